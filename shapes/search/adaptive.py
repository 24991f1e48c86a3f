"""`adaptive`: probe upward geometrically (the given --steps instead, when there are any) to the
first miss, then narrow between the highest level met and the lowest missed by interpolating on
their signed margins, until the bracket is within --capacity-precision of the answer.

Each level ends as soon as its verdict is decided (shapes/sequential.py), so the levels far from
the threshold cost a few seconds and the time goes to the ones near it.

The margin of a level is the room its verdict's deciding bound leaves to the threshold (met, > 0)
or the excess it proves (missed, <= 0), a share of the threshold (metrics/verdict.py). Between a
level met at +m_lo and one missed at m_hi, the threshold is crossed near
    lo + (hi - lo) * m_lo / (m_lo - m_hi)
if latency grows about linearly with load there; as it often does not (a queue's knee), the guess
is kept inside the middle half of the bracket, so every level narrows it to at most 3/4 of its
width whichever way it is decided (a halving's worst case is 1/2, its typical case no better), and
a bracket without both margins is halved.
"""

from __future__ import annotations

from shapes.search.bisect import lower_end
from shapes.search.doubling import probe_up
from shapes.search.registry import Bracket, Policy, Tried, narrow_enough, policy

PROBE_FACTOR = 2.0


def interpolate(lo: int, hi: int, lo_margin: float | None, hi_margin: float | None) -> int:
    """The level where the margin crosses 0 on the line through (lo, lo_margin), (hi, hi_margin),
    kept inside the middle half of [lo, hi] (and strictly inside it); the midpoint without margins."""
    width = hi - lo
    if lo_margin is None or hi_margin is None or lo_margin <= 0 or hi_margin > 0 or lo_margin - hi_margin <= 0:
        guess = lo + width / 2
    else:
        guess = lo + width * lo_margin / (lo_margin - hi_margin)
    guess = min(max(guess, lo + width / 4), hi - width / 4)
    return min(max(int(round(guess)), lo + 1), hi - 1)


@policy("adaptive")
class Adaptive(Policy):
    sequential = True

    def next_level(self, history: list[Tried]) -> int | None:
        if self.levels:
            given = self.walk(history)
            if given is not None or all(t.state != "missed" for t in history):
                return given  # the given levels walked, none missed: the highest met is the answer
        else:
            up = probe_up(self, history, PROBE_FACTOR)
            if up is not None:
                return up
        b = lower_end(self, history)
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

    def floor_when_none_met(self, history: list[Tried], b) -> int | None:
        """With no level met below the miss: the highest level below it passed on the levels above
        it while probing (short of values: presumably met), else the highest left undecided."""
        passed = [t.users for t in history if t.ended in ("short", "passed") and t.users < b.hi]
        return max(passed) if passed else super().floor_when_none_met(history, b)

    def describe(self) -> str:
        first = (
            f"levels {','.join(map(str, self.levels))} users in order up to the first miss"
            if self.levels
            else f"probing up from {self.start} user{'s' if self.start != 1 else ''} x{PROBE_FACTOR:g} to the first miss"
        )
        return f"{first}, then interpolating on the margins to within {self.precision:.0%}"
