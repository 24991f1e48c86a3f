"""Capacity search: the highest user count that meets --slo, within --run-time.

Levels are held for --step-time each. Without --steps the search doubles the user count from 1
until a level misses the SLO, then bisects between the highest passing and the lowest failing
level until they are within 10 % (at least 1 user) of each other, or the time budget cannot hold
another level. With --steps it walks the given levels in order and stops at the first miss.

Each level is judged, when it ends, on the requests that completed inside its window (warm-up
excluded; with workers, the last 4 s are left out as their records may still be on the way); a
plan whose judged window would be shorter than MIN_JUDGED_S is refused before the run starts. The
final answer in summary.json is recomputed from all records after the run.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np

from metrics.record import FIELD_NAMES

log = logging.getLogger("llm.capacity")

_I = {name: FIELD_NAMES.index(name) for name in ("step", "wall_send", "ok", "ttft_s", "tpot_s", "e2e_s", "chunk_times")}
RESOLUTION = 0.10
# With workers, the last seconds of a level are left out of its judgement: a request that ended
# there may not have reached the master yet (a worker sends its records with its report, every 3 s,
# Locust's WORKER_REPORT_INTERVAL, and a second is allowed for the batch to travel).
WORKER_REPORT_LAG_S = 4.0
# The shortest judged part of a level (after --step-warmup and, with workers, WORKER_REPORT_LAG_S);
# plugin/plan.py refuses a plan with less before the run starts. A level is judged on the requests
# that ended inside that part, and a level with none counts as missed: the first level is 1 user
# sending one request at a time, so a part of a second or two ends the search at "no capacity"
# whenever one reply takes longer than that. 4 s is as long as the worker margin itself: at least
# half of what a distributed level measured after its warm-up is judged, and the part holds a few
# replies of a second at the first level (the local capacity-search test judges parts of 4 s).
MIN_JUDGED_S = 4.0


def judged_s(step_s: float, warmup_s: float, distributed: bool) -> float:
    """Seconds of each level that its judgement covers: --step-time less --step-warmup and, with
    workers, less the records still on their way (CapacitySearch.judge)."""
    return step_s - warmup_s - (WORKER_REPORT_LAG_S if distributed else 0.0)


class CapacitySearch:
    def __init__(self, objectives, step_s: float, warmup_s: float, budget_s: float | None,
                 candidates: list[int] | None = None, distributed: bool = False):  # fmt: skip
        self.objectives = objectives
        self.step_s, self.warmup_s = step_s, warmup_s
        self.budget_s = budget_s
        self.candidates = candidates
        self.distributed = distributed  # judged without the last WORKER_REPORT_LAG_S of each level
        self.levels: list[int] = []  # users of step index i, as decided
        self.passed: dict[int, bool] = {}  # users -> passed
        self.rows: dict[int, list] = {}  # step index -> [(done_wall, ok, ttft, tpot, e2e, itl gaps)]
        self.run_start = time.time()
        self.done = False

    # records -------------------------------------------------------------------------------
    def on_rows(self, rows) -> None:
        for r in rows:
            step = r[_I["step"]]
            if step < 0:
                continue
            e2e = r[_I["e2e_s"]]
            times = r[_I["chunk_times"]]
            gaps = np.diff(times) if times is not None and len(times) > 1 else ()
            done = r[_I["wall_send"]] + (e2e if e2e == e2e else 0.0)
            self.rows.setdefault(step, []).append((done, r[_I["ok"]], r[_I["ttft_s"]], r[_I["tpot_s"]], e2e, gaps))

    def judge(self, index: int) -> bool:
        begin = self.run_start + index * self.step_s
        start = begin + self.warmup_s
        end = start + judged_s(self.step_s, self.warmup_s, self.distributed)
        done = [x for x in self.rows.get(index, ()) if start <= x[0] <= end and x[1]]
        if not done:
            return False
        columns = {"ttft": [x[2] for x in done], "tpot": [x[3] for x in done], "e2e": [x[4] for x in done]}
        itl = np.concatenate([np.asarray(x[5], dtype=float) for x in done]) if done else np.empty(0)
        for obj in self.objectives:
            values = itl if obj.metric == "itl" else np.asarray(columns[obj.metric], dtype=float)
            value = obj.statistic(values)
            if not value < obj.threshold_s:
                return False
        return True

    # decisions -----------------------------------------------------------------------------
    def bounds(self) -> tuple[int | None, int | None]:
        failing = [u for u, ok in self.passed.items() if not ok]
        upper = min(failing) if failing else None
        passing = [u for u, ok in self.passed.items() if ok and (upper is None or u < upper)]
        return (max(passing) if passing else None), upper

    def _next_level(self) -> int | None:
        lo, hi = self.bounds()
        if self.candidates is not None:
            if hi is not None:
                return None
            tried = set(self.levels)
            rest = [u for u in self.candidates if u not in tried]
            return rest[0] if rest else None
        if hi is None:
            return 1 if lo is None else lo * 2
        if lo is None:
            return None  # even the first level missed the SLO
        if hi - lo <= max(1, math.floor(RESOLUTION * lo)):
            return None
        return (lo + hi) // 2

    def level_for(self, index: int) -> int | None:
        """Users for step `index` (called once when the step begins); None ends the search."""
        if index < len(self.levels):
            return self.levels[index]
        if index > 0:
            users = self.levels[index - 1]
            self.passed[users] = self.judge(index - 1)
            lo, hi = self.bounds()
            log.info("capacity search: %d users %s (bounds %s..%s)", users,
                     "meets the SLO" if self.passed[users] else "misses the SLO", lo, hi)  # fmt: skip
        if self.budget_s is not None and (index + 1) * self.step_s > self.budget_s:
            self.done = True
            return None
        nxt = self._next_level()
        if nxt is None:
            self.done = True
            return None
        self.levels.append(nxt)
        return nxt
