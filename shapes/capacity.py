"""Capacity search: the highest user count that meets --slo, within --run-time.

Levels are held for --step-time each. Without --steps the search doubles the user count from 1
until a level misses the SLO, then bisects between the highest level met and the lowest missed
until they are within 10 % (at least 1 user) of each other, or the time budget cannot hold
another step. With --steps it walks the given levels in order and stops at the first miss.

Each level is judged when its step ends, by metrics.verdict on its declared set, as known at its
cut (its end; with workers, 4 s before it, as their records may still be on the way): its TTFT and
TTFA objectives on the requests sent after its warm-up up to the cut less the objective's threshold,
each with its first token if it had come by the cut and censored (known only to exceed cut - send)
if it was still waiting; its other objectives on the requests that had ended by the cut. The streams still open at the cut are
the load processes' latest open-stream reports (`open_streams`, plugin/progress.py). The verdict is
met, missed or undecided (too few values, values still waiting, or too close to call at the
verdict's confidence). An undecided level is held for another step (CapacitySearch._extend
says when), up to MAX_STEPS_PER_LEVEL steps in all and within -t; its window then runs from its
first step's warm-up to the end of its last step. A level still undecided is neither a pass nor a fail: the doubling
goes on above it, the bisection stops at it, and the answer names it. summary.json's by_step and
capacity compute the same verdicts from the same sets after the run (metrics.measure), so the
log, the table and the answer agree.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Callable

import pandas as pd

from metrics.measure import OPEN_COLUMNS, judge_level
from metrics.record import FIELD_NAMES, rows_to_table
from metrics.verdict import describe, too_few
from shapes.steps import StepPlan

log = logging.getLogger("llm.capacity")

_STEP = FIELD_NAMES.index("step")
RESOLUTION = 0.10
# With workers, the last seconds of a level are left out of its judgement: a request that ended
# there may not have reached the master yet (a worker sends its records and its open streams with
# its report, every 3 s, Locust's WORKER_REPORT_INTERVAL, and a second is allowed for the batch to
# travel): the latest report then was made after the cut, and holds every request sent by it that
# is not a record yet.
WORKER_REPORT_LAG_S = 4.0
# The shortest judged part of a level (after --step-warmup and, with workers, WORKER_REPORT_LAG_S);
# plugin/plan.py refuses a plan with less before the run starts. A level is judged on the requests
# sent in it that ended inside that part; with none it is undecided and held for another step,
# which a part of a second or two would make the rule at the first level (1 user sending one
# request at a time) whenever one reply takes longer than that. 4 s is as long as the worker margin itself: at least
# half of what a distributed level measured after its warm-up is judged, and the part holds a few
# replies of a second at the first level (the local capacity-search test judges parts of 4 s).
MIN_JUDGED_S = 4.0


def judged_s(step_s: float, warmup_s: float, distributed: bool) -> float:
    """Seconds of each level that its judgement covers: --step-time less --step-warmup and, with
    workers, less the records still on their way (CapacitySearch.judge)."""
    return step_s - warmup_s - (WORKER_REPORT_LAG_S if distributed else 0.0)


# An undecided level is held for more steps (the sample grows), up to this many steps in all.
MAX_STEPS_PER_LEVEL = 3


class CapacitySearch:
    def __init__(self, objectives, step_s: float, warmup_s: float, budget_s: float | None,
                 candidates: list[int] | None = None, distributed: bool = False):  # fmt: skip
        self.objectives = objectives
        self.step_s, self.warmup_s = step_s, warmup_s
        self.budget_s = budget_s
        self.candidates = candidates
        self.distributed = distributed  # judged without the last WORKER_REPORT_LAG_S of each level
        self.levels: list[int] = []  # users of step index i, as decided
        self.states: dict[int, str] = {}  # users -> "met" | "missed" | "undecided", once judged
        self.rows: dict[int, list] = {}  # step index -> the records sent in it (metrics.record rows)
        # the streams still open, every load process's latest report (plugin/progress.py); set by the
        # plugin layer (plugin/shape.py): without it every request not yet a record is censored
        self.open_streams: Callable[[], list[dict]] | None = None
        self.run_start = time.time()
        self.done = False

    def plan(self) -> StepPlan:
        """The steps so far as a plan, with the cut the levels are judged at (the summary's, the
        live view's and this search's one definition of each level's set)."""
        lag = WORKER_REPORT_LAG_S if self.distributed else 0.0
        return StepPlan(list(self.levels), self.step_s, self.warmup_s, cut_lag_s=lag)

    # records -------------------------------------------------------------------------------
    def on_rows(self, rows) -> None:
        for r in rows:
            step = r[_STEP]
            if step >= 0:
                self.rows.setdefault(step, []).append(r)

    def judge(self, index: int):
        """The level that ends with step `index`, judged: (Level, metrics.schema.figures.Step)."""
        level = self.plan().levels_at(self.run_start)[-1]
        assert level.last == index, "a level is judged when its last step ends"
        rows = [r for i in range(level.first, level.last + 1) for r in self.rows.get(i, ())]
        return level, judge_level(rows_to_table(rows), level, self.objectives, self._open(level))

    def _open(self, level):
        """The streams still open, as the records' columns a level's first tokens take (a frame of
        metrics.measure.OPEN_COLUMNS)."""
        reports = self.open_streams() if self.open_streams is not None else []
        stale = [r["t"] for r in reports if level.cut is not None and r["t"] < level.cut]
        if stale:  # a late worker: requests it sent after its report are neither records nor open streams here
            log.warning("capacity search: %d load process(es) last reported %.1f s before the cut of the %d-user level: its "
                        "verdict may rest on fewer requests than summary.json's", len(stale), level.cut - min(stale), level.users)  # fmt: skip
        field = {"step": "step", "wall_send": "sent", "ttft_s": "ttft", "ttfa_s": "ttfa"}
        return pd.DataFrame({c: [x for r in reports for x in r[field[c]]] for c in OPEN_COLUMNS}, dtype=float)

    # decisions -----------------------------------------------------------------------------
    def bounds(self) -> tuple[int | None, int | None]:
        """(highest level met below the lowest missed, lowest missed)."""
        missed = [u for u, st in self.states.items() if st == "missed"]
        upper = min(missed) if missed else None
        met = [u for u, st in self.states.items() if st == "met" and (upper is None or u < upper)]
        return (max(met) if met else None), upper

    def _next_level(self) -> int | None:
        lo, hi = self.bounds()
        tried = set(self.levels)
        if self.candidates is not None:
            if hi is not None:
                return None
            rest = [u for u in self.candidates if u not in tried]
            return rest[0] if rest else None
        if hi is None:
            return max(tried) * 2 if tried else 1
        if lo is None:
            # levels the doubling left undecided (short of values) below the miss: bisect from the
            # highest of them; none: the SLO was missed from the first level on
            below = [u for u, st in self.states.items() if st == "undecided" and u < hi]
            if not below:
                return None
            lo = max(below)
        if hi - lo <= max(1, math.floor(RESOLUTION * lo)):
            return None
        mid = (lo + hi) // 2
        return None if mid in tried else mid  # tried and undecided: the knee is too close to call

    def _extend(self, level, verdict) -> bool:
        """Hold an undecided level for another step? While the doubling has found no miss, a level
        short of values is left for the next, which sends twice as many (the search assumes, as
        bisection does, that latency grows with the load); one close to its threshold, and every
        undecided level once the bisection has begun, is held up to MAX_STEPS_PER_LEVEL steps."""
        if verdict.state != "undecided" or level.steps >= MAX_STEPS_PER_LEVEL:
            return False
        return not (self.bounds()[1] is None and self.candidates is None and too_few(verdict))

    def _time_for_a_step(self, index: int) -> bool:
        return self.budget_s is None or (index + 1) * self.step_s <= self.budget_s

    def level_for(self, index: int) -> int | None:
        """Users for step `index` (called once when the step begins); None ends the search."""
        if index < len(self.levels):
            return self.levels[index]
        if self.done:
            return None
        if index > 0:
            level, step = self.judge(index - 1)
            verdict = step.verdict
            if self._extend(level, verdict) and self._time_for_a_step(index):
                log.info("capacity search: %d users %s; held for another step", level.users, describe(verdict))
                self.levels.append(level.users)
                return level.users
            self.states[level.users] = verdict.state
            lo, hi = self.bounds()
            log.info("capacity search: %d users %s (highest met %s, lowest missed %s)", level.users, describe(verdict),
                     "-" if lo is None else lo, "-" if hi is None else hi)  # fmt: skip
        if not self._time_for_a_step(index):
            self.done = True
            return None
        nxt = self._next_level()
        if nxt is None:
            self.done = True
            return None
        self.levels.append(nxt)
        return nxt
