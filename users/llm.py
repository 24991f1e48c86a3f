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

import random
import time
from email.utils import parsedate_to_datetime

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
        """Send one sampled request; with --retry, again after a retryable failure. Every attempt
        is its own record (retries are counted, never hidden): the first keeps the request id, the
        retries add -r1, -r2, ... Returns the record of the last attempt."""
        ctx = self.ctx
        settings = ctx.settings
        request_id = ctx.next_request_id()
        body = ctx.body(self.endpoint, request)
        cancel_after = settings.cancel_after_s if settings.cancel_rate and cancel_draw(ctx) < settings.cancel_rate else None
        attempt = 0
        while True:
            rec, ex = self._attempt(request, body, f"{request_id}-r{attempt}" if attempt else request_id,
                                    float("nan") if attempt else t_intended, cancel_after)  # fmt: skip
            if attempt >= settings.retry:
                return rec
            wait = retry_wait(settings, ex, attempt + 1)
            if wait is None or ctx.stopping.is_set() or ctx.stopping.wait(wait):
                return rec  # not retryable, or the run is ending: no new attempt
            attempt += 1

    def _attempt(self, request, body: bytes, request_id: str, t_intended: float, cancel_after: float | None):
        ctx = self.ctx
        rec = RequestRecord(
            request_id=request_id,
            worker=ctx.tag,
            endpoint=self.endpoint,
            request_class=request.request_class,
            input_chars=request.input_chars,
            max_tokens=ctx.settings.max_tokens_override or request.max_tokens,
            stream=ctx.settings.stream,
            t_intended=t_intended,
        )
        headers = {**ctx.headers, "X-Request-Id": rec.request_id}
        ex = Exchange()
        rec.wall_send = time.time()
        rec.step = ctx.step_at(rec.wall_send)
        try:
            self.stream.post(self.path, body, headers, ex, cancel_after)
        except gevent.GreenletExit:
            # The run ended while this stream was in flight: keep what arrived, marked "stopped".
            ctx.finisher.submit(self.path, rec, ex, stopped=True)
            raise
        ctx.finisher.submit(self.path, rec, ex)
        return rec, ex


RETRY_BACKOFF_S = 0.5  # first wait before a retry (other than a 429 with Retry-After); doubles


def exchange_class(ex: Exchange) -> str:
    """The failure class an exchange shows before its body is parsed (metrics.timing.classify
    decides the final one); "" when the HTTP exchange itself succeeded."""
    if ex.error:
        return ex.error
    if ex.status == 200:
        return ""
    if ex.status == 429:
        return "http_429"
    return "http_5xx" if ex.status >= 500 else "http_4xx"


def parse_retry_after(value: str) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP date; None when absent or unreadable."""
    value = (value or "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    return max(0.0, seconds) if seconds == seconds else None


def retry_wait(settings, ex: Exchange, n: int) -> float | None:
    """Seconds to wait before retry number n (1, 2, ...) after the attempt `ex`; None: no retry.
    A 429's Retry-After is honoured up to --retry-max-wait; otherwise 0.5 s, doubling, capped."""
    error = exchange_class(ex)
    if not error or error not in settings.retry_on:
        return None
    if error == "http_429":
        after = parse_retry_after(ex.retry_after)
        if after is not None:
            return min(after, settings.retry_max_wait_s)
    return min(RETRY_BACKOFF_S * 2 ** (n - 1), settings.retry_max_wait_s)


def cancel_draw(ctx) -> float:
    """A uniform draw for --cancel-rate from this process's own generator: seeded from the run
    context's (so --seed reproduces it) without taking numbers from the request sequence."""
    rng = getattr(ctx, "cancel_rng", None)
    if rng is None:
        rng = ctx.cancel_rng = random.Random(hash(ctx.rng.getstate()[1]) ^ 0xCA9CE1)
    return rng.random()


class ChatCompletionsUser(LLMUser):
    """Streams /v1/chat/completions (messages with an optional system prompt)."""

    endpoint = "chat"


class CompletionsUser(LLMUser):
    """Streams /v1/completions (one prompt string)."""

    endpoint = "completions"


class ConfiguredUser(LLMUser):
    """The locustfile's user: chat or completions as --endpoint says (also in the web UI form)."""
