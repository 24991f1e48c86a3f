"""`walk`: the given levels (--steps) in order, each held --step-time, up to the first miss; then
halving between the highest level met and the lowest missed to within 10 %."""

from __future__ import annotations

from shapes.search.bisect import halve
from shapes.search.registry import RESOLUTION, Policy, Tried, policy


@policy("walk")
class Walk(Policy):
    def next_level(self, history: list[Tried]) -> int | None:
        given = self.walk(history)
        return given if given is not None else halve(self, history, RESOLUTION)

    def describe(self) -> str:
        return (
            f"levels {','.join(map(str, self.levels))} users in order up to the first miss, then bisecting "
            f"to {RESOLUTION:.0%}"
        )
