"""GPU telemetry in the results (plugin/gpu.py, metrics/gpu.py), checked against truths the suite
does not make: a stand-in nvidia-smi (tests/fake_gpu/nvidia-smi, first in PATH) that logs every
reading it printed, a DCGM exporter served from here with known values, and the simulator's truth
log for the tokens each window carried."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pandas as pd
import pytest

from metrics.gpu import energy, window_figures
from tests.helpers import ROOT, read_results, read_truth, run_locust, simulator

FAKE = os.path.join(ROOT, "tests", "fake_gpu")
EDGE_S = 0.05  # tokens this close to a window's edge may fall on either side (send vs arrival time)


# -- the arithmetic, on readings made here ------------------------------------------------------


def readings(rows):
    return pd.DataFrame(
        rows,
        columns=[
            "timestamp",
            "gpu",
            "name",
            "utilization_pct",
            "memory_used_mib",
            "memory_total_mib",
            "power_w",
            "sm_clock_mhz",
            "energy_j",
        ],
    )


def test_power_is_integrated_over_the_window_and_a_counter_preferred():
    nan = math.nan
    # GPU 0: 100 W rising to 200 W over 10 s; GPU 1: 50 W flat. Window [2.5, 7.5]: GPU 0 averages 150 W
    rows = [(t, "0", "x", 10.0, 1.0, 2.0, 100.0 + 10.0 * t, 1.0, nan) for t in range(11)]
    rows += [(t + 0.5, "1", "x", 30.0, 3.0, 4.0, 50.0, 1.0, nan) for t in range(10)]
    joules, source = energy(readings(rows), 2.5, 7.5, 1.0)
    assert source == "power" and joules == pytest.approx(150.0 * 5 + 50.0 * 5)
    assert energy(readings(rows), 2.5, 20.0, 1.0) == (None, None)  # readings end 10 s short of the window's end
    # an energy counter (J) that says 7 J/s wins over the power readings
    counted = [(t, "0", "x", 10.0, 1.0, 2.0, 100.0, 1.0, 1000.0 + 7.0 * t) for t in range(11)]
    assert energy(readings(counted), 1.0, 9.0, 1.0) == (pytest.approx(56.0), "counter")
    # the window begins half a reading before the first: the counter grows there at its rate, not 0
    assert energy(readings(counted[1:]), 0.5, 9.0, 1.0) == (pytest.approx(7.0 * 8.5), "counter")
    f = window_figures(readings(rows), 2.5, 7.5)
    # GPU 0's readings at 3..7 s, GPU 1's at 2.5..7.5 s: both edges are inside the window
    assert (
        f.readings == 5 + 6
        and f.utilization_pct_mean == pytest.approx((5 * 10 + 6 * 30) / 11)
        and f.memory_used_mib_peak == 3.0
    )
    assert f.power_w_mean == pytest.approx(150.0 + 50.0)  # the GPUs together


def test_the_capacity_in_the_deployments_terms():
    from metrics.gpu import figures
    from metrics.schema.figures import Span, Throughput
    from metrics.schema.server_side import GpuFigures

    base = GpuFigures(window=Span(start=0.0, end=10.0), energy_j=4000.0)
    th = Throughput(requests_per_s=2.0, output_tokens_per_s=100.0, total_tokens_per_s=400.0, sessions_per_s=0.5)
    f = figures(base, 8, th, 10.0, gpus=4, price=2.0)
    assert (f.users, f.requests_per_min, f.sessions_per_min) == (8, 120.0, 30.0)
    assert (f.requests_per_min_per_gpu, f.output_tokens_per_s_per_gpu, f.total_tokens_per_s_per_gpu) == (
        30.0,
        25.0,
        100.0,
    )
    assert f.joules_per_output_token == pytest.approx(4.0) and f.joules_per_token == pytest.approx(1.0)
    # 4 GPUs at 2.0 per hour: 8.0 per hour for 360,000 output tokens
    assert f.cost_per_million_output_tokens == pytest.approx(8.0 / 0.36) and f.cost_per_million_tokens == pytest.approx(
        8.0 / 1.44
    )
    bare = figures(GpuFigures(window=Span(start=0.0, end=10.0)), 8, th, 10.0, gpus=None, price=None)
    assert (
        bare.requests_per_min_per_gpu is None and bare.joules_per_token is None and bare.cost_per_million_tokens is None
    )


def test_the_plan_answers_with_the_runs_gpus_price_and_energy():
    """A ramp of two 20 s levels (10 users met, 20 missed) with readings of 2 GPUs at 300 W in all:
    `reports plan` takes the run's GPU count and price, keeps the met level's energy per token, and
    prices the replicas; --gpus given to the plan recomputes the per-GPU figures and the cost."""
    from metrics.gpu import gpu_section
    from metrics.record import RequestRecord, rows_to_table
    from metrics.slo import parse_slo
    from metrics.summary import summarize
    from reports.plan import describe, plan
    from shapes.steps import StepPlan

    def _row(step, sent, ttft, i=0):  # conversations of two turns, 4 output tokens a reply
        return RequestRecord(
            "r",
            "w",
            "chat",
            "short",
            10,
            4,
            step=step,
            wall_send=sent,
            status=200,
            ok=True,
            ttft_s=ttft,
            e2e_s=ttft + 0.1,
            tpot_s=0.01,
            prompt_tokens=10,
            output_tokens=4,
            tokens_source="usage",
            n_chunks=2,
            chunk_times=[ttft, ttft + 0.1],
            turn=1 + i % 2,
            session_id=f"s{i // 2}",
        ).as_row()

    t0 = 1_000.0
    rows = [_row(0, t0 + 5 + i * 0.075, 0.1, i) for i in range(200)] + [
        _row(1, t0 + 25 + i * 0.05, 2.0, i) for i in range(250)
    ]
    s = summarize(
        rows_to_table(rows),
        t0,
        t0 + 40,
        run_start=t0,
        plan=StepPlan([10, 20], 20.0, 5.0),
        objectives=parse_slo("ttft.p95<1s"),
    )
    nan = math.nan
    seen = readings([(t0 + t / 2, str(i), "g", 50.0, 1.0, 2.0, 300.0, 1.0, nan) for t in range(81) for i in range(2)])
    s.gpu = gpu_section(s, seen, source="nvidia-smi", price=2.0)
    met = s.by_step[0]
    seconds = met.window.end - met.window.start
    p = plan(s, rpm=2000)
    assert (p["gpus_per_replica"], p["gpu_hour_price"]) == (2, 2.0)
    assert p["sessions_per_min"] == pytest.approx(
        p["requests_per_min"] / 2
    )  # every other request begins a conversation
    assert p["joules_per_output_token"] == pytest.approx(
        600.0 * seconds / (met.throughput.output_tokens_per_s * seconds)
    )
    assert p["cost_per_million_tokens"] == pytest.approx(2.0 * 2 / 3600 / met.throughput.total_tokens_per_s * 1e6)
    held = met.throughput.requests_per_s * 60
    assert p["replicas"] == math.ceil(2000 / held) and p["cost_per_hour"] == p["replicas"] * 2 * 2.0
    assert "J per output token" in describe(p) and "per hour" in describe(p)
    q = plan(s, rpm=2000, gpus=8, price=1.0)
    assert q["output_tokens_per_s_per_gpu"] == pytest.approx(met.throughput.output_tokens_per_s / 8)
    assert q["cost_per_hour"] == q["replicas"] * 8 * 1.0 and q["joules_per_token"] == p["joules_per_token"]


def test_the_live_view_shows_the_newest_reading_of_each_gpu():
    from types import SimpleNamespace

    from plugin.gpu import GpuSampler, GpuTelemetry
    from webui.gauges import gpu_gauges

    nan = math.nan
    sampler = GpuSampler("nvidia-smi", 1.0)
    sampler.rows = [
        (1.0, "0", "g", 10.0, 100.0, 200.0, 50.0, 1.0, nan),
        (1.0, "1", "g", 20.0, 300.0, 200.0, 70.0, 1.0, nan),
        (2.0, "0", "g", 30.0, 500.0, 200.0, 90.0, 1.0, nan),
        (2.0, "1", "g", 50.0, 700.0, 200.0, nan, 1.0, nan),
    ]
    telemetry = GpuTelemetry()
    env = SimpleNamespace(llm=SimpleNamespace(plan=SimpleNamespace(gpu_telemetry=""), plugin=lambda kind: telemetry))
    assert gpu_gauges(env) is None  # --gpu-telemetry off
    env.llm.plan.gpu_telemetry = "nvidia-smi"
    assert gpu_gauges(env) == {"available": False}  # not reading (yet)
    telemetry.sampler = sampler
    assert gpu_gauges(env) == {
        "available": True,
        "gpus": 2,
        "utilization_pct": 40.0,
        "memory_used_mib": 600.0,
        "power_w": 90.0,
    }


def test_bad_gpu_options_are_refused_with_one_line():
    from argparse import Namespace

    from core.errors import InputError
    from plugin.plan import RunPlan

    def plan(**kw):
        return RunPlan.from_options(Namespace(**kw))

    p = plan(gpu_telemetry="nvidia-smi", gpus="8", gpu_hour_price="2.5", gpu_telemetry_interval="500ms")
    assert (p.gpu_telemetry, p.gpus, p.gpu_hour_price, p.gpu_telemetry_interval_s) == ("nvidia-smi", 8, 2.5, 0.5)
    for kw, named in [
        ({"gpus": "0"}, "--gpus"),
        ({"gpus": "-2"}, "--gpus"),
        ({"gpus": "2", "gpu_hour_price": "-1"}, "--gpu-hour-price"),
        ({"gpu_hour_price": "3"}, "--gpu-hour-price: the cost needs the GPU count"),
        ({"gpu_telemetry": "nvidia"}, "--gpu-telemetry"),
        ({"gpu_telemetry_interval": "1ms"}, "--gpu-telemetry-interval"),
    ]:
        with pytest.raises(InputError, match=named):
            plan(**kw)


# -- nvidia-smi: a step ramp against the simulator --------------------------------------------------


def _truth_tokens(truth: list[dict], start: float, end: float) -> tuple[float, float, float, float]:
    """(output tokens, total tokens) the simulator sent inside [start, end] (monotonic clock), as a
    lower and an upper bound: tokens within EDGE_S of an edge may be counted on either side. Each
    reply's tokens are evenly spaced from its first to its last token (the fixed profile); its
    prompt counts at its first token, as the suite counts it."""
    lo_out = hi_out = lo_tot = hi_tot = 0.0
    for r in truth:
        if r["outcome"] != "ok" or r["first_token"] is None:
            continue
        n = r["output_tokens"]
        times = np.linspace(r["first_token"], r["last_token"], n) if n > 1 else np.array([r["first_token"]])
        inner = ((times >= start + EDGE_S) & (times <= end - EDGE_S)).sum()
        outer = ((times >= start - EDGE_S) & (times <= end + EDGE_S)).sum()
        first = r["first_token"]
        lo_out, hi_out = lo_out + inner, hi_out + outer
        lo_tot += inner + (r["prompt_tokens"] if start + EDGE_S <= first <= end - EDGE_S else 0)
        hi_tot += outer + (r["prompt_tokens"] if start - EDGE_S <= first <= end + EDGE_S else 0)
    return lo_out, hi_out, lo_tot, hi_tot


def within(value, low, high):
    assert low * (1 - 1e-9) <= value <= high * (1 + 1e-9), (value, low, high)


@pytest.mark.process
def test_nvidia_smi_readings_per_step_energy_and_cost_against_the_truth(tmp_path):
    truth_log, gpu_log = tmp_path / "truth.jsonl", tmp_path / "gpu.jsonl"
    env = {"PATH": FAKE + os.pathsep + os.environ["PATH"], "FAKE_GPU_LOG": str(gpu_log), "FAKE_GPU_POWER": "150,250"}
    with simulator("--profile", "fixed", truth_log=str(truth_log)) as host:
        proc = run_locust(
            "--host",
            host,
            "--steps",
            "1,3",
            "--step-time",
            "7s",
            "--step-warmup",
            "1s",
            "--max-tokens-override",
            "24",
            "--gpu-telemetry",
            "nvidia-smi",
            "--gpu-hour-price",
            "2.5",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "smi",
            "--stop-timeout",
            "5",
            env=env,
            timeout=120,
        )
        mono_minus_wall = time.monotonic() - time.time()  # the truth log's clock (perf_counter) against the wall clock
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, summary = read_results(str(tmp_path), "smi")
    truth = read_truth(str(truth_log))
    printed = pd.DataFrame([json.loads(line) for line in gpu_log.read_text().splitlines()])
    g = summary["gpu"]
    assert (g["source"], g["gpus"], g["gpus_from"], g["failed_readings"]) == ("nvidia-smi", 2, "telemetry", 0)
    assert [d["id"] for d in g["devices"]] == ["0", "1"] and g["devices"][0]["name"] == "NVIDIA Fake H200"
    assert len(g["by_step"]) == 2
    for step, fig in zip(summary["by_step"], g["by_step"]):
        start, end = step["window"]["start"], step["window"]["end"]
        inside = printed[(printed["t"] >= start) & (printed["t"] <= end)]
        assert (
            fig["users"] == step["users"] and fig["readings"] == len(inside) >= 10
        )  # two GPUs, about one reading a second each
        assert fig["utilization_pct_mean"] == pytest.approx(inside["util"].mean())
        assert fig["utilization_pct_p95"] == pytest.approx(np.percentile(inside["util"], 95))
        assert fig["memory_used_mib_peak"] == inside["memory"].max()
        assert fig["power_w_mean"] == pytest.approx(400.0)
        joules = 400.0 * (end - start)  # constant power: whatever the integration, this is the energy
        assert fig["energy_j"] == pytest.approx(joules) and fig["energy_source"] == "power"
        lo_out, hi_out, lo_tot, hi_tot = _truth_tokens(truth, start + mono_minus_wall, end + mono_minus_wall)
        assert lo_out > 50, (lo_out, step)
        within(fig["joules_per_output_token"], joules / hi_out, joules / lo_out)
        within(fig["joules_per_token"], joules / hi_tot, joules / lo_tot)
        cost = 2.5 * 2 * (end - start) / 3600  # 2 GPUs at 2.5 per hour, over the window
        within(fig["cost_per_million_output_tokens"], cost / hi_out * 1e6, cost / lo_out * 1e6)
        within(fig["cost_per_million_tokens"], cost / hi_tot * 1e6, cost / lo_tot * 1e6)
        assert fig["requests_per_min"] == pytest.approx(step["throughput"]["requests_per_s"] * 60)
        assert fig["output_tokens_per_s_per_gpu"] == pytest.approx(step["throughput"]["output_tokens_per_s"] / 2)
    stored = pd.read_parquet(tmp_path / "smi" / "gpu_telemetry.parquet")
    w = summary[
        "window"
    ]  # every reading printed during the run's window is kept (the check before the run printed one too)
    assert len(stored[stored["timestamp"].between(w["start"], w["end"])]) == len(
        printed[printed["t"].between(w["start"], w["end"])]
    )
    md = (tmp_path / "smi" / "report.md").read_text()
    assert "### GPUs at each level" in md and "NVIDIA Fake H200" in md, md


# -- a DCGM exporter ------------------------------------------------------------------------------


class Exporter:
    """A DCGM exporter with known values: two GPUs at 40 % and 60 %, 200.5 W and 300 W, whose energy
    counters (mJ) grow with that power from the moment it started."""

    POWER = {"0": 200.5, "1": 300.0}

    def __init__(self, body: str | None = None):
        self.t0 = time.time()
        self.body = body
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                text = (exporter.body if exporter.body is not None else exporter.text()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def text(self) -> str:
        elapsed = time.time() - self.t0
        lines = []
        for name, kind, values in [
            ("DCGM_FI_DEV_GPU_UTIL", "gauge", {"0": 40, "1": 60}),
            ("DCGM_FI_DEV_FB_USED", "gauge", {"0": 1000, "1": 3000}),
            ("DCGM_FI_DEV_FB_FREE", "gauge", {"0": 79000, "1": 77000}),
            ("DCGM_FI_DEV_POWER_USAGE", "gauge", self.POWER),
            ("DCGM_FI_DEV_SM_CLOCK", "gauge", {"0": 1980, "1": 1980}),
            (
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                "counter",
                {k: 5e6 + p * elapsed * 1000 for k, p in self.POWER.items()},
            ),
        ]:
            lines += [f"# HELP {name} x", f"# TYPE {name} {kind}"]
            lines += [
                f'{name}{{gpu="{i}",UUID="GPU-{i}",device="nvidia{i}",modelName="NVIDIA H200",Hostname="h"}} {v}'
                for i, v in values.items()
            ]
        return "\n".join(lines) + "\n"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.process
def test_a_dcgm_exporter_per_window_with_its_energy_counter(tmp_path):
    exporter = Exporter()
    try:
        with simulator("--profile", "fixed") as host:
            proc = run_locust(
                "--host",
                host,
                "-u",
                "2",
                "-r",
                "2",
                "-t",
                "8s",
                "--max-tokens-override",
                "16",
                "--gpu-telemetry",
                exporter.url,
                "--gpu-telemetry-interval",
                "500ms",
                "--gpus",
                "4",
                "--gpu-hour-price",
                "3",
                "--results-dir",
                str(tmp_path),
                "--run-id",
                "dcgm",
                "--stop-timeout",
                "5",
                timeout=120,
            )
    finally:
        exporter.close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, summary = read_results(str(tmp_path), "dcgm")
    g = summary["gpu"]
    assert (g["source"], g["gpus"], g["gpus_from"], g["failed_readings"]) == (exporter.url, 4, "--gpus", 0)
    assert [(d["id"], d["name"], d["memory_total_mib"]) for d in g["devices"]] == [
        ("0", "NVIDIA H200", 80000.0),
        ("1", "NVIDIA H200", 80000.0),
    ]
    o, w = g["overall"], summary["window"]
    assert o["readings"] >= 20
    assert o["utilization_pct_mean"] == pytest.approx(50.0) and o["utilization_pct_p95"] == pytest.approx(60.0)
    assert o["memory_used_mib_mean"] == pytest.approx(2000.0) and o["memory_used_mib_peak"] == 3000.0
    assert o["power_w_mean"] == pytest.approx(500.5) and o["sm_clock_mhz_mean"] == 1980.0
    # the counter grows 500.5 J/s: the window's energy, to within the time between the exporter's reading
    # and its stamp (the middle of the scrape: a few ms, tens on a loaded machine, of an 8 s window)
    assert o["energy_source"] == "counter" and o["energy_j"] == pytest.approx(500.5 * w["seconds"], rel=1e-2)
    th = summary["overall"]["throughput"]
    assert o["joules_per_output_token"] == pytest.approx(o["energy_j"] / (th["output_tokens_per_s"] * w["seconds"]))
    assert o["requests_per_min_per_gpu"] == pytest.approx(th["requests_per_s"] * 60 / 4)
    assert o["cost_per_million_tokens"] == pytest.approx(3 * 4 / 3600 / th["total_tokens_per_s"] * 1e6)


# -- a source that cannot be read is bad input ------------------------------------------------------


@pytest.mark.process
@pytest.mark.parametrize("case", ["missing", "failing", "not-dcgm"])
def test_a_gpu_source_that_cannot_be_read_is_refused_before_load(tmp_path, case):
    env, source, named = {}, "nvidia-smi", "--gpu-telemetry: nvidia-smi is not on PATH"
    exporter = None
    if case == "missing":
        env["PATH"] = str(tmp_path)  # no nvidia-smi anywhere on it
    elif case == "failing":
        env = {"PATH": FAKE + os.pathsep + os.environ["PATH"], "FAKE_GPU_FAIL": "1"}
        named = "--gpu-telemetry: nvidia-smi found no GPU to read (NVIDIA-SMI has failed"
    else:
        exporter = Exporter(body="# TYPE node_load1 gauge\nnode_load1 0.5\n")
        source, named = exporter.url, "serves no DCGM_FI_DEV_ metric"
    try:
        with simulator("--profile", "fixed", truth_log=str(tmp_path / "truth.jsonl")) as host:
            proc = run_locust(
                "--host",
                host,
                "-u",
                "1",
                "-t",
                "5s",
                "--gpu-telemetry",
                source,
                "--results-dir",
                str(tmp_path / "r"),
                env=env,
                timeout=60,
            )
    finally:
        if exporter is not None:
            exporter.close()
    last = [line for line in proc.stderr.splitlines() if line.strip()][-1]
    assert proc.returncode == 2 and named in last and "error:" in last, proc.stderr[-2000:]
    assert not (tmp_path / "r").exists() and not (tmp_path / "truth.jsonl").read_text().strip()
