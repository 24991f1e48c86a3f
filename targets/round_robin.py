"""round-robin: each backend in turn, skipping those out of the spread (the common load
balancer's default, and AIPerf's only spread over several URLs)."""

from __future__ import annotations

from collections.abc import Sequence

from targets.registry import Policy, next_up, policy


@policy("round-robin", order=0)
class RoundRobin(Policy):
    def __init__(self, n: int):
        super().__init__(n)
        self.turn = -1

    def pick(self, session_id: str, outstanding: Sequence[int], up: Sequence[bool]) -> int:
        self.turn = next_up((self.turn + 1) % self.n, up)
        return self.turn
