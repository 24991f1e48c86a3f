"""Virtual users: one closed-loop conversation partner each, on Locust's FastHttpUser.

A user draws a request from the workload, streams it (users/stream.py), turns what arrived into a
RequestRecord (metrics/timing.py), hands the record to the process's sink, and fires Locust events
so the live table is useful:
  - one HTTP row per endpoint (request_type POST) carrying end-to-end latency and the failure class;
  - LLM rows `ttft`, `tpot`, `e2e` per request class, logged straight into their stats entries so
    they stay out of the "Aggregated" row (FIELD_NOTES 4).
Locust's rounded statistics are for the live view only; results come from the records.
"""

from __future__ import annotations

import time

import gevent
from locust import constant, task
from locust.contrib.fasthttp import FastHttpUser

from metrics.record import RequestRecord
from metrics.sse import parse_response, parse_stream
from metrics.timing import fill_record
from users.stream import Exchange, StreamClient


class RequestFailed(Exception):
    """Carries a failure class into Locust's statistics (the error table groups by message)."""


PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


class LLMUser(FastHttpUser):
    """Base of the streaming users; `endpoint` None means: the --endpoint option decides."""

    abstract = True
    endpoint: str | None = None
    wait_time = constant(0)  # closed loop: the next request as soon as the last one ended

    def on_start(self) -> None:
        self.ctx = self.environment.llm_context
        self.endpoint = self.endpoint or self.ctx.settings.endpoint
        self.path = PATHS[self.endpoint]
        self.stream = StreamClient(self.host, self.ctx.settings.timeouts, {})

    def on_stop(self) -> None:
        self.stream.close()

    @task
    def send(self) -> None:
        ctx = self.ctx
        if ctx.arrivals is None:  # closed loop
            self.send_request(ctx.sampler.next())
            return
        t_intended = ctx.arrivals.take()  # open loop: the next scheduled send time of this process
        delay = t_intended - time.perf_counter()
        if delay > 0:
            gevent.sleep(delay)
        self.send_request(ctx.sampler.next(), t_intended=t_intended)

    def send_request(self, request, t_intended: float = float("nan")) -> RequestRecord:
        ctx = self.ctx
        rec = RequestRecord(
            request_id=ctx.next_request_id(),
            worker=ctx.tag,
            endpoint=self.endpoint,
            request_class=request.request_class,
            input_chars=request.input_chars,
            max_tokens=ctx.settings.max_tokens_override or request.max_tokens,
            stream=ctx.settings.stream,
            t_intended=t_intended,
        )
        body = ctx.body(self.endpoint, request)
        headers = {**ctx.headers, "X-Request-Id": rec.request_id}
        ex = Exchange()
        rec.wall_send = time.time()
        rec.step = ctx.step_at(rec.wall_send)
        try:
            self.stream.post(self.path, body, headers, ex)
        except gevent.GreenletExit:
            # The run ended while this stream was in flight: keep what arrived, marked "stopped".
            self._finish(rec, ex, stopped=True)
            raise
        self._finish(rec, ex)
        return rec

    def _finish(self, rec: RequestRecord, ex: Exchange, stopped: bool = False) -> None:
        ctx = self.ctx
        rec.t_send = ex.t_send
        parsed = parse_stream(ex.pieces) if ctx.settings.stream else parse_response(ex.pieces)
        fill_record(rec, ex.status, parsed, ctx.count_tokens, stream=ctx.settings.stream)
        if stopped or ex.error:  # transport-level ending overrides what the bytes alone suggest
            rec.error = "stopped" if stopped else ex.error
            rec.error_detail = "in flight when the run ended" if stopped else ex.error_detail
            rec.ok = False
            if not rec.n_chunks or rec.e2e_s != rec.e2e_s:
                rec.e2e_s = time.perf_counter() - ex.t_send
        ctx.sink.add(rec)
        self._fire_events(rec, sum(len(p) for _, p in ex.pieces))

    def _fire_events(self, rec: RequestRecord, length: int) -> None:
        if rec.error == "stopped":
            return  # not a server outcome; it is in the records, not in the live table
        env = self.environment
        exc = None if rec.ok else RequestFailed(f"{rec.error}: {rec.error_detail}" if rec.error_detail else rec.error)
        e2e_ms = rec.e2e_s * 1000 if rec.e2e_s == rec.e2e_s else 0.0
        env.events.request.fire(
            request_type="POST", name=self.path, response_time=e2e_ms, response_length=length,
            exception=exc, context={"request_class": rec.request_class},
        )  # fmt: skip
        if rec.ok:
            stats = env.stats
            stats.get(rec.request_class, "ttft").log(rec.ttft_s * 1000, 0)
            stats.get(rec.request_class, "e2e").log(e2e_ms, 0)
            if rec.tpot_s == rec.tpot_s:
                stats.get(rec.request_class, "tpot").log(rec.tpot_s * 1000, 0)


class ChatCompletionsUser(LLMUser):
    """Streams /v1/chat/completions (messages with an optional system prompt)."""

    endpoint = "chat"


class CompletionsUser(LLMUser):
    """Streams /v1/completions (one prompt string)."""

    endpoint = "completions"


class ConfiguredUser(LLMUser):
    """The locustfile's user: chat or completions as --endpoint says (also in the web UI form)."""
