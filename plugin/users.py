"""The Locust user classes: virtual users, one closed-loop conversation partner each, on Locust's
FastHttpUser. They live with the plugin (users/ keeps the plain client, which knows no Locust).

A user draws a request from the workload, streams it (users/stream.py) and hands what arrived to
the process's finisher (plugin/finisher.py), which builds the RequestRecord (metrics/timing.py),
ships it, and fires Locust events so the live table is useful:
  - one HTTP row per endpoint (request_type POST) carrying end-to-end latency and the failure class;
  - LLM rows `ttft`, `tpot`, `e2e` per request class, logged straight into their stats entries so
    they stay out of the "Aggregated" row (a request event would count them in the total too,
    multiplying the shown requests/s).
Locust's rounded statistics are for the live view only; results come from the records.

A failure that comes at once (HTTP 4xx/429/5xx, a refused or reset connection) is followed by a
pause of the user before its next request in a closed loop: 0.1 s, doubling while failures
repeat, at most 5 s, back to none after the first success (`FailurePacing`). A wrong --host or a
server that is down then costs a few requests a second per user instead of thousands, and the
good fraction measures the server, not how fast the client can spin. An open loop keeps to its
schedule (the schedule bounds the rate already).
"""

from __future__ import annotations

import logging
import random
import time
from email.utils import parsedate_to_datetime

import gevent
from gevent.event import Event
from locust import constant, task
from locust.contrib.fasthttp import FastHttpUser
from locust.exception import StopUser

from metrics.record import RequestRecord
from metrics.timing import head_class
from plugin.finisher import reply_text
from plugin.start_pacing import GATE
from targets.backends import Targets, split_hosts
from targets.probe import answers
from users.stream import Exchange, StreamClient
from workloads.endpoints import ENDPOINTS
from workloads.session import Conversation

log = logging.getLogger("llm")

CONTEXT_WAIT_S = 30
REPLY_WAIT_S = 60  # a conversation waits this long for the finisher to hand back a reply's text


class LLMUser(FastHttpUser):
    """Base of the streaming users; `endpoint` None means: the --endpoint option decides."""

    abstract = True
    endpoint: str | None = None
    wait_time = constant(0)  # closed loop: the next request as soon as the last one ended

    def on_start(self) -> None:
        self.ctx = self._wait_for_context()
        self.endpoint = self.endpoint or self.ctx.plan.endpoint
        endpoint = ENDPOINTS[self.endpoint]  # workloads/endpoints/: its path, body and whether it streams
        self.path = endpoint.path
        plan = self.ctx.plan
        self.targets = targets_of(self.ctx, self.host)
        self.streamed = plan.stream and endpoint.streams
        # one connection per backend: a backend's requests reuse its own (users/stream.py)
        self.streams = [
            StreamClient(
                url,
                plan.timeouts,
                {},
                per_request=plan.connection == "per-request",
                max_body=plan.max_response_bytes,
                tls=plan.tls,
                backend_header=plan.backend_header,
                first_token=self.streamed,
            )
            for url in self.targets.urls
        ]
        self.failures = FailurePacing(self.streamed)
        self.last_exchange: Exchange | None = None
        GATE.wait()  # the first request goes out as fast as the event loop keeps up (plugin/start_pacing.py)

    def _wait_for_context(self):
        """The run context of this process; a worker that joined a running test builds it a moment
        after its users are spawned."""
        deadline = time.monotonic() + CONTEXT_WAIT_S
        state = self.environment.llm
        while state.context is None:
            if state.cannot_run:  # none will come: the worker said why once, and its master stops the run
                raise gevent.GreenletExit  # ends the user as Locust's own stop does, without a traceback per user
            if time.monotonic() > deadline:
                raise StopUser(f"no run context after {CONTEXT_WAIT_S}s")
            gevent.sleep(0.01)
        return state.context

    def on_stop(self) -> None:
        for stream in getattr(self, "streams", ()):
            stream.close()

    @task
    def send(self) -> None:
        item = self.ctx.pacer.next()  # waits until the load model says the next request is due
        if self.ctx.stopping.is_set():
            # The run is ending: no new request. A user between two tasks when the stop began is
            # killed by a callback that may run only after it has started its next task; that
            # request would be cut at once and recorded "stopped" though its reply came.
            raise StopUser()
        if item is None:
            return
        t_intended, request = item
        if request.turns:  # a conversation: its later turns follow its replies
            self.converse(request, t_intended)
        else:
            self.send_request(request, t_intended=t_intended)
        pause = self.failures.after(self.last_exchange)
        if pause and t_intended != t_intended:  # closed loop: the next request waits (module docstring)
            if self.ctx.stopping.wait(pause):
                raise StopUser()  # the run is ending: no new request (failures would come back to back)

    def converse(self, first, t_intended: float = float("nan")) -> None:
        """A whole conversation (workloads/session.py) on this user: each turn carries the turns
        before it with the replies actually received, `think_time_s` after the previous reply. In
        open loop a later turn's intended send time is the previous reply's end plus the think time.
        A turn that fails, or a run that ends, ends the conversation."""
        ctx = self.ctx
        conv = Conversation(ctx.sampler, first, ctx.next_session_id())
        replies: dict = {}
        got = Event()

        def on_parsed(rec, parsed):
            replies[rec.request_id] = (reply_text(parsed), parsed.tool_calls) if rec.ok else None
            got.set()

        request = first
        while True:
            rec = self.send_request(request, t_intended, turn=conv.turn, session_id=conv.id, on_parsed=on_parsed)
            deadline = time.monotonic() + REPLY_WAIT_S
            while rec.request_id not in replies and time.monotonic() < deadline and not ctx.stopping.is_set():
                got.clear()
                got.wait(1.0)
            reply = replies.pop(rec.request_id, None)
            replies.clear()  # failed attempts retried by send_request
            if reply is None or not (reply[0] or reply[1]) or conv.done or ctx.stopping.is_set():
                return
            request = conv.advance(*reply)
            think = conv.think_time()
            if t_intended == t_intended:  # open loop: the next turn is due a think time after this reply
                t_intended = rec.t_send + rec.e2e_s + think if rec.e2e_s == rec.e2e_s else time.perf_counter() + think
                think = t_intended - time.perf_counter()
            if ctx.stopping.wait(max(think, 0.0)):
                return

    def send_request(
        self, request, t_intended: float = float("nan"), turn: int = -1, session_id: str = "", on_parsed=None
    ) -> RequestRecord:
        """Send one sampled request; with --retry, again after a retryable failure. Every attempt
        is its own record (retries are counted, never hidden): the first keeps the request id, the
        retries add -r1, -r2, ... Returns the record of the last attempt."""
        ctx = self.ctx
        plan = ctx.plan
        request_id = ctx.next_request_id()
        body, expected = ctx.body(self.endpoint, request)
        cancel_after = plan.cancel_after_s if plan.cancel_rate and cancel_draw(ctx) < plan.cancel_rate else None
        attempt = 0
        while True:
            rec, ex = self._attempt(
                request,
                body,
                f"{request_id}-r{attempt}" if attempt else request_id,
                float("nan") if attempt else t_intended,
                cancel_after,
                turn,
                session_id,
                on_parsed,
                expected,
            )
            if attempt >= plan.retry:
                return rec
            wait = retry_wait(plan, ex, attempt + 1, self.streamed)
            if wait is None or ctx.stopping.is_set() or ctx.stopping.wait(wait):
                return rec  # not retryable, or the run is ending: no new attempt
            attempt += 1

    def _attempt(
        self,
        request,
        body: bytes,
        request_id: str,
        t_intended: float,
        cancel_after: float | None,
        turn: int = -1,
        session_id: str = "",
        on_parsed=None,
        expected: int = 0,
    ):
        ctx = self.ctx
        rec = RequestRecord(
            request_id=request_id,
            worker=ctx.tag,
            endpoint=self.endpoint,
            request_class=request.request_class,
            input_chars=request.input_chars,
            max_tokens=request.max_tokens,  # with --max-tokens-override, decided when it was drawn
            stream=self.streamed,
            t_intended=t_intended,
            turn=turn,
            session_id=session_id,
            inputs=expected,  # the results the reply must hold; fill_record sets those it held
        )
        headers = {**ctx.headers, "X-Request-Id": rec.request_id}
        ex = Exchange()
        targets = self.targets
        backend = targets.pick(session_id)  # once per request (targets/): a few list reads
        rec.backend = targets.names[backend]
        rec.wall_send = time.time()
        rec.step = ctx.step_at(rec.wall_send)
        ctx.in_flight += 1
        targets.sent(backend)
        ctx.streams[ex] = rec
        try:
            self.streams[backend].post(self.path, body, headers, ex, cancel_after)
        except gevent.GreenletExit:
            # The run ended while this stream was in flight: keep what arrived, marked "stopped".
            rec.backend = ex.backend.rsplit(",", 1)[-1].strip() or rec.backend
            ctx.finisher.submit(self.path, rec, ex, stopped=True)
            raise
        finally:
            ctx.in_flight -= 1
            targets.ended(backend)
            del ctx.streams[ex]
        if ex.backend:  # a load balancer said which of its backends served it (--backend-header); one that
            # tried several names them all (nginx's $upstream_addr: "b:8000, a:8000"): the last one served it
            rec.backend = ex.backend.rsplit(",", 1)[-1].strip()
        elif ex.error == "connect_error":  # refused or dropped before any answer: out of the spread, probed back
            targets.refused(backend)
        ctx.finisher.submit(self.path, rec, ex, on_parsed=on_parsed)
        self.last_exchange = ex
        return rec, ex


def targets_of(ctx, host: str) -> Targets:
    """This process's backends for the run (one object shared by its users: the requests in flight
    on each and which are in the spread are the process's), made by its first user."""
    targets = getattr(ctx, "targets", None)
    if targets is None:
        plan = ctx.plan
        probe = lambda url: answers(url, min(plan.timeouts.connect, 1.0))  # noqa: E731 - bounded: one probe a second at most
        targets = ctx.targets = Targets(
            split_hosts(host),
            plan.balance,
            probe,
            on_change=lambda name, text: log.warning("%s", text),
            stopping=ctx.stopping,
        )
    return targets


RETRY_BACKOFF_S = 0.5  # first wait before a retry (other than a 429 with Retry-After); doubles
FAILURE_PAUSE_S = 0.1  # a user's first pause after a failure that came at once; doubles while they repeat
FAILURE_PAUSE_MAX_S = 5.0
PACED = (
    "http_429",
    "http_4xx",
    "http_5xx",
    "connect_error",
    "not_streamed",
)  # failures known at once, from the HTTP exchange


class FailurePacing:
    """One user's pause after failures that came at once (module docstring): 0.1 s, doubling while
    they repeat, at most 5 s; none after a success or a failure that took its time (a timeout, a
    stream cut short, one only the body shows)."""

    __slots__ = ("pause", "stream")

    def __init__(self, stream: bool = True) -> None:
        self.pause = 0.0
        self.stream = stream  # streaming requests: a reply that was not streamed is a failure

    def after(self, ex: Exchange | None) -> float:
        """The pause before this user's next request, given the exchange of its last one."""
        if ex is not None and exchange_class(ex, self.stream) in PACED:
            self.pause = min(max(self.pause * 2, FAILURE_PAUSE_S), FAILURE_PAUSE_MAX_S)
        else:
            self.pause = 0.0
        return self.pause


def exchange_class(ex: Exchange, stream: bool = True) -> str:
    """The failure class an exchange shows before its body is parsed (metrics.timing.classify
    decides the final one); "" when the HTTP exchange itself succeeded."""
    if ex.error:
        return ex.error
    json_body = stream and ex.status == 200 and "json" in ex.content_type.lower()
    return head_class(ex.status, stream, ex.content_type, ex.first_bytes() if json_body else b"")


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


def retry_wait(plan, ex: Exchange, n: int, stream: bool | None = None) -> float | None:
    """Seconds to wait before retry number n (1, 2, ...) after the attempt `ex`; None: no retry.
    A 429's Retry-After is honoured up to --retry-max-wait; otherwise 0.5 s, doubling, capped."""
    error = exchange_class(ex, plan.stream if stream is None else stream)
    if not error or error not in plan.retry_on:
        return None
    if error == "http_429":
        after = parse_retry_after(ex.retry_after)
        if after is not None:
            return min(after, plan.retry_max_wait_s)
    return min(RETRY_BACKOFF_S * 2 ** (n - 1), plan.retry_max_wait_s)


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
    """The locustfile's user: chat, completions, responses, embeddings or rerank as --endpoint says (also in
    the web UI form)."""
