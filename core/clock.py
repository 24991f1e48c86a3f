"""Placing a wall-clock time on this process's `time.perf_counter()` clock.

Processes share the master's wall-clock run start and schedule on their own perf_counter. The
offset between the two clocks is read as perf, wall, perf: the wall reading lies between the
two perf readings, so the offset is known to within half their gap. One plain reading
(`perf_counter() - (time() - start)`) has no such bound: a process preempted between its two
calls is off by the whole preemption (milliseconds on a loaded machine), and each process of a
distributed open-loop run or replay would then send on a clock shifted from the others'. The
readings are in integer nanoseconds, so the float rounding of a wall time near 1.8e9 s (about
0.24 µs) does not add to the error.
"""

from __future__ import annotations

import time

MAX_ERROR_NS = 250  # the reading is taken again until its error bound (half the gap) is below this
TRIES = 100


def wall_minus_perf_ns() -> tuple[int, int]:
    """(time_ns() - perf_counter_ns() at one instant, the error bound in ns): the best of up to
    TRIES readings, stopping at the first within MAX_ERROR_NS."""
    best = None
    for _ in range(TRIES):
        p1 = time.perf_counter_ns()
        w = time.time_ns()
        p2 = time.perf_counter_ns()
        reading = (w - (p1 + p2) // 2, (p2 - p1 + 1) // 2)
        if best is None or reading[1] < best[1]:
            best = reading
        if best[1] <= MAX_ERROR_NS:
            break
    return best


def perf_counter_at(wall: float) -> float:
    """The `time.perf_counter()` value at wall-clock time `wall` (seconds since the epoch), within
    MAX_ERROR_NS on any machine that lets a process run a few µs uninterrupted."""
    offset_ns, _ = wall_minus_perf_ns()
    return (round(wall * 1e9) - offset_ns) / 1e9
