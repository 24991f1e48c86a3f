"""A reply in phases: reasoning, then the answer (content or tool calls), and the Responses API's
typed events. Each function takes the `simulator/stream.py` Stream it writes for; a stream with
reasoning, tool calls or on /v1/responses emits its chunks through `emit_phased`."""

from __future__ import annotations

from time import perf_counter

import orjson

from .tokens import token_bytes
from .wire import frame


def call_spans(s) -> list[tuple[int, int]]:
    """[start, end) token positions of each tool call: the answer's tokens split evenly."""
    first, total = s.reasoning, s.max_tokens
    n = min(len(s.calls), total - first)
    if n <= 0:
        return []
    base, extra = divmod(total - first, n)
    spans, at = [], first
    for i in range(n):
        size = base + (1 if i < extra else 0)
        spans.append((at, at + size))
        at += size
    return spans


def phase_segments(s, start: int, upto: int) -> list[tuple[str, int, int, int]]:
    """Tokens [start, upto) cut where the phase changes: (kind, call index, from, to) with kind
    reasoning | content | call."""
    cuts = [(0, s.reasoning, "reasoning", -1)]
    spans = call_spans(s) if s.calls else []
    cuts += [(a, b, "call", i) for i, (a, b) in enumerate(spans)]
    if not spans:
        cuts.append((s.reasoning, s.max_tokens, "content", -1))
    out = []
    for a, b, kind, i in cuts:
        lo, hi = max(a, start), min(b, upto)
        if lo < hi:
            out.append((kind, i, lo, hi))
    return out


def phase_delta(s, kind: str, call: int, lo: int, hi: int, count: bool = True) -> dict:
    """The delta of one segment, in vLLM's format (`count`: a call begun here counts as sent)."""
    text = token_bytes(s.seed, lo, hi - lo).decode()
    if kind == "reasoning":
        return {"reasoning": text}
    if kind == "content":
        return {"content": text}
    a, b = call_spans(s)[call]
    entry = {"index": call}
    args = ""
    if lo == a:  # the call's first token: its id and name
        s.tools_sent += count
        entry.update(id=f"chatcmpl-tool-{s.seed:06x}{call:02d}", type="function", function={"name": s.calls[call]})
        lo += 1
        if b - a == 1:
            args = "{}"
    if lo < hi:
        words = token_bytes(s.seed, lo, hi - lo).decode()
        args = ('{"q": "' if lo == a + 1 else "") + words + ('"}' if hi == b else "")
    if args:
        entry.setdefault("function", {})["arguments"] = args
    return {"tool_calls": [entry]}


def typed_event(s, kind: str, fields: dict, now: float | None = None) -> bytes:
    """One typed event of a /v1/responses stream, as OpenAI and vLLM write them."""
    s.seq_no += 1
    obj = {"type": kind, "sequence_number": s.seq_no, **fields}
    if s.want_t:
        obj["sim_t"] = now if now is not None else perf_counter()
    return b"event: %b\ndata: %b\n\n" % (kind.encode(), orjson.dumps(obj))


def responses_status(s) -> str:
    """How a Responses API reply ends: completed with its tool calls, else incomplete, the output
    limit reached (the simulator always generates max_output_tokens; chat says length)."""
    return "completed" if s.calls and call_spans(s) else "incomplete"


def response_object(s, upto: int, now: float, status: str = "completed") -> dict:
    """The response object: its output items and usage (response.completed, or the whole body)."""
    output = []
    reasoning = min(upto, s.reasoning)
    if reasoning:
        output.append(
            {
                "type": "reasoning",
                "id": f"rs_{s.rid}",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": token_bytes(s.seed, 0, reasoning).decode()}],
            }
        )
    for kind, call, lo, hi in phase_segments(s, reasoning, upto):
        if kind == "content":
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{s.rid}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": token_bytes(s.seed, lo, hi - lo).decode(), "annotations": []}
                    ],
                }
            )
        elif kind == "call":
            d = phase_delta(s, kind, call, lo, call_spans(s)[call][1], count=False)["tool_calls"][0]
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{d['id']}",
                    "call_id": d["id"],
                    "name": d["function"]["name"],
                    "arguments": d["function"].get("arguments", "{}"),
                    "status": "completed",
                }
            )
    usage = {
        "input_tokens": s.prompt_tokens,
        "input_tokens_details": {"cached_tokens": s.cached_tokens()},
        "output_tokens": upto,
        "total_tokens": s.prompt_tokens + upto,
    }
    if s.srv.profile.reasoning_usage:
        usage["output_tokens_details"] = {"reasoning_tokens": reasoning}
    out = {
        "id": s.rid,
        "object": "response",
        "created_at": s.srv.created,
        "model": s.model,
        "status": status,
        "output": output,
        "usage": usage,
    }
    if status == "incomplete":
        out["incomplete_details"] = {"reason": "max_output_tokens"}
    if status != "in_progress" and s.srv.profile.enable_per_request_metrics:
        out["metrics"] = s.request_metrics()
    return out


def responses_delta(s, kind: str, call: int, lo: int, hi: int, now: float) -> bytes:
    """The typed events of one segment: text deltas; a call opens with its output item."""
    index = call + (1 if s.reasoning else 0) if kind == "call" else (0 if kind == "reasoning" else 1)
    if kind != "call":
        name = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        item = f"rs_{s.rid}" if kind == "reasoning" else f"msg_{s.rid}"
        return typed_event(
            s,
            name,
            {
                "item_id": item,
                "output_index": index,
                "content_index": 0,
                "delta": token_bytes(s.seed, lo, hi - lo).decode(),
            },
            now,
        )
    d = phase_delta(s, kind, call, lo, hi)["tool_calls"][0]
    out = b""
    if "id" in d:
        out += typed_event(
            s,
            "response.output_item.added",
            {
                "output_index": index,
                "item": {
                    "type": "function_call",
                    "id": f"fc_{d['id']}",
                    "call_id": d["id"],
                    "name": d["function"]["name"],
                    "arguments": "",
                    "status": "in_progress",
                },
            },
            now,
        )
    args = d.get("function", {}).get("arguments")
    if args:
        out += typed_event(
            s,
            "response.function_call_arguments.delta",
            {"item_id": f"fc_chatcmpl-tool-{s.seed:06x}{call:02d}", "output_index": index, "delta": args},
            now,
        )
    return out


def emit_phased(s, start: int, upto: int, now: float, last: bool) -> bytes:
    """The events of tokens [start, upto) of a reasoning or tool-call reply (one per segment)."""
    events = []
    segments = phase_segments(s, start, upto)
    for j, (kind, call, lo, hi) in enumerate(segments):
        finish = None
        if last and j == len(segments) - 1:
            finish = "tool_calls" if s.calls and call_spans(s) else "length"
        if kind != "reasoning" and s.answer_t is None:
            s.answer_t = now
        if s.endpoint == "responses":
            typed = responses_delta(s, kind, call, lo, hi, now)
            s.chunks += typed.count(b"event: ") - 1  # a call's name and arguments: two events
            events.append(frame(typed))
            continue
        choice = {"index": 0, "delta": phase_delta(s, kind, call, lo, hi), "logprobs": None, "finish_reason": finish}
        body = s.common + b',"choices":[' + orjson.dumps(choice) + b"]"
        if s.cont_usage:
            body += s._usage(hi)
        events.append(frame(b'data: %b,"sim_t":%r}\n\n' % (body, now) if s.want_t else b"data: %b}\n\n" % body))
    s.chunks += len(events) - 1  # emit() counts one
    return b"".join(events)
