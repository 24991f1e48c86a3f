"""Which backends are in the spread: a backend that refused a connection (or dropped one before any
answer) is taken out at once, and probed back at most once per PROBE_EVERY_S, each probe waited for
before the next pause begins, until one finds it answering; then it is back in the spread. So a dead
replica costs its in-flight requests and the few sent before the first refusal, never a flood of
connect errors, and its probes are bounded by the time it is down (one a second for each load
process). Each change is said in one line (`on_change`) with when it happened.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import gevent
from gevent.event import Event

PROBE_EVERY_S = 1.0


class Health:
    """Up or down per backend, with the probes of those down (greenlets of this process)."""

    def __init__(
        self,
        names: tuple[str, ...],
        probe: Callable[[int], bool],
        every_s: float = PROBE_EVERY_S,
        on_change: Callable[[str, str], None] | None = None,
        stopping: Event | None = None,
    ):
        self.names = names
        self.probe = probe  # backend index -> answering? (targets/probe.py), blocking, bounded by its own timeout
        self.every_s = every_s
        self.on_change = on_change or (lambda name, text: None)
        self.up = [True] * len(names)
        self.probes = [0] * len(names)  # probes sent, per backend
        self.down_s = [0.0] * len(names)  # seconds out of the spread, per backend (ended outages)
        self._probers: dict[int, gevent.Greenlet] = {}
        self._stopping = stopping if stopping is not None else Event()  # the run's end: no more probes
        self._closed = False

    def refused(self, i: int) -> None:
        if not self.up[i] or self._closed or self._stopping.is_set():
            return
        self.up[i] = False
        self.on_change(
            self.names[i],
            f"backend {self.names[i]} refused a connection: out of the spread, probed every "
            f"{self.every_s:g} s until it answers",
        )
        self._probers[i] = gevent.spawn(self._probe_until_back, i, time.monotonic())

    def _probe_until_back(self, i: int, since: float) -> None:
        while not self._stopping.wait(self.every_s):  # the pause comes first: a refusal is never probed at once
            self.probes[i] += 1
            if self.probe(i):
                down = time.monotonic() - since
                self.down_s[i] += down
                self.up[i] = True
                self._probers.pop(i, None)
                self.on_change(
                    self.names[i],
                    f"backend {self.names[i]} answers again after {down:.1f} s out of the "
                    f"spread ({self.probes[i]} probes in all): back in the spread",
                )
                return

    def stop(self) -> None:
        self._closed = True
        probers, self._probers = list(self._probers.values()), {}
        gevent.killall(probers, block=False)
