"""The OpenAI Responses API's typed events (`/v1/responses`), streamed or not, parsed into the
same ParsedStream a chat stream makes (metrics/sse.py hands them over).
"""

from __future__ import annotations

from metrics.parsed import NAN, Chunk, ParsedStream, error_text

# Responses API events that carry generated output, and what kind: (content, reasoning, tool).
RESPONSES_TEXT = {
    "response.output_text.delta": "content",
    "response.refusal.delta": "content",
    "response.reasoning_text.delta": "reasoning",  # vLLM, gpt-oss
    "response.reasoning_summary_text.delta": "reasoning",  # OpenAI's reasoning models: the summary
    "response.function_call_arguments.delta": "tool",
}
RESPONSES_END = {"response.completed": "stop", "response.incomplete": "length"}


def responses_event(out: ParsedStream, t: float, kind: str, event: dict) -> None:
    """One typed event of a streamed /v1/responses reply, into the same ParsedStream a chat stream
    makes: text deltas are chunks; a function call's name (response.output_item.added) and its
    argument deltas are a tool call's, by output_index; response.completed (or .incomplete: the
    output limit) ends it with the usage, mapped to chat's names; error and response.failed are
    in-stream errors."""
    what = RESPONSES_TEXT.get(kind)
    if what is not None:
        text = event.get("delta")
        if type(text) is not str or not text:
            return
        if what == "tool":
            call = _responses_call(out, event.get("output_index"))
            call["arguments"] += text
        out.chunks.append(
            Chunk(
                t,
                text,
                what != "reasoning",
                -1,
                event.get("sim_t", NAN),
                text if what == "reasoning" else "",
                text if what == "tool" else "",
            )
        )
        return
    if kind == "response.output_item.added":
        item = event.get("item")
        if type(item) is dict and item.get("type") == "function_call":
            call = _responses_call(out, event.get("output_index"))
            call["id"] = item.get("call_id") or item.get("id") or ""
            name = item.get("name") or ""
            if type(name) is str and name:
                call["name"] = name
                out.chunks.append(Chunk(t, name, True, -1, event.get("sim_t", NAN), "", name))
        return
    if kind in RESPONSES_END:
        response = event.get("response")
        response = response if type(response) is dict else {}
        usage = response.get("usage")
        if type(usage) is dict:
            details = usage.get("output_tokens_details")
            out.usage = {"prompt_tokens": usage.get("input_tokens"), "completion_tokens": usage.get("output_tokens")}
            if type(details) is dict and details.get("reasoning_tokens") is not None:
                out.usage["completion_tokens_details"] = {"reasoning_tokens": details["reasoning_tokens"]}
        out.finish_reason = "tool_calls" if out.tool_calls and kind == "response.completed" else RESPONSES_END[kind]
        out.done = True
        return
    if kind == "error" or kind == "response.failed":
        if out.error != "mid_stream_error":
            error = event if kind == "error" else ((event.get("response") or {}).get("error") or event)
            out.error, out.error_detail = "mid_stream_error", error_text(error)


def responses_item(out: ParsedStream, t: float, index: int, item: dict) -> None:
    """A whole output item of a non-streamed /v1/responses reply, as its stream would deliver it."""
    kind = item.get("type")
    if kind == "function_call":
        responses_event(out, t, "response.output_item.added", {"output_index": index, "item": item})
        responses_event(
            out, t, "response.function_call_arguments.delta", {"output_index": index, "delta": item.get("arguments")}
        )
    elif kind in ("message", "reasoning"):
        for part in item.get("content") or ():
            if isinstance(part, dict) and part.get("type") in ("output_text", "reasoning_text", "refusal"):
                name = (
                    "response.reasoning_text.delta"
                    if part["type"] == "reasoning_text"
                    else "response.output_text.delta"
                )
                responses_event(out, t, name, {"delta": part.get("text") or part.get("refusal")})


def _responses_call(out: ParsedStream, output_index) -> dict:
    """The tool call of a Responses output item, by its output_index (calls keep their order)."""
    key = output_index if type(output_index) is int else -1
    index = out._call_index.get(key)
    if index is None:
        index = out._call_index[key] = len(out.tool_calls)
        out.tool_calls.append({"id": "", "name": "", "arguments": ""})
    return out.tool_calls[index]
