"""Capacity search (--find-capacity): the highest user count meeting --slo, its levels picked by a
policy (--capacity-policy, shapes/search/) and run and judged by shapes/capacity.py. With
--capacity-unit rate, the highest open-loop request rate: the same policies on rates (from
--start-rate, or walking --rate-steps, up to --max-rate), each level's arrivals on a schedule of
its own (plugin/load_models/rate_search.py), at most --max-concurrency in flight."""

from __future__ import annotations

from typing import Literal

from core.errors import InputError
from plugin.load_models.base import LoadModel, no_open_loop_options, refuse_unless
from plugin.load_models.open_loop import DEFAULT_MAX_CONCURRENCY
from plugin.load_models.steps import check_step_window
from shapes.capacity import MIN_JUDGED_S, RATE_GRAIN, WORKER_REPORT_LAG_S, CapacitySearch, judged_s, rate_level
from shapes.search import POLICIES
from shapes.steps import StepPlan


class CapacitySearchModel(LoadModel):
    kind: Literal["capacity"] = "capacity"
    stepped = True
    candidates: tuple[int, ...] | None  # --steps given: walk these in order
    step_s: float
    warmup_s: float
    policy: str = "adaptive"  # shapes/search/ registry name
    precision: float = 0.05  # the adaptive policy's target width, a share of the answer
    max_users: int | None = None  # the ceiling of the levels
    unit: Literal["users", "rate"] = "users"  # --capacity-unit
    # a search in requests/s: --rate-steps to walk (candidates None), --start-rate, --max-rate, the
    # arrivals (--arrival, --burstiness) and the in-flight cap (--max-concurrency)
    rates: tuple[float, ...] | None = None
    start_rate: float = 1.0
    max_rate: float | None = None
    arrival: Literal["poisson", "gamma", "constant"] = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None

    @classmethod
    def chosen(cls, p) -> bool:
        return p.find_capacity

    @classmethod
    def from_options(cls, p, distributed: bool) -> CapacitySearchModel:
        if getattr(p, "capacity_unit", "users") == "rate":
            return cls._rate_search(p, distributed)
        refuse_unless(
            p,
            "rate_steps",
            False,
            "--find-capacity: searches a user count; drop --rate-steps (or give --capacity-unit rate)",
        )
        check_step_window(p)
        _check_judged_window(p.step_time, p.step_warmup, distributed)
        if p.request_rate is not None:
            raise InputError("--find-capacity: searches a user count; drop --request-rate")
        no_open_loop_options(p)
        if not p.slo:
            raise InputError("--find-capacity: needs --slo, e.g. --slo 'ttft.p95<5s'")
        policy = getattr(p, "capacity_policy", "adaptive") or "adaptive"
        if policy == "walk" and not p.steps:
            raise InputError(
                "--capacity-policy walk: walks the levels of --steps; give --steps 8,16,32,64 or --capacity-policy adaptive"
            )
        if policy == "doubling" and p.steps:
            raise InputError(
                "--capacity-policy doubling: doubles from 1 user; drop --steps, or use --capacity-policy walk"
            )
        max_users = getattr(p, "max_users", None)
        if max_users is not None and p.steps and max_users < p.steps[0]:
            raise InputError(
                f"--max-users: {max_users} is below the first level of --steps ({p.steps[0]}); raise it or drop it"
            )
        return cls(
            candidates=p.steps or None,
            step_s=p.step_time,
            warmup_s=p.step_warmup,
            policy=policy,
            precision=getattr(p, "capacity_precision", 0.05),
            max_users=max_users,
        )

    @classmethod
    def _rate_search(cls, p, distributed: bool) -> CapacitySearchModel:
        """--find-capacity --capacity-unit rate: the options of an open loop whose rate is searched."""
        if distributed:
            raise InputError(
                "--capacity-unit rate: the search sets each level's rate in the process that runs the users; "
                "run it without --master/--processes (one process sends hundreds of requests/s)"
            )
        check_step_window(p)
        _check_judged_window(p.step_time, p.step_warmup, distributed)
        if p.steps:
            raise InputError("--steps: user counts; a search in requests/s walks --rate-steps instead")
        if p.replay:
            raise InputError("--find-capacity: a replayed trace keeps its own times; drop --replay")
        refuse_unless(p, "time_scale", False, "--time-scale: only applies with --replay")
        if not p.slo:
            raise InputError("--find-capacity: needs --slo, e.g. --slo 'ttft.p95<5s'")
        policy = getattr(p, "capacity_policy", "adaptive") or "adaptive"
        rates = p.rate_steps or None
        if policy == "walk" and not rates:
            raise InputError(
                "--capacity-policy walk: walks the levels of --rate-steps; give --rate-steps 1,2,4,8 or "
                "--capacity-policy adaptive"
            )
        if policy == "doubling" and rates:
            raise InputError(
                "--capacity-policy doubling: doubles from --start-rate; drop --rate-steps, or use --capacity-policy walk"
            )
        if rates and p.start_rate is not None:
            raise InputError("--start-rate: --rate-steps gives the first level already; give one of the two")
        if rates and p.max_rate is not None and p.max_rate < rates[0]:
            raise InputError(
                f"--max-rate: {p.max_rate:g} is below the first level of --rate-steps ({rates[0]:g}); raise it or drop it"
            )
        if rates and len({rate_level(r) for r in rates}) < len(rates):
            raise InputError(f"--rate-steps: the levels of a search must differ by at least {RATE_GRAIN:g} requests/s")
        return cls(
            candidates=None,
            step_s=p.step_time,
            warmup_s=p.step_warmup,
            policy=policy,
            precision=getattr(p, "capacity_precision", 0.05),
            unit="rate",
            rates=rates,
            start_rate=p.start_rate or (rates[0] if rates else 1.0),
            max_rate=p.max_rate,
            arrival=p.arrival,
            burstiness=p.burstiness or 1.0,
            max_concurrency=p.max_concurrency,
        )

    @property
    def by_rate(self) -> bool:
        return self.unit == "rate"

    def new_policy(self):
        if self.by_rate:  # the same policies on whole numbers of RATE_GRAIN requests/s (shapes/capacity.py)
            return POLICIES[self.policy](
                tuple(rate_level(r) for r in self.rates or ()),
                self.precision,
                None if self.max_rate is None else rate_level(self.max_rate),
                start=rate_level(self.start_rate),
            )
        return POLICIES[self.policy](self.candidates or (), self.precision, self.max_users)

    def headless_users(self) -> int | None:
        """A search in requests/s: its users are the in-flight cap (the shape holds it at every step)."""
        return (self.max_concurrency or DEFAULT_MAX_CONCURRENCY) if self.by_rate else None

    def pacer(self, ctx, worker_index: int, processes: int, environment):
        if not self.by_rate:
            return super().pacer(ctx, worker_index, processes, environment)
        from plugin.load_models.rate_search import search_pacer

        return search_pacer(self, ctx, environment)

    def describe(self, plan) -> str:
        # the levels it may walk and how each is held, as a step ramp states its own (a reader of the
        # report's header or run.json sees what load ran)
        policy = self.new_policy()
        held = (
            f"each level ended once decided, at most {3 * self.step_s:g}s (a warm-up until the requests before it "
            f"ended, at most {self.warmup_s:g}s)"
            if policy.sequential
            else f"{self.step_s:g}s each ({self.warmup_s:g}s warm-up)"
        )
        within = f", within -t {plan.run_time_s:g}s" if plan.run_time_s is not None else ""
        ceiling = f", at most {self.max_users} users" if self.max_users is not None else ""
        if self.by_rate:
            return (
                f"capacity search in requests/s for {', '.join(o.text for o in plan.slo)}: {self._rate_describe()}, "
                f"open loop ({self.arrival}, at most {self.headless_users()} in flight), {held}"
                f"{f', at most {self.max_rate:g} requests/s' if self.max_rate is not None else ''}{within}"
            )
        return (
            f"capacity search for {', '.join(o.text for o in plan.slo)}: {policy.describe()}, {held}{ceiling}{within}"
        )

    def _rate_describe(self) -> str:
        """The policy's own line in requests/s (its describe() speaks of users)."""
        policy = self.new_policy()
        first = (
            f"levels {','.join(f'{r:g}' for r in self.rates)} requests/s in order up to the first miss"
            if self.rates
            else f"probing up from {self.start_rate:g} requests/s to the first miss"
        )
        then = f"narrowing to within {policy.precision:.0%}" if policy.sequential else "bisecting to 10 %"
        return f"{first}, then {then} ({self.policy})"

    def step_seconds(self) -> float:
        # the grain each record's step is stamped with: an adaptive search's slice (shapes/capacity.py)
        return CapacitySearch.grain(self.step_s, POLICIES[self.policy].sequential)

    def fixed_levels(self) -> tuple[int, ...]:
        return self.candidates or ()

    def new_search(self, plan, distributed: bool) -> CapacitySearch:
        return CapacitySearch(
            list(plan.slo),
            self.step_s,
            self.warmup_s,
            plan.run_time_s,
            candidates=list(self.candidates) if self.candidates else None,
            distributed=distributed,
            policy=self.new_policy(),
            rate_cap=self.headless_users() if self.by_rate else None,
        )

    def step_plan(self, search=None) -> StepPlan | None:
        """The levels the search decided, as the summary's steps (with the cut they are judged at)."""
        return search.plan() if search is not None else None


def _check_judged_window(step_time: float, step_warmup: float, distributed: bool) -> None:
    """A capacity search judges each level while the run goes, on --step-time less --step-warmup
    and, with workers (a master, also --processes), less the last 4 s whose records may still be on
    their way (shapes/capacity.py): that part must hold MIN_JUDGED_S. Step ramps have no such
    margin: their steps are measured after the run from every record, over --step-time less
    --step-warmup, which check_step_window keeps above 0."""
    judged = judged_s(step_time, step_warmup, distributed)
    if judged >= MIN_JUDGED_S:
        return
    lag = f" - {WORKER_REPORT_LAG_S:g}s while the workers' last records arrive" if distributed else ""
    need = step_time - judged + MIN_JUDGED_S
    shorter = ", or a shorter --step-warmup" if step_warmup > 0 else ""
    raise InputError(
        f"--step-time: {step_time:g}s leaves {max(judged, 0.0):g}s to judge each capacity-search level "
        f"({step_time:g}s - --step-warmup {step_warmup:g}s{lag}), at least {MIN_JUDGED_S:g}s is needed; "
        f"give --step-time {need:g}s or more{shorter}"
    )
