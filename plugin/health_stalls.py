"""The event loop's stalls, each placed in time, and the records whose first-token stamp they may
have moved.

A stream's reads are stamped by the kernel (users/connection.py, SO_TIMESTAMPNS), so a read that
comes late is still stamped with the time its bytes arrived, as long as they arrived in one segment.
When the loop is held longer than a stream's gap between two chunks, its socket holds several, and
TCP merges segments that wait in one socket into one buffer that keeps the newest one's stamp: the
first token is then stamped with the time of a later one (measured at 2,048 streams all started at
once on one core: TTFT p99 60-80 ms too high). Nothing afterwards can tell such a stamp from an
exact one, so the stalls themselves are logged.

A libev timer every PERIOD_S (no greenlet, no switch: one callback) measures how late it fires;
lateness of at least MIN_STALL_S is a stall from when it was due until it ran, to within PERIOD_S.
A record waited for its first token from `t_send` to its first-token stamp; the longest stretch of
a stall inside that wait bounds how far the stamp may have moved: the record's `stamp_skew_ms`.
It is **suspect** when that is at least SUSPECT_FLOOR_S and, where reads carry the kernel's stamps,
its first token was read together with the next one (the merge that moves a kernel stamp; a TTFT of
seconds, most of it the server's queue, is still off by the whole merge), or else, where every read
a stall delays is stamped late, the stall is at least SUSPECT_SHARE of its TTFT (`suspect`). The
self-health counts them (plugin/health_monitor.py).
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left

import gevent

PERIOD_S = 0.002  # timer period: a stall is placed to within this
MIN_STALL_S = 0.001  # lateness below this is the loop's ordinary turn, not a stall
KEEP_S = 120.0  # stalls older than this are dropped (a first token that takes longer is judged on what is left)
SUSPECT_FLOOR_S = 0.002  # a record is suspect when a stall in its wait is at least this long ...
SUSPECT_SHARE = 0.02  # ... and, without kernel stamps, at least this share of its TTFT

_perf = time.perf_counter


class StallLog:
    """The process's loop stalls, (start, end) on perf_counter's clock, in the order they ended."""

    def __init__(self, period_s: float = PERIOD_S, min_stall_s: float = MIN_STALL_S):
        self.period_s = period_s
        self.min_stall_s = min_stall_s
        self.starts: list[float] = []
        self.ends: list[float] = []
        self._timer = None
        self._due = 0.0

    def start(self) -> None:
        self.stop()
        # one repeating timer, never re-armed: a timer started from the loop's cached time (stale
        # while the loop is busy) would be due at once and fire on every turn of the loop
        self._timer = gevent.get_hub().loop.timer(self.period_s, self.period_s)
        self._due = _perf() + self.period_s
        self._timer.start(self._tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer.close()
            self._timer = None

    @property
    def running(self) -> bool:
        return self._timer is not None

    def _tick(self) -> None:
        now = _perf()
        due = self._due
        late = now - due
        if late >= self.min_stall_s:
            self.add(due, now)
        # libev's next expiry: a period after this one, or, when that has passed already, the
        # loop's time now (the timer then fires on the loop's next turn)
        due += self.period_s
        self._due = due if due > now else now

    def add(self, start: float, end: float) -> None:
        """One stall: the loop ran nothing else from `start` to `end`."""
        self.starts.append(start)
        self.ends.append(end)
        if len(self.ends) > 4096 and self.ends[0] < end - KEEP_S:
            cut = bisect_left(self.ends, end - KEEP_S)
            del self.starts[:cut], self.ends[:cut]

    def longest_within(self, t0: float, t1: float) -> float:
        """Seconds of the longest stall inside [t0, t1] (the part of it inside), 0.0 for none."""
        if not t1 > t0:
            return 0.0
        starts, ends = self.starts, self.ends
        i = bisect_left(ends, t0)
        worst = 0.0
        for j in range(i, len(ends)):
            s = starts[j]
            if s >= t1:  # starts grow too (each is the previous tick plus a period): none later overlaps
                break
            overlap = min(ends[j], t1) - max(s, t0)
            if overlap > worst:
                worst = overlap
        return worst


def stamp_skew_s(log: StallLog, t_send: float, ttft_s: float) -> float:
    """How far a stall may have moved a record's first-token stamp, at most: NaN without a first token."""
    if not (ttft_s == ttft_s and t_send == t_send) or math.isinf(ttft_s):
        return math.nan
    return log.longest_within(t_send, t_send + ttft_s)


def suspect(skew_ms: float, ttft_s: float, chunk_times=(), kernel_stamps: bool = False, streamed: bool = True) -> bool:
    """A record whose first-token stamp a stall may have moved by a material amount (module docstring).

    With the kernel's stamps a late read is still stamped when its bytes came, unless a later
    chunk came before it and was read with it: then the first two token chunks carry one stamp.
    A first token read apart from the next one (`chunk_times` differ) was stamped exactly, however
    long the stall; without kernel stamps every read a stall delayed is stamped late. A reply not
    streamed is timed at its last byte, which a late read's kernel stamp keeps: never suspect then."""
    if not (skew_ms == skew_ms and skew_ms >= 1000 * SUSPECT_FLOOR_S):
        return False
    if kernel_stamps:  # the merge is the evidence: a stall at least the floor, whatever the TTFT
        return streamed and (len(chunk_times) < 2 or chunk_times[1] == chunk_times[0])
    return skew_ms >= 1000 * SUSPECT_SHARE * ttft_s
