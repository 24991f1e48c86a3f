"""What the streams still open have delivered so far, for the live view (tokens when they arrive,
TTFT when the first token comes).

A record exists once its request has ended, so a view built on records alone trails a ramp by a
request's length (20-60 s on a busy server). Every load process (a worker, or a local run) that
serves a web UI therefore keeps a `StreamTracker` over its open exchanges: those on the wire
(`RunContext.streams`, registered by plugin/users.py around each request) and those handed to the
finisher but not yet records (`Finisher.queue`). For each it finds the first token (an exact
parse of the first reads: `metrics.sse.parse_reads`) and then counts the `data:` events of the
later reads with `bytes.count` (C speed, no JSON parse). Nothing runs on the hot path: the users
only add and remove their exchange, once per request.

The tracker looks at the open streams every `TICK_S` in slices, yielding between them, so that
a report never has many reads to catch up with; `collect()` catches up and returns one entry per
open stream. A worker sends it with its report (the same synchronous call that cuts the record
batch), so each stream is either a record the master has or an entry of this report, never both.
The master keeps each worker's latest report (webui/live_blocks.py Flight merges them for the window).

Per stream: request class, send time (wall), prompt size in characters, first-token time (wall,
NaN before the first token), TTFT (s), time of the last counted read (wall) and the number of
token events counted so far. Times on the wall clock are `wall_send + (read - t_send)`, as the
records' `chunk_times` are.
"""

from __future__ import annotations

import math
import time

import gevent

from metrics.sse import parse_reads
from users.connection import CHUNKED

NAN = float("nan")
TICK_S = 0.5  # the open streams are brought up to date this often
SLICE = 100  # streams between two yields to the event loop
PROBE_READS = 16  # reads parsed exactly while a stream has not delivered its first token
REPORT_KEY = "llm_progress"
FIELDS = ("cls", "sent", "chars", "first", "ttft", "last", "events")


class _Track:
    __slots__ = ("seen", "probe", "first", "ttft", "last", "events")

    def __init__(self) -> None:
        self.seen = 0  # reads looked at
        self.probe = PROBE_READS
        self.first = NAN  # wall time of the first token
        self.ttft = NAN
        self.last = NAN  # wall time of the last read that carried events
        self.events = 0


def _update(tr: _Track, ex, rec) -> None:
    """Bring one stream's track up to date with the reads that arrived since the last look."""
    times = ex.times
    n = len(times)
    if n <= tr.seen:
        return
    datas = ex.datas
    offset = rec.wall_send - ex.t_send  # perf_counter -> wall clock, as the record's chunk_times
    if tr.first != tr.first:  # no token yet: parse the first reads exactly (role chunk, comments)
        m = min(n, tr.probe)
        parsed, _ = parse_reads(times[:m], datas[:m], ex.framing == CHUNKED)
        tr.seen = m
        if not parsed.chunks:
            if m == tr.probe:
                tr.probe *= 2  # many events without a token (a long reasoning preamble): look further
            return
        chunks = parsed.chunks
        tr.first = offset + chunks[0].t
        tr.ttft = chunks[0].t - ex.t_send
        tr.last = offset + chunks[-1].t
        tr.events = len(chunks)
        if n <= m:
            return
    blob = b"".join(datas[tr.seen : n])
    events = blob.count(b"data:") - blob.count(b"[DONE]") - blob.count(b'"choices":[]')
    tr.seen = n
    if events > 0:
        tr.events += events
        tr.last = offset + times[n - 1]


class StreamTracker:
    """One per load process and run: the open streams' first tokens and token events."""

    def __init__(self, ctx):
        self.ctx = ctx
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
                    _update(tr, ex, rec)
                gevent.sleep(0)

    def collect(self, now: float | None = None) -> dict:
        """Every open stream, up to date now (no yield: consistent with the records cut with it).
        Tracks of streams that closed are dropped."""
        streams = self.open_streams()
        old, tracks = self.tracks, {}
        out = {k: [] for k in FIELDS}
        cls, sent, chars, first, ttft, last, events = (out[k] for k in FIELDS)
        for ex, rec in streams:
            tr = old.get(ex)
            if tr is None:
                tr = _Track()
            tracks[ex] = tr
            _update(tr, ex, rec)
            cls.append(rec.request_class)
            sent.append(rec.wall_send)
            chars.append(rec.input_chars)
            first.append(tr.first)
            ttft.append(tr.ttft)
            last.append(tr.last)
            events.append(tr.events)
        self.tracks = tracks
        out["t"] = time.time() if now is None else now
        return out


def empty(t: float) -> dict:
    return {"t": t, **{k: [] for k in FIELDS}}


def valid(progress) -> bool:
    """A report's entry has the shape collect() gives (a worker of another version may differ)."""
    if not isinstance(progress, dict) or not isinstance(progress.get("t"), (int, float)) or not math.isfinite(progress["t"]):
        return False
    lists = [progress.get(k) for k in FIELDS]
    return all(isinstance(v, list) for v in lists) and len({len(v) for v in lists}) == 1
