"""The arrivals of a capacity search in requests/s (--find-capacity --capacity-unit rate).

Each step runs at the rate the search decided when the step began, its arrivals a schedule of their
own from the step's start (as a --rate-steps step's: shapes/arrivals.py, seeded by the run's seed
and the step), kept whatever the server does: a request whose time comes while every user is busy
is sent late and its lateness recorded. The pacer asks the search for a step's rate at the step's
start (shapes.capacity.CapacitySearch.rate_for, which judges the level that just ended), so the
rate changes at the step's boundary on the run's clock, not at the shape's next tick up to a second
later; the shape asks as well, so a search whose users are all busy still goes on. Both run in the
one process the search runs in (the load model refuses workers).

A level after one that was not met starts on a drained server (CapacitySearch.drains): above its
capacity an open loop leaves a backlog, which would queue the next level's requests behind it; the
pacer sends nothing until every request of this process has ended, then starts the level's
schedule (its warm-up lasts until then, shapes/capacity.py).
"""

from __future__ import annotations

import time

from core.clock import perf_counter_at
from plugin.load_models.open_loop import OpenPacer
from shapes.arrivals import START_DELAY_S, ArrivalSchedule

NEVER_S = 86400.0  # after the search ended: a send time no user reaches (the shape ends the run)
DRAIN_POLL_S = 0.05  # how often a level waiting for the backlog to end looks again


class SearchSchedule:
    """This process's send times over the search's steps (`take`, as ArrivalSchedule's), each step's
    rate asked of `rate_for(step)` once the step has begun (None: the search is over)."""

    def __init__(
        self,
        rate_for,
        step_s: float,
        arrival: str,
        burstiness: float,
        seed: int,
        t0: float,
        stopping,
        drains,
        in_flight,
    ):
        self.rate_for, self.step_s, self.t0 = rate_for, step_s, t0
        self.drains, self.in_flight = drains, in_flight  # the search's `drains`, this process's requests on the wire
        self.drained: int | None = None  # the first step of the last level that waited for the backlog
        self.arrival, self.burstiness, self.seed = arrival, burstiness, seed
        self.stopping = stopping
        self.k = 0  # the step whose arrivals are being taken
        self.current: ArrivalSchedule | None = None
        self.over = False

    def _start(self, k: int, rate: float, begin: float) -> ArrivalSchedule:
        """Step k's schedule from `begin`: the first step's after START_DELAY_S (users spawn), a later
        one's first arrival at `begin` for constant arrivals (one gap before), as --rate-steps'."""
        lead = 1.0 / rate if self.arrival == "constant" else 0.0
        t0 = begin - (START_DELAY_S + lead if k else 0.0)
        return ArrivalSchedule(rate, self.arrival, self.burstiness, self.seed * 1000 + k, 1, 0, t0)

    def take(self) -> float:
        """The next send time (perf_counter), waiting for the step it falls in to begin and be decided.
        Users take them concurrently: the state changes only between waits."""
        while not self.over and not self.stopping.is_set():
            if self.current is None:
                k = self.k
                wait = self.t0 + k * self.step_s - time.perf_counter()
                if wait > 0:
                    self.stopping.wait(wait)
                    continue
                rate = self.rate_for(k)
                if self.current is not None or self.k != k:  # another user started it meanwhile
                    continue
                if rate is None:
                    self.over = True
                    break
                begin = self.t0 + k * self.step_s
                first = self.drains(k)
                if first is not None and first != self.drained:  # the backlog of the levels before first
                    if self.in_flight() > 0:
                        self.stopping.wait(DRAIN_POLL_S)
                        if time.perf_counter() >= begin + self.step_s and self.k == k:
                            self.k += 1  # the step passed while draining: nothing of it was sent
                        continue
                    self.drained, begin = first, max(begin, time.perf_counter())
                self.current = self._start(k, rate, begin)
            t = self.current.take()
            if t < self.t0 + (self.k + 1) * self.step_s:
                return t
            self.current, self.k = None, self.k + 1
        return time.perf_counter() + NEVER_S


def search_pacer(model, ctx, environment) -> OpenPacer:
    """The pacer of a search in requests/s: the run's search (the results side of this one process)
    decides each step's rate."""
    search = environment.llm.run.search
    t0 = perf_counter_at(ctx.run_start)  # the run's start on this process's clock (core/clock.py)
    schedule = SearchSchedule(
        search.rate_for,
        search.step_s,
        model.arrival,
        model.burstiness,
        ctx.plan.seed or 0,
        t0,
        ctx.stopping,
        search.drains,
        lambda: ctx.in_flight,
    )
    return OpenPacer(ctx.sampler, schedule, ctx.stopping)
