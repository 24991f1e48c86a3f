"""Load models against the real simulator: open-loop rates and arrival statistics (one process and
two workers), coordinated-omission-correct latency under a stalling server, step ramps and SLO exit
codes. The capacity search against a server of known capacity: tests/test_capacity_adaptive.py."""

from __future__ import annotations

import numpy as np
import pytest

from plugin import exit_codes
from tests.helpers import master_and_workers, read_results, run_locust, simulator, stop

pytestmark = [pytest.mark.process, pytest.mark.timing]  # timing against the truth or a rate: tests/conftest.py

SHORT = ("--max-tokens-override", "6")  # TTFT 0.1 s + 5 x 0.02 s: 0.2 s per request


def open_loop_run(tmp, url, run_id, rate, arrival, seconds, workers=0, extra=()):
    args = [
        "--host",
        url,
        "-t",
        f"{seconds}s",
        "--request-rate",
        str(rate),
        "--arrival",
        arrival,
        "--seed",
        "21",
        "--results-dir",
        str(tmp),
        "--run-id",
        run_id,
        "--stop-timeout",
        "10",
        *SHORT,
        *extra,
    ]
    if not workers:
        proc = run_locust(*args, timeout=seconds + 120)
        assert proc.returncode == 0, proc.stderr[-3000:]
    else:
        with master_and_workers(
            *args, expect_workers=workers, log_path=str(tmp / f"{run_id}-master.log"), worker_logs=[None] * workers
        ) as run:
            assert stop(run.master, timeout=seconds + 120) == 0, (tmp / f"{run_id}-master.log").read_text()[-3000:]
    return read_results(str(tmp), run_id)


def intended_gaps(df, summary):
    w = summary["window"]
    t = np.sort(df.loc[(df["wall_send"] >= w["start"]) & (df["wall_send"] <= w["end"]), "t_intended"].to_numpy())
    return np.diff(t)


@pytest.mark.parametrize("workers", [0, 2])
def test_open_loop_constant_rate_is_kept_with_one_and_two_workers(tmp_path, workers):
    with simulator("--profile", "fixed") as url:
        df, summary = open_loop_run(tmp_path, url, f"c{workers}", 40, "constant", 15, workers=workers)
    ol = summary["open_loop"]
    assert abs(ol["sent_per_s"] / 40 - 1) < 0.02, ol  # the total is R, not N x R
    assert df["ok"].all()
    gaps = intended_gaps(df, summary)
    assert np.allclose(gaps, 1 / 40, atol=1e-6)  # one global schedule, split, not duplicated
    assert summary["overall"]["schedule_lag_ms"]["p50"] < 5.0
    if workers:
        assert df["worker"].nunique() == 2


def test_open_loop_poisson_arrivals_across_two_workers(tmp_path):
    with simulator("--profile", "fixed") as url:
        df, summary = open_loop_run(tmp_path, url, "p2", 160, "poisson", 20, workers=2)
    gaps = intended_gaps(df, summary)
    cv = gaps.std() / gaps.mean()
    assert abs(cv - 1) < 0.05, cv
    assert abs(summary["open_loop"]["sent_per_s"] / 160 - 1) < 0.04, summary["open_loop"]  # ~3000 arrivals: sd 1.8 %


def test_gamma_burstiness_changes_the_spread_not_the_rate(tmp_path):
    with simulator("--profile", "fixed") as url:
        df, summary = open_loop_run(tmp_path, url, "g", 100, "gamma", 15, extra=("--burstiness", "0.25"))
    gaps = intended_gaps(df, summary)
    assert abs(gaps.std() / gaps.mean() - 2.0) < 0.25  # CV of a gamma with shape k is 1/sqrt(k)
    # counts of a renewal process with CV 2 over ~1,400 arrivals vary by about 5 % (1 sd)
    assert abs(summary["open_loop"]["sent_per_s"] / 100 - 1) < 0.2


def test_stalling_server_latency_from_intended_send_exceeds_actual_and_is_flagged(tmp_path):
    profile = tmp_path / "slow.yaml"
    profile.write_text("kind: fixed\nttft_s: 1.0\nitl_s: 0.02\n")
    with simulator("--profile", str(profile)) as url:
        df, summary = open_loop_run(tmp_path, url, "stall", 10, "constant", 8, extra=("--max-concurrency", "4"))
    o = summary["overall"]
    assert o["ttft_from_intended_ms"]["p50"] > o["ttft_ms"]["p50"] + 500
    assert o["e2e_from_intended_ms"]["p95"] > o["e2e_ms"]["p95"] + 500
    assert o["schedule_lag_ms"]["p50"] > 500
    assert summary["open_loop"]["behind_schedule"] is True and summary["open_loop"]["reasons"]
    assert summary["open_loop"]["capped_at"] == 4, summary["open_loop"]  # all 4 users busy: the cap, not the client


def test_step_ramp_records_steps_and_excludes_warmup(tmp_path):
    with simulator("--profile", "fixed") as url:
        proc = run_locust(
            "--host",
            url,
            "--steps",
            "2,6,12",
            "--step-time",
            "5s",
            "--step-warmup",
            "1s",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "steps",
            "--stop-timeout",
            "10",
            *SHORT,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Per step" in proc.stdout
    df, summary = read_results(str(tmp_path), "steps")
    steps = summary["by_step"]
    assert [s["users"] for s in steps] == [2, 6, 12]
    assert set(df["step"]) >= {0, 1, 2} and df["step"].max() <= 3  # a request may leave as the run stops
    rates = [s["throughput"]["requests_per_s"] for s in steps]
    assert rates[0] < rates[1] < rates[2]  # closed loop, fixed latency: throughput follows users
    for s, users in zip(steps, (2, 6, 12)):
        assert abs(s["throughput"]["requests_per_s"] / (users / 0.2) - 1) < 0.25
        start, end = s["window"]["start"], s["window"]["end"]
        in_step = df[df["step"] == s["step"]]
        assert s["requests"]["sent"] == int(((in_step["wall_send"] >= start) & (in_step["wall_send"] <= end)).sum())
        assert (in_step["wall_send"] < start).any()  # warm-up records exist but are excluded


def test_slo_miss_fails_a_headless_run_and_goodput_counts_failures(tmp_path):
    """A run's exit code follows its one verdict (metrics/verdict.py): met 0, missed 3, and 6 when
    its requests are too few to bound the percentile (a P99 of a 2 s run of one user)."""
    with simulator("--profile", "fixed") as url:
        ok = run_locust(
            "--host",
            url,
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "4s",
            "--slo",
            "ttft.p95<2s,tpot.p90<100ms",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "met",
            *SHORT,
        )
        missed = run_locust(
            "--host",
            url,
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "4s",
            "--slo",
            "ttft.p95<50ms",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "missed",
            *SHORT,
        )
        few = run_locust(
            "--host",
            url,
            "-u",
            "1",
            "-r",
            "1",
            "-t",
            "2s",
            "--slo",
            "ttft.p99<2s",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "few",
            *SHORT,
        )
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert missed.returncode == 3, missed.stderr[-2000:]
    assert few.returncode == exit_codes.SLO_UNDECIDED == 6, few.stderr[-2000:]
    _, met = read_results(str(tmp_path), "met")
    assert met["slo"]["state"] == "met" and met["slo"]["passed"] and met["overall"]["goodput"]["good_fraction"] == 1.0
    assert met["slo"]["margin"] > 0
    _, miss = read_results(str(tmp_path), "missed")
    assert (
        miss["slo"]["state"] == "missed"
        and miss["slo"]["margin"] < 0
        and miss["overall"]["goodput"]["good_fraction"] == 0.0
    )
    assert "MISSED" in missed.stdout
    _, undecided = read_results(str(tmp_path), "few")
    (e,) = undecided["slo"]["objectives"]
    # every TTFT is 0.1 s, far under 2 s, yet fewer than 230 values bound no P99 from above
    assert (
        undecided["slo"]["state"] == "undecided"
        and e["upper_ms"] is None
        and e["samples"] < 230
        and e["value_ms"] < 200
    )
    assert undecided["slo"]["margin"] == 0 and "too few values to bound ttft.p99" in few.stdout
