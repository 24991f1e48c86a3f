"""What the streams still open have delivered so far: first tokens (TTFT, and the first answer
token for TTFA) when they come, token events as they arrive. A capacity search judges its
first-token objectives on them at each level's cut (metrics/verdict.py), and the web UI's live
view shows them.

A record exists once its request has ended, so a view built on records alone trails a ramp by a
request's length (20-60 s on a busy server), and a level judged on records alone only knows the
first tokens of the requests that ended. Every load process (a worker, or a local run) of a
capacity search or of a web-UI run therefore keeps a `StreamTracker` over its open exchanges: those
on the wire (`RunContext.streams`, registered by plugin/users.py around each request) and those
handed to the finisher but not yet records (`Finisher.queue`). For each it finds the first token
(an exact parse of the first reads: `metrics.sse.parse_reads`; with a TTFA objective, of the reads
up to the first answer token) and then counts the `data:` events of the later reads with
`bytes.count` (C speed, no JSON parse). Nothing runs on the hot path: the users only add and remove
their exchange, once per request.

The tracker looks at the open streams every `TICK_S` in slices, yielding between them, so that
a report never has many reads to catch up with; `collect()` catches up and returns one entry per
open stream. A worker sends it with its report (the same synchronous call that cuts the record
batch), so each stream is either a record the master has or an entry of this report, never both;
a local run's results side calls `collect()` itself, with no yield between it and the records it
holds. `OpenStreams` (installed with every run by plugin/hooks.py) keeps the tracker on the load
side and each worker's latest report on the results side, where the search and the live view
read them (`reports`).

Per stream: request class, step, send time (wall), prompt size in characters, first-token time
(wall, NaN before the first token), TTFT and TTFA (s, NaN before their token), time of the last
counted read (wall) and the number of token events counted so far. Times on the wall clock are
`wall_send + (read - t_send)`, as the records' `chunk_times` are; TTFT and TTFA are `read - t_send`
of the same parse as the record's, so a first token is at the same time in both.
"""

from __future__ import annotations

import math
import time

import gevent
from locust.runners import STATE_MISSING, MasterRunner

from metrics.sse import parse_reads
from plugin.state import Plugin, state_of
from users.connection import CHUNKED

NAN = float("nan")
TICK_S = 0.5  # the open streams are brought up to date this often
SLICE = 100  # streams between two yields to the event loop
PROBE_READS = 16  # reads parsed exactly while a stream has not delivered its first token
REPORT_KEY = "llm_progress"
FIELDS = ("cls", "step", "sent", "chars", "first", "ttft", "ttfa", "last", "events")
LIVE_VIEW = "live_view"  # the results side shows the run live: its load processes track their open streams


class _Track:
    __slots__ = ("seen", "probe", "first", "ttft", "ttfa", "last", "events")

    def __init__(self) -> None:
        self.seen = 0  # reads looked at
        self.probe = PROBE_READS
        self.first = NAN  # wall time of the first token
        self.ttft = NAN
        self.ttfa = NAN  # found only while the reads are parsed exactly (`answers`)
        self.last = NAN  # wall time of the last read that carried events
        self.events = 0


def _update(tr: _Track, ex, rec, answers: bool = False, full: bool = False) -> None:
    """Bring one stream's track up to date with the reads that arrived since the last look. Its
    first reads are parsed exactly until the first token (with `answers`, the first answer token)
    is found; `full`: parse all of them now, not only the first `probe` (the answer's time is then
    exact whatever the preamble's length)."""
    times = ex.times
    n = len(times)
    if n <= tr.seen:
        return
    datas = ex.datas
    offset = rec.wall_send - ex.t_send  # perf_counter -> wall clock, as the record's chunk_times
    if tr.first != tr.first or (answers and tr.ttfa != tr.ttfa):  # parse the first reads exactly (role chunk, comments)
        m = n if full else min(n, tr.probe)
        parsed, _ = parse_reads(times[:m], datas[:m], ex.framing == CHUNKED)
        tr.seen = m
        chunks = parsed.chunks
        if chunks:
            tr.first = offset + chunks[0].t
            tr.ttft = chunks[0].t - ex.t_send
            tr.last = offset + chunks[-1].t
            tr.events = len(chunks)
            answer = next((c.t for c in chunks if c.answer), None)
            if answer is not None:
                tr.ttfa = answer - ex.t_send
        if tr.first != tr.first or (answers and tr.ttfa != tr.ttfa):
            if m >= tr.probe:
                tr.probe *= 2  # many events without a token (a long reasoning preamble): look further
            return
        if n <= m:
            return
    blob = b"".join(datas[tr.seen : n])
    events = blob.count(b"data:") - blob.count(b"[DONE]") - blob.count(b'"choices":[]')
    tr.seen = n
    if events > 0:
        tr.events += events
        tr.last = offset + times[n - 1]


class StreamTracker:
    """One per load process and run: the open streams' first tokens and token events. `answers`:
    find each stream's first answer token too (a TTFA objective is judged on it)."""

    def __init__(self, ctx, answers: bool = False):
        self.ctx = ctx
        self.answers = answers
        self.tracks: dict = {}
        self._loop: gevent.Greenlet | None = None

    def open_streams(self) -> list:
        """(exchange, record) of every request on the wire or waiting in the finisher's queue."""
        ctx = self.ctx
        out = list(ctx.streams.items())
        finisher = getattr(ctx, "finisher", None)
        if finisher is not None:
            out += [(item[2], item[1]) for item in list(finisher.queue)]
        return out

    def start(self) -> None:
        if self._loop is None:
            self._loop = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.kill(block=False)
            self._loop = None

    def _run(self) -> None:
        while True:
            gevent.sleep(TICK_S)
            streams = self.open_streams()
            for i in range(0, len(streams), SLICE):
                tracks = self.tracks
                for ex, rec in streams[i : i + SLICE]:
                    tr = tracks.get(ex)
                    if tr is None:
                        tr = tracks[ex] = _Track()
                    _update(tr, ex, rec, self.answers)
                gevent.sleep(0)

    def collect(self, now: float | None = None) -> dict:
        """Every open stream, up to date now (no yield: consistent with the records cut with it;
        a stream still without its answer token is parsed in full). Tracks of streams that closed
        are dropped."""
        streams = self.open_streams()
        old, tracks = self.tracks, {}
        out = {k: [] for k in FIELDS}
        cls, step, sent, chars, first, ttft, ttfa, last, events = (out[k] for k in FIELDS)
        for ex, rec in streams:
            tr = old.get(ex)
            if tr is None:
                tr = _Track()
            tracks[ex] = tr
            _update(tr, ex, rec, self.answers, full=self.answers)
            cls.append(rec.request_class)
            step.append(rec.step)
            sent.append(rec.wall_send)
            chars.append(rec.input_chars)
            first.append(tr.first)
            ttft.append(tr.ttft)
            ttfa.append(tr.ttfa)
            last.append(tr.last)
            events.append(tr.events)
        self.tracks = tracks
        out["t"] = time.time() if now is None else now
        return out


def empty(t: float) -> dict:
    return {"t": t, **{k: [] for k in FIELDS}}


def valid(progress) -> bool:
    """A report's entry has the shape collect() gives (a worker of another version may differ)."""
    if (
        not isinstance(progress, dict)
        or not isinstance(progress.get("t"), (int, float))
        or not math.isfinite(progress["t"])
    ):
        return False
    lists = [progress.get(k) for k in FIELDS]
    return all(isinstance(v, list) for v in lists) and len({len(v) for v in lists}) == 1


def _tracked(state) -> bool:
    """Does this run's load side track its open streams? A capacity search judges first tokens on
    them; a web-UI run shows them (its results side said so with the run)."""
    plan = state.plan
    return bool(state.shared.get(LIVE_VIEW)) or (plan is not None and plan.load.kind == "capacity")


class OpenStreams(Plugin):
    """The open streams of a run (module doc): on each load process its tracker, on the results
    process each worker's latest report. Installed with every run (plugin/hooks.py `install`)."""

    def __init__(self):
        self.tracker: StreamTracker | None = None
        self.latest: dict[str, dict] = {}  # worker client id -> its latest report

    # -- the results process -------------------------------------------------------------------
    def run_starting(self, run) -> None:
        self.latest = {}

    def worker_report(self, environment, client_id, data) -> None:
        progress = data.pop(REPORT_KEY, None)
        if progress is not None and valid(progress):
            self.latest[client_id] = progress

    def reports(self, environment, now: float | None = None) -> list[dict]:
        """The open streams of every load process that is still there: a local run's own, now
        (a `collect()`), or each live worker's latest report."""
        runner = environment.runner
        if not isinstance(runner, MasterRunner):
            tracker = self.tracker
            return [] if tracker is None else [tracker.collect(now)]
        live = [c.id for c in list(runner.clients.values()) if c.state != STATE_MISSING]
        return [self.latest[c] for c in live if c in self.latest]

    # -- the load process ------------------------------------------------------------------------
    def load_started(self, environment) -> None:
        state = state_of(environment)
        self._stop_tracker()
        if _tracked(state):
            self._tracker_for(state)

    def report_to_master(self, environment, data) -> None:
        state = state_of(environment)
        if not _tracked(state):
            return
        tracker = self._tracker_for(state)
        if tracker is not None:  # the same call that cut the record batch: nothing is counted twice
            data[REPORT_KEY] = tracker.collect()

    def load_stopped(self, environment) -> None:
        self._stop_tracker()

    def _tracker_for(self, state) -> StreamTracker | None:
        """This process's tracker over the run's context (a late-joining worker gets its context
        a moment after test_start)."""
        ctx = state.context
        if ctx is None:
            return None
        if self.tracker is None or self.tracker.ctx is not ctx:
            self._stop_tracker()
            plan = state.plan  # the answer token's time is needed only where a search judges TTFA on it
            answers = plan.load.kind == "capacity" and any(o.metric == "ttfa" for o in plan.slo)
            self.tracker = StreamTracker(ctx, answers=answers)
            self.tracker.start()
        return self.tracker

    def _stop_tracker(self) -> None:
        if self.tracker is not None:
            self.tracker.stop()
            self.tracker = None
