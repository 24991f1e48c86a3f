"""The comparison of two measurements by bootstrap replicates: the interval of each, the interval
of their difference and whether it excludes 0. Pure: no run, no file, no Locust.

The method, as `python -m reports compare` applies it (stats/block_bootstrap.py makes the
replicates). Values are exact, computed from the per-request records as metrics/summary.py
computes them (the same window, the same `distribution` function; a load step's percentiles are
order statistics, as its by_step block's, while their bootstrap replicates below interpolate as
every scope's do). Whether a difference is beyond noise is decided by a bootstrap confidence interval of the difference (NEW - BASE), which is "significant" only when
it excludes 0.

The bootstrap resamples *time blocks*, not single requests: the measurement window (of the run,
or of a load step) is cut into K equal blocks, and each of B resamples (default 1000, seeded)
draws K blocks with replacement (multinomial weights). A statistic of a resample is the statistic
of the records in the drawn blocks, weighted by how often each block was drawn. Requests close in
time share the server's state (queue, batch), so their latencies are correlated; whole blocks keep
that correlation inside the resample and give honest (wider) intervals than resampling requests.
The same method serves every metric:

  latency percentiles  weighted quantile ('linear', as numpy) of the drawn blocks' values; values
                       are sorted once and, above 20000 values, grouped into 20000 groups of
                       consecutive ranks (the interval's precision, never the reported value)
  latency mean         weighted mean
  ITL                  every gap belongs to its request's block (gaps of one request stay together)
  throughput           completions per block by completion time, tokens per block by arrival
                       (as summary.json counts them); a resample's rate is its total over the
                       window length
  error_rate           failed / ended requests of the drawn blocks

Both runs are resampled independently; the interval is the central `confidence` range of the B
differences (percentile method).
"""

from __future__ import annotations

import math

import numpy as np

ENOUGH = 0.9  # below this share of finite replicates (too many empty resamples), no interval


def interval(reps: np.ndarray, alpha: float) -> list:
    """The central range of the finite replicates: [alpha, 100 - alpha] percentiles, or [None, None]."""
    r = reps[np.isfinite(reps)]
    return [float(x) for x in np.percentile(r, [alpha, 100 - alpha])] if r.size else [None, None]


def difference(base: np.ndarray, new: np.ndarray, alpha: float) -> tuple[list, bool]:
    """The interval of new - base over paired replicates (both runs resampled independently) and
    whether it excludes 0; no interval when fewer than ENOUGH of the differences are finite."""
    d = new - base
    d = d[np.isfinite(d)]
    if d.size < ENOUGH * len(base):
        return [None, None], False
    lo, hi = np.percentile(d, [alpha, 100 - alpha])
    return [float(lo), float(hi)], bool(lo > 0 or hi < 0)


def percent_change(a: float, b: float) -> float | None:
    """b against a in percent of |a| (0 against 0 is no change; anything against 0 is infinite)."""
    if a == 0:
        return 0.0 if b == 0 else (math.inf if b > 0 else -math.inf)
    return (b - a) / abs(a) * 100.0


# z(0.975) + z(0.80) over z(0.975): a true change this many half-widths of a 95 % interval large is
# found (its interval excludes 0) 4 times in 5
POWER_80 = (1.959964 + 0.841621) / 1.959964


def half_width(ci: list) -> float | None:
    """Half the width of an interval of a difference: the smallest change the comparison could
    have told from no change (a smaller one leaves 0 inside the interval)."""
    lo, hi = ci
    return None if lo is None or hi is None else (hi - lo) / 2


def length_for(threshold: float, detectable: float, seconds: float, power: float = POWER_80) -> float:
    """The run length at which a change of `threshold` would be found with 80 % power, from a run of
    `seconds` whose interval's half-width was `detectable`: a half-width shrinks as one over the
    square root of the requests (and time blocks) it rests on, so length grows with its square."""
    return seconds * (power * detectable / abs(threshold)) ** 2
