"""Turning finished exchanges into records, off the hot path.

A user hands over the raw exchange (timed byte pieces) and goes straight on to its next request;
this per-process greenlet parses, builds the record, ships it and fires the Locust events,
yielding to the event loop after each one. Without it, streams that end together (same length,
same start) make a burst of parsing during which every other open stream waits to be read, and
the last tokens of the burst are stamped late.

Memory between the users and the writer is bounded. A user waits in `submit` while the exchanges
handed over and not yet parsed hold more than BACKLOG_BYTES (replies of 100,000 chunks arrive
faster than they can be parsed: without the wait they piled up by the gigabyte); the finisher
waits while the writer has more rows to write than it writes at once (`sink.wait_for_room`); the
drain at the end yields between records, so the writer's flushes run meanwhile. A client that
cannot keep up is then slower, and says so (its self-health), instead of losing records.
"""

from __future__ import annotations

import gc
from collections import deque
from urllib.parse import urlsplit

import gevent
from gevent.event import Event

from core.redact import redact
from metrics.record import RequestRecord
from metrics.sse import parse_reads, parse_response
from metrics.timing import end_early, fill_record
from plugin import events as llm_events
from users.connection import CHUNKED
from users.stream import Exchange

_parsed_hook = llm_events.stream_parsed
IDLE_BACKLOG = 16  # records waiting: below this the finisher runs only when no socket has data
YIELD_S = 1e-5  # above it, a timer: the sockets are polled between two records
BACKLOG_BYTES = 64 << 20  # exchanges waiting to be parsed, by `exchange_bytes`: above it users wait
READ_BYTES = 80  # the memory of one read beside its bytes: the bytes object, its time, two list slots


def exchange_bytes(ex: Exchange) -> int:
    """The memory an exchange waiting to be parsed holds, estimated from its reads."""
    return READ_BYTES * len(ex.datas) + sum(map(len, ex.datas))


class RequestFailed(Exception):
    """Carries a failure class into Locust's statistics (the error table groups by message)."""


def keep_pauses_out_of_the_hot_path() -> None:
    """A pause of the whole process, long enough to delay every stream in flight, paid at the
    start of a run instead of during it: the garbage collector. Everything alive at the start
    (Locust, the suite, imported modules: some hundred thousand objects) is moved out of its
    reach. A full collection otherwise walks them all, 50-150 ms during which no stream is read
    (bench/RESULTS.md "Client speed"). Objects made later are collected as usual by the young
    collections, which stay short; full collections come 100 times rarer than Python's default
    (FULL_AFTER). Those of a run walk every
    object it keeps (users, streams, records not yet written): 40-110 ms at 2,048 streams, four in
    a 30 s run, and they found nothing to free (the suite's garbage has no cycles that outlive a
    young collection). The GIL is held throughout, so nothing reads a socket, the first-token
    watch's thread included (users/first_token_watch.py): every first token that arrived with its
    second inside one was stamped late (bench/RESULTS.md "The first-token watch"). (The other
    pause of a run's stop, Locust's inspect.stack(), is made cheap in plugin/locust_fixes.py.)"""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_AFTER)


# a full collection after this many middle ones (Python's default: 10): at 2,048 streams one in
# about 10 minutes instead of one every 7 s
FULL_AFTER = 1000


class Finisher:
    def __init__(self, ctx, environment):
        keep_pauses_out_of_the_hot_path()
        self.ctx = ctx
        self.environment = environment
        self.prefix = (
            urlsplit((environment.host or "").split(",")[0]).path.rstrip("/") if environment is not None else ""
        )
        self.queue: deque = deque()  # (path, rec, ex, stopped, on_parsed): plugin/progress.py reads it
        self.sizes: deque = deque()  # exchange_bytes of each, in the same order
        self.backlog = 0  # their sum
        self.room = Event()  # set while the backlog is below BACKLOG_BYTES
        self.room.set()
        self.ready = Event()
        self.greenlet = gevent.spawn(self._run)

    def submit(self, path: str, rec: RequestRecord, ex: Exchange, stopped: bool = False, on_parsed=None) -> None:
        """`on_parsed(rec, parsed)`, when given, is called once the record is built: a conversation
        takes the reply text from the one parse (`reply_text`), never parsing the stream twice.
        The caller waits here while the backlog is above BACKLOG_BYTES (its exchange is queued
        first, so a user stopped while it waits loses nothing); a stream cut by the run's end
        (`stopped`) never waits."""
        size = exchange_bytes(ex)
        self.queue.append((path, rec, ex, stopped, on_parsed))
        self.sizes.append(size)
        self.backlog += size
        self.ready.set()
        if self.backlog > BACKLOG_BYTES:
            self.room.clear()
            if not stopped:
                self.room.wait()

    def _next(self) -> None:
        """Finish the oldest exchange waiting, once the writer has room for its record."""
        self.ctx.sink.wait_for_room()
        if not self.queue:  # the drain took it meanwhile
            return
        item = self.queue.popleft()
        self.backlog -= self.sizes.popleft()
        if self.backlog <= BACKLOG_BYTES:
            self.room.set()
        self._finish(*item)

    def _run(self) -> None:
        while True:
            self.ready.wait()
            while self.queue:
                self._next()
                # Let streams with data waiting be read first. gevent.sleep(0) does not: it
                # resumes this greenlet before the loop polls the sockets again, so a backlog
                # of records is parsed in one go while every open stream waits (bench/RESULTS.md
                # "Client speed": first tokens 18 ms late at 300 streams). idle() resumes once the
                # loop has no I/O pending; with a backlog, a timer still leaves one poll of the
                # sockets between two records, so the backlog cannot grow without bound.
                if len(self.queue) < IDLE_BACKLOG:
                    gevent.idle()
                else:
                    gevent.sleep(YIELD_S)
            self.ready.clear()

    def drain(self) -> None:
        """Finish everything handed over so far (the run is ending; records must be complete),
        yielding between records: the writer writes what it is given meanwhile."""
        while self.queue:
            self._next()
            gevent.sleep(0)

    def stop(self) -> None:
        self.drain()
        self.greenlet.kill(block=False)

    def _finish(self, path: str, rec: RequestRecord, ex: Exchange, stopped: bool, on_parsed=None) -> None:
        ctx = self.ctx
        stream = rec.stream  # the plan's --no-stream; embeddings are never streamed
        rec.t_send = ex.t_send
        rec.resent = ex.resent
        rec.connect_s = ex.connect_s
        if stream:  # straight from the raw reads, chunked framing undone on the way
            parsed, length = parse_reads(ex.times, ex.datas, ex.framing == CHUNKED)
        else:
            parsed = parse_response(ex.pieces)
            length = sum(len(p) for _, p in ex.pieces)
        first = ex.first_bytes() if stream and "json" in ex.content_type.lower() else b""  # a reply not streamed?
        fill_record(rec, ex.status, parsed, ctx.count_tokens, stream=stream, content_type=ex.content_type, first=first)
        if rec.status != 200 and rec.status and not rec.error_detail:
            rec.error_detail = http_detail(rec.status, self.prefix + path, ex)
        if stopped or ex.error:  # a transport-level ending overrides what the bytes alone suggest
            end_early(
                rec,
                "stopped" if stopped else ex.error,
                "in flight when the run ended" if stopped else ex.error_detail,
                ex.t_end,
                cause=ex.error,
            )
        if rec.error_detail:  # the server's text, as kept: an echoed key masked before anything reads it
            rec.error_detail = redact(rec.error_detail, ctx.plan.api_key)
        if _parsed_hook._handlers:  # self-health token lag, client benchmarks
            _parsed_hook.fire(rec=rec, parsed=parsed)
        ctx.sink.add(rec)
        if not stopped:  # not a server outcome: in the records, not in the live table
            fire_events(self.environment, path, rec, length)
        if on_parsed is not None:
            on_parsed(rec, parsed)


HTTP_DETAIL_BYTES = 200  # of an HTTP failure's body, kept in its record's error_detail


def http_detail(status: int, path: str, ex: Exchange) -> str:
    """What an HTTP failure's record keeps: the status, the path it was sent to and the first
    bytes of the body (whitespace folded): 'HTTP 404 on POST /v1/v1/chat/completions: {...}'."""
    text = " ".join(ex.first_bytes(HTTP_DETAIL_BYTES).decode("utf-8", "replace").split())
    return f"HTTP {status} on POST {path}: {text}" if text else f"HTTP {status} on POST {path}"


def reply_text(parsed) -> str:
    """The content of a parsed reply (what a conversation sends back as the assistant turn): neither
    its reasoning, which chat templates drop from earlier turns, nor its tool calls."""
    return "".join(c.content for c in parsed.chunks)


def fire_events(env, path: str, rec: RequestRecord, length: int) -> None:
    if rec.ok:
        exc = None
    elif rec.error.startswith("http_"):  # the status only: Locust's error table keeps one row per message
        exc = RequestFailed(f"{rec.error}: HTTP {rec.status}")
    else:
        exc = RequestFailed(f"{rec.error}: {rec.error_detail}" if rec.error_detail else rec.error)
    e2e_ms = rec.e2e_s * 1000 if rec.e2e_s == rec.e2e_s else 0.0
    env.events.request.fire(
        request_type="POST",
        name=path,
        response_time=e2e_ms,
        response_length=length,
        exception=exc,
        context={"request_class": rec.request_class},
    )
    if rec.ok:  # straight into the entries: a request event would count LLM rows in "Aggregated" too
        stats = env.stats
        if rec.ttft_s == rec.ttft_s:  # embeddings have none
            stats.get(rec.request_class, "ttft").log(rec.ttft_s * 1000, 0)
        stats.get(rec.request_class, "e2e").log(e2e_ms, 0)
        if rec.tpot_s == rec.tpot_s:
            stats.get(rec.request_class, "tpot").log(rec.tpot_s * 1000, 0)
