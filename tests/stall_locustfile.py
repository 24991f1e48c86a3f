"""Test-only: holds the load process's event loop once, to show what a stall does to the stamps.

Loaded beside the real locustfile (`-f locustfile.py,tests/stall_locustfile.py`). Once the first
request is in flight, it waits STALL_AFTER_S, then blocks the whole process for STALL_S (a busy
wait: nothing else runs, as in a burst of spawning or a long parse). Nothing of it is in the suite.
"""

from __future__ import annotations

import os
import time

import gevent
from locust import events

STALL_AFTER_S = float(os.environ.get("STALL_AFTER_S", "0.05"))
STALL_S = float(os.environ.get("STALL_S", "0.2"))


def _stall_once(environment) -> None:
    while getattr(environment.llm.context, "in_flight", 0) == 0:
        gevent.sleep(0.001)
    gevent.sleep(STALL_AFTER_S)
    end = time.perf_counter() + STALL_S
    while time.perf_counter() < end:
        pass


@events.test_start.add_listener
def _on_start(environment, **_kw) -> None:
    if STALL_S > 0:
        gevent.spawn(_stall_once, environment)
