"""The JSON body a sampled request is sent as, per endpoint (`--endpoint`).

    chat         /v1/chat/completions  messages (+ tools, tool_choice), max_tokens, stream_options
    completions  /v1/completions       prompt, max_tokens
    responses    /v1/responses         input (the same conversation as Responses items), max_output_tokens,
                                       tools in the API's flat form; usage comes with response.completed
    embeddings   /v1/embeddings        input: the request's text, or the class's batch of texts; no
                                       max_tokens, never streamed
    rerank       /v1/rerank            query: the request's text; documents: the class's batch of texts
                                       (the first is the query's own text), or that text alone; never streamed
"""

from __future__ import annotations

from typing import Any

ENDPOINTS = ("chat", "completions", "responses", "embeddings", "rerank")


def body(endpoint: str, request, model: str, max_tokens: int, stream: bool) -> dict[str, Any]:
    """The request body (the run's extra body fields are added by the caller)."""
    out: dict[str, Any] = {"model": model} if model else {}
    if endpoint in ("embeddings", "rerank"):
        texts = list(request.inputs) if request.inputs else [request.prompt()]
        out.update({"input": texts} if endpoint == "embeddings" else {"query": request.prompt(), "documents": texts})
        return out
    if endpoint == "chat":
        out["messages"] = request.messages()
        if request.tools:
            out.update(request.tools)
        out["max_tokens"] = max_tokens
    elif endpoint == "responses":
        out["input"] = responses_input(request.messages())
        if request.tools:
            out.update(responses_tools(request.tools))
        out["max_output_tokens"] = max_tokens
    else:
        out["prompt"] = request.prompt()
        out["max_tokens"] = max_tokens
    out["stream"] = stream
    if stream and endpoint != "responses":
        out["stream_options"] = {"include_usage": True}
    return out


def expected_results(endpoint: str, sent: dict) -> int:
    """The results a reply to `sent` (the body with the run's extra fields) must hold: a vector per
    input, a ranked document per document (top_n of them when a positive top_n is set); 0 for
    generation."""
    if endpoint == "embeddings":
        return len(sent["input"]) if isinstance(sent.get("input"), list) else 1
    if endpoint == "rerank":
        n, top = len(sent.get("documents") or ()), sent.get("top_n")
        return min(n, top) if isinstance(top, int) and top > 0 else n
    return 0


def responses_input(messages: list[dict]) -> list[dict]:
    """Chat messages as Responses API input items: text and image parts become input_text and
    input_image, an assistant's tool calls function_call items, a tool message a
    function_call_output."""
    out = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            out.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = [{"type": "input_text", "text": p["text"]} if p.get("type") == "text"
                       else {"type": "input_image", "image_url": p["image_url"]["url"]} for p in content]  # fmt: skip
        if content is not None:
            out.append({"role": role, "content": content})
        for call in m.get("tool_calls") or ():
            fn = call["function"]
            out.append({"type": "function_call", "call_id": call["id"], "name": fn["name"], "arguments": fn["arguments"]})
    return out


def responses_tools(fields: dict) -> dict:
    """Chat's tools and tool_choice in the Responses API's flat form ({"type": "function", "name", ...})."""
    out: dict[str, Any] = {"tools": [{"type": "function", **t["function"]} for t in fields["tools"]]}
    choice = fields.get("tool_choice")
    if isinstance(choice, dict):
        choice = {"type": "function", "name": choice["function"]["name"]}
    if choice is not None:
        out["tool_choice"] = choice
    if "parallel_tool_calls" in fields:
        out["parallel_tool_calls"] = fields["parallel_tool_calls"]
    return out


__all__ = ["ENDPOINTS", "body", "expected_results", "responses_input", "responses_tools"]
