"""The percentiles: exact, missing values (NaN) left out, by one of two definitions.

Every percentile the suite reports comes from here: summary.json's distributions, the SLO
statistics of a run or a step and of each request (metrics/slo.py), the client's own health
figures (plugin/health_monitor.py) and the report's per-time-bin latencies (reports/series.py).

LINEAR, numpy's 'linear' interpolation (`vllm bench serve`'s), is the metric contract: the run's,
each class's and each window's percentiles. ORDER, the order statistic X(ceil(q n)) (numpy
'inverted_cdf': the smallest value with at least q % of the values at or below it), is a load
level's (summary.json by_step, its verdict, the live per-step rows): a level's verdict brackets its
percentile with order-statistic confidence bounds X(i) <= X(ceil(q n)) <= X(j), which hold for any
confidence of 50 % or more (metrics/verdict.py), so the level's percentile always lies within its
bounds, where 'linear' interpolates between X(n-1) and X(n) of two values to a P95 below its lower
bound X(2).
"""

from __future__ import annotations

import numpy as np

LINEAR = "linear"  # the metric contract (module doc)
ORDER = "inverted_cdf"  # a load level's: an order statistic, within its verdict's bounds (module doc)


def percentile(values, q: float, method: str = LINEAR) -> float | None:
    """The q-th percentile (0..100) of `values`; None when no value is there."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    return float(np.percentile(v, q, method=method)) if v.size else None


def percentiles(values, qs, method: str = LINEAR) -> list[float] | None:
    """Several percentiles of the same values (one sort); None when no value is there."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    return [float(x) for x in np.percentile(v, list(qs), method=method)] if v.size else None


def percentile_by_group(values, groups, n_groups: int, q: float) -> np.ndarray:
    """The q-th percentile of the values of each group 0..n_groups-1 (NaN for a group with no
    value), as `percentile` computes it for each group alone; vectorised: one sort for all groups."""
    v = np.asarray(values, dtype=float)
    g = np.asarray(groups, dtype=np.int64)
    keep = ~np.isnan(v) & (g >= 0) & (g < n_groups)
    v, g = v[keep], g[keep]
    out = np.full(n_groups, np.nan)
    if v.size == 0:
        return out
    order = np.lexsort((v, g))  # by group, then value
    v, g = v[order], g[order]
    counts = np.bincount(g, minlength=n_groups)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    has = counts > 0
    h = (q / 100.0) * (counts[has] - 1)  # numpy 'linear': rank h between floor(h) and floor(h) + 1
    lo = np.floor(h).astype(np.int64)
    hi = np.minimum(lo + 1, counts[has] - 1)
    a, b = v[starts[has] + lo], v[starts[has] + hi]
    t, diff = h - lo, b - a
    out[has] = np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)  # numpy's own interpolation, to the bit
    return out


def mean(values) -> float | None:
    """The mean of `values`, NaN left out; None when no value is there."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    return float(v.mean()) if v.size else None
