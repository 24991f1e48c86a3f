"""/v1/responses: input, the same conversation as Responses items; tools in the API's flat form;
max_output_tokens. No stream_options: a streamed reply's usage comes with response.completed."""

from __future__ import annotations

from typing import Any

from .registry import endpoint, stream_fields, with_model


@endpoint("responses", "/v1/responses", 2, attachments=True)
def body(request, model: str, stream: bool) -> dict[str, Any]:
    out = with_model(model)
    out["input"] = responses_input(request.messages())
    if request.tools:
        out.update(responses_tools(request.tools))
    out["max_output_tokens"] = request.max_tokens
    return stream_fields(out, stream, usage_option=False)


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
            content = [
                {"type": "input_text", "text": p["text"]}
                if p.get("type") == "text"
                else {"type": "input_image", "image_url": p["image_url"]["url"]}
                for p in content
            ]
        if content is not None:
            out.append({"role": role, "content": content})
        for call in m.get("tool_calls") or ():
            fn = call["function"]
            out.append(
                {"type": "function_call", "call_id": call["id"], "name": fn["name"], "arguments": fn["arguments"]}
            )
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
