"""The one verdict rule of --slo: met, missed or undecided, with the evidence it rests on and its
signed margin to the threshold.

Every set of requests judged on the --slo is judged by `judge`: a load level, the whole run of a
run without levels (summary.json `slo`, which sets the exit code: plugin/exit_codes.py), each block
of summary.json (`overall.slo`, `by_class.*.slo`, ...) and the live view's window (webui/live_blocks.py).
A whole run, a block and the live window are judged on the requests sent in (the live view: ended
in) their window, every one of them counted whenever it ended; the live view judges TTFT
objectives on the first tokens that came in its window, the open streams' included.

A level of a step ramp or a capacity search is judged on one declared set of requests: those of
its steps *sent* in the level's window (after its --step-warmup, up to its end). A step ramp is
measured after the run: every request of that set counts, whenever it ended. A capacity search
decides as the run goes, at each level's cut (its end, less the time records take to reach the
master with workers: shapes.steps.Level), so its set is what was known at the cut:

- its TTFT and TTFA objectives (FIRST_TOKEN) are judged on the requests sent from the window's
  start to the cut less the objective's threshold. A request whose first token (TTFA: first answer
  token, as metrics/slo.py defines it) had come by the cut gives its exact value, whether it had
  ended or not; one that had ended in failure by the cut is a failure; every other one was still
  waiting for its token at the cut and is *censored*: its value is only known to exceed
  (cut - send), at least the threshold. The requests sent in the threshold's last seconds before
  the cut are left out, whatever their tokens did: still waiting, such a value is unknown on either
  side of the threshold, and as many are waiting as arrive in one TTFT (near the knee, TTFT /
  window of the set: above 5 %, a P95 could never be met). Leaving them out by send time alone
  keeps the set unbiased;
- its other objectives (E2E, TPOT, ITL) are judged on the requests that had ended by the cut.

`metrics.measure.Measure.in_level` and `first_tokens` compute these sets, from the records after
the run and, while the run goes, from the records so far and the streams still open
(plugin/progress.py: each is either a record or an open stream, never both). The live search, the
per-step table, summary.json (`by_step[].verdict`, `capacity`), the live view and the report all
call `judge` on those same sets, so they say the same thing.

A percentile objective (`ttft.p95<5s`) is judged with a distribution-free confidence bound: the
order statistics X(j) of the n values bracket the true percentile at the given confidence, since
the number of values below it is Binomial(n, q) whatever the distribution (the classical
order-statistic interval). The level

- *met* the objective when the upper bound is under the threshold,
- *missed* it when the lower bound is at or above the threshold,
- is *undecided* otherwise: too few values, or a percentile too close to the threshold.

A censored value takes, for the upper bound, +infinity (an upper bound that falls on one is none),
and for the lower bound and the percentile stated, its known minimum: so a level meets an
objective only if it would whatever the waiting requests turn out to be, and misses it when their
minimums alone already prove it. As a level's censored values waited at least the threshold, each
is simply a value above it. The evidence counts them (`censored`).

The percentile the verdict states, as the level's by_step distributions do, is the order statistic
X(ceil(q n)) (metrics/percentiles.py ORDER), which lies within those bounds, where the run's
interpolated percentile of a level with few values can fall below its own lower bound.

A P95 needs at least 45 values (at 90 % confidence) before it can be met at all: with fewer, the
upper bound is above the largest value. A single value above the threshold can already prove a
miss. A mean objective uses the normal approximation (mean +- z s / sqrt(n), n >= 2); with
censored values, the mean and its lower bound are taken with each at its minimum (both bound the
true ones from below), and it has no upper bound: a mean is met only when nothing was censored.
ITL gaps are pooled over requests; their bound treats gaps as independent, which they are not quite.
A level meets the SLO when it met every objective, misses it when it missed any, and is
undecided otherwise.

The margin says how far the verdict is from the threshold, signed, as a share of the threshold:
    met:       (threshold - upper bound) / threshold, > 0: the room left even at the upper bound;
    missed:    (threshold - lower bound) / threshold, <= 0: the excess even at the lower bound;
    undecided: 0: the bounds hold the threshold (or there is no upper bound), so the values cannot
               tell the statistic from it.
So its sign is the state's: a search can bisect on it, and interpolate between a level met with
+0.25 and one missed with -0.5. It is None for an objective without a value (and for one whose
deciding bound is infinite: a ttfa objective whose replies had no answer token). A verdict's margin
is its binding objective's, the smallest: every objective met, the least room; one missed, the
largest excess; otherwise 0 (None when no request gave a value: all failed, or none ended). A level with no successful request and no first token misses when requests
failed, is undecided when none ended and none is waiting, and is otherwise judged on the minimums
of the waiting ones. Everything said here of a level holds for any set `judge` is given.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from metrics.percentiles import ORDER, percentile
from metrics.schema.verdicts import ObjectiveEvidence, SloVerdict

CONFIDENCE = 0.90  # one-sided, for each bound
FIRST_TOKEN = ("ttft", "ttfa")  # judged at a cut on first tokens, the waiting ones censored
State = Literal["met", "missed", "undecided"]


# the binomial's mass is summed within this many standard deviations (and as many values) of its
# mean: beyond, it is below what float64 adds to the sums (checked against the whole sum for n up to
# 10 million and q from 0.5 to 0.9999: the same bounds); a run's pooled ITL gaps number millions, and
# every block and the live view's windows judge them
SPAN_SD = 40


def _binom_cdf(n: int, p: float) -> np.ndarray:
    """P(B <= k) for k = 0..n, B ~ Binomial(n, p), in log space (n up to millions), its mass
    summed near its mean (SPAN_SD): 0 below, 1 above."""
    half = SPAN_SD * math.sqrt(n * p * (1 - p)) + SPAN_SD
    lo, hi = max(0, int(n * p - half)), min(n, math.ceil(n * p + half))
    k = np.arange(lo, hi + 1, dtype=float)
    start = math.lgamma(n + 1) - math.lgamma(lo + 1) - math.lgamma(n - lo + 1) if lo else 0.0  # log C(n, lo)
    log_choose = start + np.concatenate([[0.0], np.cumsum(np.log(n - k[1:] + 1) - np.log(k[1:]))])
    log_pmf = log_choose + k * math.log(p) + (n - k) * math.log1p(-p)
    pmf = np.exp(log_pmf - log_pmf.max())
    cdf = np.ones(n + 1)
    cdf[:lo] = 0.0
    cdf[lo : hi + 1] = np.minimum(np.cumsum(pmf) / pmf.sum(), 1.0)
    return cdf


def order_bounds(
    values_sorted: np.ndarray, q: float, confidence: float = CONFIDENCE
) -> tuple[float | None, float | None]:
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


def judge_objective(obj, values_s, confidence: float = CONFIDENCE, censored_s=()) -> ObjectiveEvidence:
    """One objective on one level's values (seconds; NaN left out) and its censored values, each
    given by its known minimum (seconds; module doc)."""
    v = np.asarray(values_s, dtype=float)
    v = v[~np.isnan(v)]
    low = np.asarray(censored_s, dtype=float)
    c = int(low.size)
    at_min = np.sort(np.concatenate([v, low]))  # the censored values at their minimum
    n = int(at_min.size)
    if obj.stat == "mean":
        value = obj.statistic(at_min)
        if n >= 2:
            half = _z(confidence) * float(at_min.std(ddof=1)) / math.sqrt(n)
            lower, upper = value - half, (value + half if c == 0 else None)
        else:
            lower = upper = None
    else:
        # the level's percentile is the order statistic its bounds are made of (not the run's 'linear'
        # interpolation): so it always lies within them (metrics/percentiles.py)
        q = obj.percentile() / 100.0
        value = percentile(at_min, obj.percentile(), ORDER)
        value = math.nan if value is None else value
        lower, upper = order_bounds(at_min, q, confidence)
        if c:  # the upper bound with every censored value at +infinity
            upper = order_bounds(np.sort(np.concatenate([v, np.full(c, np.inf)])), q, confidence)[1]
            upper = None if upper is None or math.isinf(upper) else upper
    if upper is not None and upper < obj.threshold_s:
        state, room = "met", margin(obj.threshold_s, upper)
    elif lower is not None and lower >= obj.threshold_s:
        state, room = "missed", margin(obj.threshold_s, lower)
    else:
        state, room = "undecided", 0.0 if n else None
    ms = lambda x: None if x is None or x != x else x * 1000.0  # noqa: E731
    return ObjectiveEvidence(
        objective=obj.text,
        metric=obj.key,
        threshold_ms=round(obj.threshold_s * 1000, 9),
        value_ms=ms(value),
        lower_ms=ms(lower),
        upper_ms=ms(upper),
        samples=n,
        censored=c,
        state=state,
        margin=room,
    )


def margin(threshold_s: float, bound_s: float) -> float | None:
    """(threshold - bound) / threshold: the signed distance of the deciding bound to the threshold,
    a share of it (module doc); None for an infinite bound."""
    room = (threshold_s - bound_s) / threshold_s
    return room if math.isfinite(room) else None


def judge(
    objectives, values: dict, ok: int, failed: int, confidence: float = CONFIDENCE, censored: dict | None = None
) -> SloVerdict:
    """A level's verdict from its declared sets: `values` maps each objective's key to the values
    of its successful requests (ITL: their pooled gaps; a first-token objective at a cut: its exact
    first tokens), `censored` a first-token objective's key to the minimums of its censored values;
    `ok` and `failed` count the requests that had ended."""
    censored = censored or {}
    evidence = [judge_objective(o, values.get(o.key, ()), confidence, censored.get(o.key, ())) for o in objectives]
    states = {e.state for e in evidence}
    first = [e for e in evidence if e.metric.split(".")[0] in FIRST_TOKEN]
    tokens = any(e.samples > e.censored for e in first)  # a first token came: a request did not fail
    waiting = any(e.censored for e in first)  # their minimums may prove a miss
    margins = [e.margin for e in evidence if e.margin is not None]
    if ok == 0 and not tokens and (failed or not waiting):
        state, room = ("missed" if failed else "undecided"), None
        why = f"all {failed} requests failed" if failed else "no request ended in the window"
    elif "missed" in states:
        state, why = "missed", ""
        room = min((e.margin for e in evidence if e.state == "missed" and e.margin is not None), default=None)
    elif states == {"met"}:
        state, why, room = "met", "", min(margins)
    else:
        state, room = "undecided", 0.0
        few = [e.metric for e in evidence if e.state == "undecided" and e.upper_ms is None]
        why = f"too few values to bound {', '.join(few)}" if few else "its confidence bounds straddle the threshold"
        waiting = [
            f"{e.metric}: {e.censored} still waiting at the cut"
            for e in evidence
            if e.state == "undecided" and e.censored
        ]
        if waiting:
            why += f" ({'; '.join(waiting)})"
    return SloVerdict(
        state=state, requests=ok, failed=failed, confidence=confidence, objectives=evidence, reason=why, margin=room
    )


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


def too_few(v: SloVerdict) -> bool:
    """Undecided for want of values (no upper bound), not for being close to the threshold."""
    return v.state == "undecided" and (
        v.requests == 0 or any(e.upper_ms is None for e in v.objectives if e.state == "undecided")
    )


def held(steps: int, seconds: float) -> str:
    """'74 s measured' for a level a capacity search held longer than one step (its measured
    window, the warm-up excluded; an adaptive search's steps are 2 s slices, whose count said
    nothing: "held 42 steps" was 84 s); "" for one step."""
    return f"{seconds:.0f} s measured" if steps > 1 else ""


def judged_on(v: SloVerdict, steps: int, seconds: float) -> str:
    """What a level's verdict rests on, as every per-step table says it (the report's, the live
    view's): '165 requests', '212 requests, 74 s measured'; a first-token objective judged on other
    values than the requests that ended says so: '3 requests, ttft.p95 on 312 values, 4 still
    waiting at the cut'."""
    return ", ".join(
        [count(v.requests, "request"), *first_tokens_text(v), *([held(steps, seconds)] if steps > 1 else [])]
    )


def count(n: int, noun: str) -> str:
    """'1 request', '2 requests', '1,024 values'."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def first_tokens_text(v: SloVerdict) -> list[str]:
    """['ttft.p95 on 312 values, 4 still waiting at the cut'] for each first-token objective judged
    on other values than the requests that ended (a capacity search's level); [] otherwise."""
    return [
        f"{e.metric} on {values_text(e)}"
        for e in v.objectives
        if e.metric.split(".")[0] in FIRST_TOKEN and (e.samples != v.requests or e.censored)
    ]


def values_text(e: ObjectiveEvidence) -> str:
    """'312 values' or '312 values, 4 still waiting at the cut' (those 4 among the 312)."""
    return count(e.samples, "value") + (f", {e.censored:,} still waiting at the cut" if e.censored else "")


def margin_text(m: float | None) -> str:
    """'margin +12.5 %' (room) or 'margin -40.0 %' (excess), as every surface says it; '' for None."""
    return "" if m is None else "margin 0 %" if m == 0 else f"margin {m * 100:+.1f} %"


def describe(v: SloVerdict) -> str:
    """'met on 312 requests, margin +8.3 %; ttft.p95 4,400 ms (90 % bounds 4,100..4,800 ms, 312
    values)' for logs and tables."""
    parts = []
    for e in v.objectives:
        lo = "-" if e.lower_ms is None else f"{e.lower_ms:,.0f}"
        hi = "-" if e.upper_ms is None else f"{e.upper_ms:,.0f}"
        val = "-" if e.value_ms is None else f"{e.value_ms:,.0f}"
        conf = "" if v.confidence is None else f"{v.confidence:.0%} "  # None: read from a file without bounds
        parts.append(f"{e.metric} {val} ms ({conf}bounds {lo}..{hi} ms, {values_text(e)})")
    text = f"{v.state} on {v.requests} requests" + (f" ({v.failed} failed)" if v.failed else "")
    text += f", {margin_text(v.margin)}" if v.margin is not None else ""
    if v.reason:
        text += f": {v.reason}"
    return text + ("; " + "; ".join(parts) if parts else "")
