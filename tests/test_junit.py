"""--junit of a run: one test case per run check and per SLO objective, a failure carrying the
measured value, in agreement with the exit code and summary.json."""

from __future__ import annotations

import os

import pytest

from metrics.schema import as_summary
from plugin import exit_codes
from reports.junit import run_cases
from tests.helpers import read_results, run_locust, simulator
from tests.test_ci_recipes import junit_cases

pytestmark = pytest.mark.process


def test_a_missed_slo_and_failed_requests_are_failed_cases_with_the_measured_values(tmp_path):
    junit = str(tmp_path / "ci" / "junit.xml")  # its folder is made
    with simulator("--profile", "fixed", "--fault", "http_500=0.25", "--seed", "3") as host:
        proc = run_locust(
            "--headless",
            "--host",
            host,
            "-u",
            "3",
            "-r",
            "3",
            "-t",
            "6s",
            "--max-tokens-override",
            "8",
            "--slo",
            "ttft.p95<1ms,e2e.p50<60s",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "j",
            "--stop-timeout",
            "5",
            "--junit",
            junit,
            timeout=90,
        )
    assert proc.returncode == exit_codes.SLO_MISSED, proc.stderr[-3000:]
    _, summary = read_results(str(tmp_path), "j")
    cases = junit_cases(junit)
    assert list(cases) == [
        "complete",
        "results written",
        "requests",
        "client within accuracy limits",
        "ttft.p95<1ms",
        "e2e.p50<60s",
    ], cases
    ttft, e2e = summary["slo"]["objectives"]
    assert ttft["state"] == "missed" and e2e["state"] == "met", summary[
        "slo"
    ]  # the run's one verdict (metrics/verdict.py)
    lower, upper = (f"{x:,.1f}" if x is not None else "-" for x in (ttft["lower_ms"], ttft["upper_ms"]))
    assert cases["ttft.p95<1ms"][0] == (
        f"missed: ttft.p95 = {ttft['value_ms']:,.1f} ms, threshold 1.0 ms (bounds {lower}..{upper} "
        f"ms on {ttft['samples']:,} values, margin {ttft['margin'] * 100:+.1f} %)"
    )
    assert cases["e2e.p50<60s"][0] is None and cases["e2e.p50<60s"][1].startswith("e2e.p50 = ")
    failed = summary["records"]["by_error"]["http_5xx"]
    assert (
        failed > 0
        and cases["requests"][0] == f"{failed} of {summary['records']['total']} requests failed: http_5xx {failed}"
    )
    assert cases["complete"][0] is None and cases["results written"][0] is None
    assert f"junit: {junit} (6 checks, 2 failed)" in proc.stderr


def test_an_incomplete_run_a_bound_client_and_a_missed_capacity_are_failed_cases(tmp_path):
    """The cases a short real run cannot be made to show on demand, from its summary changed."""
    with simulator("--profile", "fixed") as host:
        proc = run_locust(
            "--headless",
            "--host",
            host,
            "-u",
            "1",
            "-r",
            "1",
            "-t",
            "3s",
            "--max-tokens-override",
            "4",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "k",
            "--stop-timeout",
            "5",
            timeout=90,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, data = read_results(str(tmp_path), "k")
    data["complete"], data["reason"] = False, "worker w1 lost mid-run: at least 3 requests lost with it"
    data["client_bound"] = {"bound": True, "advice": "this load needs about 3 worker processes"}
    data["capacity"] = {"slo": "ttft.p95<1ms", "users": None, "sentence": "ttft.p95<1ms is missed already at 1 user"}
    cases = {c.name: c.failure for c in run_cases(as_summary(data), ["requests.parquet"])}
    assert (
        cases["complete"]
        == "the run did not do what was asked: worker w1 lost mid-run: at least 3 requests lost with it"
    )
    assert cases["results written"] == "not written: requests.parquet"
    assert cases["client within accuracy limits"] == "client bound: this load needs about 3 worker processes"
    assert cases["ttft.p95<1ms"] == "ttft.p95<1ms is missed already at 1 user"
    assert os.path.exists(os.path.join(str(tmp_path), "k", "summary.json"))
