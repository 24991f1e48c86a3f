"""Open loop in steps (--rate-steps 1,2,4,8): each --step-time at the next request rate, arrivals on
a schedule whatever the server does, at most max_concurrency in flight; each step's statistics
after its --step-warmup, as a step ramp's (summary.json by_step, its `rate` the one asked for).

Step k runs from the run's start + k x --step-time (the steps are cut on the run's start, as a
step ramp's); its arrivals are a schedule of its own (shapes/arrivals.py, seeded by the run's seed
and the step), split across the load processes as an open loop's. The locustfile's shape holds the
in-flight cap as the user count at every step and ends the run after the last one."""

from __future__ import annotations

import math
from typing import Literal

from core.errors import InputError
from plugin.load_models.base import refuse_unless
from plugin.load_models.open_loop import OpenPacer, Scheduled
from plugin.load_models.steps import check_step_window
from shapes.arrivals import START_DELAY_S, ArrivalSchedule
from shapes.steps import StepPlan


class StepSchedule:
    """The send times of one process over the steps: each step's own schedule, from its start to
    its end (`take`, as ArrivalSchedule's), then the next step's; after the last, a day later (the
    shape has ended the run by then)."""

    def __init__(
        self, rates, step_s: float, arrival: str, burstiness: float, seed: int, processes: int, index: int, t0: float
    ):
        self.rates, self.step_s, self.t0 = rates, step_s, t0
        self.make = lambda k: ArrivalSchedule(
            rates[k],
            arrival,
            burstiness,
            seed * 1000 + k,
            processes,
            index,
            t0 + k * step_s - (START_DELAY_S + self._lead(k) if k else 0.0),
        )
        self.arrival = arrival
        self.k = 0
        self.current = self.make(0)

    def _lead(self, k: int) -> float:
        """How far before its step a later step's schedule starts: constant arrivals one gap, so the
        first comes at the step's start and the step holds rate x step time of them; random ones
        none (a Poisson process started at the step's start is one there)."""
        return 1.0 / self.rates[k] if self.arrival == "constant" else 0.0

    def take(self) -> float:
        while self.k < len(self.rates):
            t = self.current.take()
            if t < self.t0 + (self.k + 1) * self.step_s:
                return t
            self.k += 1
            if self.k < len(self.rates):
                self.current = self.make(self.k)
        return self.t0 + len(self.rates) * self.step_s + 86400.0

    def count_between(self, start: float, end: float) -> int:
        """This schedule's send times in [start, end] (a fresh schedule: it uses it up)."""
        n = 0
        for k in range(len(self.rates)):
            lo, hi = max(start, self.t0 + k * self.step_s), min(end, self.t0 + (k + 1) * self.step_s)
            if hi > lo:
                n += self.make(k).count_between(lo, hi - 1e-9)
        return n


class RateSteps(Scheduled):
    kind: Literal["rate_steps"] = "rate_steps"
    stepped = True  # the shape holds the cap at every step and ends the run after the last
    rates: tuple[float, ...]
    step_s: float
    warmup_s: float
    arrival: Literal["poisson", "gamma", "constant"]
    burstiness: float

    @property
    def duration_s(self) -> float:
        return self.step_s * len(self.rates)

    @classmethod
    def chosen(cls, p) -> bool:
        return bool(getattr(p, "rate_steps", ())) and not p.find_capacity  # a search in requests/s walks them

    @classmethod
    def from_options(cls, p, distributed: bool) -> RateSteps:
        if p.request_rate is not None:
            raise InputError(
                "--rate-steps: steps of request rates; drop --request-rate (one rate), or give it as --rate-steps R"
            )
        if p.steps:
            raise InputError("--rate-steps: steps of request rates; --steps steps users: pick one")
        if p.replay:
            raise InputError(
                "--rate-steps: a replayed trace keeps its own times; drop one of --replay and --rate-steps"
            )
        refuse_unless(p, "time_scale", False, "--time-scale: only applies with --replay")
        check_step_window(p)
        return cls(
            rates=p.rate_steps,
            step_s=p.step_time,
            warmup_s=p.step_warmup,
            arrival=p.arrival,
            burstiness=p.burstiness or 1.0,
            max_concurrency=p.max_concurrency,
        )

    def describe(self, plan) -> str:
        text = (
            f"open loop in steps {','.join(f'{r:g}' for r in self.rates)} requests/s ({self.arrival}), "
            f"{self.step_s:g}s each ({self.warmup_s:g}s warm-up)"
        )
        if plan.run_time_s is not None and plan.run_time_s < self.duration_s:
            held = max(1, math.ceil(plan.run_time_s / self.step_s))
            text += f"; -t {plan.run_time_s:g}s ends it in step {held} of {len(self.rates)}"
        return text

    def window_start(self, started: float, warmup_s: float) -> float:
        return (
            started + warmup_s
        )  # steps are cut on the run's start; the first step's warm-up covers the first arrival's delay

    def step_seconds(self) -> float:
        return self.step_s

    def step_plan(self, search=None) -> StepPlan:
        cap = self.headless_users()
        return StepPlan([cap] * len(self.rates), self.step_s, self.warmup_s, rates=self.rates)

    def schedule(self, seed: int, processes: int, index: int, t0: float) -> StepSchedule:
        return StepSchedule(self.rates, self.step_s, self.arrival, self.burstiness, seed, processes, index, t0)

    def scheduled_between(self, run_start, start, end, seed):
        return self.schedule(seed, 1, 0, run_start).count_between(start, end)

    def scheduled_pacer(self, ctx, worker_index, processes, environment, t0):
        return OpenPacer(ctx.sampler, self.schedule(ctx.plan.seed or 0, processes, worker_index, t0), ctx.stopping)
