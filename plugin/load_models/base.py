"""What every load model is: a frozen description built from the options, and its duties in a run.

A load model (one class per kind, `plugin/load_models/__init__.py` lists them) is chosen by its
options, checks them against the others, and owns what differs between kinds:

  chosen(options)                      its options ask for it (the registry asks in order)
  from_options(options, distributed)   the validated model, or one-line InputError
  describe(plan)                       what will run, in one line
  pacer(ctx, worker_index, processes)  when each user of a process sends its next request, and which
  window_start(started, warmup_s)      where the measured window begins
  headless_users()                     the user count a headless run starts (None: Locust's -u)
  target_rate()                        requests per second asked for (open loops), for the summary
  scheduled_between(run_start, s, e, seed)  open loops: the arrivals due in [s, e] (wall clock), all processes
  step_seconds(), fixed_levels()       per-step accounting: each record's step, the levels known up front
  step_plan(search), new_search(...)   the shape of a stepped run and the steps of its summary
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from core.errors import InputError

NAN = float("nan")


class LoadModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    stepped: ClassVar[bool] = False  # Locust runs the locustfile's shape (plugin/shape.py) for it

    @classmethod
    def chosen(cls, p) -> bool:
        raise NotImplementedError

    @classmethod
    def from_options(cls, p, distributed: bool) -> LoadModel:
        raise NotImplementedError

    def describe(self, plan) -> str:
        raise NotImplementedError

    def pacer(self, ctx, worker_index: int, processes: int, environment):
        return ClosedPacer(ctx.sampler)

    def window_start(self, started: float, warmup_s: float) -> float:
        return started + warmup_s

    def headless_users(self) -> int | None:
        return None

    def target_rate(self) -> float | None:
        return None

    def scheduled_between(self, run_start: float, start: float, end: float, seed: int) -> int | None:
        """Open loops: how many arrivals of the whole schedule were due in [start, end] (wall clock);
        None for a load without a schedule."""
        return None

    def step_seconds(self) -> float | None:
        return None

    def fixed_levels(self) -> tuple[int, ...]:
        return ()

    def step_plan(self, search=None):
        """The steps of the summary (shapes.steps.StepPlan), None for an unstepped run."""
        return None

    def new_search(self, plan, distributed: bool):
        """A capacity search's decisions as the run goes (shapes.capacity.CapacitySearch), or None."""
        return None


class ClosedPacer:
    """Closed loop (also step ramps and capacity search): the next request at once."""

    def __init__(self, sampler):
        self.sampler = sampler

    def next(self):
        return NAN, self.sampler.next()


def refuse_unless(p, name: str, allowed: bool, message: str) -> None:
    """An option set that this kind does not take: one line saying so."""
    value = getattr(p, name)
    if value not in (None, False, (), "") and not allowed:
        raise InputError(message)


def no_open_loop_options(p) -> None:
    refuse_unless(p, "time_scale", False, "--time-scale: only applies with --replay")
    refuse_unless(
        p,
        "max_concurrency",
        False,
        "--max-concurrency: only applies with --request-rate or --replay (open loop); in a closed loop use -u",
    )
