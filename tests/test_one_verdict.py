"""One verdict rule for --slo (metrics/verdict.py): the same requests get the same verdict and the
same signed margin whether they are judged as a load level, as a whole run (summary.json `slo`,
which sets the exit code) or as the live view's window; and that verdict is the one the
order-statistic interval gives, computed here from its definition with exact binomial sums."""

from __future__ import annotations

import math
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest

from metrics.measure import Measure, records_frame
from metrics.record import RequestRecord, rows_to_table, with_all_columns
from metrics.slo import parse_slo
from metrics.summary import summarize
from plugin import exit_codes
from shapes.steps import Level
from webui.live import LiveWindow

pytestmark = pytest.mark.unit

T0 = 1_700_000_000.0
OBJECTIVES = parse_slo("ttft.p95<200ms")
THRESHOLD_S = 0.2


def reference(
    values_s, threshold_s: float = THRESHOLD_S, q: Fraction = Fraction(95, 100), confidence: Fraction = Fraction(9, 10)
) -> dict:
    """The verdict of one percentile objective from its definition: X(j) bounds the q-quantile from
    above when P(Binomial(n, q) <= j - 1) >= confidence, X(i) from below when P(Binomial(n, q) >= i)
    >= confidence (exact sums); met when the upper bound is under the threshold, missed when the
    lower one is at or above it; the margin (threshold - deciding bound) / threshold, 0 undecided."""
    v = sorted(values_s)
    n = len(v)
    pmf = [math.comb(n, k) * q**k * (1 - q) ** (n - k) for k in range(n + 1)]
    below = [sum(pmf[: k + 1]) for k in range(n + 1)]  # P(B <= k)
    upper = next((v[j - 1] for j in range(1, n + 1) if below[j - 1] >= confidence), None)
    lower = next((v[i - 1] for i in range(n, 0, -1) if 1 - below[i - 1] >= confidence), None)
    if upper is not None and upper < threshold_s:
        state, margin = "met", (threshold_s - upper) / threshold_s
    elif lower is not None and lower >= threshold_s:
        state, margin = "missed", (threshold_s - lower) / threshold_s
    else:
        state, margin = "undecided", 0.0
    return {"state": state, "value": v[math.ceil(q * n) - 1], "lower": lower, "upper": upper, "margin": margin}


def _rows(ttfts, failed: int = 0) -> list[tuple]:
    """One request every 0.1 s from T0 + 1 with the given TTFTs, each ending 0.1 s after its first
    token, then `failed` requests that failed (HTTP 500) at their send."""
    rows = []
    for i, ttft in enumerate([*ttfts, *[None] * failed]):
        rec = RequestRecord(
            f"r{i}",
            "0",
            "chat",
            "short",
            400,
            8,
            wall_send=T0 + 1 + 0.1 * i,
            t_send=1 + 0.1 * i,
            status=200 if ttft is not None else 500,
            step=0,
        )
        if ttft is not None:
            rec.ok, rec.ttft_s, rec.e2e_s, rec.tpot_s = True, ttft, ttft + 0.1, 0.05
            rec.chunk_times, rec.n_chunks = [ttft, ttft + 0.05, ttft + 0.1], 3
            rec.output_tokens, rec.prompt_tokens, rec.tokens_source = 3, 100, "usage"
        else:
            rec.ok, rec.error = False, "http_5xx"
        rows.append(rec.as_row())
    return rows


def _three_paths(rows) -> tuple:
    """The verdict of the same requests as a load level, as a whole run and as the live window."""
    start, end = T0, T0 + 1 + 0.1 * len(rows) + 5  # every request sent and ended inside
    table = with_all_columns(rows_to_table(rows))
    level = Measure(records_frame(table), table.column("chunk_times"), OBJECTIVES).level(
        Level(0, 0, 8, T0, start, end, None)
    )
    run = summarize(rows_to_table(rows), start, end, objectives=OBJECTIVES).slo
    window = LiveWindow(OBJECTIVES, run_start=T0, windows=(end - start,))
    window.add_rows(rows)
    live = next(iter(window.snapshot(end=end)["windows"].values()))["overall"]["slo"]
    return level.verdict.model_dump(), run.model_dump(), live


@pytest.mark.parametrize(
    "ttfts",
    [
        np.random.default_rng(1).uniform(0.05, 0.15, 120),  # met: room of about a quarter
        np.random.default_rng(2).uniform(0.15, 0.35, 120),  # missed
        np.r_[np.full(114, 0.1), np.full(6, 0.3)],  # 5 % above: bounds on both sides of the threshold
        np.full(30, 0.1),  # fast, but too few values to bound a P95 from above
    ],
    ids=["met", "missed", "straddling", "too-few"],
)
def test_the_same_requests_get_one_verdict_and_margin_as_a_level_a_run_and_the_live_view(ttfts):
    level, run, live = _three_paths(_rows(ttfts, failed=3))
    assert level == run == live, (level, run, live)
    (e,) = run["objectives"]
    truth = reference(ttfts)
    assert (run["state"], e["state"]) == (truth["state"], truth["state"]) and run["passed"] == (truth["state"] == "met")
    assert math.isclose(e["value_ms"], truth["value"] * 1000)
    for key in ("lower", "upper"):
        assert (e[f"{key}_ms"] is None) == (truth[key] is None), key
        assert truth[key] is None or math.isclose(e[f"{key}_ms"], truth[key] * 1000), key
    assert math.isclose(e["margin"], truth["margin"], abs_tol=1e-12) and run["margin"] == e["margin"]
    assert (run["requests"], run["failed"], e["samples"]) == (len(ttfts), 3, len(ttfts))
    assert (e["margin"] > 0) == (truth["state"] == "met") and (e["margin"] < 0) == (truth["state"] == "missed")


def test_a_verdicts_margin_is_its_binding_objectives():
    """Two objectives: the verdict's margin is the smaller room when both are met, the larger excess
    when one is missed, 0 when one is undecided; all failed: missed without a margin."""
    both = parse_slo("ttft.p95<200ms,e2e.p95<1s")
    rows = _rows(np.full(120, 0.1))  # ttft 100 ms, e2e 200 ms: room 50 % and 80 %
    table = with_all_columns(rows_to_table(rows))
    v = (
        Measure(records_frame(table), table.column("chunk_times"), both)
        .block(np.ones(len(rows), bool), T0, T0 + 30)
        .slo
    )
    assert (
        v.state == "met"
        and [e.margin for e in v.objectives] == pytest.approx([0.5, 0.8])
        and v.margin == pytest.approx(0.5)
    )
    v = summarize(rows_to_table(_rows(np.full(120, 0.8))), T0, T0 + 30, objectives=both).slo  # ttft missed, e2e met
    assert v.state == "missed" and v.margin == pytest.approx(-3.0) and v.objectives[1].margin == pytest.approx(0.1)
    v = summarize(rows_to_table(_rows(np.full(20, 0.1))), T0, T0 + 30, objectives=both).slo
    assert v.state == "undecided" and v.margin == 0.0 and "too few values to bound ttft.p95, e2e.p95" in v.reason
    v = summarize(rows_to_table(_rows([], failed=5)), T0, T0 + 30, objectives=both).slo
    assert v.state == "missed" and v.margin is None and v.reason == "all 5 requests failed"


def test_a_runs_exit_code_follows_its_verdict():
    """met: 0, missed: 3, undecided: 6, its own code; with load levels, the capacity decides."""
    for ttfts, code in (
        (np.full(120, 0.1), exit_codes.DONE),
        (np.full(120, 0.3), exit_codes.SLO_MISSED),
        (np.full(30, 0.1), exit_codes.SLO_UNDECIDED),
    ):
        assert exit_codes.of_slo(summarize(rows_to_table(_rows(ttfts)), T0, T0 + 30, objectives=OBJECTIVES)) == code

    def capacity(users, failing):
        return SimpleNamespace(capacity=SimpleNamespace(users=users, next_failing_users=failing), slo=None)

    assert exit_codes.of_slo(capacity(8, 16)) == exit_codes.DONE
    assert exit_codes.of_slo(capacity(None, 8)) == exit_codes.SLO_MISSED
    assert exit_codes.of_slo(capacity(None, None)) == exit_codes.SLO_UNDECIDED  # no level decided
    assert exit_codes.of_slo(SimpleNamespace(capacity=None, slo=None)) == exit_codes.DONE  # no --slo


def test_the_binomial_summed_near_its_mean_gives_the_bounds_of_the_whole_sum():
    """metrics/verdict.py sums the binomial within SPAN_SD standard deviations of its mean (pooled ITL
    gaps number millions): the order statistics it picks are those of the sum over every k."""
    from metrics.verdict import _binom_cdf

    def whole(n, q):  # P(B <= k), k = 0..n, summed over every k in log space
        k = np.arange(n + 1, dtype=float)
        log_pmf = (
            np.array([math.lgamma(n + 1) - math.lgamma(x + 1) - math.lgamma(n - x + 1) for x in k])
            + k * math.log(q)
            + (n - k) * math.log1p(-q)
        )
        pmf = np.exp(log_pmf - log_pmf.max())
        return np.cumsum(pmf) / pmf.sum()

    def picks(cdf, confidence):
        above = np.nonzero(1.0 - cdf[:-1] >= confidence)[0]
        return int(np.searchsorted(cdf, confidence)), int(above.max()) if above.size else None

    for n in (1, 45, 1000, 40_000, 300_000):
        for q in (0.5, 0.95, 0.999):
            for confidence in (0.9, 0.99):
                assert picks(_binom_cdf(n, q), confidence) == picks(whole(n, q), confidence), (n, q, confidence)
