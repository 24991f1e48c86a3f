"""Step ramps: `--steps 5,10,20,50,80,120,160 --step-time 60s --step-warmup 10s`.

The arithmetic form `--steps 1:160:10` means "from 1, add 10 every --step-time, up to 160"
(160 is included even when the increments do not land on it). A plan is pure arithmetic on the
run's start time, so every process (master and workers) stamps the same step on a record from
its send time alone; no step message has to travel.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from core.errors import InputError


def parse_steps(text: str) -> list[int]:
    text = (text or "").strip()
    if not text:
        return []
    m = re.fullmatch(r"(\d+):(\d+):(\d+)", text)
    if m:
        start, stop, add = map(int, m.groups())
        if add <= 0 or stop < start or start <= 0:
            raise InputError(f"--steps: '{text}' must be FROM:TO:ADD with 0 < FROM <= TO and ADD > 0, e.g. 1:160:10")
        levels = list(range(start, stop + 1, add))
        if levels[-1] != stop:
            levels.append(stop)
        return levels
    try:
        levels = [int(x) for x in text.split(",")]
    except ValueError:
        raise InputError(
            f"--steps: '{text}' must be a list of user counts like 5,10,20 or FROM:TO:ADD like 1:160:10"
        ) from None
    if any(x <= 0 for x in levels):
        raise InputError(f"--steps: '{text}': user counts must be above 0")
    if any(b <= a for a, b in zip(levels, levels[1:])):
        raise InputError(f"--steps: '{text}' must be strictly increasing, e.g. 5,10,20,50")
    return levels


@dataclass(frozen=True, slots=True)
class Level:
    """A load level as judged: consecutive steps at the same user count (a capacity search holds
    an undecided level for more steps), its window (wall clock, the warm-up after the change
    excluded) and its cut: requests that ended after it are not in the level's set (None: every
    request sent in the window counts, whenever it ended)."""

    first: int  # index of its first step
    last: int  # index of its last step
    users: int
    begin: float  # the level began (its users changed)
    start: float  # the window: requests sent from here ...
    end: float  # ... to here
    cut: float | None
    # the confidence of its verdict's bounds (None: metrics.verdict.CONFIDENCE); an adaptive capacity
    # search looks at a level several times, each look at a higher one (shapes/sequential.py)
    confidence: float | None = None
    rate: float | None = None  # an open loop in steps (--rate-steps): the requests/s the level asked for

    @property
    def steps(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True, slots=True)
class StepPlan:
    levels: list[int]
    step_s: float
    warmup_s: float
    # A capacity search judges each level when it ends, on the requests that had ended by then,
    # less this lag (records on their way from workers); None: a step ramp, measured after the run
    cut_lag_s: float | None = None
    # an adaptive capacity search: each level's own warm-up (until the requests before its change
    # ended, shapes/capacity.py), in the order of levels_at; warmup_s for a level not in it
    warmups: tuple[float, ...] | None = None
    confidence: float | None = None  # of each level's verdict (None: metrics.verdict.CONFIDENCE)
    # a capacity search's account of itself for its answer (metrics/capacity.py): policy, precision,
    # family (each level's confidence over all its looks), timed_out, levels (shapes.capacity.Ended)
    search: dict | None = None
    # an open loop in steps (--rate-steps): each step's requests/s; `levels` holds its in-flight cap
    rates: tuple[float, ...] | None = None

    def index_at(self, elapsed_s: float) -> int:
        """The step running `elapsed_s` after the run started (-1 before, last index after)."""
        if elapsed_s < 0:
            return -1
        return min(int(elapsed_s // self.step_s), len(self.levels) - 1)

    def window(self, index: int, run_start: float) -> tuple[float, float]:
        """Measurement window of a step (wall clock): its warm-up after the change excluded."""
        begin = run_start + index * self.step_s
        return begin + self.warmup_s, begin + self.step_s

    @property
    def duration_s(self) -> float:
        return self.step_s * len(self.levels)

    def levels_at(self, run_start: float) -> list[Level]:
        """The levels (consecutive steps of the same user count merged) on the wall clock."""
        out: list[Level] = []
        for index, users in enumerate(self.levels):
            begin = run_start + index * self.step_s
            end = begin + self.step_s
            cut = None if self.cut_lag_s is None else end - self.cut_lag_s
            rate = self.rates[index] if self.rates is not None else None
            if out and out[-1].users == users and out[-1].rate == rate:
                out[-1] = replace(out[-1], last=index, end=end, cut=cut)
            else:
                k = len(out)
                warmup = self.warmups[k] if self.warmups is not None and k < len(self.warmups) else self.warmup_s
                out.append(Level(index, index, users, begin, begin + warmup, end, cut, self.confidence, rate))
        return out
