"""Capacity-search policies, one module each, registered here by name (--capacity-policy).

A policy is one class that picks the next load level from the levels tried so far and their
verdicts (`Tried`: users, state, signed margin), and says how its levels are held: `sequential`
policies end a level as soon as its verdict is decided (shapes/sequential.py), the others hold
each level a fixed --step-time (more when undecided). The mechanism that runs a level and judges
it is shapes/capacity.py's; a policy only does arithmetic on the history, so it can be tested on
a synthetic one. A new policy is one more module in this folder, decorated with `@policy(name)`
and imported by `shapes/search/__init__.py`.

Every policy reads the history the same way (`Bracket`): latency is assumed to grow with load, so
the capacity lies between the highest level met below the lowest level missed (`lo`) and that
lowest miss (`hi`); a level met implies every lower level would be met (a lower level left
undecided is passed on that evidence), and a miss implies every higher level would miss.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

# Today's resolution of the doubling and walking policies: bisect until the bracket is within 10 %.
RESOLUTION = 0.10
DEFAULT_PRECISION = 0.05  # --capacity-precision: the adaptive search's target width, a share of the answer


@dataclass(frozen=True, slots=True)
class Tried:
    """A level the search ended: its users, its verdict's state and signed margin
    (metrics/verdict.py: > 0 room left, <= 0 excess, 0 undecided, None without a value), why it
    ended (shapes/capacity.py: 'decided', 'held', 'short', 'passed', 'placed', 'time'), the verdict
    itself, and its margin resampled from its values (shapes/search/curve.Margins: what a fit of
    the curve through the levels uses; None in a synthetic history, or short of values)."""

    users: int
    state: str  # "met" | "missed" | "undecided"
    margin: float | None = None
    ended: str = "decided"
    verdict: object | None = field(default=None, compare=False, repr=False)
    margins: object | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Bracket:
    lo: int | None  # the highest level met below the lowest missed (None: none met)
    hi: int | None  # the lowest level missed (None: none missed)
    lo_margin: float | None = None
    hi_margin: float | None = None

    @property
    def width(self) -> int | None:
        return None if self.lo is None or self.hi is None else self.hi - self.lo


def bracket(history: list[Tried]) -> Bracket:
    """The highest level met below the lowest missed, and the lowest missed, with their margins."""
    missed = [t for t in history if t.state == "missed"]
    hi = min(missed, key=lambda t: t.users, default=None)
    met = [t for t in history if t.state == "met" and (hi is None or t.users < hi.users)]
    lo = max(met, key=lambda t: t.users, default=None)
    return Bracket(
        lo.users if lo else None, hi.users if hi else None, lo.margin if lo else None, hi.margin if hi else None
    )


def narrow_enough(b: Bracket, precision: float) -> bool:
    """The bracket is within `precision` of the answer (its lower end), or one user wide."""
    return b.width is not None and b.width <= max(1, math.floor(precision * b.lo))


class Policy:
    """Picks the next level (None: the search is over) from the levels ended so far, in order."""

    name: ClassVar[str] = ""
    sequential: ClassVar[bool] = False  # end a level once decided (shapes/sequential.py), not after --step-time
    describe_text: ClassVar[str] = ""

    def __init__(
        self, levels: tuple[int, ...] = (), precision: float | None = None, max_users: int | None = None, start: int = 1
    ):
        self.levels = tuple(levels)  # given levels (--steps), walked in order before narrowing
        self.precision = DEFAULT_PRECISION if precision is None else precision
        self.max_users = max_users
        self.start = start

    def next_level(self, history: list[Tried]) -> int | None:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def bound(self, users: int | None, history: list[Tried]) -> int | None:
        """A proposed level under the ceiling and not tried before; None when neither holds."""
        if users is None:
            return None
        if self.max_users is not None:
            users = min(users, self.max_users)
        return None if users in {t.users for t in history} or users < 1 else users

    def highest_possible(self) -> int | None:
        """The highest level the search may reach before it starts (None: unbounded but -t)."""
        if self.max_users is not None:
            return min(self.max_users, self.levels[-1]) if self.levels else self.max_users
        return self.levels[-1] if self.levels else None

    def walk(self, history: list[Tried]) -> int | None:
        """The next given level while none missed; None when they are walked or one missed."""
        b = bracket(history)
        if b.hi is not None:
            return None
        tried = {t.users for t in history}
        rest = [u for u in self.levels if u not in tried and (self.max_users is None or u <= self.max_users)]
        return rest[0] if rest else None

    def leave(self, history: list[Tried], current: Tried) -> bool:
        """At a look that left the current level undecided: end it now (the search's evidence
        already places what it would tell)? Only a policy that fits the curve can say so."""
        return False

    def margins(self, table, level, objectives, open_streams, verdict, need: int) -> object | None:
        """What a policy that fits the curve through the levels keeps of a level just judged (its
        records, the streams still open, its verdict, the values a met needs): Tried.margins."""
        return None

    def crossing(self, history: list[Tried]) -> dict | None:
        """The answer's interval from the curve through the levels (summary.json capacity.crossing),
        for a policy that fits one; None otherwise."""
        return None

    def floor_when_none_met(self, history: list[Tried], b: Bracket) -> int | None:
        """With no level met below the miss: the highest level left undecided below it (the bracket
        narrows from there), or None: the SLO was missed from the first level on."""
        below = [t.users for t in history if t.state == "undecided" and t.users < b.hi]
        return max(below) if below else None


POLICIES: dict[str, type[Policy]] = {}


def policy(name: str) -> Callable[[type[Policy]], type[Policy]]:
    """Register the decorated Policy subclass as --capacity-policy `name`."""

    def register(cls: type[Policy]) -> type[Policy]:
        cls.name = name
        POLICIES[name] = cls
        return cls

    return register
