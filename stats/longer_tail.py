"""Resampled values of a statistic given, on each side of its point value, the reach of the longer
of its two tails.

A resampling of one sample spreads the statistic as that sample allows, and for a high percentile
of correlated, right-skewed values (the first tokens of one load level) that spread leans with the
sample: a window that missed the server's worst queue reads low, and its resamples, drawn from the
same calm values, reach little higher; one that caught a long queue reads high with a long upper
tail. So the tail towards the truth is the short one just when it matters. The longer tail says how
far the statistic moves, and both sides are given it: quantile by quantile, the draw at quantile u
lies at least as far from the point as the draw at 1 - u does on the other side.
"""

from __future__ import annotations

import numpy as np


def longer_tail(draws: np.ndarray, point: float) -> np.ndarray:
    """`draws` (1-D, in their order: each keeps its rank) moved away from `point` where the other
    side reaches farther: the k-th smallest becomes the lower of itself and `point` minus the k-th
    largest's distance above it, and the k-th largest the higher of itself and `point` plus the k-th
    smallest's distance below it. Never narrower than `draws`; symmetric tails are left as they are."""
    d = np.asarray(draws, dtype=float) - float(point)
    rank = np.argsort(d, kind="stable")
    s = d[rank]  # ascending
    mirror = -s[::-1]  # the other side's deviation at the same distance from the middle
    lower = np.arange(s.size) < s.size / 2
    out = np.empty_like(d)
    out[rank] = np.where(lower, np.minimum(s, mirror), np.maximum(s, mirror))
    return float(point) + out
