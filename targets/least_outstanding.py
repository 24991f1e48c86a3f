"""least-outstanding: the backend with the fewest requests of this load process in flight (a tie
goes to the next after the last pick, so equal backends still take turns). Each load process counts
its own requests: with several workers, each balances its share, as a client-side balancer would."""

from __future__ import annotations

from collections.abc import Sequence

from targets.registry import Policy, policy


@policy("least-outstanding", order=1)
class LeastOutstanding(Policy):
    def __init__(self, n: int):
        super().__init__(n)
        self.last = -1

    def pick(self, session_id: str, outstanding: Sequence[int], up: Sequence[bool]) -> int:
        n, best, fewest = self.n, -1, 0
        for k in range(1, n + 1):
            i = (self.last + k) % n
            if up[i] and (best < 0 or outstanding[i] < fewest):
                best, fewest = i, outstanding[i]
        if best < 0:  # every backend down: the next one, which fails fast
            best = (self.last + 1) % n
        self.last = best
        return best
