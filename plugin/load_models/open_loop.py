"""Open loop (--request-rate): arrivals on a schedule whatever the server does, at most
max_concurrency in flight. With N processes the total is the rate: one schedule drawn from the
seed, split across them (shapes/arrivals.py)."""

from __future__ import annotations

import logging
import time
from typing import Literal

from gevent.event import Event

from core.clock import perf_counter_at
from core.errors import InputError
from plugin.load_models.base import LoadModel, refuse_unless
from shapes.arrivals import START_DELAY_S, ArrivalSchedule

log = logging.getLogger("llm")
DEFAULT_MAX_CONCURRENCY = 512  # headless, without --max-concurrency


class Scheduled(LoadModel):
    """What both open loops share: the window starts with the first arrival, the headless user
    count is the in-flight cap, and a worker that joins after the schedule was split sends nothing."""

    max_concurrency: int | None  # None: the user count is the cap (web UI), or DEFAULT_MAX_CONCURRENCY headless

    def window_start(self, started: float, warmup_s: float) -> float:
        return started + warmup_s + START_DELAY_S  # the first arrival comes START_DELAY_S after the start

    def headless_users(self) -> int:
        return self.max_concurrency or DEFAULT_MAX_CONCURRENCY

    def pacer(self, ctx, worker_index: int, processes: int, environment):
        if worker_index >= processes:
            log.warning(
                "this worker (index %d) joined an open-loop run after its schedule was split across %d "
                "processes: it sends nothing (restart the run to include it)",
                worker_index,
                processes,
            )
            return IdlePacer(ctx.stopping)
        t0 = perf_counter_at(ctx.run_start)  # the run start on this process's clock, within 0.25 µs (core/clock.py)
        return self.scheduled_pacer(ctx, worker_index, processes, environment, t0)

    def scheduled_pacer(self, ctx, worker_index: int, processes: int, environment, t0: float):
        raise NotImplementedError


class OpenLoop(Scheduled):
    kind: Literal["open"] = "open"
    rate: float
    arrival: Literal["poisson", "gamma", "constant"]
    burstiness: float

    @classmethod
    def chosen(cls, p) -> bool:
        return p.request_rate is not None

    @classmethod
    def from_options(cls, p, distributed: bool) -> OpenLoop:
        if p.steps:
            raise InputError("--request-rate: cannot be combined with --steps (closed-loop user steps); pick one")
        if p.find_capacity:
            raise InputError(
                "--find-capacity: searches the load itself; drop --request-rate (--capacity-unit rate searches requests/s)"
            )
        refuse_unless(p, "time_scale", False, "--time-scale: only applies with --replay")
        return cls(
            rate=p.request_rate, arrival=p.arrival, burstiness=p.burstiness or 1.0, max_concurrency=p.max_concurrency
        )

    def describe(self, plan) -> str:
        return f"open loop at {self.rate:g} requests/s ({self.arrival})"

    def target_rate(self) -> float:
        return self.rate

    def scheduled_between(self, run_start, start, end, seed):
        return ArrivalSchedule(self.rate, self.arrival, self.burstiness, seed, 1, 0, run_start).count_between(
            start, end
        )

    def scheduled_pacer(self, ctx, worker_index, processes, environment, t0):
        arrivals = ArrivalSchedule(
            self.rate, self.arrival, self.burstiness, ctx.plan.seed or 0, processes, worker_index, t0
        )
        return OpenPacer(ctx.sampler, arrivals, ctx.stopping)


class OpenPacer:
    """Open loop: this process's share of the run's arrival schedule."""

    def __init__(self, sampler, arrivals: ArrivalSchedule, stopping: Event):
        self.sampler, self.arrivals, self.stopping = sampler, arrivals, stopping

    def next(self):
        t_intended = self.arrivals.take()
        if self.stopping.wait(max(t_intended - time.perf_counter(), 0.0)):
            return None  # the run is ending: arrivals after it are not sent
        return t_intended, self.sampler.next()


class IdlePacer:
    """A worker that joined an open-loop run after its schedule was split: it sends nothing."""

    def __init__(self, stopping: Event):
        self.stopping = stopping

    def next(self):
        self.stopping.wait(1.0)
        return None
