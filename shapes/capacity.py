"""Capacity search: the highest user count that meets --slo, within --run-time.

A policy (shapes/search/, --capacity-policy) picks each next level from the levels ended so far and
their verdicts' signed margins; this module runs the levels it picks and judges them. Two ways of
holding a level:

- fixed (the walk and doubling policies): each level is held --step-time, judged when its step
  ends; an undecided level is held for another step (CapacitySearch._extend says when), up to
  MAX_STEPS_PER_LEVEL steps in all and within -t; its window then runs from its first step's
  warm-up to the end of its last step.
- sequential (the adaptive policy): time is cut in slices of SLICE_S (each record's step), a level
  is the slices at one user count. Its warm-up lasts until the requests sent before its change have
  ended (at most --step-warmup); its verdict is then looked at up to shapes.sequential.LOOKS times,
  each at the confidence that keeps 90 % per side over all of them, and it ends at the first look
  that decides it, or undecided at its longest hold (MAX_STEPS_PER_LEVEL x --step-time). While no
  level has missed, a level short of values is passed to the next (too slow to be met within its
  longest hold, or all its statistics under FAR_BELOW of their thresholds).

Each level is judged by metrics.verdict on its declared set, as known at its cut (its end; with
workers, 4 s before it, as their records may still be on the way): its TTFT and TTFA objectives on
the requests sent after its warm-up up to the cut less the objective's threshold, each with its
first token if it had come by the cut and censored (known only to exceed cut - send) if it was
still waiting; its other objectives on the requests that had ended by the cut. The streams still
open at the cut are the load processes' latest open-stream reports (`open_streams`,
plugin/progress.py). A level still undecided is neither a pass nor a fail: the probing goes on
above it, the narrowing stops at it, and the answer names it. summary.json's by_step and capacity
compute the same verdicts from the same sets after the run (metrics.measure, with the plan's
confidence and warm-ups), so the log, the table and the answer agree; the plan also carries the
search's own account (`record`: its levels in order and why each ended) for the answer.

A search in requests/s (--capacity-unit rate, `rate_cap` set) runs the same policies on the same
whole numbers, each a count of RATE_GRAIN requests/s: its levels are open-loop rates (the load
process's pacer asks `rate_for` at each step's start), its users the in-flight cap at every step;
a level whose server or client did not keep up with its rate is missed (metrics/keep_up.py).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from metrics.record import FIELD_NAMES, rows_to_table
from metrics.schema.level_endings import Ending, ending_words
from metrics.verdict import CONFIDENCE, FIRST_TOKEN, describe, too_few
from shapes.search import POLICIES, RESOLUTION, Tried, bracket
from shapes.sequential import FAMILY_CONFIDENCE, decidability, look_confidence, look_times, next_look, values_needed
from shapes.steps import StepPlan

log = logging.getLogger("llm.capacity")

_STEP = FIELD_NAMES.index("step")
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


# An undecided level is held for more steps (the sample grows), up to this many steps in all; an
# adaptive search's level (shapes/sequential.py) at most this many --step-time.
MAX_STEPS_PER_LEVEL = 3
# An adaptive search's grain: each record's step is its send time in slices of this length
# (plugin/context.py, from the send time alone, in every process), and a level is a run of
# consecutive slices at one user count, so it can end (and its warm-up end) at any slice's end.
SLICE_S = 2.0
# While probing up, a level short of values whose statistics are all under this share of their
# thresholds is passed to the next level (CapacitySearch._far_below): deciding it would take
# longest where it matters least, at the lowest loads.
FAR_BELOW = 0.5


def reading_values(objective) -> int:
    """The fewest values whose statistic reads the objective's: for a percentile q, enough that their
    largest is more likely than not above it (1 - q^n >= 1/2: 14 for a P95, 69 for a P99); a mean
    is read as the median."""
    q = (objective.percentile() or 50.0) / 100.0
    return max(1, math.ceil(math.log(0.5) / math.log(q)))


# A search in requests/s: its policy's whole numbers are counts of this many requests/s (its
# precision then ends at a thousandth of a request per second, never at a whole one).
RATE_GRAIN = 0.001


def rate_level(rate: float) -> int:
    """A rate in requests/s as a search level (a count of RATE_GRAIN)."""
    return max(1, int(round(rate / RATE_GRAIN)))


@dataclass(frozen=True, slots=True)
class Ended:
    """A level the search ended, and why (summary.json capacity.levels; the endings and their words:
    metrics/schema/level_endings.py)."""

    users: int
    state: str
    margin: float | None
    ended: Ending
    seconds: float  # from its change to its end
    warmup_s: float
    looks: int
    requests: int
    binding: str | None  # the objective its margin is (met: the least room; missed: the largest excess)
    rate: float | None = None  # a search in requests/s: the level's rate (`users` is its in-flight cap)


def binding(verdict) -> str | None:
    """The objective that decides a verdict's margin (metrics/verdict.py): the least room when all
    are met, the largest excess when one is missed."""
    if verdict.margin is None:
        return None
    for e in verdict.objectives:
        if e.margin == verdict.margin and e.state == verdict.state:
            return e.objective
    return None


def room_note(budget_s: float | None, longest_s: float) -> str:
    """Empty when -t holds two levels held to their longest (`longest_s`), else the capacity
    precheck's note that the levels near the knee, the ones held longest, may be cut undecided (from
    the web form, 300 s with the default 60 s --step-time, levels held up to 180 s, ended two
    searches in three with no level met). The one wording of it."""
    if budget_s is None or budget_s >= 2 * longest_s:
        return ""
    return (
        f"; -t {budget_s:.0f}s has room for fewer than two levels held to their longest ({longest_s:.0f}s each): "
        "a level near the knee may end undecided; a longer -t or a shorter --step-time gives the knee more"
    )


class CapacitySearch:
    def __init__(
        self,
        objectives,
        step_s: float,
        warmup_s: float,
        budget_s: float | None,
        candidates: list[int] | None = None,
        distributed: bool = False,
        policy=None,
        rate_cap: int | None = None,
    ):
        self.objectives = objectives
        if policy is None:  # the walk of the given levels, or the doubling without
            policy = POLICIES["walk" if candidates else "doubling"](tuple(candidates or ()))
        self.policy = policy
        self.rate_cap = rate_cap  # a search in requests/s: the in-flight cap (its users at every step)
        self.sequential = policy.sequential
        self.level_s = step_s  # --step-time: a level's fixed hold, or its longest / MAX_STEPS_PER_LEVEL
        # the grain of steps (records are stamped with it): a fixed hold's step, or an adaptive slice
        self.step_s = self.grain(step_s, self.sequential)
        self.warmup_s = warmup_s  # a fixed warm-up, or the longest an adaptive one lasts
        self.budget_s = budget_s
        self.candidates = candidates
        self.distributed = distributed  # judged without the last WORKER_REPORT_LAG_S of each level
        self.lag_s = WORKER_REPORT_LAG_S if distributed else 0.0
        self.confidence = look_confidence() if self.sequential else CONFIDENCE
        self.looks = (
            look_times(MAX_STEPS_PER_LEVEL * step_s - warmup_s - self.lag_s, MIN_JUDGED_S) if self.sequential else []
        )
        self.levels: list[int] = []  # users of step index i, as decided
        self.warmups: list[float] = []  # each level's warm-up (seconds after its change), in order
        self.settled = True  # the current level's warm-up is over
        self.drained_at: int | None = None  # a search in requests/s: the step its backlog was seen ended
        self.looked = 0  # looks taken at the current level
        self.next_look_s: float | None = None  # judged seconds of its next look (None: none left)
        self.need = max(values_needed(o, self.confidence) for o in objectives)  # values a level needs to be met
        # a first-token objective's set ends its threshold before the cut (metrics/verdict.py): the
        # first seconds of a level's judged time give it no values, which a projection leaves out
        self.offset_s = max((o.threshold_s for o in objectives if o.metric in FIRST_TOKEN), default=0.0)
        self.states: dict[int, str] = {}  # users -> "met" | "missed" | "undecided", once judged
        self.history: list = []  # shapes.search.Tried of each level ended, in order
        self.ended: list[Ended] = []
        self.timed_out = False  # -t ended the search before the policy did
        self.stopped = False  # the run ended before the search did (stop(): the web UI's STOP, a signal, ...)
        self.crossing: dict | None = None  # the policy's crossing of the curve (summary.json capacity.crossing)
        self.margins = None  # the last level judged, as the policy's fit of the curve takes it (Policy.margins)
        self.notes: list[str] = []  # lines the search said about its plan (decidability)
        self.rows: dict[int, list] = {}  # step index -> the records sent in it (metrics.record rows)
        # the streams still open, every load process's latest report (plugin/progress.py); set by the
        # plugin layer (plugin/shape.py): without it every request not yet a record is censored
        self.open_streams: Callable[[], list[dict]] | None = None
        self.run_start = time.time()
        self.done = False

    def key(self, level) -> int:
        """A judged level (shapes.steps.Level) as its policy's number: users, or its rate in RATE_GRAIN."""
        return rate_level(level.rate) if self.rate_cap is not None and level.rate is not None else level.users

    def load(self, number: int | None) -> str:
        """A policy's number as the load it is: '12 users' or '2.5 requests/s'."""
        if number is None:
            return "-"
        if self.rate_cap is not None:
            return f"{number * RATE_GRAIN:g} requests/s"
        return f"{number} user{'s' * (number != 1)}"

    def users_for(self, index: int) -> int | None:
        """The users step `index` runs (level_for). A search in requests/s: its in-flight cap, the
        step running now on the run's clock decided here if its pacer has not asked yet (its users
        all busy); the shape's ticks, up to a second apart, never decide a step before it began."""
        if self.rate_cap is None:
            return self.level_for(index)
        now = int((time.time() - self.run_start) // self.step_s)
        if now >= 0 and not self.done:
            self.level_for(now)
        return None if self.done else self.rate_cap

    def rate_for(self, index: int) -> float | None:
        """A search in requests/s: the rate of step `index` (level_for: deciding it when it begins;
        the load process's pacer asks at the step's start); None ends the search."""
        level = self.level_for(index)
        return None if level is None else level * RATE_GRAIN

    def drains(self, index: int) -> int | None:
        """A search in requests/s: the first step of the level running at step `index` when that level
        follows one that was not met, else None. An open loop above the server's capacity leaves a
        backlog that would queue the next level's requests behind it (a closed loop's users bound
        theirs), so the pacer sends nothing from that step until every request before it ended."""
        if self.rate_cap is None or index >= len(self.levels):
            return None
        first = index
        while first > 0 and self.levels[first - 1] == self.levels[index]:
            first -= 1
        if first == 0 or self.states.get(self.levels[first - 1]) == "met":
            return None
        return first

    @staticmethod
    def grain(step_s: float, sequential: bool) -> float:
        """The length of a step: --step-time for a fixed hold, a slice for an adaptive search."""
        return min(SLICE_S, step_s) if sequential else step_s

    @property
    def longest_judged_s(self) -> float:
        return (
            self.looks[-1]
            if self.looks
            else judged_s(MAX_STEPS_PER_LEVEL * self.level_s, self.warmup_s, self.distributed)
        )

    def plan(self) -> StepPlan:
        """The steps so far as a plan, with the cut the levels are judged at (the summary's, the
        live view's and this search's one definition of each level's set)."""
        warmups = None
        if self.sequential:  # the level still warming up: its longest warm-up until it settles
            warmups = tuple(self.warmups) + (() if self.settled or not self.levels else (self.warmup_s,))
        rates = None
        levels = list(self.levels)
        if self.rate_cap is not None:  # the rate of each step; its users the in-flight cap
            rates, levels = tuple(level * RATE_GRAIN for level in levels), [self.rate_cap] * len(levels)
        return StepPlan(
            levels,
            self.step_s,
            self.warmup_s,
            cut_lag_s=self.lag_s,
            warmups=warmups,
            confidence=self.confidence,
            search=self.record(),
            rates=rates,
        )

    def record(self) -> dict:
        """What the answer says of the search (metrics/capacity.py, summary.json capacity): its
        policy, its precision, each level's confidence over all its looks (an adaptive one's: 90 %
        per side, shapes/sequential.py; a fixed hold's: None, each step a 90 % look), whether -t
        ended it or the run was stopped first (`stop`), and its levels in the order tried with why
        each ended."""
        return {
            "policy": self.policy.name,
            "unit": "rate" if self.rate_cap is not None else "users",
            "precision": self.policy.precision if self.sequential else RESOLUTION,
            "family": FAMILY_CONFIDENCE if self.sequential else None,
            "timed_out": self.timed_out,
            "stopped": self.stopped,
            "levels": [asdict(e) for e in self.ended],
            "crossing": self._crossing(),
            "precheck": self.precheck(),
        }

    def _crossing(self) -> dict | None:
        """The curve's crossing (the policy's, in its numbers) as the answer states it: in users, or
        in requests/s for a search in requests/s."""
        c = self.crossing
        if c is None or self.rate_cap is None:
            return c
        rate = lambda x: None if x is None else round(x * RATE_GRAIN, 4)  # noqa: E731
        return {**c, **{k: rate(c[k]) for k in ("users", "lower", "upper")}, "between": [rate(b) for b in c["between"]]}

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
        from metrics.measure import judge_level  # pandas: loaded by the process that judges, not the load's

        table, open_streams = rows_to_table(rows), self._open(level)
        step = judge_level(table, level, self.objectives, open_streams)
        # what a policy that fits the curve through the levels takes from this one (None for the others)
        self.margins = self.policy.margins(table, level, self.objectives, open_streams, step.verdict, self.need)
        return level, step

    def _open(self, level):
        """The streams still open, as the records' columns a level's first tokens take (a frame of
        metrics.measure.OPEN_COLUMNS)."""
        reports = self.open_streams() if self.open_streams is not None else []
        stale = [r["t"] for r in reports if level.cut is not None and r["t"] < level.cut]
        if stale:  # a late worker: requests it sent after its report are neither records nor open streams here
            log.warning(
                "capacity search: %d load process(es) last reported %.1f s before the cut of the %d-user level: its "
                "verdict may rest on fewer requests than summary.json's",
                len(stale),
                level.cut - min(stale),
                level.users,
            )
        import pandas as pd

        from metrics.measure import OPEN_COLUMNS

        field = {"step": "step", "wall_send": "sent", "ttft_s": "ttft", "ttfa_s": "ttfa"}
        return pd.DataFrame({c: [x for r in reports for x in r[field[c]]] for c in OPEN_COLUMNS}, dtype=float)

    # decisions -----------------------------------------------------------------------------
    def bounds(self) -> tuple[int | None, int | None]:
        """(highest level met below the lowest missed, lowest missed)."""
        b = bracket(self.tried())
        return b.lo, b.hi

    def tried(self) -> list:
        """The levels ended so far as the policy reads them (shapes.search.Tried), in order; a level
        whose state was set without a margin (a test's history) counts with none."""
        known = {t.users for t in self.history}
        return self.history + [Tried(u, st) for u, st in self.states.items() if u not in known]

    def _extend(self, level, verdict) -> bool:
        """A fixed hold: hold an undecided level for another step? While no level has missed and
        the policy probes up, a level short of values is left for the next, which sends more (the
        search assumes, as bisection does, that latency grows with the load); one close to its
        threshold, and every undecided level once a miss brackets the knee, is held up to
        MAX_STEPS_PER_LEVEL steps."""
        if verdict.state != "undecided" or level.steps >= MAX_STEPS_PER_LEVEL:
            return False
        return not (self.bounds()[1] is None and self.candidates is None and too_few(verdict))

    def _time_for_a_step(self, index: int) -> bool:
        return self.budget_s is None or (index + 1) * self.step_s <= self.budget_s

    def _still_open_before(self, t: float) -> int:
        """Requests sent before `t` still open now (every load process's latest report)."""
        reports = self.open_streams() if self.open_streams is not None else []
        return sum(1 for r in reports for s in r["sent"] if s < t)

    def _settle(self, index: int) -> None:
        """An adaptive level's warm-up ends at the first slice end at which the requests sent before
        its change have all ended (the server then serves this level's load only), at the longest
        --step-warmup."""
        first = self.plan().levels_at(self.run_start)[-1].first
        since = (index - first) * self.step_s
        done = self._still_open_before(self.run_start + first * self.step_s) == 0
        longest = self.warmup_s
        if self.drains(first) is not None:
            # a search in requests/s drains a backlog before the level (`drains`): its load begins once
            # the backlog ended, from nothing, and its warm-up lasts --step-warmup from there
            longest = MAX_STEPS_PER_LEVEL * self.level_s
            if done and self.drained_at is None:
                self.drained_at = index
            done = self.drained_at is not None and (index - self.drained_at) * self.step_s >= self.warmup_s
        if since >= longest or done:
            self.warmups.append(min(since, longest))
            self.settled = True
            self.looked, self.next_look_s = 0, self.looks[0]

    def _look(self, index: int):
        """Judge the adaptive level if a look is due (shapes/sequential.py): (level, step) or None."""
        level = self.plan().levels_at(self.run_start)[-1]
        judged = level.end - self.lag_s - level.start
        if self.next_look_s is None or judged + 1e-9 < self.next_look_s:
            return None
        self.looked += 1
        level, step = self.judge(index - 1)
        v = step.verdict
        values = min((e.samples for e in v.objectives), default=v.requests)  # the objective shortest of values
        self.next_look_s = next_look(judged, self.looked, self.looks, values, self.need, self.step_s, self.offset_s)
        log.debug(
            "capacity search: %s, look %d at %.1fs judged: %s on %d values, next look at %s",
            self.load(self.key(level)),
            self.looked,
            judged,
            v.state,
            values,
            self.next_look_s,
        )
        return level, step

    def _short(self, level, step) -> bool:
        """While no level has missed: an undecided level whose values come too slowly to meet its
        objectives by its longest hold is left (the next level up sends more; it is passed on the
        higher levels' verdicts). Said once, with its fixes."""
        if self.bounds()[1] is not None or not too_few(step.verdict):
            return False
        if any(e.value_ms is not None and e.value_ms >= e.threshold_ms for e in step.verdict.objectives):
            return False  # its values so far are over the threshold: not presumed met, it is held
        judged = level.end - self.lag_s - level.start - self.offset_s  # the time that gave values
        values = min((e.samples for e in step.verdict.objectives), default=step.verdict.requests)
        rate = values / judged if judged > 0 else 0.0
        longest = self.longest_judged_s - self.offset_s
        if rate == 0 or rate * longest >= self.need:  # none yet: no rate to project
            return False
        if self.rate_cap is not None:  # an open loop's values come at its rate: no reply time to project
            return True
        reply = level.users / rate
        line, ok = decidability(self.objectives, level.users, longest, self.confidence, reply)
        if not ok and not self.notes:
            log.warning("%s", line)
            self.notes.append(line)
        return True

    def _far_below(self, verdict) -> bool:
        """While no level has missed and the policy probes up: a level undecided for want of values
        whose every statistic so far is under FAR_BELOW of its threshold, on enough values to read
        it (`reading_values`), is passed; the next level up, which sends more, decides it (a met
        there implies it; a miss there makes the narrowing start from it). Without that floor a
        level was passed on its first few first tokens, before its queue built up (64 users of the
        reference profile: 4 values, 6 s after its warm-up), became the floor of the narrowing when
        the level above it missed, and in virtual time 8 of 20 searches of 300 s ended with no
        level met (0 of 20 with it: bench/RESULTS.md)."""
        if self.bounds()[1] is not None or not too_few(verdict) or not verdict.objectives:
            return False
        return all(
            e.value_ms is not None
            and e.value_ms <= FAR_BELOW * e.threshold_ms
            and e.censored == 0
            and e.samples >= reading_values(o)
            for e, o in zip(verdict.objectives, self.objectives, strict=True)
        )

    def _end(self, level, step, why: str) -> None:
        verdict = step.verdict
        key = self.key(level)
        self.states[key] = verdict.state
        self.history.append(Tried(key, verdict.state, verdict.margin, why, verdict, self.margins))
        if self.sequential:  # the answer's interval from the curve (shapes/search/curve.py), as of this level
            self.crossing = self.policy.crossing(self.history)
        self.ended.append(
            Ended(
                level.users,
                verdict.state,
                verdict.margin,
                why,
                round(level.end - level.begin, 3),
                round(level.start - level.begin, 3),
                self.looked if self.sequential else level.steps,
                verdict.requests,
                binding(verdict),
                level.rate if self.rate_cap is not None else None,
            )
        )
        lo, hi = self.bounds()
        words = ending_words(why, level.end - level.begin, level.start - level.begin)
        how = words.log.format(seconds=level.end - level.begin, far_below=FAR_BELOW)
        width = f", bracket {self.load(lo)}..{self.load(hi)} ({(hi - lo) / lo:.0%})" if lo and hi else ""
        log.info(
            "capacity search: %s %s%s (highest met %s, lowest missed %s%s)",
            self.load(key),
            words.verdict or describe(verdict),
            f"; {how}" if how else "",
            self.load(lo),
            self.load(hi),
            width,
        )

    def _next(self, index: int) -> int | None:
        """The policy's next level, started at step `index`; None ends the search."""
        nxt = self.policy.next_level(self.tried())
        if nxt is None or not self._time_for_a_step(index):
            # the policy would have gone on, or -t cut the level it would have held longer
            self.timed_out = nxt is not None or bool(self.ended and self.ended[-1].ended == "time")
            self.done = True
            return None
        self.levels.append(nxt)
        self.settled, self.looked, self.next_look_s = not self.sequential, 0, None
        self.drained_at = None
        return nxt

    def stop(self) -> None:
        """The run has ended (plugin/run_end.py, once the shape can decide no more): a search that
        neither its policy nor -t had ended was stopped from outside it (the web UI's STOP, Ctrl-C or
        another signal, the all-failed stop, a lost worker), which its answer says. Known only here,
        at the run's end: while the run goes, a search not done is still running."""
        self.stopped = not self.done
        self.done = True

    def level_for(self, index: int) -> int | None:
        """Users for step `index` (called when the step begins; a skipped one is the level before);
        None ends the search."""
        if index < len(self.levels):
            return self.levels[index]
        if self.done:
            return None
        while 0 < len(self.levels) < index:  # a tick came late: the steps in between held the level
            self.levels.append(self.levels[-1])
        if index == 0:
            return self._next(0)
        return self._sequential_step(index) if self.sequential else self._fixed_step(index)

    def _fixed_step(self, index: int) -> int | None:
        level, step = self.judge(index - 1)
        verdict = step.verdict
        extend = self._extend(level, verdict)
        if extend and self._time_for_a_step(index):
            log.info("capacity search: %s %s; held for another step", self.load(self.key(level)), describe(verdict))
            self.levels.append(self.key(level))
            return self.levels[-1]
        held = level.steps >= MAX_STEPS_PER_LEVEL  # else left, short of values, for the next level up
        self._end(
            level,
            step,
            "decided" if verdict.state != "undecided" else "time" if extend else "held" if held else "short",
        )
        return self._next(index)

    def _sequential_step(self, index: int) -> int | None:
        users = self.levels[-1]
        if not self.settled:
            self._settle(index)
        looked = self._look(index) if self.settled else None
        last = not self._time_for_a_step(index)
        if looked is None and not last:
            self.levels.append(users)
            return users
        level, step = looked if looked is not None else self.judge(index - 1)
        state = step.verdict.state
        if state != "undecided":
            self._end(level, step, "decided")
        elif looked is not None and self.policy.leave(
            self.tried(), Tried(self.key(level), state, step.verdict.margin, "placed", step.verdict, self.margins)
        ):
            self._end(level, step, "placed")
        elif self.settled and self.next_look_s is None:  # its looks all taken (one still warming up has none yet)
            self._end(level, step, "held")
        elif self._short(level, step):
            self._end(level, step, "short")
        elif self._far_below(step.verdict):
            self._end(level, step, "passed")
        elif last:
            self._end(level, step, "time")
        else:
            self.levels.append(users)
            return users
        return self._next(index)

    def precheck(self) -> str:
        """What the first level needs to be decided (shapes/sequential.decidability) and how high the
        search may go, said before it starts."""
        if self.rate_cap is not None:
            return self._rate_precheck()
        users = self.policy.levels[0] if self.policy.levels else self.policy.start
        looks = len(self.looks) if self.sequential else 1
        line, _ = decidability(
            self.objectives, users, self.longest_judged_s - self.offset_s, self.confidence, looks=looks
        )
        top = self.policy.highest_possible()
        if top is not None:
            reach = f"it tries {top} users at most"
        elif self.budget_s is None:
            reach = "no --max-users and no -t: it doubles until a level misses, without a ceiling"
        else:  # the fastest level: a step, or a slice of warm-up and the first look
            fastest = self.step_s if not self.sequential else self.step_s + self.looks[0] + self.lag_s
            doublings = int(self.budget_s // fastest)
            most = f"up to {2 ** (doublings - 1):,} users within -t" if doublings <= 20 else "as high as -t allows"
            reach = f"no --max-users: it doubles until a level misses, {most}"
        return f"capacity search: {line}; {reach}{self._room()}"

    @property
    def longest_hold_s(self) -> float:
        """The longest a level is held: MAX_STEPS_PER_LEVEL x --step-time, whatever the policy (an
        adaptive level until a look decides it, a fixed hold's undecided level step by step)."""
        return MAX_STEPS_PER_LEVEL * self.level_s

    def _room(self) -> str:
        """The precheck's note on -t (`room_note`), for every kind of search and wherever the
        precheck is shown: the console, summary.json, the report and the web UI's LLM view."""
        return room_note(self.budget_s, self.longest_hold_s)

    def _rate_precheck(self) -> str:
        """A search in requests/s: what a level needs to be decided (values come at its rate, so a
        level below need / judged seconds cannot be met: it is passed on the levels above), and how
        high it may go."""
        need = max(values_needed(o, self.confidence) for o in self.objectives)
        judged = self.longest_judged_s - self.offset_s
        top = self.policy.highest_possible()
        reach = (
            f"it tries {self.load(top)} at most"
            if top is not None
            else "no --max-rate: it doubles until a level misses"
            + (", without a ceiling" if self.budget_s is None else ", as high as -t allows")
        )
        return (
            f"capacity search in requests/s: a level needs {need} values to be met ({self.confidence * 100:.3g}% "
            f"bounds), which a level of at most {judged:.0f}s judged gets at {need / judged:.2g} requests/s or more; "
            f"at most {self.rate_cap} requests in flight; {reach}{self._room()}"
        )
