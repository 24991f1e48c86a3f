"""Test-only: how long the load process's event loop was held, by its own work, around the stop of
a run; for tests/test_stop_stall.py.

Loaded beside the real locustfile (`-f locustfile.py,tests/stop_stall_locustfile.py`). A libev
timer every millisecond notes perf_counter's time and the thread's CPU time, and so does every call
of Locust's `User.stop` (the runner's stop of each user): the CPU time from a tick to the last stop
call before the next tick is what the process did in one stretch, with the loop held, up to that
stop (on a shared machine another process holding the core adds wall time, not CPU time; the
suite's own periodic work, which may run in the same stretch after the stop's, is left out). At the
stop's end it writes STOP_STALLS_OUT: when the stop began (Locust's test_stopping, before its
runner stops the users), every tick and every stop call. Nothing of it is in the suite.
"""

from __future__ import annotations

import json
import os
import time

import gevent
from locust import User, events

TICK_S = 0.001
_ticks: list[tuple[float, float]] = []
_stopping: list[float] = []
_timer = []
_stops: list[tuple[float, float]] = []
_user_stop = User.stop


def _stop(self, force: bool = False):
    _stops.append((time.perf_counter(), time.thread_time()))
    return _user_stop(self, force)


User.stop = _stop


def _tick() -> None:
    _ticks.append((time.perf_counter(), time.thread_time()))


@events.test_start.add_listener
def _on_start(environment, **_kw) -> None:
    timer = gevent.get_hub().loop.timer(TICK_S, TICK_S)
    timer.start(_tick)
    _timer.append(timer)


@events.test_stopping.add_listener
def _on_stopping(environment, **_kw) -> None:
    _stopping.append(time.perf_counter())


@events.test_stop.add_listener
def _on_stop(environment, **_kw) -> None:
    for timer in _timer:
        timer.stop()
    with open(os.environ["STOP_STALLS_OUT"], "w") as f:
        json.dump({"stopping": _stopping[0], "ticks": _ticks, "stops": _stops}, f)
