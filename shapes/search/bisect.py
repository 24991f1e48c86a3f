"""Narrowing a bracket by halving it: the step the walking and doubling policies end with."""

from __future__ import annotations

from shapes.search.registry import Bracket, Policy, Tried, bracket, narrow_enough


def lower_end(policy: Policy, history: list[Tried]) -> Bracket | None:
    """The bracket to narrow: (highest met, lowest missed), or from the highest level left
    undecided below the miss when none met (the SLO may hold there: the search narrows from it);
    None when nothing is bracketed (no miss yet, or missed from the first level on)."""
    b = bracket(history)
    if b.hi is None:
        return None
    if b.lo is None:
        lo = policy.floor_when_none_met(history, b)
        return None if lo is None else Bracket(lo, b.hi, None, b.hi_margin)
    return b


def halve(policy: Policy, history: list[Tried], resolution: float) -> int | None:
    """The midpoint of the bracket, until it is within `resolution`; None when it is, or when the
    midpoint was tried and left undecided (the knee is too close to call there)."""
    b = lower_end(policy, history)
    if b is None or narrow_enough(b, resolution):
        return None
    return policy.bound((b.lo + b.hi) // 2, history)
