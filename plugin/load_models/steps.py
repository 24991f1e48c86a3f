"""Step ramp (--steps): closed loop at each user count for --step-time, its first --step-warmup excluded."""

from __future__ import annotations

import math
from typing import Literal

from core.errors import InputError
from plugin.load_models.base import LoadModel, no_open_loop_options
from shapes.steps import StepPlan


def check_step_window(p) -> None:
    if p.step_warmup >= p.step_time:
        raise InputError(f"--step-warmup: {p.step_warmup:g}s must be shorter than --step-time {p.step_time:g}s")


class StepRamp(LoadModel):
    kind: Literal["steps"] = "steps"
    stepped = True
    levels: tuple[int, ...]
    step_s: float
    warmup_s: float

    @property
    def duration_s(self) -> float:
        return self.step_s * len(self.levels)

    @classmethod
    def chosen(cls, p) -> bool:
        return bool(p.steps)

    @classmethod
    def from_options(cls, p, distributed: bool) -> StepRamp:
        check_step_window(p)
        no_open_loop_options(p)
        return cls(levels=p.steps, step_s=p.step_time, warmup_s=p.step_warmup)

    def describe(self, plan) -> str:
        text = f"step ramp {','.join(map(str, self.levels))} users, {self.step_s:g}s each ({self.warmup_s:g}s warm-up)"
        if plan.run_time_s is not None and plan.run_time_s < self.duration_s:
            held = max(1, math.ceil(plan.run_time_s / self.step_s))
            text += f"; -t {plan.run_time_s:g}s ends it in step {held} of {len(self.levels)}"
        return text

    def step_seconds(self) -> float:
        return self.step_s

    def fixed_levels(self) -> tuple[int, ...]:
        return self.levels

    def step_plan(self, search=None) -> StepPlan:
        return StepPlan(list(self.levels), self.step_s, self.warmup_s)
