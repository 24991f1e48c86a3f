"""`adaptive`: probe upward geometrically (the given --steps instead, when there are any) to the
first miss, then place levels to narrow where the curve through the levels crosses the threshold,
until that crossing's interval is within ±--capacity-precision of it (or the bracket between the
highest level met and the lowest missed is within --capacity-precision).

Each level ends as soon as its verdict is decided (shapes/sequential.py), so the levels far from
the threshold cost a few seconds and the time goes to the ones near it. The probe jumps x4 past a
level whose every statistic is under FAR_UNDER of its threshold (1, 4, 16, 64 rather than 1, 2, 4,
..., 64), x2 past one nearer.

Once a level missed, the crossing (shapes/search/curve.py) is fitted through every level with
values: their margins, each resampled from its own spread, made to fall with the users and
interpolated between the two levels either side of zero. While those two are far apart (more than
SPAN x precision of the crossing) the straight line between them is not trusted (latency
bends upward at a knee, so a chord puts the crossing too low) and the next level is the crossing
kept inside the middle half of that gap, so every level at least quarters it; once they are close,
the next level goes where the crossing's interval is still open: the estimate, else an end of its
interval, away from the levels tried. A level near the knee that its looks cannot decide is left at
a look once the fit with its values places the crossing: within the precision (the search is
over), or outside that level's users (a level nearer the crossing tells more) -- 'placed'; while
probing, a level whose own draws put it under the threshold (90 % of them) is left for the next.

Without a fit (levels too short of values to have a spread), the bracket is narrowed on the
verdicts' signed margins (metrics/verdict.py): between a level met at +m_lo and one missed at m_hi,
the threshold is crossed near
    lo + (hi - lo) * m_lo / (m_lo - m_hi)
if latency grows about linearly with load there, kept inside the middle half of the bracket, and a
bracket without both margins is halved.
"""

from __future__ import annotations

import numpy as np

from shapes.search.bisect import lower_end
from shapes.search.curve import CONFIDENCE, SPAN, fit, margins, record, values_of, within
from shapes.search.doubling import probe_up
from shapes.search.registry import Bracket, Policy, Tried, bracket, narrow_enough, policy

PROBE_FACTOR = 2.0
FAR_FACTOR = 4.0  # the probe's jump past a level far under the threshold
FAR_UNDER = 0.25  # ... every statistic under this share of its threshold


def far_under(t: Tried) -> bool:
    """Every statistic of the level under FAR_UNDER of its threshold (one without values is not)."""
    objectives = getattr(t.verdict, "objectives", None)
    return bool(objectives) and all(
        e.value_ms is not None and e.value_ms <= FAR_UNDER * e.threshold_ms for e in objectives
    )


def middle_half(lo: int, hi: int, guess: float) -> int:
    """`guess` kept inside the middle half of [lo, hi] and strictly inside it."""
    width = hi - lo
    guess = min(max(guess, lo + width / 4), hi - width / 4)
    return min(max(int(round(guess)), lo + 1), hi - 1)


def interpolate(lo: int, hi: int, lo_margin: float | None, hi_margin: float | None) -> int:
    """The level where the margin crosses 0 on the line through (lo, lo_margin), (hi, hi_margin),
    kept inside the middle half of [lo, hi] (and strictly inside it); the midpoint without margins."""
    width = hi - lo
    if lo_margin is None or hi_margin is None or lo_margin <= 0 or hi_margin > 0 or lo_margin - hi_margin <= 0:
        guess = lo + width / 2
    else:
        guess = lo + width * lo_margin / (lo_margin - hi_margin)
    return middle_half(lo, hi, guess)


@policy("adaptive")
class Adaptive(Policy):
    sequential = True

    def next_level(self, history: list[Tried]) -> int | None:
        if self.levels:
            given = self.walk(history)
            if given is not None or all(t.state != "missed" for t in history):
                return given  # the given levels walked, none missed: the highest met is the answer
        else:
            top = max(history, key=lambda t: t.users, default=None)
            up = probe_up(self, history, FAR_FACTOR if top is not None and far_under(top) else PROBE_FACTOR)
            if up is not None:
                return up
        c = fit(history, self.precision)
        if self.stops(history, c):
            return None
        b = lower_end(self, history)
        placed = self.place(c, history, b)
        if placed is not None:
            return placed
        if b is None or narrow_enough(b, self.precision):
            return None
        # a level inside the bracket held to its longest and still undecided: the knee is too close
        # to call there, so the answer is narrowed below it (the met side is the one it gives)
        undecided = [t.users for t in history if t.state == "undecided" and b.lo < t.users < b.hi]
        if undecided:
            b = Bracket(b.lo, min(undecided), b.lo_margin, None)
            if narrow_enough(b, self.precision):
                return None
        return self.bound(interpolate(b.lo, b.hi, b.lo_margin, b.hi_margin), history)

    def stops(self, history: list[Tried], c) -> bool:
        """The search is over at this look: the crossing's interval (`c`, the fit through `history`) is
        within ±precision of its estimate, between levels close enough to trust the line. Looked at
        after every look, so it ends on the first narrow interval; rules asking more of the stop (a
        wider interval, two narrow looks in a row, a correction for the number of looks) were
        measured (bench/capacity_coverage.py --replay-stops, bench/RESULTS.md) and none was better."""
        return within(c, self.precision)

    def place(self, c, history: list[Tried], b: Bracket | None) -> int | None:
        """The next level from the curve's crossing (module doc), inside the bracket; None without
        a crossing between two levels, or when every place it would go was tried."""
        if c is None or c.estimate is None or c.gap is None:
            return None
        lo = b.lo if b is not None and b.lo is not None else c.below
        hi = b.hi if b is not None and b.hi is not None else c.above
        reach = self.precision * c.estimate
        if c.gap > SPAN * reach:
            guesses = [middle_half(c.below, c.above, c.estimate)]
        else:
            ends = [x for x in (c.lower, c.upper) if x is not None]
            guesses = [c.estimate, *ends, *((c.estimate + x) / 2 for x in ends)]
        tried = [t.users for t in history]
        room = max(1.0, reach / 2)  # a level this near one tried tells little more than it did
        for g in guesses:
            users = int(round(g))
            if lo < users < hi and all(abs(users - u) >= room for u in tried):
                return self.bound(users, history)
        return None

    def leave(self, history: list[Tried], current: Tried) -> bool:
        """Leave the undecided level at this look: while probing, when its own draws put it under
        the threshold at the curve's confidence (the next level up is where the answer is); once a
        level missed, when the fit with its values places the crossing within the precision, or
        outside its users. Not on its own draws alone once a level missed: a knee level left when
        its values happen to lean one way would carry that lean into the fit (in virtual time its
        intervals then held the truth 8 times in 20 at 80 %)."""
        if current.margins is None:
            return False  # its values do not tell its spread yet: the fit would place nothing by it
        above = float(np.mean(current.margins.draws > 0))
        tail = (1.0 - CONFIDENCE) / 2.0
        if bracket(history).hi is None:  # still probing: a level under the threshold is left for the next one up
            return above >= 1.0 - tail
        c = fit([*history, current], self.precision)
        if self.stops([*history, current], c):
            return True
        if c is None or c.estimate is None:
            return False
        return (c.upper is not None and current.users > c.upper) or (c.lower is not None and current.users < c.lower)

    def margins(self, table, level, objectives, open_streams, verdict, need: int):
        values = values_of(table, level, objectives, open_streams)
        return margins(values, objectives, level.users, need, verdict.state == "missed")

    def crossing(self, history: list[Tried]) -> dict | None:
        return record(fit(history, self.precision), self.precision)

    def floor_when_none_met(self, history: list[Tried], b) -> int | None:
        """With no level met below the miss: the highest level below it passed on the levels above
        it while probing (short of values: presumably met), else the highest left undecided."""
        passed = [t.users for t in history if t.ended in ("short", "passed") and t.users < b.hi]
        return max(passed) if passed else super().floor_when_none_met(history, b)

    def describe(self) -> str:
        first = (
            f"levels {','.join(map(str, self.levels))} users in order up to the first miss"
            if self.levels
            else f"probing up from {self.start} user{'s' if self.start != 1 else ''} x{PROBE_FACTOR:g} (x{FAR_FACTOR:g} "
            f"past a level far under) to the first miss"
        )
        return (
            f"{first}, then placing levels where the curve through them crosses the threshold, to within "
            f"±{self.precision:.0%} at {CONFIDENCE:.0%} confidence"
        )
