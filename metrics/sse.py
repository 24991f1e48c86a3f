"""Server-sent events, parsed after the stream has ended.

While a stream is open the client only keeps the raw reads with their arrival times, one per
socket read, HTTP chunked framing included (see users/stream.py). Everything here runs
afterwards: undoing the chunked framing, splitting lines, decoding JSON and picking out the
generated text. An event's time is the arrival of the read that completed its line, which is
when the client could first have seen it.

`parse_reads` does it all in one pass over the raw reads (what the finisher uses); it gives the
same result as `parse_stream(dechunk(times, reads))`, with a fast path for the common read that
holds exactly one chunk holding exactly one `data:` event, and a text template for the common event
that differs from the one before only in its generated text (`TEMPLATE_TRIES`, below).

Tolerated, as servers send them: `data:` with or without a space, `\\r\\n` line ends, comment
lines starting with `:` (keep-alives), `event:`/`id:`/`retry:` lines, blank lines.

What it gives is a `metrics.parsed.ParsedStream`; the Responses API's typed events are parsed by
metrics/responses_events.py.
"""

from __future__ import annotations

import orjson

from metrics.parsed import NAN, Chunk, ParsedStream, error_text
from metrics.responses_events import responses_event, responses_item

DONE = b"[DONE]"


class Dechunker:
    """Undoes HTTP chunked transfer encoding read by read; a chunk or a size line may span reads."""

    __slots__ = ("need", "line", "done")

    def __init__(self) -> None:
        self.need = 0  # bytes still to come of the current chunk: payload, then its CRLF
        self.line = b""  # a chunk-size line split across reads
        self.done = False  # the last chunk (size 0) was seen

    def feed(self, d: bytes) -> bytes:
        """The payload bytes this read carried (b"" for framing only)."""
        if self.done:
            return b""
        n = len(d)
        need = self.need
        if need >= n:  # all of this read is inside one chunk
            self.need = need - n
            k = need - 2  # payload bytes still to come (the rest is the CRLF)
            return b"" if k <= 0 else (d if k >= n else d[:k])
        parts = []
        pos = 0
        if need:  # the end of a chunk begun in an earlier read
            if need > 2:
                parts.append(d[: need - 2])
            pos = need
            self.need = 0
        if self.line:
            d = self.line + d[pos:]
            self.line, pos, n = b"", 0, len(d)
        while pos < n:
            j = d.find(b"\n", pos)
            if j < 0:
                self.line = d[pos:]
                break
            try:
                size = int(d[pos:j], 16)  # int() ignores the CR and surrounding blanks
            except ValueError:
                try:
                    size = int(d[pos:j].split(b";", 1)[0], 16)  # chunk extensions
                except ValueError:
                    size = 0  # not chunked framing: keep what was decoded
            if size == 0:
                self.done = True
                break
            start = j + 1
            end = start + size
            if start < n:
                parts.append(d[start:end])
            if end + 2 <= n:
                pos = end + 2
            else:  # the chunk continues in the next read
                self.need = end + 2 - n
                break
        return parts[0] if len(parts) == 1 else b"".join(parts)


def dechunk(times: list[float], reads: list[bytes]) -> list[tuple[float, bytes]]:
    """Undo chunked transfer encoding over timed reads: each read's payload bytes keep its time."""
    dec = Dechunker()
    out = []
    for t, d in zip(times, reads):
        body = dec.feed(d)
        if body:
            out.append((t, body))
        if dec.done:
            break
    return out


def data_payloads(pieces: list[tuple[float, bytes]]) -> list[tuple[float, bytes]]:
    """Every `data:` line as (time, stripped payload). An unterminated last line still counts:
    some servers close the connection right after the final event without a newline."""
    return read_payloads([t for t, _ in pieces], [d for _, d in pieces], False)[0]


# A line longer than this that has not ended yet is kept as a list of its reads and joined once,
# when its newline comes: joining it to every next read copies it again on each one, quadratic in
# the line's length (one 50 MB event over 64 KiB reads took 23 s on the event loop).
LONG_LINE = 65536


def read_payloads(
    times: list[float], reads: list[bytes], chunked: bool
) -> tuple[list[tuple[float, bytes]], float, int]:
    """`data_payloads(dechunk(times, reads))` in one pass: every `data:` payload with its time, the
    arrival of the last read that carried body bytes, and the body length. Linear in the body's
    length, however long its lines (LONG_LINE)."""
    out = []
    append = out.append
    dec = Dechunker() if chunked else None
    carry = b""  # the start of a line not ended yet
    long_line: list[bytes] | None = None  # ... when it grew past LONG_LINE: its pieces
    last_t = NAN
    body_len = 0
    # the fast path takes a read whole when nothing is pending from the reads before it (no partial
    # chunk, size line or event): always true after a read it took, so only the slow path asks again
    fast = dec is not None
    for t, d in zip(times, reads):
        if fast:  # the read is one chunk holding one event: "<size>\r\ndata: ...\n\n\r\n"
            j = d.find(b"\r\n")
            if 0 < j < 9 and d.endswith(b"\n\n\r\n") and d.startswith(b"data:", j + 2):
                n = len(d)
                if d.find(b"\n", j + 2) == n - 4:
                    try:
                        size = int(d[:j], 16)
                    except ValueError:
                        size = -1
                    if size == n - j - 4:
                        append((t, d[j + 7 : n - 4].strip()))
                        last_t = t
                        body_len += size
                        continue
        if dec is not None:
            body = dec.feed(d)
        else:
            body = d
        if body:
            last_t = t
            body_len += len(body)
            if long_line is not None:
                j = body.find(b"\n")
                if j < 0:
                    long_line.append(body)
                    body = b""
                else:
                    long_line.append(body[:j])
                    line = b"".join(long_line)
                    long_line = None
                    if line[:5] == b"data:":
                        append((t, line[5:].strip()))
                    body = body[j + 1 :]
            elif carry:
                body = carry + body
            lines = body.split(b"\n")
            carry = lines.pop()
            for line in lines:
                if line[:5] == b"data:":
                    append((t, line[5:].strip()))
            if len(carry) > LONG_LINE and long_line is None:
                long_line, carry = [carry], b""
        if dec is not None:
            if dec.done:
                break
            fast = not (dec.need or dec.line or carry or long_line)
    if long_line is not None:
        carry = b"".join(long_line)
    if carry[:5] == b"data:":
        append((last_t, carry[5:].strip()))
    return out, last_t, body_len


def parse_reads(times: list[float], reads: list[bytes], chunked: bool) -> tuple[ParsedStream, int]:
    """`parse_stream(dechunk(times, reads))` (or of the reads themselves when not chunked) in one
    pass, and the body length."""
    payloads, t_end, body_len = read_payloads(times, reads, chunked)
    out = ParsedStream(t_end=t_end)
    _parse_payloads(out, payloads)
    return out, body_len


def parse_stream(pieces: list[tuple[float, bytes]]) -> ParsedStream:
    """Chunks with their arrival times, usage, finish reason and errors of a streamed body
    (decoded pieces: chunked framing already undone)."""
    out = ParsedStream()
    if pieces:
        out.t_end = pieces[-1][0]
    _parse_payloads(out, data_payloads(pieces))
    return out


# Most events of a stream are byte for byte the one before but for the generated text (vLLM,
# SGLang, llama.cpp within a second: id, model, created and the nulls repeat). Such an event is
# read through a text template: the bytes before and after the previous event's text string. When
# an event starts with the one and ends with the other, and what lies between is one JSON string,
# it is that event with this text and nothing else changed (a JSON string is one token: the tokens
# around it are lexed and parsed as before), so only the string is decoded. A template is made from
# an event parsed in full that only carried text (no usage, finish reason, reasoning, tool call or
# simulator stamp), and only once a marker string put in place of its text is found there and
# nowhere else (the event parsed with the marker, its text put back, equals the event). A server
# whose events differ in more than the text pays for TEMPLATE_TRIES of them.
TEMPLATE_TRIES = 4
_MARK = "\x00text\x00"
_MARK_JSON = orjson.dumps(_MARK)


def _text_slot(event) -> tuple[dict, str] | None:
    """Where an event's generated text is: choice 0's delta.content (chat) or text (completions)."""
    choices = event.get("choices") if type(event) is dict else None
    choice = choices[0] if type(choices) is list and choices else None
    if type(choice) is not dict:
        return None
    delta = choice.get("delta")
    return (delta, "content") if type(delta) is dict else (choice, "text")


def text_template(payload: bytes, event: dict, text: str) -> tuple[bytes, bytes] | None:
    """The bytes of `payload` (parsed: `event`) before and after its text string `text`, when they
    hold it exactly once and a marker put in its place parses as `event` with the marker for text."""
    quoted = orjson.dumps(text)  # a server escaping differently: not found, no template
    at = payload.find(quoted)
    if at < 0 or payload.find(quoted, at + 1) >= 0:
        return None
    before, after = payload[:at], payload[at + len(quoted) :]
    try:
        marked = orjson.loads(before + _MARK_JSON + after)
    except orjson.JSONDecodeError:
        return None
    slot = _text_slot(marked)
    if slot is None:
        return None
    slot[0][slot[1]] = text  # the marker was in the text, and only there: the event comes back whole
    return (before, after) if marked == event else None


def _parse_payloads(out: ParsedStream, payloads: list[tuple[float, bytes]]) -> None:
    """Runs once per request after the stream (plugin/finisher.py), some hundred events per request,
    so the loop is kept flat: one `orjson.loads` and a few dict lookups per event, or, for an event
    that differs from the one before only in its text, a look at its ends and the text decoded."""
    chunks = out.chunks
    loads = orjson.loads
    before = after = None  # the text template (above)
    cut_front = cut_back = 0
    tries = TEMPLATE_TRIES
    for t, payload in payloads:
        if not payload:
            continue
        if payload == DONE:
            out.done = True
            continue
        if before is not None and payload.startswith(before) and payload.endswith(after):
            try:
                text = loads(payload[cut_front : len(payload) - cut_back])
            except orjson.JSONDecodeError:
                text = None
            if type(text) is str:
                if text:
                    chunks.append(Chunk(t, text, True, -1, NAN, "", ""))
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
        kind = event.get("type")
        if type(kind) is str and (kind[:9] == "response." or kind == "error"):  # the Responses API's typed events
            responses_event(out, t, kind, event)
            continue
        if "error" in event:
            if out.error != "mid_stream_error":
                out.error, out.error_detail = "mid_stream_error", error_text(event["error"])
            continue
        usage = event.get("usage")
        if usage:
            out.usage = usage
            timing = event.get("metrics")  # vLLM's per-request timing rides with the final usage
            if timing:
                out.server_metrics = timing
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
        reasoning = called = ""
        if type(delta) is dict:
            text = delta.get("content") or ""
            answer = bool(text)
            reasoning = delta.get("reasoning") or delta.get("reasoning_content") or ""
            if reasoning:
                text += reasoning
            calls = delta.get("tool_calls")
            if calls:
                called = _add_tool_calls(out.tool_calls, calls)
                if called:
                    text += called
                    answer = True
        else:
            text = choice.get("text") or ""
            answer = bool(text)
        if text:
            tokens = usage.get("completion_tokens", -1) if usage else -1
            chunks.append(Chunk(t, text, answer, tokens, event.get("sim_t", NAN), reasoning, called))
            if tries and not (usage or finish or reasoning or called or "sim_t" in event):
                tries -= 1
                template = text_template(payload, event, text)
                if template is not None:
                    before, after = template
                    cut_front, cut_back = len(before), len(after)


def _add_tool_calls(calls: list[dict], deltas) -> str:
    """Fold one event's tool-call deltas into `calls` (by index); the generated text they carried
    (name and argument fragments)."""
    text = ""
    if type(deltas) is not list:
        return text
    for position, d in enumerate(deltas):
        if type(d) is not dict:
            continue
        index = d.get("index", position)
        if type(index) is not int or index < 0:
            index = position
        while len(calls) <= index:
            calls.append({"id": "", "name": "", "arguments": ""})
        call = calls[index]
        if d.get("id"):
            call["id"] = d["id"]
        fn = d.get("function")
        if type(fn) is dict:
            name, args = fn.get("name") or "", fn.get("arguments") or ""
            if type(name) is str and name:
                call["name"] += name
                text += name
            if type(args) is str and args:
                call["arguments"] += args
                text += args
            elif type(args) is dict:  # a server that sends the arguments as an object, whole
                args = orjson.dumps(args).decode()
                call["arguments"] += args
                text += args
    return text


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
    out.server_metrics = body.get("metrics") if isinstance(body.get("metrics"), dict) else None
    out.done = True
    if body.get("object") == "list" and isinstance(body.get("data"), list):  # /v1/embeddings
        out.inputs = sum(1 for d in body["data"] if isinstance(d, dict) and d.get("embedding") is not None)
        return out
    if "results" in body:  # /v1/rerank (Jina/Cohere form): usage has total_tokens only, all of them input
        results = body["results"] if isinstance(body["results"], list) else ()
        out.inputs = sum(1 for r in results if isinstance(r, dict) and r.get("relevance_score") is not None)
        if isinstance(out.usage, dict) and out.usage.get("prompt_tokens") is None:
            out.usage = {**out.usage, "prompt_tokens": out.usage.get("total_tokens")}
        return out
    if body.get("object") == "response":  # /v1/responses, not streamed: its output items as events
        for i, item in enumerate(body.get("output") or ()):
            if isinstance(item, dict):
                responses_item(out, out.t_end, i, item)
        responses_event(
            out,
            out.t_end,
            "response.completed" if body.get("status") != "incomplete" else "response.incomplete",
            {"response": body},
        )
        return out
    for choice in body.get("choices") or ():
        if not isinstance(choice, dict):
            break
        out.finish_reason = choice.get("finish_reason") or ""
        message = choice.get("message") or {}
        content = message.get("content") or choice.get("text") or ""
        reasoning = message.get("reasoning") or message.get("reasoning_content") or ""
        called = _add_tool_calls(
            out.tool_calls,
            [{**c, "index": i} for i, c in enumerate(message.get("tool_calls") or ()) if isinstance(c, dict)],
        )
        text = content + reasoning + called
        if text:
            tokens = out.usage.get("completion_tokens", -1) if out.usage else -1
            out.chunks.append(Chunk(out.t_end, text, bool(content or called), tokens, NAN, reasoning, called))
        break
    return out
