"""One completion request (/v1/chat/completions, /v1/completions, /v1/responses), from the parsed
body to its last byte.

Chunk bytes are assembled from per-request pre-encoded prefixes and the
pre-encoded vocabulary (no JSON serialisation on the token path) and framed
with chunked transfer encoding; each write goes straight to the transport.
A reply with reasoning or tool calls, and the Responses API's typed events, are written by
`simulator/reply_phases.py`.
"""

from __future__ import annotations

import zlib
from time import perf_counter

import orjson

from .reply_phases import (
    call_spans,
    emit_phased,
    phase_delta,
    phase_segments,
    response_object,
    responses_status,
    typed_event,
)
from .tokens import token_bytes
from .wire import DONE, TERMINATOR, error_body, frame


class Stream:
    """One completion request, from the parsed body to its last byte."""

    __slots__ = (
        "srv",
        "conn",
        "rid",
        "endpoint",
        "is_stream",
        "prompt_tokens",
        "max_tokens",
        "model",
        "include_usage",
        "cont_usage",
        "want_t",
        "arrival",
        "start_t",
        "seed",
        "sent",
        "chunks",
        "first_t",
        "last_t",
        "done",
        "status",
        "fault",
        "fault_param",
        "fault_k",
        "hold_s",
        "held",
        "generated",
        "seq",
        "t_first",
        "shift",
        "next_count",
        "head",
        "mid",
        "mid_last",
        "fixed_len",
        "common",
        "submitted",
        "role_pending",
        "out",
        "reasoning",
        "calls",
        "answer_t",
        "tools_sent",
        "images",
        "tool_results",
        "seq_no",
        "phased",
        "block_keys",
    )

    def __init__(
        self,
        srv,
        conn,
        rid,
        endpoint,
        is_stream,
        prompt_tokens,
        max_tokens,
        model,
        include_usage,
        cont_usage,
        want_t,
        arrival,
    ):
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
        self.seq = None  # the engine's Seq (batch runner)
        self.block_keys = ()  # prefix-cache keys of the prompt's full blocks (enable_prefix_caching)
        self.submitted = False
        self.role_pending = b""  # chat: the role-only chunk, written with the first token
        self.out = None  # writes gathered by hold_writes
        # Reasoning then answer (profile reasoning_tokens) and tool calls (a request with tools): the
        # first `reasoning` tokens are reasoning; with `calls` (the function names of a tool-call
        # reply) the answer's tokens are split between the calls. Either one streams through
        # `emit_phased` (simulator/reply_phases.py) instead of the plain content path.
        self.set_phases(0, [])
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
            orjson.dumps(rid),
            obj,
            srv.created,
            orjson.dumps(model),
        )
        self.head = b"data: " + self.common + b',"choices":[' + open_
        self.mid = close_ + b',"logprobs":null,"finish_reason":null}]'
        self.mid_last = close_ + b',"logprobs":null,"finish_reason":"length"}]'
        self.fixed_len = len(self.head) + len(self.mid) + 3

    # -- helpers ------------------------------------------------------------
    def _usage(self, completion):
        p = self.srv.profile
        cached = b""
        if p.enable_prompt_tokens_details:  # as vLLM: only when the request had prefix-cache hits
            n = self.cached_tokens()
            if n:
                cached = b',"prompt_tokens_details":{"cached_tokens":%d}' % n
        if self.reasoning and p.reasoning_usage:
            return (
                b',"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d%b,'
                b'"completion_tokens_details":{"reasoning_tokens":%d}}'
                % (
                    self.prompt_tokens,
                    completion,
                    self.prompt_tokens + completion,
                    cached,
                    min(completion, self.reasoning),
                )
            )
        return b',"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d%b}' % (
            self.prompt_tokens,
            completion,
            self.prompt_tokens + completion,
            cached,
        )

    def _final_usage(self, completion):
        """The usage of the stream's last chunk, and vLLM's per-request ``metrics`` beside it when
        the profile asks (enable_per_request_metrics)."""
        if self.srv.profile.enable_per_request_metrics:
            return self._usage(completion) + b',"metrics":' + orjson.dumps(self.request_metrics())
        return self._usage(completion)

    def cached_tokens(self) -> int:
        """Prompt tokens found in the prefix cache when the engine first admitted the request."""
        return self.seq.cached_tokens if self.seq is not None else 0

    def engine_times(self):
        """(queued, scheduled): when the request entered the engine's queue and the start of the
        step that first admitted it; None where it never did (the fixed runner has no engine)."""
        seq = self.seq
        if seq is None:
            return None, None
        return seq.queued_t, seq.scheduled_t

    def request_metrics(self) -> dict:
        """vLLM's per-request ``metrics`` (--enable-per-request-metrics), from the times the truth log
        records: queue = scheduled - queued; TTFT from scheduled to the first token; generation from
        the first token to the last; mean ITL over the tokens after the first; tokens per second over
        scheduled to the last token. A figure whose times are missing is null, as in vLLM."""
        queued, scheduled = self.engine_times()
        first, last, n = self.first_t, self.last_t, self.sent

        def ms(a, b):
            return (b - a) * 1000.0 if a is not None and b is not None else None

        gen = ms(first, last)
        span = last - scheduled if scheduled is not None and last is not None else 0.0
        return {
            "time_to_first_token_ms": ms(scheduled, first),
            "generation_time_ms": gen,
            "queue_time_ms": ms(queued, scheduled),
            "mean_itl_ms": gen / (n - 1) if gen is not None and n > 1 else None,
            "tokens_per_second": n / span if span > 0 else None,
        }

    def set_phases(self, reasoning: int, calls: list[str]) -> None:
        """The reply's reasoning tokens and tool calls. `phased` follows them once, here: emit reads
        it for every chunk (a property's call there cost the plain content path its share of CPU)."""
        self.reasoning = reasoning
        self.calls = calls
        self.phased = bool(reasoning or calls) or self.endpoint == "responses"

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
            hdr = self.conn.headers_bytes(
                200, b"text/event-stream; charset=utf-8", None, self.rid, b"cache-control: no-cache\r\n"
            )
            if self.endpoint == "chat":
                role = (
                    self.common
                    + b',"choices":[{"index":0,"delta":{"role":"assistant"},"logprobs":null,"finish_reason":null}]'
                )
                if self.cont_usage:
                    role += self._usage(0)
                if self.srv.role_at_once:
                    self._write(hdr + frame(self._event(role)))
                else:  # vLLM: the headers now, the role-only chunk in one write with the first token
                    self._write(hdr)
                    self.role_pending = frame(self._event(role))
            elif self.endpoint == "responses":
                created = {
                    "response": {**response_object(self, 0, self.arrival, "in_progress"), "output": [], "usage": None}
                }
                self._write(
                    hdr
                    + frame(
                        typed_event(self, "response.created", created)
                        + typed_event(self, "response.in_progress", created)
                    )
                )
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
        if self.phased:  # reasoning, tool calls, the Responses API: a chunk per phase (emit_phased)
            events = emit_phased(self, start, upto, now, last)
            if not last:
                self._write(pre + events)
            elif self.endpoint == "responses":  # no [DONE]: response.completed (or .incomplete) ends it
                status = responses_status(self)
                end = {"response": response_object(self, upto, now, status)}
                self._write(pre + events + frame(typed_event(self, f"response.{status}", end)) + TERMINATOR)
                self.finish("ok")
                return
            else:
                out = [pre, events]
                if self.include_usage:
                    out.append(frame(self._event(self.common + b',"choices":[]' + self._final_usage(upto))))
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
                    out.append(frame(self._event(self.common + b',"choices":[]' + self._final_usage(upto))))
                out.append(frame(DONE))
                out.append(TERMINATOR)
                self._write(b"".join(out))
                self.finish("ok")
                return
        if fk is not None and upto >= fk:
            self._apply_k_fault()
        elif (
            self.fault == "stall_between"
            and self.hold_s == 0.0
            and not self.held
            and upto >= max(1, self.max_tokens // 2)
            and self.fault_param is not None
        ):
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
            self.first_t = self.last_t = now
            self.answer_t = now if self.reasoning < n else None
            self.tools_sent = len(call_spans(self)) if self.calls else 0
            self.sent = n
            body = orjson.dumps(response_object(self, n, now, responses_status(self)))
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
            for kind, call, lo, hi in phase_segments(self, 0, n):
                d = phase_delta(self, kind, call, lo, hi)
                if kind != "call":
                    message[kind] = d[kind]
                else:
                    entry = d["tool_calls"][0]
                    message.setdefault("tool_calls", []).append(
                        {
                            "id": entry["id"],
                            "type": "function",
                            "function": {
                                "name": entry["function"]["name"],
                                "arguments": entry["function"].get("arguments", "{}"),
                            },
                        }
                    )
                    finish = "tool_calls"
            if self.reasoning < n:
                self.answer_t = now
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            obj = "chat.completion"
        elif self.endpoint == "chat":
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": "length",
            }
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
            obj = "text_completion"
        reply = {
            "id": self.rid,
            "object": obj,
            "created": self.srv.created,
            "model": self.model,
            "choices": [choice],
            "usage": orjson.loads(self._usage(n)[len(b',"usage":') :]),
        }
        self.first_t = self.last_t = now
        self.sent = n
        if self.srv.profile.enable_per_request_metrics:
            reply["metrics"] = self.request_metrics()
        body = orjson.dumps(reply)
        if self.fault == "malformed_chunk":
            body = body[: len(body) // 2]
        m = self.srv.metrics
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
            self._write(
                frame(b'data: {"id":"' + self.rid.encode() + b'","choices":[{"index":0,"delta":{"content":"\n\n')
            )
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
        queued, scheduled = self.engine_times()
        if outcome == "ok":
            srv.metrics.success["length"] += 1
            if self.last_t is not None:
                srv.metrics.e2e.observe(self.last_t - self.arrival)
            srv.metrics.request_done(queued, scheduled, self.first_t, self.last_t, self.prompt_tokens, self.sent)
        seq = self.seq
        if srv.truth:
            srv.truth.record(
                {
                    "request_id": self.rid,
                    "endpoint": self.endpoint,
                    "stream": self.is_stream,
                    "arrival": self.arrival,
                    "first_token": self.first_t,
                    "last_token": self.last_t,
                    "prompt_tokens": self.prompt_tokens,
                    "output_tokens": self.sent,
                    "chunks": self.chunks,
                    "status": self.status,
                    "outcome": outcome,
                    "fault": self.fault,
                    "first_answer_token": self.answer_t if self.phased else self.first_t,
                    "reasoning_tokens": min(self.sent, self.reasoning),
                    "answer_tokens": max(0, self.sent - self.reasoning),
                    "tool_calls": self.tools_sent,
                    "images": self.images,
                    "tool_results": self.tool_results,
                    "queued": queued,
                    "scheduled": scheduled,
                    "queue_time": scheduled - queued if scheduled is not None and queued is not None else None,
                    "preemptions": seq.preemptions if seq is not None else 0,
                    "cached_tokens": seq.cached_tokens if seq is not None else 0,
                }
            )
        if respond:
            self.conn.response_done()
