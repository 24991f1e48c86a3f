"""The capacity-search policies (--capacity-policy), one module each:

    adaptive  probe up x2 (or walk --steps) to the first miss, interpolate on the margins to
              within --capacity-precision; each level ended once decided (the default)
    walk      the given --steps in order, each held --step-time, to the first miss; halve to 10 %
    doubling  from 1 user doubling, each level held --step-time, to the first miss; halve to 10 %

Each module registers itself with ``registry.policy``; importing it here is all a new one needs.
"""

from __future__ import annotations

from . import adaptive, doubling, walk  # noqa: F401  (they register themselves)
from .registry import DEFAULT_PRECISION, POLICIES, RESOLUTION, Bracket, Policy, Tried, bracket, narrow_enough

DEFAULT = "adaptive"
NAMES: tuple[str, ...] = tuple(sorted(POLICIES))

__all__ = [
    "DEFAULT",
    "DEFAULT_PRECISION",
    "NAMES",
    "POLICIES",
    "RESOLUTION",
    "Bracket",
    "Policy",
    "Tried",
    "bracket",
    "narrow_enough",
]
