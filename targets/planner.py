"""The replica planner: from one replica's measured capacity, the capacity of N replicas and the
replicas a target traffic needs, with what it assumes said.

A pure function of measured figures (a capacity search's met level: users, requests/min), used by
`python -m reports plan` and checked against measured replicas by bench/replicas.py
(bench/RESULTS.md "Replicas"). It assumes:

  policy      the load is spread so that no replica holds more than its share of the requests in
              flight: least-outstanding (or a balancer's least_conn). Round-robin spreads requests,
              not requests in flight, and a replica can hold more than its share for a while;
  scaling     linear: N replicas hold N times one replica's capacity, times
  efficiency  the share of that linear capacity measured on replicas (SCALING_EFFICIENCY, the
              measurement's own figure: bench/RESULTS.md). 1.0 until measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# N replicas' measured capacity over N x one replica's (bench/replicas.py, bench/RESULTS.md
# "Replicas": 2 and 4 simulator replicas spread by least-outstanding or nginx's least_conn measured
# 0.97 to 1.00 of it in users, 1.01 in requests/s)
SCALING_EFFICIENCY = 1.0


@dataclass(frozen=True)
class Assumptions:
    policy: str = "least-outstanding (no replica holds more than its share of the requests in flight)"
    scaling: str = "linear"
    efficiency: float = SCALING_EFFICIENCY

    def text(self) -> str:
        return (
            f"assumes: the load spread {self.policy}, {self.scaling} scaling at {self.efficiency:.0%} of N x one "
            "replica's capacity (measured: bench/RESULTS.md, Replicas)"
        )


def capacity_of(replicas: int, one: float, assumptions: Assumptions = Assumptions()) -> float:
    """The capacity of `replicas` replicas (users, requests/min: as `one` is given) from one replica's."""
    if replicas < 1:
        raise ValueError("replicas must be at least 1")
    return one * (1 if replicas == 1 else replicas * assumptions.efficiency)


def replicas_for(target: float, one: float, assumptions: Assumptions = Assumptions()) -> int:
    """The fewest replicas whose capacity (`capacity_of`) holds `target` (same unit as `one`)."""
    if not one > 0 or not target > 0:
        raise ValueError("target and one replica's capacity must be above 0")
    n = max(1, math.ceil(target / (one * assumptions.efficiency)))
    while n > 1 and capacity_of(n - 1, one, assumptions) >= target:
        n -= 1
    while capacity_of(n, one, assumptions) < target:
        n += 1
    return n
