"""`doubling`: from --capacity-start users (1), doubling each level held --step-time, up to the first
miss; then halving between the highest level met and the lowest missed to within 10 %."""

from __future__ import annotations

from shapes.search.bisect import halve
from shapes.search.registry import RESOLUTION, Policy, Tried, bracket, policy


def probe_up(p: Policy, history: list[Tried], factor: float = 2.0) -> int | None:
    """The next level of an upward probe: the start, then `factor` times the highest level tried,
    up to the ceiling; None once a level missed or the ceiling was tried."""
    if bracket(history).hi is not None:
        return None
    if not history:
        return p.bound(p.start, history)
    top = max(t.users for t in history)
    if p.max_users is not None and top >= p.max_users:
        return None
    return p.bound(max(top + 1, int(round(top * factor))), history)


@policy("doubling")
class Doubling(Policy):
    def next_level(self, history: list[Tried]) -> int | None:
        up = probe_up(self, history)
        return up if up is not None else halve(self, history, RESOLUTION)

    def describe(self) -> str:
        return f"doubling from {self.start} user{'s' if self.start != 1 else ''}, then bisecting to {RESOLUTION:.0%}"
