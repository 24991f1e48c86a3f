"""One verdict per load level: met, missed or undecided, with the evidence it rests on.

A level of a step ramp or a capacity search is judged on one declared set of requests: those
*sent* in the level's window (after its --step-warmup, up to its end) and, for a capacity search,
which decides as the run goes, that had ended by the level's cut (its end, less the time records
take to reach the master with workers: shapes.steps.Level). The live search, the per-step table,
summary.json (`by_step[].verdict`, `capacity`), the live view and the report all call `judge` on
that same set, so they say the same thing.

A percentile objective (`ttft.p95<5s`) is judged with a distribution-free confidence bound: the
order statistics X(j) of the n values bracket the true percentile at the given confidence, since
the number of values below it is Binomial(n, q) whatever the distribution (the classical
order-statistic interval). The level

- *met* the objective when the upper bound is under the threshold,
- *missed* it when the lower bound is at or above the threshold,
- is *undecided* otherwise: too few values, or a percentile too close to the threshold.

The percentile the verdict states, as the level's by_step distributions do, is the order statistic
X(ceil(q n)) (metrics/percentiles.py ORDER), which lies within those bounds, where the run's
interpolated percentile of a level with few values can fall below its own lower bound.

A P95 needs at least 45 values (at 90 % confidence) before it can be met at all: with fewer, the
upper bound is above the largest value. A single value above the threshold can already prove a
miss. A mean objective uses the normal approximation (mean +- z s / sqrt(n), n >= 2). ITL gaps are
pooled over requests; their bound treats gaps as independent, which they are not quite.
A level meets the SLO when it met every objective, misses it when it missed any, and is
undecided otherwise. A level with no successful request misses when requests failed and is
undecided when none ended.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from metrics.percentiles import ORDER, percentile
from metrics.schema.verdicts import LevelVerdict, ObjectiveEvidence

CONFIDENCE = 0.90  # one-sided, for each bound
State = Literal["met", "missed", "undecided"]


def _binom_cdf(n: int, p: float) -> np.ndarray:
    """P(B <= k) for k = 0..n, B ~ Binomial(n, p), in log space (n up to millions)."""
    k = np.arange(n + 1, dtype=float)
    log_choose = np.concatenate([[0.0], np.cumsum(np.log(n - k[1:] + 1) - np.log(k[1:]))])
    log_pmf = log_choose + k * math.log(p) + (n - k) * math.log1p(-p)
    pmf = np.exp(log_pmf - log_pmf.max())
    return np.minimum(np.cumsum(pmf) / pmf.sum(), 1.0)


def order_bounds(values_sorted: np.ndarray, q: float, confidence: float = CONFIDENCE) -> tuple[float | None, float | None]:
    """(lower, upper) one-sided confidence bounds of the q-quantile (0 < q < 1) from sorted values:
    order statistics X(i) <= true quantile <= X(j), each with probability >= `confidence`; None
    where the values are too few for a bound on that side."""
    n = len(values_sorted)
    if n == 0:
        return None, None
    cdf = _binom_cdf(n, q)  # B = number of values below the true quantile
    # upper: smallest j (1-based) with P(X(j) >= quantile) = P(B <= j - 1) >= confidence
    j = int(np.searchsorted(cdf, confidence)) + 1
    upper = float(values_sorted[j - 1]) if j <= n else None
    # lower: largest i with P(X(i) <= quantile) = P(B >= i) = 1 - P(B <= i - 1) >= confidence
    above = np.nonzero(1.0 - cdf[:-1] >= confidence)[0]  # entry i - 1 holds P(B >= i), i = 1..n
    i = int(above.max()) + 1 if above.size else 0
    lower = float(values_sorted[i - 1]) if i >= 1 else None
    return lower, upper


def _z(confidence: float) -> float:
    """The standard normal quantile (bisection on erf: no scipy needed)."""
    lo, hi = 0.0, 10.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < confidence:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def judge_objective(obj, values_s, confidence: float = CONFIDENCE) -> ObjectiveEvidence:
    """One objective on one level's values (seconds; NaN left out)."""
    v = np.asarray(values_s, dtype=float)
    v = np.sort(v[~np.isnan(v)])
    n = int(v.size)
    if obj.stat == "mean":
        value = obj.statistic(v)
        if n >= 2:
            half = _z(confidence) * float(v.std(ddof=1)) / math.sqrt(n)
            lower, upper = value - half, value + half
        else:
            lower = upper = None
    else:
        # the level's percentile is the order statistic its bounds are made of (not the run's 'linear'
        # interpolation): so it always lies within them (metrics/percentiles.py)
        value = percentile(v, obj.percentile(), ORDER)
        value = math.nan if value is None else value
        lower, upper = order_bounds(v, obj.percentile() / 100.0, confidence)
    if upper is not None and upper < obj.threshold_s:
        state = "met"
    elif lower is not None and lower >= obj.threshold_s:
        state = "missed"
    else:
        state = "undecided"
    ms = lambda x: None if x is None or x != x else x * 1000.0  # noqa: E731
    return ObjectiveEvidence(objective=obj.text, metric=obj.key, threshold_ms=round(obj.threshold_s * 1000, 9),
                             value_ms=ms(value), lower_ms=ms(lower), upper_ms=ms(upper), samples=n, state=state)  # fmt: skip


def judge(objectives, values: dict, ok: int, failed: int, confidence: float = CONFIDENCE) -> LevelVerdict:
    """A level's verdict from its declared set: `values` maps each objective's key to the values
    of its successful requests (ITL: their pooled gaps); `ok` and `failed` count the set."""
    evidence = [judge_objective(o, values.get(o.key, ()), confidence) for o in objectives]
    states = {e.state for e in evidence}
    if ok == 0:
        state = "missed" if failed else "undecided"
        why = f"all {failed} requests failed" if failed else "no request ended in the level's window"
    elif "missed" in states:
        state, why = "missed", ""
    elif states == {"met"}:
        state, why = "met", ""
    else:
        state = "undecided"
        few = [e.metric for e in evidence if e.state == "undecided" and e.upper_ms is None]
        why = f"too few values to bound {', '.join(few)}" if few else "its confidence bounds straddle the threshold"
    return LevelVerdict(state=state, requests=ok, failed=failed, confidence=confidence, objectives=evidence, reason=why)


def level_values(objectives, ok_frame, itl_s) -> dict:
    """Each objective's values from a level's successful requests (a frame of record columns) and
    their pooled ITL gaps: the input of `judge`. A successful reply without an answer token misses
    a ttfa objective (metrics/slo.py), so its ttfa counts as infinite."""
    from metrics.slo import METRICS

    out = {}
    for o in objectives:
        if o.metric == "itl":
            out[o.key] = np.asarray(itl_s, dtype=float)
        elif o.metric == "ttfa":
            out[o.key] = np.nan_to_num(ok_frame["ttfa_s"].to_numpy(dtype=float), nan=np.inf)
        else:
            out[o.key] = ok_frame[METRICS[o.metric]].to_numpy(dtype=float)
    return out


def too_few(v: LevelVerdict) -> bool:
    """Undecided for want of values (no upper bound), not for being close to the threshold."""
    return v.state == "undecided" and (v.requests == 0 or any(e.upper_ms is None for e in v.objectives if e.state == "undecided"))


def held(steps: int) -> str:
    """'held 2 steps' for a level a capacity search extended to decide it; "" for one step."""
    return f"held {steps} steps" if steps > 1 else ""


def judged_on(requests: int, steps: int) -> str:
    """What a level's verdict rests on, as every per-step table says it (the report's, the live
    view's): '165 requests', '212 requests, held 2 steps'."""
    return f"{requests:,} requests" + (f", {held(steps)}" if steps > 1 else "")


def describe(v: LevelVerdict) -> str:
    """'met: ttft.p95 4,400 ms (90 % bounds 4,100..4,800 ms, 312 requests)' for logs and tables."""
    parts = []
    for e in v.objectives:
        lo = "-" if e.lower_ms is None else f"{e.lower_ms:,.0f}"
        hi = "-" if e.upper_ms is None else f"{e.upper_ms:,.0f}"
        val = "-" if e.value_ms is None else f"{e.value_ms:,.0f}"
        parts.append(f"{e.metric} {val} ms ({v.confidence:.0%} bounds {lo}..{hi} ms, {e.samples} values)")
    text = f"{v.state} on {v.requests} requests" + (f" ({v.failed} failed)" if v.failed else "")
    if v.reason:
        text += f": {v.reason}"
    return text + ("; " + "; ".join(parts) if parts else "")
