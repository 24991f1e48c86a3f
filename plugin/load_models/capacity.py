"""Capacity search (--find-capacity): the highest user count meeting --slo, its levels picked by a
policy (--capacity-policy, shapes/search/) and run and judged by shapes/capacity.py."""

from __future__ import annotations

from typing import Literal

from core.errors import InputError
from plugin.load_models.base import LoadModel, no_open_loop_options
from plugin.load_models.steps import check_step_window
from shapes.capacity import MIN_JUDGED_S, WORKER_REPORT_LAG_S, CapacitySearch, judged_s
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

    @classmethod
    def chosen(cls, p) -> bool:
        return p.find_capacity

    @classmethod
    def from_options(cls, p, distributed: bool) -> CapacitySearchModel:
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

    def new_policy(self):
        return POLICIES[self.policy](self.candidates or (), self.precision, self.max_users)

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
        return (
            f"capacity search for {', '.join(o.text for o in plan.slo)}: {policy.describe()}, {held}{ceiling}{within}"
        )

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
