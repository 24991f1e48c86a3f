"""The HTTP side: a raw ``asyncio.Protocol`` HTTP/1.1 server on uvloop.

Chunk bytes are assembled from per-request pre-encoded prefixes and the
pre-encoded vocabulary (no JSON serialisation on the token path) and framed
with chunked transfer encoding; each write goes straight to the transport.

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /v1/responses``
(OpenAI's Responses API: typed events, ending with ``response.completed``), ``POST /v1/embeddings``,
``POST /v1/rerank`` (also ``/rerank``; vLLM's Jina/Cohere form), ``GET /v1/models``, ``GET /health``, ``GET /metrics``.  Any ``model`` field is
accepted and echoed back (the served id when absent).
"""
from __future__ import annotations

import asyncio
import socket
import struct
import time
import uuid
import zlib
from time import perf_counter

import orjson

from . import __version__
from .faults import HTTP_FAULTS, FaultPlan
from .metrics import Metrics
from .runtime import BatchRunner, FixedRunner
from .tokens import PromptCounter, image_tokens, token_bytes
from .truthlog import TruthLog

MAX_HEAD = 65536
MAX_BODY = 64 * 1024 * 1024
DEFAULT_MAX_TOKENS = 256

SERVER_HEADER = b"server: llm-simulator/%s\r\n" % __version__.encode()  # names the server, as real ones do

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            413: "Payload Too Large", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
            500: "Internal Server Error", 501: "Not Implemented", 503: "Service Unavailable"}
_ERR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowed",
              413: "BadRequestError", 429: "RateLimitError", 431: "BadRequestError",
              500: "InternalServerError", 501: "NotImplementedError", 503: "ServiceUnavailableError"}

DONE = b"data: [DONE]\n\n"
ROUTES = {"/v1/chat/completions": "chat", "/v1/completions": "completions", "/v1/responses": "responses",
          "/v1/embeddings": "embeddings", "/v1/rerank": "rerank", "/rerank": "rerank"}
TERMINATOR = b"0\r\n\r\n"


ID_PREFIX = {"chat": "chatcmpl", "responses": "resp", "embeddings": "embd", "rerank": "rerank"}


class HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def error_body(status: int, message: str) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": _ERR_TYPES.get(status, "Error"),
                                   "param": None, "code": status}})


def frame(payload: bytes) -> bytes:
    """One chunk of chunked transfer encoding."""
    return b"%x\r\n%b\r\n" % (len(payload), payload)


def _positive_int(req, key):
    v = req.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise HttpError(400, f"{key} must be an integer >= 1, got {v!r}")
    return v


class Stream:
    """One completion request, from the parsed body to its last byte."""

    __slots__ = (
        "srv", "conn", "rid", "endpoint", "is_stream", "prompt_tokens", "max_tokens", "model",
        "include_usage", "cont_usage", "want_t", "arrival", "start_t", "seed", "sent", "chunks",
        "first_t", "last_t", "done", "status", "fault", "fault_param", "fault_k", "hold_s", "held",
        "generated", "seq", "t_first", "shift", "next_count", "head", "mid", "mid_last", "fixed_len",
        "common", "submitted", "role_pending", "out", "reasoning", "calls", "answer_t", "tools_sent", "images",
        "tool_results", "seq_no",
    )

    def __init__(self, srv, conn, rid, endpoint, is_stream, prompt_tokens, max_tokens, model,
                 include_usage, cont_usage, want_t, arrival):
        self.srv = srv
        self.conn = conn
        self.rid = rid
        self.endpoint = endpoint
        self.is_stream = is_stream
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.model = model
        self.include_usage = include_usage
        self.cont_usage = cont_usage
        self.want_t = want_t
        self.arrival = arrival
        self.start_t = arrival
        self.seed = ((zlib.crc32(rid.encode("utf-8", "replace")) * 0x9E3779B1) >> 11) & 0xFFFFFF
        self.sent = 0
        self.chunks = 0
        self.first_t = None
        self.last_t = None
        self.done = False
        self.status = 0
        self.fault = None
        self.fault_param = None
        self.fault_k = None
        self.hold_s = 0.0
        self.held = False
        self.generated = 0
        self.seq = None
        self.submitted = False
        self.role_pending = b""  # chat: the role-only chunk, written with the first token
        self.out = None  # writes gathered by hold_writes
        # Reasoning then answer (profile reasoning_tokens) and tool calls (a request with tools): the
        # first `reasoning` tokens are reasoning; with `calls` (the function names of a tool-call
        # reply) the answer's tokens are split between the calls. Either one streams through
        # `_emit_phased` instead of the plain content path.
        self.reasoning = 0
        self.calls: list[str] = []
        self.answer_t = None  # when the first answer token (content or tool call) was written
        self.tools_sent = 0  # tool calls begun
        self.images = 0  # image_url parts in the request
        self.tool_results = 0  # tool messages in the request (results of earlier tool calls)
        self.seq_no = -1  # the Responses API: sequence_number of the last typed event
        if endpoint == "chat":
            obj = b"chat.completion.chunk"
            open_, close_ = b'{"index":0,"delta":{"content":"', b'"}'
        else:
            obj = b"text_completion"
            open_, close_ = b'{"index":0,"text":"', b'"'
        self.common = b'{"id":%b,"object":"%b","created":%d,"model":%b' % (
            orjson.dumps(rid), obj, srv.created, orjson.dumps(model))
        self.head = b"data: " + self.common + b',"choices":[' + open_
        self.mid = close_ + b',"logprobs":null,"finish_reason":null}]'
        self.mid_last = close_ + b',"logprobs":null,"finish_reason":"length"}]'
        self.fixed_len = len(self.head) + len(self.mid) + 3

    # -- helpers ------------------------------------------------------------
    def _usage(self, completion):
        if self.reasoning and self.srv.profile.reasoning_usage:
            return b',"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,' \
                   b'"completion_tokens_details":{"reasoning_tokens":%d}}' % (
                       self.prompt_tokens, completion, self.prompt_tokens + completion, min(completion, self.reasoning))
        return b',"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}' % (
            self.prompt_tokens, completion, self.prompt_tokens + completion)

    # -- reasoning and tool calls ---------------------------------------------
    @property
    def phased(self) -> bool:
        return bool(self.reasoning or self.calls) or self.endpoint == "responses"

    def _call_spans(self) -> list[tuple[int, int]]:
        """[start, end) token positions of each tool call: the answer's tokens split evenly."""
        first, total = self.reasoning, self.max_tokens
        n = min(len(self.calls), total - first)
        if n <= 0:
            return []
        base, extra = divmod(total - first, n)
        spans, at = [], first
        for i in range(n):
            size = base + (1 if i < extra else 0)
            spans.append((at, at + size))
            at += size
        return spans

    def _segments(self, start: int, upto: int) -> list[tuple[str, int, int, int]]:
        """Tokens [start, upto) cut where the phase changes: (kind, call index, from, to) with kind
        reasoning | content | call."""
        cuts = [(0, self.reasoning, "reasoning", -1)]
        spans = self._call_spans() if self.calls else []
        cuts += [(a, b, "call", i) for i, (a, b) in enumerate(spans)]
        if not spans:
            cuts.append((self.reasoning, self.max_tokens, "content", -1))
        out = []
        for a, b, kind, i in cuts:
            lo, hi = max(a, start), min(b, upto)
            if lo < hi:
                out.append((kind, i, lo, hi))
        return out

    def _delta(self, kind: str, call: int, lo: int, hi: int, count: bool = True) -> dict:
        """The delta of one segment, in vLLM's format (`count`: a call begun here counts as sent)."""
        text = token_bytes(self.seed, lo, hi - lo).decode()
        if kind == "reasoning":
            return {"reasoning": text}
        if kind == "content":
            return {"content": text}
        a, b = self._call_spans()[call]
        entry = {"index": call}
        args = ""
        if lo == a:  # the call's first token: its id and name
            self.tools_sent += count
            entry.update(id=f"chatcmpl-tool-{self.seed:06x}{call:02d}", type="function",
                         function={"name": self.calls[call]})
            lo += 1
            if b - a == 1:
                args = "{}"
        if lo < hi:
            words = token_bytes(self.seed, lo, hi - lo).decode()
            args = ('{"q": "' if lo == a + 1 else "") + words + ('"}' if hi == b else "")
        if args:
            entry.setdefault("function", {})["arguments"] = args
        return {"tool_calls": [entry]}

    # -- the Responses API ----------------------------------------------------
    def _typed(self, kind: str, fields: dict, now: float | None = None) -> bytes:
        """One typed event of a /v1/responses stream, as OpenAI and vLLM write them."""
        self.seq_no += 1
        obj = {"type": kind, "sequence_number": self.seq_no, **fields}
        if self.want_t:
            obj["sim_t"] = now if now is not None else perf_counter()
        return b"event: %b\ndata: %b\n\n" % (kind.encode(), orjson.dumps(obj))

    def _responses_status(self) -> str:
        """How a Responses API reply ends: completed with its tool calls, else incomplete, the output
        limit reached (the simulator always generates max_output_tokens; chat says length)."""
        return "completed" if self.calls and self._call_spans() else "incomplete"

    def _response(self, upto: int, now: float, status: str = "completed") -> dict:
        """The response object: its output items and usage (response.completed, or the whole body)."""
        output = []
        reasoning = min(upto, self.reasoning)
        if reasoning:
            output.append({"type": "reasoning", "id": f"rs_{self.rid}", "summary": [],
                           "content": [{"type": "reasoning_text", "text": token_bytes(self.seed, 0, reasoning).decode()}]})
        for kind, call, lo, hi in self._segments(reasoning, upto):
            if kind == "content":
                output.append({"type": "message", "id": f"msg_{self.rid}", "role": "assistant", "status": "completed",
                               "content": [{"type": "output_text", "text": token_bytes(self.seed, lo, hi - lo).decode(),
                                            "annotations": []}]})
            elif kind == "call":
                d = self._delta(kind, call, lo, self._call_spans()[call][1], count=False)["tool_calls"][0]
                output.append({"type": "function_call", "id": f"fc_{d['id']}", "call_id": d["id"],
                               "name": d["function"]["name"], "arguments": d["function"].get("arguments", "{}"),
                               "status": "completed"})
        usage = {"input_tokens": self.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": upto, "total_tokens": self.prompt_tokens + upto}
        if self.srv.profile.reasoning_usage:
            usage["output_tokens_details"] = {"reasoning_tokens": reasoning}
        out = {"id": self.rid, "object": "response", "created_at": self.srv.created, "model": self.model,
               "status": status, "output": output, "usage": usage}
        if status == "incomplete":
            out["incomplete_details"] = {"reason": "max_output_tokens"}
        return out

    def _responses_delta(self, kind: str, call: int, lo: int, hi: int, now: float) -> bytes:
        """The typed events of one segment: text deltas; a call opens with its output item."""
        index = call + (1 if self.reasoning else 0) if kind == "call" else (0 if kind == "reasoning" else 1)
        if kind != "call":
            name = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
            item = f"rs_{self.rid}" if kind == "reasoning" else f"msg_{self.rid}"
            return self._typed(name, {"item_id": item, "output_index": index, "content_index": 0,
                                      "delta": token_bytes(self.seed, lo, hi - lo).decode()}, now)
        d = self._delta(kind, call, lo, hi)["tool_calls"][0]
        out = b""
        if "id" in d:
            out += self._typed("response.output_item.added", {"output_index": index, "item": {
                "type": "function_call", "id": f"fc_{d['id']}", "call_id": d["id"], "name": d["function"]["name"],
                "arguments": "", "status": "in_progress"}}, now)
        args = d.get("function", {}).get("arguments")
        if args:
            out += self._typed("response.function_call_arguments.delta", {
                "item_id": f"fc_chatcmpl-tool-{self.seed:06x}{call:02d}", "output_index": index, "delta": args}, now)
        return out

    def _emit_phased(self, start: int, upto: int, now: float, last: bool) -> bytes:
        """The events of tokens [start, upto) of a reasoning or tool-call reply (one per segment)."""
        events = []
        segments = self._segments(start, upto)
        for j, (kind, call, lo, hi) in enumerate(segments):
            finish = None
            if last and j == len(segments) - 1:
                finish = "tool_calls" if self.calls and self._call_spans() else "length"
            if kind != "reasoning" and self.answer_t is None:
                self.answer_t = now
            if self.endpoint == "responses":
                typed = self._responses_delta(kind, call, lo, hi, now)
                self.chunks += typed.count(b"event: ") - 1  # a call's name and arguments: two events
                events.append(frame(typed))
                continue
            choice = {"index": 0, "delta": self._delta(kind, call, lo, hi), "logprobs": None, "finish_reason": finish}
            body = self.common + b',"choices":[' + orjson.dumps(choice) + b"]"
            if self.cont_usage:
                body += self._usage(hi)
            events.append(frame(b'data: %b,"sim_t":%r}\n\n' % (body, now) if self.want_t else b"data: %b}\n\n" % body))
        self.chunks += len(events) - 1  # emit() counts one
        return b"".join(events)

    def _event(self, body: bytes) -> bytes:
        """SSE event of a JSON object whose closing brace is still missing."""
        if self.want_t:
            return b'data: %b,"sim_t":%r}\n\n' % (body, perf_counter())
        return b"data: %b}\n\n" % body

    def _write(self, data: bytes):
        if self.out is not None:  # a timer tick writing several chunks: one write at its end
            self.out.append(data)
        else:
            self.conn.transport.write(data)

    def hold_writes(self):
        """Gather what is written until `flush_writes` into one write (one syscall, not thousands)."""
        if self.out is None:
            self.out = []

    def flush_writes(self):
        out, self.out = self.out, None
        if out:
            self.conn.transport.write(b"".join(out))

    # -- lifecycle ----------------------------------------------------------
    def begin(self):
        """Headers (+ role chunk), then into the engine."""
        if self.done:
            return
        srv = self.srv
        if self.fault == "slow_headers":
            srv.loop.call_later(self.fault_param, self._begin_now)
            return
        self._begin_now()

    def _begin_now(self):
        if self.done:
            return
        self.start_t = perf_counter() if self.fault == "slow_headers" else self.arrival
        if self.is_stream:
            self.status = 200
            hdr = self.conn.headers_bytes(200, b"text/event-stream; charset=utf-8", None, self.rid,
                                          b"cache-control: no-cache\r\n")
            if self.endpoint == "chat":
                role = self.common + b',"choices":[{"index":0,"delta":{"role":"assistant"},"logprobs":null,"finish_reason":null}]'
                if self.cont_usage:
                    role += self._usage(0)
                if self.srv.role_at_once:
                    self._write(hdr + frame(self._event(role)))
                else:  # vLLM: the headers now, the role-only chunk in one write with the first token
                    self._write(hdr)
                    self.role_pending = frame(self._event(role))
            elif self.endpoint == "responses":
                created = {"response": {**self._response(0, self.arrival, "in_progress"), "output": [], "usage": None}}
                self._write(hdr + frame(self._typed("response.created", created)
                                        + self._typed("response.in_progress", created)))
            else:
                self._write(hdr)
            if self.fault_k == 0:
                self._apply_k_fault()
                if self.done:
                    return
        extra = self.fault_param if self.fault == "stall_first" else 0.0
        self.submitted = True
        self.srv.runner.submit(self, extra)

    def on_token(self, generated):
        """Batch runner: the engine emitted token number ``generated``."""
        self.generated = generated
        if self.done or self.held:
            return
        if not self.is_stream:
            if generated >= self.max_tokens:
                self.emit(generated)
            return
        if generated == 1 or generated >= self.max_tokens or generated - self.sent >= self.srv.stream_interval:
            self.emit(generated)

    def _release(self):
        """End of a ``stall_between`` gap (batch runner)."""
        self.held = False
        if not self.done and self.generated > self.sent:
            self.emit(self.generated)

    def emit(self, upto):
        """Write tokens ``sent .. upto-1`` as one chunk (the hot path)."""
        if self.done:
            return
        now = perf_counter()
        if not self.is_stream:
            self._write_full(now)
            return
        fk = self.fault_k
        if fk is not None and upto >= fk and self.fault != "malformed_chunk":
            upto = fk
        start = self.sent
        n = upto - start
        if n <= 0:
            if fk is not None and upto >= fk:
                self._apply_k_fault()
            return
        text = token_bytes(self.seed, start, n)
        self.sent = upto
        last = upto >= self.max_tokens
        m = self.srv.metrics
        pre = b""  # the role-only chunk, when it goes out with the first token (role_chunk: with_first_token)
        if self.first_t is None:
            pre, self.role_pending = self.role_pending, b""
            self.first_t = now
            m.ttft.observe(now - self.arrival)
            m.prompt_tokens += self.prompt_tokens
        else:
            m.itl.observe(now - self.last_t)
        self.last_t = now
        self.chunks += 1
        m.generation_tokens += n
        if self.phased:  # reasoning, tool calls, the Responses API: a chunk per phase (_emit_phased)
            events = self._emit_phased(start, upto, now, last)
            if not last:
                self._write(pre + events)
            elif self.endpoint == "responses":  # no [DONE]: response.completed (or .incomplete) ends it
                status = self._responses_status()
                end = {"response": self._response(upto, now, status)}
                self._write(pre + events + frame(self._typed(f"response.{status}", end)) + TERMINATOR)
                self.finish("ok")
                return
            else:
                out = [pre, events]
                if self.include_usage:
                    out.append(frame(self._event(self.common + b',"choices":[]' + self._usage(upto))))
                out += [frame(DONE), TERMINATOR]
                self._write(b"".join(out))
                self.finish("ok")
                return
        elif not (last or self.cont_usage or self.want_t):
            self._write(pre + b"%x\r\n%b%b%b}\n\n\r\n" % (self.fixed_len + len(text), self.head, text, self.mid))
        else:
            body = self.head + text + (self.mid_last if last else self.mid)
            if self.cont_usage:
                body += self._usage(upto)
            if self.want_t:
                payload = b'%b,"sim_t":%r}\n\n' % (body, now)
            else:
                payload = body + b"}\n\n"
            if not last:
                self._write(pre + frame(payload))
            else:
                out = [pre, frame(payload)]
                if self.include_usage:
                    out.append(frame(self._event(self.common + b',"choices":[]' + self._usage(upto))))
                out.append(frame(DONE))
                out.append(TERMINATOR)
                self._write(b"".join(out))
                self.finish("ok")
                return
        if fk is not None and upto >= fk:
            self._apply_k_fault()
        elif self.fault == "stall_between" and self.hold_s == 0.0 and not self.held \
                and upto >= max(1, self.max_tokens // 2) and self.fault_param is not None:
            self._stall_between()

    def _stall_between(self):
        s = self.fault_param
        self.fault_param = None  # once
        if self.srv.fixed:
            self.hold_s = s
        else:
            self.held = True
            self.srv.loop.call_later(s, self._release)

    def _write_full(self, now):
        """Non-streaming: the whole body at once."""
        n = self.max_tokens
        text = token_bytes(self.seed, 0, n).decode()
        if self.fault == "mid_stream_error":
            self._send_simple(500, error_body(500, "simulated engine error (mid_stream_error)"))
            self.finish("mid_stream_error")
            return
        if self.fault in ("cut_close", "cut_reset"):
            self.conn.drop(reset=self.fault == "cut_reset")
            self.finish(self.fault)
            return
        if self.endpoint == "responses":
            body = orjson.dumps(self._response(n, now, self._responses_status()))
            self.first_t = self.last_t = now
            self.answer_t = now if self.reasoning < n else None
            self.tools_sent = len(self._call_spans()) if self.calls else 0
            self.sent = n
            m = self.srv.metrics
            m.ttft.observe(now - self.arrival)
            m.prompt_tokens += self.prompt_tokens
            m.generation_tokens += n
            self._send_simple(200, body)
            self.finish(self.fault or "ok")
            return
        if self.endpoint == "chat" and self.phased:
            message = {"role": "assistant", "content": None}
            finish = "length"
            for kind, call, lo, hi in self._segments(0, n):
                d = self._delta(kind, call, lo, hi)
                if kind != "call":
                    message[kind] = d[kind]
                else:
                    entry = d["tool_calls"][0]
                    message.setdefault("tool_calls", []).append(
                        {"id": entry["id"], "type": "function", "function": {
                            "name": entry["function"]["name"], "arguments": entry["function"].get("arguments", "{}")}})
                    finish = "tool_calls"
            if self.reasoning < n:
                self.answer_t = now
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            obj = "chat.completion"
        elif self.endpoint == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                      "finish_reason": "length"}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
            obj = "text_completion"
        body = orjson.dumps({"id": self.rid, "object": obj, "created": self.srv.created, "model": self.model,
                             "choices": [choice],
                             "usage": orjson.loads(self._usage(n)[len(b',"usage":'):])})
        if self.fault == "malformed_chunk":
            body = body[: len(body) // 2]
        m = self.srv.metrics
        self.first_t = self.last_t = now
        self.sent = n
        m.ttft.observe(now - self.arrival)
        m.prompt_tokens += self.prompt_tokens
        m.generation_tokens += n
        self._send_simple(200, body)
        self.finish(self.fault or "ok")

    def _send_simple(self, status, body, extra=b""):
        self.status = status
        self._write(self.conn.headers_bytes(status, b"application/json", len(body), self.rid, extra) + body)

    def _apply_k_fault(self):
        f = self.fault
        self.fault_k = None
        if f == "malformed_chunk":
            self._write(frame(b'data: {"id":"' + self.rid.encode() + b'","choices":[{"index":0,"delta":{"content":"\n\n'))
            return
        if f == "mid_stream_error":
            err = b'data: {"error":{"message":"simulated engine error (mid_stream_error)","type":"InternalServerError","param":null,"code":500}}\n\n'
            self._write(frame(err) + frame(DONE) + TERMINATOR)
            self.srv.runner.cancel(self)
            self.finish(f)
        elif f in ("cut_close", "cut_reset"):
            self.srv.runner.cancel(self)
            self.finish(f, respond=False)
            self.conn.drop(reset=f == "cut_reset")

    def client_gone(self):
        if not self.done:
            self.srv.runner.cancel(self)
            self.finish("client_disconnected", respond=False)

    def finish(self, outcome, respond=True):
        self.flush_writes()  # before the connection ends or serves its next request
        if self.done:
            return
        self.done = True
        srv = self.srv
        if self.submitted:
            srv.runner.finished(self)
        srv.active.discard(self)
        if outcome == "ok":
            srv.metrics.success["length"] += 1
            if self.last_t is not None:
                srv.metrics.e2e.observe(self.last_t - self.arrival)
        if srv.truth:
            srv.truth.record({
                "request_id": self.rid, "endpoint": self.endpoint, "stream": self.is_stream,
                "arrival": self.arrival, "first_token": self.first_t, "last_token": self.last_t,
                "prompt_tokens": self.prompt_tokens, "output_tokens": self.sent, "chunks": self.chunks,
                "status": self.status, "outcome": outcome, "fault": self.fault,
                "first_answer_token": self.answer_t if self.phased else self.first_t,
                "reasoning_tokens": min(self.sent, self.reasoning), "answer_tokens": max(0, self.sent - self.reasoning),
                "tool_calls": self.tools_sent, "images": self.images, "tool_results": self.tool_results,
            })
        if respond:
            self.conn.response_done()



def check_tool_messages(msgs: list) -> None:
    """A tool message answers a tool call of an earlier assistant message, by its id (as OpenAI's
    API insists; HTTP 400 otherwise)."""
    called = set()
    for m in msgs:
        if not isinstance(m, dict):
            continue
        for c in m.get("tool_calls") or ():
            if isinstance(c, dict):
                called.add(c.get("id"))
        if m.get("type") == "function_call":  # the Responses API's items
            called.add(m.get("call_id"))
        if m.get("type") == "function_call_output" and m.get("call_id") not in called:
            raise HttpError(400, f"No tool call found for function call output with call_id {m.get('call_id')!r}.")
        if m.get("role") == "tool" and m.get("tool_call_id") not in called:
            raise HttpError(400, "messages with role 'tool' must be a response to a preceding message with "
                                 f"'tool_calls' (no call has id {m.get('tool_call_id')!r})")


def tool_calls_for(req: dict, profile, seed: int) -> list[str]:
    """The function names a reply to `req` calls: none without tools or with tool_choice none; the
    named function; else the tools in turn, as many as profile.parallel_tool_calls, when tool_choice
    is required, or with probability profile.tool_call_rate (drawn from the request's seed)."""
    tools = req.get("tools")
    if not isinstance(tools, list) or not tools:
        return []
    names = [n for n in (_tool_name(t) for t in tools) if n]
    choice = req.get("tool_choice", "auto")
    if not names or choice == "none":
        return []
    if isinstance(choice, dict):
        named = _tool_name(choice)
        return [named] if isinstance(named, str) else []
    if choice != "required" and (seed % 100_003) / 100_003 >= profile.tool_call_rate:
        return []
    n = 1 if req.get("parallel_tool_calls") is False else profile.parallel_tool_calls
    return [names[i % len(names)] for i in range(n)]


def _tool_name(tool) -> str | None:
    """A function tool's (or a named tool_choice's) name: chat's {"function": {"name"}} or the
    Responses API's flat {"name"}."""
    if not isinstance(tool, dict):
        return None
    name = tool["function"].get("name") if isinstance(tool.get("function"), dict) else tool.get("name")
    return name if isinstance(name, str) and name else None


class Embedding:
    """One /v1/embeddings or /v1/rerank request: it waits its turn on the one embedding queue (a
    reranker is a pooling model like an embedding model: it costs per input token), then the
    vectors, or the documents ranked by relevance (vLLM's Jina/Cohere-form reply), are written at
    once (profile embedding_*). `documents`: rerank's, `inputs` of them returned (top_n)."""

    __slots__ = ("srv", "conn", "rid", "arrival", "tokens", "inputs", "model", "timer", "done", "documents")

    def __init__(self, srv, conn, rid, arrival, tokens, inputs, model, documents=None):
        self.srv, self.conn, self.rid, self.arrival = srv, conn, rid, arrival
        self.tokens, self.inputs, self.model, self.documents = tokens, inputs, model, documents
        self.done = False
        p = srv.profile
        start = max(arrival, srv.embed_free_at)
        srv.embed_free_at = start + p.embedding_base_s + p.embedding_per_token_s * tokens
        self.timer = srv.loop.call_later(max(0.0, srv.embed_free_at - perf_counter()), self.respond)

    def respond(self):
        if self.done:
            return
        srv = self.srv
        if self.documents is not None:
            scores = [(zlib.crc32(f"{self.rid}/{i}".encode()) % 10**6) / 10**6 for i in range(len(self.documents))]
            ranked = sorted(range(len(scores)), key=lambda i: -scores[i])[: self.inputs]
            body = orjson.dumps({"id": self.rid, "model": self.model, "usage": {"total_tokens": self.tokens}, "results": [
                {"index": i, "document": {"text": self.documents[i]}, "relevance_score": scores[i]} for i in ranked]})
        else:
            dim = srv.profile.embedding_dim
            vector = [round(((zlib.crc32(self.rid.encode()) >> (i % 24)) % 2001 - 1000) / 1000, 3) for i in range(dim)]
            body = orjson.dumps({"object": "list", "model": self.model, "data": [
                {"object": "embedding", "index": i, "embedding": vector} for i in range(self.inputs)],
                "usage": {"prompt_tokens": self.tokens, "total_tokens": self.tokens}})
        t = perf_counter()  # the moment of the write, as for chunks
        self.conn.simple(200, body, rid=self.rid)
        self._end(200, "ok", t)
        self.conn.response_done()

    def client_gone(self):
        if not self.done:
            self.timer.cancel()
            self._end(0, "client_disconnected", None)

    def _end(self, status, outcome, t):
        self.done = True
        srv = self.srv
        if outcome == "ok":
            srv.metrics.prompt_tokens += self.tokens
            srv.metrics.e2e.observe(t - self.arrival)
        if srv.truth:
            endpoint = "embeddings" if self.documents is None else "rerank"
            srv.truth.record({"request_id": self.rid, "endpoint": endpoint, "stream": False, "arrival": self.arrival,
                              "first_token": None, "last_token": t, "prompt_tokens": self.tokens, "output_tokens": 0,
                              "chunks": 0, "status": status, "outcome": outcome, "fault": None, "inputs": self.inputs})


class SimServer:
    """Shared state of one simulator process."""

    def __init__(self, profile, loop, model=None, counter=None, truth=None, faults=None, seed=0):
        self.profile = profile
        self.loop = loop
        self.model = model or profile.model
        self.counter = counter or PromptCounter(None)
        self.truth = truth or TruthLog(None)
        self.faults = faults or FaultPlan({}, seed)
        self.metrics = Metrics(self.model)
        self.fixed = profile.kind == "fixed"
        self.runner = (FixedRunner if self.fixed else BatchRunner)(profile, loop, seed)
        self.stream_interval = profile.stream_interval
        self.role_at_once = profile.role_chunk == "at_once"
        self.created = int(time.time())
        self.embed_free_at = 0.0  # when the embedding queue is free again (Embedding)
        self.active: set[Stream] = set()
        self.conns: set[HttpConn] = set()
        self._n = 0
        self._prefix = uuid.uuid4().hex[:8]
        self.models_body = orjson.dumps({"object": "list", "data": [{
            "id": self.model, "object": "model", "created": self.created, "owned_by": "simulator",
            "root": self.model, "parent": None, "max_model_len": profile.max_model_len}]})

    def new_id(self, endpoint):
        self._n += 1
        return f"{ID_PREFIX.get(endpoint, 'cmpl')}-{self._prefix}{self._n:08x}"

    def shape_reply(self, s: Stream, req: dict) -> None:
        """Reasoning then answer (profile reasoning_tokens), or tool calls for a request with tools."""
        p = self.profile
        kwargs = req.get("chat_template_kwargs")
        thinking = not (isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False)
        s.reasoning = min(p.reasoning_tokens, s.max_tokens) if thinking else 0
        s.calls = tool_calls_for(req, p, s.seed)
        msgs = req["messages"]
        s.images = image_tokens(msgs, p.image_patch_px, p.image_tokens)[0]
        s.tool_results = sum(1 for m in msgs if isinstance(m, dict)
                             and (m.get("role") == "tool" or m.get("type") == "function_call_output"))

    def metrics_text(self) -> bytes:
        r = self.runner
        return self.metrics.render(r.num_running(), r.num_waiting(), r.kv_usage())

    def parse_request(self, endpoint, body):
        try:
            req = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise HttpError(400, f"invalid JSON body: {e}") from None
        if not isinstance(req, dict):
            raise HttpError(400, "request body must be a JSON object")
        if endpoint == "responses":  # input: a string or a list of messages and items
            items = req.get("input")
            if isinstance(items, str):
                items = [{"role": "user", "content": items}]
            if not isinstance(items, list) or not items:
                raise HttpError(400, "'input' must be a string or a non-empty list")
            req["messages"] = items
            if isinstance(req.get("instructions"), str):
                items = [{"role": "system", "content": req["instructions"]}, *items]
            check_tool_messages(items)
            prompt_tokens = self.counter.count_messages(items)
            prompt_tokens += image_tokens(items, self.profile.image_patch_px, self.profile.image_tokens)[1]
        elif endpoint == "chat":
            msgs = req.get("messages")
            if not isinstance(msgs, list) or not msgs:
                raise HttpError(400, "'messages' must be a non-empty list")
            check_tool_messages(msgs)
            prompt_tokens = self.counter.count_messages(msgs)
            prompt_tokens += image_tokens(msgs, self.profile.image_patch_px, self.profile.image_tokens)[1]
        else:
            if "prompt" not in req or req["prompt"] is None:
                raise HttpError(400, "'prompt' is required")
            prompt_tokens = self.counter.count_prompt(req["prompt"])
        stream = req.get("stream", False)
        if not isinstance(stream, bool):
            raise HttpError(400, "'stream' must be a boolean")
        so = req.get("stream_options")
        if so is not None:
            if not stream:
                raise HttpError(400, "Stream options can only be defined when `stream=True`.")
            if not isinstance(so, dict):
                raise HttpError(400, "'stream_options' must be an object")
        else:
            so = {}
        max_tokens = _positive_int(req, "max_output_tokens" if endpoint == "responses" else "max_completion_tokens")
        mt = _positive_int(req, "max_tokens")
        if mt is not None:
            max_tokens = mt
        if max_tokens is None:
            max_tokens = DEFAULT_MAX_TOKENS
        limit = self.profile.max_model_len
        if prompt_tokens + max_tokens > limit:
            raise HttpError(400, f"This model's maximum context length is {limit} tokens. However, you "
                                 f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
                                 f"messages, {max_tokens} in the completion). Please reduce the length of "
                                 f"the messages or completion.")
        model = req.get("model")
        if not isinstance(model, str) or not model:
            model = self.model
        include_usage = bool(so.get("include_usage")) or endpoint == "responses"  # usage is in response.completed
        return req, prompt_tokens, max_tokens, stream, include_usage, \
            bool(so.get("continuous_usage_stats")), model

    def shutdown(self):
        for s in list(self.active):
            if not s.done:
                self.runner.cancel(s)
                s.finish("server_shutdown", respond=False)
        for c in list(self.conns):
            c.drop(reset=False)
        self.runner.stop()
        self.truth.close()


class HttpConn(asyncio.Protocol):
    __slots__ = ("srv", "transport", "buf", "active", "closed", "keep_alive", "_head", "_sent_continue")

    def __init__(self, srv: SimServer):
        self.srv = srv
        self.transport = None
        self.buf = bytearray()
        self.active = None
        self.closed = False
        self.keep_alive = True
        self._head = None
        self._sent_continue = False

    # -- asyncio.Protocol -------------------------------------------------------
    def connection_made(self, transport):
        self.transport = transport
        srv = self.srv
        if srv.faults and srv.faults.draw_connection():
            if srv.truth:
                srv.truth.record({"request_id": None, "endpoint": None, "stream": None,
                                  "arrival": perf_counter(), "first_token": None, "last_token": None,
                                  "prompt_tokens": 0, "output_tokens": 0, "chunks": 0, "status": 0,
                                  "outcome": "refuse", "fault": "refuse"})
            self.closed = True
            self._reset()
            return
        srv.conns.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def connection_lost(self, exc):
        self.closed = True
        self.srv.conns.discard(self)
        a = self.active
        if a is not None:
            self.active = None
            a.client_gone()

    def data_received(self, data):
        self.buf += data
        if self.active is None:
            self._process()

    def eof_received(self):
        return False  # close our side too

    # -- output -----------------------------------------------------------------
    def headers_bytes(self, status, ctype, length, rid, extra=b""):
        h = [b"HTTP/1.1 %d %s\r\n%bcontent-type: %b\r\n" % (status, _REASONS.get(status, "OK").encode(), SERVER_HEADER, ctype)]
        if length is None:
            h.append(b"transfer-encoding: chunked\r\n")
        else:
            h.append(b"content-length: %d\r\n" % length)
        if rid is not None:
            h.append(b"x-request-id: %b\r\n" % rid.encode("latin-1", "replace"))
        if not self.keep_alive:
            h.append(b"connection: close\r\n")
        h.append(extra)
        h.append(b"\r\n")
        return b"".join(h)

    def simple(self, status, body, ctype=b"application/json", rid=None, extra=b""):
        if not self.closed:
            self.transport.write(self.headers_bytes(status, ctype, len(body), rid, extra) + body)
            if not self.keep_alive:
                self.transport.close()

    def response_done(self):
        self.active = None
        if self.closed:
            return
        if not self.keep_alive:
            self.transport.close()
            return
        if self.buf:
            self.srv.loop.call_soon(self._process)

    def _reset(self):
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        self.transport.abort()

    def drop(self, reset: bool):
        if self.closed:
            return
        self.closed = True
        self.srv.conns.discard(self)
        if reset:
            self._reset()
        else:
            self.transport.close()

    # -- input ------------------------------------------------------------------
    def _process(self):
        while self.active is None and not self.closed:
            buf = self.buf
            if self._head is None:
                i = buf.find(b"\r\n\r\n")
                if i < 0:
                    if len(buf) > MAX_HEAD:
                        self.keep_alive = False
                        self.simple(431, error_body(431, "request head too large"))
                    return
                head = bytes(buf[:i])
                del buf[: i + 4]
                try:
                    self._head = self._parse_head(head)
                except HttpError as e:
                    self.keep_alive = False
                    self.simple(e.status, error_body(e.status, e.message))
                    return
                self._sent_continue = False
            method, path, headers, length = self._head
            if len(buf) < length:
                if headers.get("expect", "").lower() == "100-continue" and not self._sent_continue:
                    self._sent_continue = True
                    self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                return
            body = bytes(buf[:length])
            del buf[:length]
            self._head = None
            self._dispatch(method, path, headers, body)

    def _parse_head(self, head: bytes):
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise HttpError(400, "malformed request line")
        method, target, version = parts
        headers = {}
        for line in lines[1:]:
            k, sep, v = line.partition(":")
            if not sep:
                raise HttpError(400, "malformed header line")
            headers[k.strip().lower()] = v.strip()
        conn = headers.get("connection", "").lower()
        if version == "HTTP/1.0":
            self.keep_alive = conn == "keep-alive"
        else:
            self.keep_alive = conn != "close"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise HttpError(501, "chunked request bodies are not supported; send Content-Length")
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise HttpError(400, "bad Content-Length") from None
        if length < 0 or length > MAX_BODY:
            raise HttpError(413, "request body too large")
        path = target.split("?", 1)[0]
        return method, path, headers, length

    def _dispatch(self, method, path, headers, body):
        srv = self.srv
        if path in ROUTES:
            if method != "POST":
                self.simple(405, error_body(405, "method not allowed"), extra=b"allow: POST\r\n")
                return
            if ROUTES[path] in ("embeddings", "rerank"):
                self._pooling(ROUTES[path], headers, body)
            else:
                self._completion(ROUTES[path], headers, body)
            return
        if method not in ("GET", "HEAD"):
            self.simple(405 if path in ("/health", "/v1/models", "/metrics") else 404,
                        error_body(405 if path in ("/health", "/v1/models", "/metrics") else 404, "not found"))
            return
        if path == "/health":
            self.simple(200, b"", ctype=b"text/plain")
        elif path == "/v1/models":
            self.simple(200, srv.models_body)
        elif path == "/metrics":
            self.simple(200, srv.metrics_text(), ctype=b"text/plain; version=0.0.4; charset=utf-8")
        else:
            self.simple(404, error_body(404, f"no route {path}"))

    def _pooling(self, endpoint, headers, body):
        """/v1/embeddings, or /v1/rerank: each document is scored with the query before it (a cross
        encoder's pair), so a document costs the query's tokens and its own, as vLLM counts them."""
        srv = self.srv
        arrival = perf_counter()
        rid = headers.get("x-request-id") or srv.new_id(endpoint)
        documents = None
        try:
            req = orjson.loads(body)
            if not isinstance(req, dict):
                raise HttpError(400, "request body must be a JSON object")
            if endpoint == "rerank":
                query, documents, top_n = req.get("query"), req.get("documents"), req.get("top_n") or 0
                if not isinstance(query, str) or not isinstance(documents, list) or not documents \
                        or not all(isinstance(d, str) for d in documents):
                    raise HttpError(400, "'query' must be a string and 'documents' a non-empty list of strings")
                if not isinstance(top_n, int) or top_n < 0:
                    raise HttpError(400, "'top_n' must be a non-negative integer")
                q = srv.counter.count_prompt(query)
                tokens = sum(q + srv.counter.count_prompt(d) for d in documents)
                inputs = documents[:top_n] if top_n else documents
            else:
                inputs = req.get("input")
                inputs = [inputs] if isinstance(inputs, str) or (isinstance(inputs, list) and inputs and isinstance(inputs[0], int)) else inputs
                if not isinstance(inputs, list) or not inputs:
                    raise HttpError(400, "'input' must be a string or a non-empty list")
                tokens = sum(srv.counter.count_prompt(x) for x in inputs)
        except orjson.JSONDecodeError as e:
            self.simple(400, error_body(400, f"invalid JSON body: {e}"), rid=rid)
            return
        except HttpError as e:
            self.simple(e.status, error_body(e.status, e.message), rid=rid)
            return
        model = req.get("model") if isinstance(req.get("model"), str) and req.get("model") else srv.model
        self.active = Embedding(srv, self, rid, arrival, tokens, len(inputs), model, documents)

    def _completion(self, endpoint, headers, body):
        srv = self.srv
        arrival = perf_counter()
        rid = headers.get("x-request-id") or srv.new_id(endpoint)
        try:
            req, prompt_tokens, max_tokens, stream, inc_usage, cont_usage, model = srv.parse_request(endpoint, body)
        except HttpError as e:
            self.simple(e.status, error_body(e.status, e.message), rid=rid)
            if srv.truth:
                srv.truth.record({"request_id": rid, "endpoint": endpoint, "stream": None, "arrival": arrival,
                                  "first_token": None, "last_token": None, "prompt_tokens": 0,
                                  "output_tokens": 0, "chunks": 0, "status": e.status, "outcome": "rejected",
                                  "fault": None})
            return
        s = Stream(srv, self, rid, endpoint, stream, prompt_tokens, max_tokens, model, inc_usage, cont_usage,
                   headers.get("x-sim-timestamps") == "1", arrival)
        self.active = s
        srv.active.add(s)
        if endpoint in ("chat", "responses"):
            srv.shape_reply(s, req)
        fault = srv.faults.draw_request() if srv.faults else None
        if fault is not None:
            name, param = fault
            s.fault, s.fault_param = name, param
            if name in HTTP_FAULTS:
                st = HTTP_FAULTS[name]
                s._send_simple(st, error_body(st, f"simulated {name}"),
                               b"retry-after: 1\r\n" if st == 429 else b"")
                s.finish(name)
                return
            if name == "json_reply":
                s.is_stream = False
            if name in ("mid_stream_error", "cut_close", "cut_reset", "malformed_chunk"):
                s.fault_k = max(0, min(int(param), max_tokens - 1))
                if name == "malformed_chunk":
                    s.fault_k = max(1, s.fault_k)
        s.begin()
