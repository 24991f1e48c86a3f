"""Server-sent events, parsed after the stream has ended.

While a stream is open the client only appends `(arrival_time, bytes)` pieces, one per socket
read (see users/stream.py). Everything here runs afterwards: splitting lines, decoding JSON and
picking out the generated text. An event's time is the arrival of the read that completed its
line, which is when the client could first have seen it.

Tolerated, as servers send them: `data:` with or without a space, `\\r\\n` line ends, comment
lines starting with `:` (keep-alives), `event:`/`id:`/`retry:` lines, blank lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

DONE = b"[DONE]"
NAN = float("nan")


@dataclass(slots=True)
class Chunk:
    """One token-bearing event."""

    t: float  # arrival time (perf_counter)
    text: str  # generated text it carried (content + reasoning)
    visible: bool  # carried content (not only reasoning)
    usage_tokens: int  # cumulative completion_tokens when the server sent usage in it, else -1
    sim_t: float  # the simulator's own send time, when asked for (X-Sim-Timestamps), else nan


@dataclass(slots=True)
class ParsedStream:
    chunks: list[Chunk] = field(default_factory=list)
    usage: dict | None = None  # the last usage object seen
    finish_reason: str = ""
    done: bool = False  # saw data: [DONE]
    error: str = ""  # "mid_stream_error" | "malformed_chunk" | ""
    error_detail: str = ""
    t_end: float = NAN  # arrival of the last piece

    @property
    def finished(self) -> bool:
        """The server ended the stream properly."""
        return self.done or bool(self.finish_reason)


def iter_data_lines(pieces: list[tuple[float, bytes]]):
    """Yield (time, payload) for every `data:` line; the payload is stripped bytes."""
    carry = b""
    for t, data in pieces:
        if carry:
            data = carry + data
        lines = data.split(b"\n")
        carry = lines.pop()
        for line in lines:
            if line.startswith(b"data:"):
                yield t, line[5:].strip()
    # An unterminated last line is still an event if it is complete JSON or [DONE]:
    # some servers close the connection right after the final event without a newline.
    if carry.startswith(b"data:") and pieces:
        yield pieces[-1][0], carry[5:].strip()


def data_payloads(pieces: list[tuple[float, bytes]]) -> list[tuple[float, bytes]]:
    """Every `data:` line as (time, stripped payload); the list form of `iter_data_lines`."""
    out = []
    append = out.append
    carry = b""
    for t, data in pieces:
        if carry:
            data = carry + data
        lines = data.split(b"\n")
        carry = lines.pop()
        for line in lines:
            if line[:5] == b"data:":
                append((t, line[5:].strip()))
    if carry[:5] == b"data:" and pieces:
        append((pieces[-1][0], carry[5:].strip()))
    return out


def parse_stream(pieces: list[tuple[float, bytes]]) -> ParsedStream:
    """Chunks with their arrival times, usage, finish reason and errors of a streamed body.

    Runs once per request after the stream (users/finisher.py), some hundred events per request,
    so the loop is kept flat: one `orjson.loads` and a few dict lookups per event."""
    out = ParsedStream()
    if pieces:
        out.t_end = pieces[-1][0]
    chunks = out.chunks
    loads = orjson.loads
    for t, payload in data_payloads(pieces):
        if not payload:
            continue
        if payload == DONE:
            out.done = True
            continue
        try:
            event = loads(payload)
        except orjson.JSONDecodeError:
            if not out.error:
                out.error, out.error_detail = "malformed_chunk", payload[:200].decode("utf-8", "replace")
            continue
        if type(event) is not dict:
            if not out.error:
                out.error, out.error_detail = "malformed_chunk", payload[:200].decode("utf-8", "replace")
            continue
        if "error" in event:
            if out.error != "mid_stream_error":
                out.error, out.error_detail = "mid_stream_error", _error_text(event["error"])
            continue
        usage = event.get("usage")
        if usage:
            out.usage = usage
        choices = event.get("choices")
        if not choices or type(choices) is not list:
            continue
        choice = choices[0]  # choice 0 only: the suite sends n=1
        if type(choice) is not dict:
            continue
        finish = choice.get("finish_reason")
        if finish:
            out.finish_reason = finish
        delta = choice.get("delta")
        if type(delta) is dict:
            text = delta.get("content") or ""
            visible = bool(text)
            reasoning = delta.get("reasoning") or delta.get("reasoning_content")
            if reasoning:
                text += reasoning
        else:
            text = choice.get("text") or ""
            visible = bool(text)
        if text:
            tokens = usage.get("completion_tokens", -1) if usage else -1
            chunks.append(Chunk(t, text, visible, tokens, event.get("sim_t", NAN)))
    return out


def _error_text(error) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)[:200]
    return str(error)[:200]


def parse_response(pieces: list[tuple[float, bytes]]) -> ParsedStream:
    """A non-streaming response as a one-chunk stream arriving when the body completed."""
    out = ParsedStream()
    if not pieces:
        return out
    out.t_end = pieces[-1][0]
    try:
        body = orjson.loads(b"".join(p for _, p in pieces))
    except orjson.JSONDecodeError:
        out.error, out.error_detail = "malformed_chunk", "the response body is not JSON"
        return out
    if not isinstance(body, dict):
        out.error, out.error_detail = "malformed_chunk", "the response body is not a JSON object"
        return out
    if "error" in body:
        out.error, out.error_detail = "mid_stream_error", str(body["error"])[:200]
        return out
    out.usage = body.get("usage")
    out.done = True
    for choice in body.get("choices") or ():
        out.finish_reason = choice.get("finish_reason") or ""
        message = choice.get("message") or {}
        text = (message.get("content") or "") + (message.get("reasoning") or message.get("reasoning_content") or "")
        text = text or choice.get("text") or ""
        if text:
            tokens = out.usage.get("completion_tokens", -1) if out.usage else -1
            out.chunks.append(Chunk(out.t_end, text, True, tokens, NAN))
        break
    return out
