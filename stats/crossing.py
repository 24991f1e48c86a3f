"""Where a curve measured at a few points crosses zero, with an interval from resampling each point.

The points are load levels (x: users) and, at each, draws of a signed margin from the level's own
sampling uncertainty (> 0: under a threshold, <= 0: over it). The curve is assumed to fall with x
(monotone: more load, less room) and to be locally linear between two neighbouring levels. Per
draw (one margin per level), the margins are made non-increasing in x by weighted isotonic
regression (pool adjacent violators, each level weighted by the inverse variance of its draws),
and the crossing is where the line through the last level above zero and the first at or below it
meets zero: below the lowest level when that one is already at or below zero (-inf), above the
highest when none is (+inf). The interval is the central `confidence` share of the draws'
crossings, open on a side where more than its tail share of draws fell beyond the levels tried.

Each level's draws are independent of the others' (its own requests), so the spread of the
crossings is the resampling spread of the whole fit; what it does not hold is the error of the
model itself (a curve that bends between two neighbouring levels), which is why a caller asks for
neighbours close together before it trusts a narrow interval (`Crossing.gap`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Crossing:
    estimate: float | None  # the crossing of the fit through the levels' point margins (None: not bracketed)
    lower: float | None  # the interval's ends (None: open on that side, beyond the levels tried)
    upper: float | None
    confidence: float
    below: int | None  # the neighbouring levels the point crossing lies between
    above: int | None

    @property
    def gap(self) -> int | None:
        """Users between the two levels the crossing is interpolated between."""
        return None if self.below is None or self.above is None else self.above - self.below


def decreasing(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted isotonic (non-increasing) regression of `y` (pool adjacent violators)."""
    values: list[float] = []
    weights: list[float] = []
    counts: list[int] = []
    for yi, wi in zip(y.tolist(), w.tolist(), strict=True):
        values.append(yi)
        weights.append(wi)
        counts.append(1)
        while len(values) > 1 and values[-2] < values[-1]:  # a rise: pool the last two blocks
            v, w_, k = values.pop(), weights.pop(), counts.pop()
            values[-1] = (values[-1] * weights[-1] + v * w_) / (weights[-1] + w_)
            weights[-1] += w_
            counts[-1] += k
    return np.repeat(values, counts)


def zero_of(x: np.ndarray, m: np.ndarray) -> tuple[float, int | None]:
    """(where the piecewise-linear non-increasing `m` over sorted `x` first reaches 0, the index of
    the first point at or below 0): (-inf, 0) below the first point, (+inf, None) past the last."""
    at = np.nonzero(m <= 0)[0]
    if at.size == 0:
        return math.inf, None
    i = int(at[0])
    if i == 0:
        return -math.inf, 0
    x0, x1, m0, m1 = x[i - 1], x[i], m[i - 1], m[i]
    return float(x0 + (x1 - x0) * m0 / (m0 - m1)), i


def crossing(x, point, draws, confidence: float = 0.8, span: float = math.inf) -> Crossing:
    """The crossing of zero by margins measured at levels `x` (any order, distinct): `point` their
    point margins (L,), `draws` resampled margins (B, L), one column per level. A draw whose two
    neighbouring levels are more than `span` x its crossing apart does not trust the line between
    them: it counts as anywhere between them (the level below for the interval's lower end, the
    one above for its upper end), which assumes only that the margin falls."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x)
    x = x[order]
    point = np.asarray(point, dtype=float)[order]
    draws = np.asarray(draws, dtype=float)[:, order]
    var = draws.var(axis=0)
    w = 1.0 / np.maximum(var, 1e-12)
    estimate, i = zero_of(x, decreasing(point, w))
    below = above = None
    if i is not None and i > 0:
        below, above = int(x[i - 1]), int(x[i])
    lows, highs = [], []
    for row in draws:
        z, j = zero_of(x, decreasing(row, w))
        if j is not None and j > 0 and x[j] - x[j - 1] > span * z:
            lows.append(x[j - 1])
            highs.append(x[j])
        else:
            lows.append(z)
            highs.append(z)
    tail = (1.0 - confidence) / 2.0
    b = len(lows)
    # order statistics, not interpolation: a draw may be infinite
    lo = np.sort(lows)[int(math.floor(tail * b))]
    hi = np.sort(highs)[max(0, int(math.ceil((1.0 - tail) * b)) - 1)]
    return Crossing(
        None if not math.isfinite(estimate) else estimate,
        float(lo) if math.isfinite(lo) else None,
        float(hi) if math.isfinite(hi) else None,
        confidence,
        below,
        above,
    )
