"""The report in a real browser: headless Chromium opens report.html from disk (file://), with
its network features off, driven over the DevTools protocol (tests/cdp.py). Every chart must
have drawn marks, the console must stay free of errors, the page must request nothing but itself,
and a screenshot is saved next to the test's files.

Chromium is required: CI installs Debian's `chromium` package (.ci/run). Without it these tests
fail, they do not skip.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.cdp import check_report, find_chromium, table_boxes
from tests.helpers import run_locust, simulator
from tests.test_reports import CLASS_CHARTS, DIST_CHARTS, STEP_CHARTS, TIME_CHARTS, _steps_run

pytestmark = pytest.mark.browser


def _need_chromium() -> None:
    if find_chromium() is None:
        pytest.fail(
            "chromium is not installed: run `apt-get update && apt-get install -y chromium` "
            "(CI does it in .ci/run); the report must be checked in a real browser"
        )


def _check(html: str, tmp_path, expected: list[str]) -> dict:
    shot = str(tmp_path / "report.png")
    page = check_report(html, screenshot=shot, user_data_dir=str(tmp_path / "chromium-profile"))
    charts = {c["id"]: c for c in page["charts"]}
    for cid in expected:
        assert cid in charts, f"chart {cid} missing from the page"
    for c in page["charts"]:
        assert c["marks"] > 0, f"chart {c['id']} has no drawn data marks"
        assert c["width"] > 200 and c["height"] > 100, c
        assert c["title"].strip(), c
        assert len(c["axis_titles"]) == 2 and all(t.strip() for t in c["axis_titles"]), c
    assert page["console_errors"] == [], page["console_errors"]
    assert page["requests"] == [page["url"]], f"the page fetched more than itself: {page['requests']}"
    assert page["scripts"] == 0 and page["external"] == []
    assert page["tables"] >= 3
    with open(shot, "rb") as f:
        png = f.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000, "the screenshot is a real picture of the page"
    return page


def test_simulator_run_report_renders_offline(tmp_path):
    """A stepped run with an SLO, injected faults and scraped server metrics: every chart kind."""
    _need_chromium()
    results = str(tmp_path / "results")
    with simulator("--profile", "fixed", "--fault", "http_500=0.05", "--fault", "cut_close=0.03", "--seed", "1") as url:
        proc = run_locust(
            "--host",
            url,
            "--results-dir",
            results,
            "--run-id",
            "browser",
            "--steps",
            "4,12",
            "--step-time",
            "4s",
            "--step-warmup",
            "1s",
            "--slo",
            "ttft.p95<115ms",
            "--max-tokens-override",
            "24",
            "--seed",
            "3",
            "--server-metrics",
            url + "/metrics",
            "--server-metrics-interval",
            "1s",
            "--stop-timeout",
            "10",
            timeout=120,
        )
    html = os.path.join(results, "browser", "report.html")
    assert os.path.isfile(html), proc.stdout[-2000:] + proc.stderr[-3000:]
    # the simulator streams one token a chunk: its tokens-per-chunk chart, one bar at 100 %, is left out
    dist = [c for c in DIST_CHARTS if c != "tokens_per_chunk_hist"]
    _check(html, tmp_path, CLASS_CHARTS + TIME_CHARTS + dist + STEP_CHARTS + ["server_queue", "server_kv_cache"])
    assert (
        "Tokens per chunk: every request&#39;s chunks carried 1 token on average" in open(html, encoding="utf-8").read()
    )


def test_synthetic_large_report_renders(tmp_path):
    """Real Parquet files of a four-step run with GPU metrics: the step and server charts."""
    _need_chromium()
    _steps_run(tmp_path, n=20_000)
    from reports.build import build

    html = build(str(tmp_path))["html"]
    _check(
        html,
        tmp_path,
        CLASS_CHARTS
        + TIME_CHARTS
        + DIST_CHARTS
        + STEP_CHARTS
        + ["server_queue", "server_kv_cache", "gpu_util", "gpu_power"],
    )


def test_the_load_steps_table_fits_the_page_at_1400_px(tmp_path):
    """The widest per-step table: an SLO's three columns and an open loop's rate asked (the rates of
    a --rate-steps run put into the steps of a synthetic stepped run's summary.json). At a 1400 px
    window it ran 30 px past its box (scrollWidth 1210 against 1180), a scroll bar for two columns;
    it fits now, and its numbers are the ones the table was built from."""
    _need_chromium()
    from reports.build import build

    _steps_run(tmp_path, n=20_000)
    path = tmp_path / "summary.json"
    summary = json.loads(path.read_text())
    for step, rate in zip(summary["by_step"], (2.5, 10.0, 25.0, 40.0)):
        step["rate"] = rate
    path.write_text(json.dumps(summary))
    html = build(str(tmp_path))["html"]
    assert "<th>rate asked</th>" in open(html, encoding="utf-8").read()
    boxes = {b["heading"]: b for b in table_boxes(html, 1400, user_data_dir=str(tmp_path / "chromium-profile"))}
    steps = boxes["Load steps"]
    assert steps["scroll"] <= steps["client"], steps
