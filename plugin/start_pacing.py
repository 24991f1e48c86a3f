"""Users start their first request only as fast as the event loop keeps up.

Locust starts every user it spawns at once (all of them with `-r` at or above `-u`), and each
one's first request costs the loop a connect, a request to build and write and a head to read. At
2,048 users that is a few hundred milliseconds in which no socket is read: the first tokens of the
first users sit in their sockets with the chunks after them, and TCP merges such segments into one
buffer stamped with the newest one's arrival (plugin/health_stalls.py): their TTFT read 60-80 ms
high. So a user's first request passes a gate first. The gate's greenlet wakes every TICK_S and
measures how late it woke (the loop's lag right now); while the lag stays under LAG_BUDGET_S it
lets twice as many users through on each tick (up to MAX_BATCH), when the lag passes it half as
many, never fewer than one per tick, so a start that costs more than the loop has still ends.
A user spawned alone goes through within a tick. The requests after a user's first, and the
pacer's schedule (open loop, replay), are not held: TTFT and E2E start at t_send, when the
request is written, so a user held at the gate changes no timing, only when its first request
goes out.
"""

from __future__ import annotations

import os
import time
from collections import deque

import gevent
from gevent.event import Event

TICK_S = 0.001
LAG_BUDGET_S = 0.003  # well under a typical gap between two chunks of one stream (10-50 ms): no merged reads
MAX_BATCH = 64
ENABLED = os.environ.get("LLM_START_GATE", "1") != "0"  # LLM_START_GATE=0: every user at once (benchmarks)

_perf = time.perf_counter


class StartGate:
    """The process's gate for users' first requests (module docstring)."""

    def __init__(self, tick_s: float = TICK_S, budget_s: float = LAG_BUDGET_S, max_batch: int = MAX_BATCH):
        self.tick_s = tick_s
        self.budget_s = budget_s
        self.max_batch = max_batch
        self.waiting: deque[Event] = deque()
        self.greenlet = None
        self.admitted = 0

    def wait(self) -> None:
        """Return when this user may send its first request."""
        if not ENABLED:
            return
        ev = Event()
        self.waiting.append(ev)
        if self.greenlet is None or self.greenlet.dead:
            self.greenlet = gevent.spawn(self._run)
        ev.wait()

    def _run(self) -> None:
        batch = 1
        waiting = self.waiting
        while waiting:
            t = _perf()
            gevent.sleep(self.tick_s)
            late = _perf() - t - self.tick_s
            batch = min(batch * 2, self.max_batch) if late < self.budget_s else max(1, batch // 2)
            for _ in range(min(batch, len(waiting))):
                waiting.popleft().set()
                self.admitted += 1


GATE = StartGate()
