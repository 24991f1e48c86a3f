"""Virtual users: one closed-loop conversation partner each, on Locust's FastHttpUser.

A user draws a request from the workload, streams it (users/stream.py) and hands what arrived to
the process's finisher (users/finisher.py), which builds the RequestRecord (metrics/timing.py),
ships it, and fires Locust events so the live table is useful:
  - one HTTP row per endpoint (request_type POST) carrying end-to-end latency and the failure class;
  - LLM rows `ttft`, `tpot`, `e2e` per request class, logged straight into their stats entries so
    they stay out of the "Aggregated" row (FIELD_NOTES 4).
Locust's rounded statistics are for the live view only; results come from the records.
"""

from __future__ import annotations

import time

import gevent
from locust import constant, task
from locust.exception import StopUser
from locust.contrib.fasthttp import FastHttpUser

from metrics.record import RequestRecord
from users.stream import Exchange, StreamClient


CONTEXT_WAIT_S = 30
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


class LLMUser(FastHttpUser):
    """Base of the streaming users; `endpoint` None means: the --endpoint option decides."""

    abstract = True
    endpoint: str | None = None
    wait_time = constant(0)  # closed loop: the next request as soon as the last one ended

    def on_start(self) -> None:
        self.ctx = self._wait_for_context()
        self.endpoint = self.endpoint or self.ctx.settings.endpoint
        self.path = PATHS[self.endpoint]
        self.stream = StreamClient(self.host, self.ctx.settings.timeouts, {})

    def _wait_for_context(self):
        """The run context of this process; a worker that joined a running test builds it a moment
        after its users are spawned."""
        deadline = time.monotonic() + CONTEXT_WAIT_S
        while getattr(self.environment, "llm_context", None) is None:
            if time.monotonic() > deadline:
                raise StopUser(f"no run context after {CONTEXT_WAIT_S}s")
            gevent.sleep(0.01)
        return self.environment.llm_context

    def on_stop(self) -> None:
        if getattr(self, "stream", None) is not None:
            self.stream.close()

    @task
    def send(self) -> None:
        ctx = self.ctx
        if ctx.idle:
            ctx.stopping.wait(1.0)
            return
        if ctx.arrivals is None:  # closed loop
            self.send_request(ctx.sampler.next())
            return
        t_intended = ctx.arrivals.take()  # open loop: the next scheduled send time of this process
        delay = t_intended - time.perf_counter()
        if ctx.stopping.wait(max(delay, 0.0)):
            return  # the run is ending: arrivals after it are not sent
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
            ctx.finisher.submit(self.path, rec, ex, stopped=True)
            raise
        ctx.finisher.submit(self.path, rec, ex)
        return rec


class ChatCompletionsUser(LLMUser):
    """Streams /v1/chat/completions (messages with an optional system prompt)."""

    endpoint = "chat"


class CompletionsUser(LLMUser):
    """Streams /v1/completions (one prompt string)."""

    endpoint = "completions"


class ConfiguredUser(LLMUser):
    """The locustfile's user: chat or completions as --endpoint says (also in the web UI form)."""
