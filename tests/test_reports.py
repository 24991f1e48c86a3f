"""reports/: build, show and compare on real runs against the simulator, and on real Parquet files.

Three short headless runs (module fixture): two of the same seeded workload against simulators of
the same `fixed` profile, and one against a profile whose time to first token is 20 % longer.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import types
from concurrent.futures import ThreadPoolExecutor
from html import escape as html_escape

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.helpers import ROOT, run_locust, simulator
from tests.test_truth import SHORT_MIX

# A warm-up excludes the first wave (connections opening, the first server-metrics scrape).
# Replies of varied length and users spawned over 2 s: streams do not move in lock-step, so one
# scheduling hiccup on a busy machine touches a few requests, not a whole wave of them.
RUN_ARGS = ["-u", "20", "-r", "10", "-t", "12s", "--warmup", "3s", "--seed", "7", "--stop-timeout", "10"]
TIME_CHARTS = [
    "ttft_over_time",
    "tpot_over_time",
    "e2e_over_time",
    "requests_over_time",
    "tokens_over_time",
    "concurrency_over_time",
    "errors_over_time",
]
CLASS_CHARTS = ["ttft_by_class", "tpot_by_class", "itl_by_class", "e2e_by_class"]
DIST_CHARTS = ["output_tokens_hist", "tokens_per_chunk_hist", "itl_hist", "ttft_cdf", "e2e_cdf"]
STEP_CHARTS = ["step_requests", "step_tokens", "step_ttft"]


def reports_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "reports", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def _locust(results: str, run_id: str, host: str, *extra: str) -> subprocess.CompletedProcess:
    proc = run_locust("--host", host, "--results-dir", results, "--run-id", run_id, *RUN_ARGS, *extra, timeout=120)
    assert os.path.isfile(os.path.join(results, run_id, "summary.json")), proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """base and same: the fixed profile, same seed; slow: the fixed profile with TTFT x 1.2."""
    results = str(tmp_path_factory.mktemp("results"))
    spec = os.path.join(results, "short-replies.yaml")
    with open(spec, "w") as f:
        f.write(SHORT_MIX.format(templates=os.path.join(ROOT, "workloads", "templates.jsonl")))
    with open(os.path.join(ROOT, "simulator", "profiles", "fixed.yaml")) as f:
        profile = yaml.safe_load(f)
    profile["ttft_s"] = profile["ttft_s"] * 1.2
    slow_profile = os.path.join(results, "fixed-slow-prefill.yaml")
    with open(slow_profile, "w") as f:
        yaml.safe_dump(profile, f)
    out = {"results": results}

    def metrics(url):
        return ["--workload", spec, "--server-metrics", url + "/metrics", "--server-metrics-interval", "1s"]

    # the three runs side by side, each with a simulator of its own (its /metrics counts its run
    # alone), during the module's first test, a timing test: these six processes run at the normal
    # CPU policy, every other test's at SCHED_IDLE (tests/conftest.py)
    with (
        simulator("--profile", "fixed") as base,
        simulator("--profile", "fixed") as same,
        simulator("--profile", slow_profile) as slow,
        ThreadPoolExecutor(3) as pool,
    ):
        started = {
            name: pool.submit(_locust, results, name, url, *metrics(url))
            for name, url in (("base", base), ("same", same), ("slow", slow))
        }
        out["base_proc"], out["same_proc"] = started["base"].result(), started["same"].result()
        started["slow"].result()
    for name in ("base", "same", "slow"):
        out[name] = os.path.join(results, name)
    return out


def charts_in(html: str) -> list[str]:
    return re.findall(r'<svg class="chart" data-chart="([^"]+)"', html)


# ---------------------------------------------------------------------------------------------
# build


@pytest.mark.process
# timing: the module's runs (the `runs` fixture) are made as this test, the first to use them,
# starts; their TTFT (x 1.2 told apart) needs the CPU. The tests after it read the results.
@pytest.mark.timing
def test_report_built_at_the_end_of_the_run(runs):
    proc = runs["base_proc"]
    log = proc.stdout + proc.stderr
    html = os.path.join(runs["base"], "report.html")
    assert os.path.isfile(html) and os.path.isfile(os.path.join(runs["base"], "report.md"))
    assert f"report: {html}" in log, "the run logs one line with the report's path"


@pytest.mark.process
def test_report_has_every_chart_and_the_contract(runs):
    path = runs["base"]
    with open(os.path.join(path, "report.html"), encoding="utf-8") as f:
        html = f.read()
    with open(os.path.join(path, "summary.json")) as f:
        summary = json.load(f)
    found = charts_in(html)
    # a clean run of the simulator (one token in every chunk) without a failure: those two charts
    # would say nothing and are left out, one line each (tests/test_report_layout.py)
    quiet = {
        "errors_over_time": "No failed request: no chart of failures over time.",
        "tokens_per_chunk_hist": "Tokens per chunk: every request&#39;s chunks carried 1 token on average",
    }
    if summary["overall"]["requests"]["failed"]:
        quiet.pop("errors_over_time")
    for cid in CLASS_CHARTS + TIME_CHARTS + DIST_CHARTS + ["server_queue", "server_kv_cache"]:
        if cid in quiet:
            assert cid not in found and quiet[cid] in html, cid
        else:
            assert cid in found, f"chart {cid} missing"
    assert len(found) == len(set(found))
    # every chart: a title and two axis titles with units
    for svg in re.findall(r'<svg class="chart".*?</svg>', html, flags=re.S):
        assert re.search(r'class="title">[^<]+<', svg)
        axis = re.findall(r'class="axis-title"[^>]*>([^<]*)<', svg)
        assert len(axis) == 2 and all(axis), axis
    # offline: no script, no external reference of any kind, a CSP that forbids fetches
    assert "<script" not in html.lower()
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', html, flags=re.I)
    assert "@import" not in html and "url(" not in html
    assert "default-src 'none'" in html
    # header, definitions, tables
    for text in ("base", "sim-model", summary["definitions"]["ttft"][:40], "Metric definitions", "Failures", "overall"):
        assert text in html
    run = json.load(open(os.path.join(path, "run.json")))
    assert run["host"] in html
    # the report's table shows summary.json's numbers
    p95 = summary["overall"]["ttft_ms"]["p95"]
    assert f"{p95:,.0f}" in html
    md = open(os.path.join(path, "report.md"), encoding="utf-8").read()
    assert "| overall |" in md and f"{p95:,.0f}" in md and "Metric definitions" in md


@pytest.mark.process
def test_show_prints_the_summary_table(runs):
    proc = reports_cli("show", runs["base"])
    assert proc.returncode == 0, proc.stderr
    assert "LLM results" in proc.stdout and "overall" in proc.stdout
    summary = json.load(open(os.path.join(runs["base"], "summary.json")))
    assert f"{summary['overall']['ttft_ms']['p95']:,.0f}" in proc.stdout


@pytest.mark.process
def test_build_and_show_errors_are_one_line(tmp_path):
    proc = reports_cli("build", str(tmp_path / "nope"))
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
    (tmp_path / "empty").mkdir()
    proc = reports_cli("show", str(tmp_path / "empty"))
    assert proc.returncode == 2 and "requests.parquet" in proc.stderr


# ---------------------------------------------------------------------------------------------
# compare


@pytest.mark.process
def test_compare_same_setup_passes(runs):
    for base, new in (("base", "same"), ("same", "base")):
        out = os.path.join(runs["results"], f"cmp-{base}-{new}")
        proc = reports_cli(
            "compare", runs[base], runs[new], "--fail-on", "ttft.p95>+10%,output_tokens_per_s<-5%", "--out", out
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "no regression" in proc.stdout
        result = json.load(open(os.path.join(out, "compare.json")))
        assert result["regression"] is False and len(result["rules"]) == 2
        assert os.path.isfile(os.path.join(out, "compare.md"))


@pytest.mark.process
def test_compare_slower_prefill_fails_naming_the_metric(runs):
    # the median: a 20 % slower prefill moves every first token, while the three runs side by side on
    # two cores put a few percent of one run's first tokens tens of ms late, enough for a P95's block
    # bootstrap to straddle 0 in some runs
    proc = reports_cli("compare", runs["base"], runs["slow"], "--fail-on", "ttft.p50>+10%")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REGRESSION: ttft.p50" in proc.stdout
    assert "FAIL  ttft.p50>+10%" in proc.stdout
    # written into NEW by default
    result = json.load(open(os.path.join(runs["slow"], "compare.json")))
    (rule,) = result["rules"]
    assert rule["failed"] and rule["significant"] and rule["change"] > 10
    md = open(os.path.join(runs["slow"], "compare.md")).read()
    assert "REGRESSION: ttft.p50" in md
    # a throughput rule does not trip: closed loop, same users, throughput barely moves
    proc = reports_cli("compare", runs["base"], runs["slow"], "--fail-on", "output_tokens_per_s<-20%")
    assert proc.returncode == 0, proc.stdout


@pytest.mark.process
def test_compare_refuses_runs_of_different_loads_or_workloads_naming_them(runs, tmp_path):
    """A copy of `same` whose run.json says 40 users and another workload: refused with one line
    naming both differences (exit 2, nothing written); --allow-different compares them, the
    differences first. The old compare reported them with `warnings: []`."""
    other = str(tmp_path / "other")
    shutil.copytree(runs["same"], other)
    info_path = os.path.join(other, "run.json")
    info = json.load(open(info_path))
    users = info["options"]["num_users"]
    info["options"]["num_users"] = 40
    info["workload"]["hash"] = "f" * 64
    json.dump(info, open(info_path, "w"))
    proc = reports_cli("compare", runs["base"], other)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"users {users} (base) vs kind closed, users 40 (new)" in line and "workload:" in line
    assert "--allow-different" in line and not os.path.exists(os.path.join(other, "compare.json"))
    proc = reports_cli("compare", runs["base"], other, "--allow-different", "--resamples", "200")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("DIFFERENT workload:"), proc.stdout[:300]
    result = json.load(open(os.path.join(other, "compare.json")))
    assert len(result["differences"]) == 2
    md = open(os.path.join(other, "compare.md")).read()
    assert md.split("\n")[2].startswith("> **The runs measured different things**")
    # runs of the same setup (the same server on a fresh free port) compare without a word
    assert reports_cli("compare", runs["base"], runs["same"], "--resamples", "200").returncode == 0


@pytest.mark.process
def test_compare_values_equal_the_summary(runs):
    from reports.compare import compare

    result = compare(runs["base"], runs["same"], resamples=200)
    summary = json.load(open(os.path.join(runs["same"], "summary.json")))
    scopes = {s["scope"]: {m["metric"]: m for m in s["metrics"]} for s in result["scopes"]}
    assert set(scopes) == {"overall", *summary["by_class"]}
    for scope, block in [("overall", summary["overall"]), *summary["by_class"].items()]:
        for metric in ("ttft", "tpot", "itl", "e2e"):
            for stat in ("mean", "p50", "p90", "p95", "p99"):
                assert scopes[scope][f"{metric}.{stat}"]["new"] == pytest.approx(block[f"{metric}_ms"][stat], rel=1e-9)
        for name in ("requests_per_s", "output_tokens_per_s", "total_tokens_per_s"):
            assert scopes[scope][name]["new"] == pytest.approx(block["throughput"][name], rel=1e-12)
        r = block["requests"]
        assert scopes[scope]["error_rate"]["new"] == pytest.approx(r["failed"] / (r["ok"] + r["failed"]) * 100)
    # every interval holds its own delta
    for s in result["scopes"]:
        for m in s["metrics"]:
            if m["ci"][0] is not None:
                assert m["ci"][0] <= m["ci"][1]


@pytest.mark.process
@pytest.mark.parametrize(
    "rule, words",
    [
        ("ttft>+10%", "name a statistic"),
        ("ttft.p97>+10%", "cannot read rule 'ttft.p97>+10%'"),
        ("ttft.p95 > 10", "give a unit"),
        ("output_tokens_per_s<-5ms", "ms applies to latencies only"),
        ("latency.p95>+10%", "cannot read rule"),
        ("ttft.p95=+10%", "cannot read rule"),
        ("nosuchclass.ttft.p95>+10%", "'nosuchclass' is not a request class"),
    ],
)
def test_bad_rule_is_one_line_exit_2(runs, rule, words):
    proc = reports_cli("compare", runs["base"], runs["same"], "--fail-on", f"ttft.p95>+10%,{rule}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: --fail-on")
    assert words in proc.stderr
    assert "e.g." in proc.stderr or "classes and steps" in proc.stderr


@pytest.mark.process
def test_class_qualified_and_absolute_rules(runs, tmp_path):
    """...and each rule's change is written the same way in the console, compare.md and JUnit: with
    its unit, a share's change in points (one formatter; the console and compare.md wrote '+12.34%'
    and a bare '+3.21' where JUnit wrote '+12.34 %' and '+3.21 ms')."""
    from tests.test_ci_recipes import junit_cases

    rules = ("short.ttft.p50>+10ms", "long.e2e.p99>+50%", "error_rate>+5pp")
    junit = str(tmp_path / "junit.xml")
    proc = reports_cli(
        "compare", runs["base"], runs["slow"], "--fail-on", ",".join(rules), "--out", str(tmp_path), "--junit", junit
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REGRESSION: short.ttft.p50" in proc.stdout
    assert "long.e2e" not in proc.stdout.split("REGRESSION:")[1]
    md, cases = (tmp_path / "compare.md").read_text(), junit_cases(junit)
    units = {"short.ttft.p50>+10ms": r" ms", "long.e2e.p99>+50%": r" %", "error_rate>+5pp": r" pp"}
    for rule in rules:
        change = re.search(r", change ([^;]+);", cases[rule][0] or cases[rule][1]).group(1)
        assert re.fullmatch(r"[+-][\d,.]+" + units[rule], change), (rule, change)
        assert f"  {rule}: {change} (" in proc.stdout, proc.stdout
        assert f"| `{rule}` | {change} |" in md, md


def test_bootstrap_quantiles_equal_brute_force_resampling():
    """boot_quantiles gives exactly numpy's percentile of the explicitly resampled blocks."""
    from stats.block_bootstrap import boot_quantiles

    rng = np.random.default_rng(3)
    values = np.sort(rng.lognormal(0, 1, 3000))
    blocks = rng.integers(0, 12, values.size)
    weights = rng.multinomial(12, np.full(12, 1 / 12), size=40).astype(float)
    got = boot_quantiles(values, blocks, weights, [50, 90, 95, 99])
    for b in range(weights.shape[0]):
        rep = np.repeat(
            np.arange(values.size), weights[b, blocks].astype(int)
        )  # each value as often as its block was drawn
        want = np.percentile(values[rep], [50, 90, 95, 99])
        np.testing.assert_allclose(got[b], want, rtol=1e-12)


def test_bootstrap_identical_runs_are_not_significant(tmp_path):
    """The same records as base and new: every difference is 0, nothing is significant."""
    from bench.report_scale import synth_table, write_run
    from reports.compare import compare

    t0 = 1_700_000_000.0
    table = synth_table(4000, seed=5, t0=t0, duration=120, steps=(4, 8))
    write_run(str(tmp_path / "a"), table, t0, 120, steps=(4, 8), slo="ttft.p95<200ms")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    result = compare(str(tmp_path / "a"), str(tmp_path / "b"), resamples=300)
    keys = {s["scope"] for s in result["scopes"]}
    assert {"overall", "short", "medium", "long", "step:0", "step:1"} <= keys
    for s in result["scopes"]:
        for m in s["metrics"]:
            assert m["delta"] in (0, 0.0, None)
            assert not m["significant"], (s["scope"], m)


# ---------------------------------------------------------------------------------------------
# real parquet files: steps, SLO, capacity, server metrics, a missing summary, a failing build


def _steps_run(folder, n=6000, seed=2, slow=1.0):
    from bench.report_scale import synth_table, write_run

    t0 = 1_700_000_000.0
    steps = (5, 20, 50, 80)
    table = synth_table(n, seed=seed, t0=t0, duration=240, steps=steps, slow=slow)
    summary = write_run(str(folder), table, t0, 240, steps=steps, slo="ttft.p95<150ms")
    ts = np.repeat(t0 + np.arange(0, 241, 5.0), 3)
    metric = np.tile(
        ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"], ts.size // 3
    )
    value = np.where(metric == "vllm:kv_cache_usage_perc", 0.4, 12.0)
    pq.write_table(
        pa.table(
            {
                "timestamp": ts,
                "source": ["http://sim/metrics"] * ts.size,
                "metric": metric,
                "labels": ["{}"] * ts.size,
                "value": value,
                "raw_metric": metric,
            }
        ),
        os.path.join(folder, "server_metrics.parquet"),
    )
    gpu = np.repeat(t0 + np.arange(0, 241, 1.0), 2)  # two GPUs read every second (--gpu-telemetry)
    n = gpu.size
    pq.write_table(
        pa.table(
            {
                "timestamp": gpu,
                "gpu": ["0", "1"] * (n // 2),
                "name": ["H200"] * n,
                "utilization_pct": np.full(n, 87.0),
                "memory_used_mib": np.full(n, 1e4),
                "memory_total_mib": np.full(n, 1.4e5),
                "power_w": np.full(n, 300.0),
                "sm_clock_mhz": np.full(n, 1980.0),
                "energy_j": np.full(n, np.nan),
            }
        ),
        os.path.join(folder, "gpu_telemetry.parquet"),
    )
    return summary


@pytest.mark.process
def test_steps_slo_capacity_and_server_metrics(tmp_path):
    from reports.build import build

    summary = _steps_run(tmp_path)
    assert summary.by_step and summary.capacity.sentence
    paths = build(str(tmp_path))
    html = open(paths["html"], encoding="utf-8").read()
    found = charts_in(html)
    for cid in (
        CLASS_CHARTS
        + TIME_CHARTS
        + DIST_CHARTS
        + STEP_CHARTS
        + ["server_queue", "server_kv_cache", "gpu_util", "gpu_power"]
    ):
        assert cid in found, cid
    step_ttft = re.search(r'data-chart="step_ttft".*?</svg>', html, flags=re.S).group(0)
    assert "SLO ttft.p95 &lt; 150 ms" in step_ttft and "capacity:" in step_ttft
    assert html_escape(summary.capacity.sentence) in html
    md = open(paths["md"], encoding="utf-8").read()
    # judged per level: the capacity is the run's answer, no verdict pooled over the steps
    assert "**Capacity:**" in md and "### Load steps" in md and "### SLO" not in md and summary.slo is None
    shown = reports_cli("show", str(tmp_path)).stdout
    assert "step" in shown.lower() and summary.capacity.sentence in shown


@pytest.mark.process
def test_compare_energy_and_cost_per_token_when_both_runs_have_gpu_figures(tmp_path, capsys):
    """Two step runs with GPU figures (2 GPUs at 300 W, 2.0 per GPU-hour; the second run's
    replies slower): compare puts summary.json's energy per token and cost per million tokens side
    by side, for the run and each level; against a run without GPU figures it says which run has
    them instead of leaving them out."""
    import pandas as pd

    from core.files import write_json
    from metrics.gpu import gpu_section
    from reports.compare import compare, run_compare

    summaries = {}
    for name, slow, gpu in (("a", 1.0, True), ("b", 1.3, True), ("c", 1.0, False)):
        summary = _steps_run(tmp_path / name, slow=slow)
        if gpu:
            readings = pd.read_parquet(tmp_path / name / "gpu_telemetry.parquet")
            summary.gpu = gpu_section(summary, readings, source="nvidia-smi", price=2.0)
            write_json(str(tmp_path / name / "summary.json"), summary.model_dump())
        summaries[name] = summary
    result = compare(str(tmp_path / "a"), str(tmp_path / "b"), resamples=100)
    gpu = result["gpu"]
    assert gpu["note"] == "" and [s["scope"] for s in gpu["scopes"]] == [
        "overall",
        "step:0",
        "step:1",
        "step:2",
        "step:3",
    ]
    a, b = summaries["a"].gpu, summaries["b"].gpu
    for scope, fa, fb in zip(gpu["scopes"], [a.overall, *a.by_step], [b.overall, *b.by_step]):
        rows = {r["figure"]: r for r in scope["rows"]}
        assert set(rows) == {
            "joules_per_output_token",
            "joules_per_token",
            "cost_per_million_output_tokens",
            "cost_per_million_tokens",
        }
        for key, r in rows.items():
            assert (r["base"], r["new"]) == (getattr(fa, key), getattr(fb, key)) and r["base"] > 0
            assert r["delta"] == pytest.approx(r["new"] - r["base"])
    assert run_compare(str(tmp_path / "a"), str(tmp_path / "b"), resamples=100) == 0
    out = capsys.readouterr().out
    assert "energy and cost per token" in out and "J/token" in out
    md = open(tmp_path / "b" / "compare.md", encoding="utf-8").read()
    assert "### Energy and cost per token" in md and "| cost/M tokens |" in md
    one = compare(str(tmp_path / "a"), str(tmp_path / "c"), resamples=100)["gpu"]
    assert one["scopes"] == [] and one["note"].startswith("only the base run has GPU figures"), one
    assert compare(str(tmp_path / "c"), str(tmp_path / "c"), resamples=100)["gpu"] is None


def test_build_without_summary_json(tmp_path):
    from reports.build import build

    _steps_run(tmp_path, n=2000)
    os.remove(tmp_path / "summary.json")
    html = open(build(str(tmp_path))["html"], encoding="utf-8").read()
    assert "summary.json was missing" in html
    assert "ttft_over_time" in charts_in(html)


def test_a_failed_build_logs_and_keeps_the_results(tmp_path, caplog):
    import reports.plugin

    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "requests.parquet").write_bytes(b"PAR1 not really parquet")
    (folder / "summary.json").write_text("{}")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    run = types.SimpleNamespace(writer=types.SimpleNamespace(path=str(folder), not_written=[]))
    with caplog.at_level(logging.ERROR, logger="llm.reports"):
        reports.plugin.Reports().run_finished(run=run, summary={})
    assert any("could not build the report" in r.getMessage() for r in caplog.records)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_in_flight_equals_brute_force(tmp_path):
    """The vectorised in-flight mean and peak per bin against a direct count on a fine grid."""
    from bench.report_scale import synth_table, write_run
    from reports import series as S
    from runfolder import reading as D

    t0 = 1_700_000_000.0
    write_run(
        str(tmp_path),
        synth_table(600, seed=9, t0=t0, duration=60, steps=(3,), error_rate=0.05),
        t0,
        60,
        steps=(3,),
        slo="",
    )
    run = D.load_run(str(tmp_path))
    grid = S.time_grid(run)
    mean, peak = S.in_flight(run, grid)
    send = run.df["wall_send"].to_numpy()
    finish = send + np.nan_to_num(run.df["e2e_s"].to_numpy(), nan=0.0)
    for i in range(grid.n):  # a few bins, each checked on a fine grid
        a, b = grid.edges[i], grid.edges[i + 1]
        ts = np.linspace(a, b, 4001)[:-1] + (b - a) / 8000
        counts = ((send[None, :] <= ts[:, None]) & (finish[None, :] > ts[:, None])).sum(axis=1)
        assert mean[i] == pytest.approx(counts.mean(), abs=0.05 * max(1, counts.mean()))
        assert peak[i] >= counts.max()


def test_build_is_fast_on_a_large_run(tmp_path):
    """100k records with ~50 chunks each: the report builds in seconds (bench/report_scale.py does 1M)."""
    from bench.report_scale import synth_table, write_run
    from reports.build import build

    t0 = 1_700_000_000.0
    write_run(str(tmp_path), synth_table(100_000, seed=4, t0=t0, duration=1800), t0, 1800)
    t = (
        time.process_time()
    )  # its own CPU time (threads included): other processes' share of a loaded machine is not its cost
    html = open(build(str(tmp_path))["html"], encoding="utf-8").read()
    elapsed = time.process_time() - t
    assert elapsed < 10, f"build took {elapsed:.1f}s of CPU for 100k records"
    assert len(html) < 2_000_000, "what is drawn is binned: the page stays small"
    assert "row-group sample" in html


def test_rule_fails_when_new_run_has_no_successful_request(tmp_path, capsys):
    """A new run where every request failed has no TTFT at all: a ttft rule must not pass it."""
    from bench.report_scale import synth_table, write_run
    from reports.compare import run_compare

    t0 = 1_700_000_000.0
    write_run(
        str(tmp_path / "a"), synth_table(3000, seed=1, t0=t0, duration=60, steps=(4, 8)), t0, 60, steps=(4, 8), slo=""
    )
    write_run(
        str(tmp_path / "b"),
        synth_table(3000, seed=2, t0=t0, duration=60, steps=(4, 8), error_rate=1.0),
        t0,
        60,
        steps=(4, 8),
        slo="",
    )
    rc = run_compare(str(tmp_path / "a"), str(tmp_path / "b"), "step1.ttft.p95>+10%,error_rate>+1pp", resamples=200)
    out = capsys.readouterr().out
    assert rc == 1
    assert "REGRESSION: step1.ttft.p95, error_rate" in out
    assert "no successful request" in out


def test_client_bound_warning_and_turns_in_report_and_compare(tmp_path, capsys):
    """summary.json's client_bound (plugin/health.py) surfaces as a warning in both tools."""
    from bench.report_scale import synth_table, write_run
    from core.files import write_json
    from reports.build import build
    from reports.compare import run_compare

    t0 = 1_700_000_000.0
    for name in ("a", "b"):
        summary = write_run(
            str(tmp_path / name), synth_table(2000, seed=1, t0=t0, duration=60, steps=(4,)), t0, 60, steps=(4,), slo=""
        )
    summary = summary.with_sections(
        client_bound={
            "bound": True,
            "contended": False,
            "workers": [{"worker": "local", "cpu_p95": 99.0, "samples": [1] * 900}],
            "advice": "this load needs about 2 worker processes",
        },
        by_turn={"1": summary.overall, "2": summary.by_class["short"]},  # conversations (metrics/summary.py)
    )
    write_json(str(tmp_path / "b" / "summary.json"), summary.model_dump())
    html = open(build(str(tmp_path / "b"))["html"], encoding="utf-8").read()
    assert "client bound (out of CPU)" in html and "about 2 worker processes" in html
    assert "By conversation turn" in html
    assert run_compare(str(tmp_path / "a"), str(tmp_path / "b"), "ttft.p95>+10%", resamples=200) == 0
    assert "warning: new run: The load generator was client bound" in capsys.readouterr().out


def test_the_client_warning_is_said_once_and_no_advice_contradicts_it(tmp_path):
    """A step run whose client was late while idle (contended) and so inaccurate: the report says
    the client's warning once, and the knee's diagnosis refers to it (the old report said it three
    times: the warning, inside the diagnosis' sentence and in its evidence) without advice of its
    own; the console table says it once too."""
    from core.files import write_json
    from metrics.console_table import format_table
    from reports.build import build

    summary = _steps_run(tmp_path)
    advice = (
        "No worker ran out of CPU, but some were late while idle: other processes on their machines took the CPU. "
        "Run the load generator on a quieter machine for exact timings."
    )  # plugin/health_board.py's
    summary = summary.with_sections(
        client_bound={
            "bound": False,
            "contended": True,
            "inaccurate": True,
            "advice": advice,
            "workers": [{"worker": "local", "contended": True, "inaccurate": True}],
        }
    )
    summary.diagnosis = None  # the report diagnoses from the folder's server metrics and this client_bound
    write_json(str(tmp_path / "summary.json"), summary.model_dump())
    paths = build(str(tmp_path))
    md = open(paths["md"], encoding="utf-8").read()
    body = md.split("<details>")[0]  # the summary.json sections shown as they are come after
    assert body.count(advice) == 1 and f"The load generator's machine was contended: {advice}" in body, body
    assert body.count("other processes") == 1  # the warning's opening does not repeat its advice
    assert "**Why the knee is there:**" in body and "see its warning" in body and "add workers" not in md
    html = open(paths["html"], encoding="utf-8").read()
    assert html.count(html_escape(advice)) <= 2 and "add workers" not in html  # the warning; client_bound's table
    from metrics.diagnosis import diagnose_levels

    summary.diagnosis = diagnose_levels(
        summary.by_step, summary.capacity, None, summary.client_bound
    )  # no server metrics
    table = format_table(summary)
    assert summary.diagnosis.kind == "client inaccurate" and "see its warning" in summary.diagnosis.sentence
    assert table.count(advice) == 1 and "add workers" not in table, table


# ---------------------------------------------------------------------------------------------
# summary.json as a typed contract; the report's figures are the summary's


def _small_run(folder, error_rate=0.05, slo="", steps=(4, 8), n=2000):
    from bench.report_scale import synth_table, write_run

    t0 = 1_700_000_000.0
    return write_run(
        str(folder),
        synth_table(n, seed=3, t0=t0, duration=60, steps=steps, error_rate=error_rate),
        t0,
        60,
        steps=steps,
        slo=slo,
    )


@pytest.mark.process
@pytest.mark.parametrize("version, words", [(None, "no schema_version"), (7, "schema_version 7")])
def test_a_summary_of_another_schema_is_refused_in_one_line(tmp_path, version, words):
    _small_run(tmp_path)
    path = tmp_path / "summary.json"
    data = json.loads(path.read_text())
    if version is None:
        del data["schema_version"]
    else:
        data["schema_version"] = version
    path.write_text(json.dumps(data))
    for command in ("build", "show"):
        proc = reports_cli(command, str(tmp_path))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.startswith(f"error: {path}: ") and proc.stderr.count("\n") == 1, proc.stderr
        assert words in proc.stderr
    proc = reports_cli("compare", str(tmp_path), str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and str(path) in proc.stderr


@pytest.mark.process
def test_a_summary_with_a_wrong_field_names_it(tmp_path):
    _small_run(tmp_path)
    path = tmp_path / "summary.json"
    data = json.loads(path.read_text())
    data["overall"]["requests"]["ok"] = "many"
    path.write_text(json.dumps(data))
    proc = reports_cli("show", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"{path}: overall.requests.ok: 'many' must be a whole number" in proc.stderr


def test_summary_json_has_null_never_nan_and_reads_back_equal(tmp_path):
    """Every request failed: no latency at all. The file says null, and reads back as the model."""
    from metrics.schema import load_summary

    summary = _small_run(tmp_path, error_rate=1.0, slo="ttft.p95<100ms")
    text = (tmp_path / "summary.json").read_text()
    constants = []  # NaN, Infinity, -Infinity written as JSON values (the definitions' prose may say "NaN")
    data = json.loads(text, parse_constant=constants.append)
    assert constants == []
    assert data["schema_version"] == 2
    assert data["overall"]["ttft_ms"] == {
        "count": 0,
        "mean": None,
        "min": None,
        "p50": None,
        "p90": None,
        "p95": None,
        "p99": None,
        "p99.9": None,
        "max": None,
    }
    slo = data["overall"]["slo"]  # a step run: judged per level, the pooled figures in overall
    assert slo["objectives"][0]["value_ms"] is None and slo["passed"] is False and data["slo"] is None
    assert load_summary(str(tmp_path / "summary.json")) == summary


def test_failure_table_shows_the_summary_numbers(tmp_path):
    """Counts and shares come from summary.json (records.by_error, each block's requests), not
    from a second count over the records."""
    from reports.build import build

    summary = _small_run(tmp_path, error_rate=0.05)
    overall = summary.overall.requests
    assert summary.records.by_error and overall.failed > 0
    md = open(build(str(tmp_path))["md"], encoding="utf-8").read()
    table = md.split("### Failures\n\n")[1].split("\n\n")[0].splitlines()[2:]  # the rows, below the header
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in table}
    assert set(rows) == set(summary.records.by_error)
    for name, cells in rows.items():
        assert cells[1] == f"{summary.records.by_error[name]:,}"
        assert cells[2] == f"{overall.count(name):,}"
        assert cells[3] == f"{overall.count(name) / overall.ended * 100:,.2f}"
        shown = dict(part.rsplit(" ", 1) for part in cells[4].split(", ") if part)
        assert shown == {c: str(b.requests.count(name)) for c, b in summary.by_class.items() if b.requests.count(name)}


def test_slo_values_print_rounded(tmp_path):
    """The console table and both report files show an SLO's measured value to 0.1 ms."""
    from bench.report_scale import synth_table, write_run
    from metrics.console_table import format_table
    from reports.build import build

    t0 = 1_700_000_000.0  # a run without load levels: one run-wide verdict
    summary = write_run(
        str(tmp_path), synth_table(3000, seed=2, t0=t0, duration=60, steps=(5,)), t0, 60, steps=(), slo="ttft.p95<150ms"
    )
    (verdict,) = summary.slo.objectives
    assert verdict.value_ms != round(verdict.value_ms, 1)  # the raw value has more digits
    table = format_table(summary)
    word = {"met": "met", "missed": "MISSED", "undecided": "undecided"}[verdict.state]
    assert f"SLO ttft.p95<150ms: {word} (measured {verdict.value_ms:,.1f} ms, threshold 150.0 ms; 90% bounds " in table
    paths = build(str(tmp_path))
    for path in paths.values():
        text = open(path, encoding="utf-8").read()
        assert f"{verdict.value_ms:,.1f}" in text
        assert not re.search(r"\d\.\d{4,} ?ms", re.sub(r"<svg.*?</svg>", "", text, flags=re.S)), path


def test_throughput_charts_end_without_a_spike(tmp_path):
    """A last time bin a few milliseconds wide would divide a completion or two by almost nothing
    (86 or 1,611 requests/s over a real 1-2): it joins the bin before."""
    from bench.report_scale import write_run
    from metrics.record import RequestRecord, rows_to_table
    from reports import series as S
    from runfolder import reading as D

    t0 = 1_700_000_000.0
    records = [
        RequestRecord(
            f"r{i}",
            "w",
            "chat",
            "short",
            10,
            2,
            t_send=0.0,
            wall_send=t0 + 9.75 + i * 0.5,
            status=200,
            ok=True,
            ttft_s=0.25,
            e2e_s=0.5,
            prompt_tokens=10,
            output_tokens=2,
            n_chunks=2,
            chunk_times=[0.25, 0.5],
        ).as_row()
        for i in range(40)
    ]
    records.append(
        RequestRecord(
            "last",
            "w",
            "chat",
            "short",
            10,
            2,
            t_send=0.0,
            wall_send=t0 + 29.504,
            status=200,
            ok=True,
            ttft_s=0.25,
            e2e_s=0.5,
            prompt_tokens=10,
            output_tokens=2,
            n_chunks=2,
            chunk_times=[0.25, 0.5],
        ).as_row()
    )  # ends 4 ms after a bin edge
    write_run(str(tmp_path), rows_to_table(records), t0, 30, steps=(), slo="")
    run = D.load_run(str(tmp_path))
    grid = S.time_grid(run)
    assert grid.width == 1.0 and grid.end_s == pytest.approx(30.004)
    assert grid.n == 30 and grid.widths[-1] == pytest.approx(1.004)  # merged, not a 4 ms bin of its own
    ot = S.over_time(run, grid)
    assert ot["requests_per_s"][11:29].tolist() == [2.0] * 18  # two completions a second
    assert ot["requests_per_s"][-1] == pytest.approx(3 / 1.004)  # two, and the last one, over 1.004 s (not 1 over 4 ms)
    assert ot["output_tokens_per_s"][-1] == pytest.approx(6 / 1.004)
    assert ot["count"].sum() == 41  # every completion still counted


@pytest.mark.parametrize(
    "span, n, last", [(30.004, 30, 1.004), (30.4, 30, 1.4), (30.6, 31, 0.6), (30.0, 30, 1.0), (0.5, 1, 1.0)]
)
def test_time_grid_last_bin_is_at_least_half_a_bin(span, n, last):
    from reports.series import grid_for

    grid = grid_for(100.0, span)
    assert grid.n == n and grid.widths[-1] == pytest.approx(last)
    assert grid.edges[0] == 100.0 and grid.edges[-1] == pytest.approx(100.0 + max(1.0, span))
    # every time of the span falls in one bin; the end in the last
    t = 100.0 + np.linspace(0, max(1.0, span), 1001)
    idx = grid.index(t)
    assert (idx >= 0).all() and idx[-1] == n - 1 and (np.diff(idx) >= 0).all()
    assert grid.index(np.array([99.0, 100.0 + max(1.0, span) + 0.01, np.nan])).tolist() == [-1, -1, -1]


@pytest.mark.process
def test_an_incomplete_run_says_why_in_every_output(tmp_path):
    from core.files import write_json
    from reports.build import build

    summary = _small_run(tmp_path).with_sections(complete=False, reason="the writer could not finish")
    write_json(str(tmp_path / "summary.json"), summary.model_dump())
    paths = build(str(tmp_path))
    assert "no: the writer could not finish, partial results" in open(paths["html"], encoding="utf-8").read()
    assert (
        "> **Interrupted run:** the results are partial (the writer could not finish)."
        in open(paths["md"], encoding="utf-8").read()
    )
    shown = reports_cli("show", str(tmp_path))
    assert "note: the run was interrupted (the writer could not finish); results are partial" in shown.stdout


@pytest.mark.process
def test_build_writes_the_formats_asked_for(tmp_path):
    _small_run(tmp_path)
    proc = reports_cli("build", str(tmp_path), "--format", "md")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"summary for CI: {tmp_path / 'report.md'}\n"
    assert (tmp_path / "report.md").is_file() and not (tmp_path / "report.html").exists()
    assert "_Charts:" not in (tmp_path / "report.md").read_text()  # no page to point at
    proc = reports_cli("build", str(tmp_path), "--format", "html,pdf")
    assert (
        proc.returncode == 2
        and proc.stderr
        == "error: --format: 'pdf' is not a report format; give html, md or several, e.g. --format html,md\n"
    )
    assert not (tmp_path / "report.html").exists()
