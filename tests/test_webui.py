"""The LLM view's numbers (webui/): the live window against numpy over the same records, and a
web-UI run (master + forked workers, --processes) whose /llm/stats equals its requests.parquet.

The browser side is tests/test_webui_browser.py."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np
import pyarrow.parquet as pq
import pytest

from metrics.record import FIELD_NAMES, RequestRecord
from metrics.slo import parse_slo
from tests.helpers import LOCUST, ROOT, free_port
from webui.live import LIVE_COLUMNS, LiveWindow

T0 = 1_800_000_000.0  # a fixed wall clock for the synthetic runs


def _record(rng, i: int, wall: float, cls: str, error: str = "") -> tuple:
    n = int(rng.integers(1, 60))
    ttft = float(rng.uniform(0.02, 0.4))
    times = list(ttft + np.cumsum(np.r_[0.0, rng.exponential(0.02, n - 1)]))
    rec = RequestRecord(f"r{i}", "0", "chat", cls, 100, 64, wall_send=wall, t_send=wall - T0, status=200)
    if error in ("", "stopped", "timeout", "mid_stream_error"):
        rec.chunk_times = times
        rec.ttft_s, rec.e2e_s = times[0], times[-1]
        rec.output_tokens, rec.prompt_tokens, rec.tokens_source = n, int(rng.integers(5, 50)), "usage"
        if n > 1:
            rec.tpot_s = (times[-1] - times[0]) / (n - 1)
    rec.ok = not error
    rec.error = error
    if error == "connect_error":
        rec.status = 0  # no timings at all: ends at its send time
    return rec.as_row()


def _rows(seed=1, n=900):
    rng = np.random.default_rng(seed)
    errors = ["", "", "", "", "", "", "", "", "timeout", "http_5xx", "connect_error", "stopped", "mid_stream_error"]
    return [
        _record(rng, i, T0 + float(rng.uniform(0, 60)), str(rng.choice(["short", "medium", "long"])), str(rng.choice(errors)))
        for i in range(n)
    ]


def _expected(rows, start, end, objectives=()):
    """The window's statistics by plain numpy, written independently of webui.live."""
    col = {name: [r[FIELD_NAMES.index(name)] for r in rows] for name in FIELD_NAMES}
    wall, e2e = np.array(col["wall_send"], float), np.array(col["e2e_s"], float)
    ended = np.where(np.isnan(e2e), wall, wall + e2e)
    sel = (ended >= start) & (ended <= end)
    ok = np.array(col["ok"], bool)
    err = np.array(col["error"], object)
    okw = sel & ok
    out = {
        "ended": int(sel.sum()),
        "ok": int(okw.sum()),
        "failed": int((sel & ~ok & (err != "stopped")).sum()),
        "stopped": int((sel & (err == "stopped")).sum()),
        "ttft": np.array(col["ttft_s"], float)[okw] * 1000,
        "tpot": np.array(col["tpot_s"], float)[okw] * 1000,
        "e2e": e2e[okw] * 1000,
        "itl": np.concatenate([np.diff(col["chunk_times"][i]) for i in np.flatnonzero(okw)] or [np.empty(0)]) * 1000,
        "output": np.clip(np.array(col["output_tokens"])[okw], 0, None).sum(),
        "prompt": np.clip(np.array(col["prompt_tokens"])[okw], 0, None).sum(),
    }
    good = okw.copy()
    for obj in objectives:
        values = {"ttft": np.array(col["ttft_s"], float), "tpot": np.array(col["tpot_s"], float), "e2e": e2e}[obj.metric]
        good &= ~(values >= obj.threshold_s)
    out["good"] = int(good.sum())
    return out


def _close(a, b, rel=1e-9):
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)


def _check_block(block, exp, seconds):
    r = block["requests"]
    assert (r["ended"], r["ok"], r["failed"], r["stopped"]) == (exp["ended"], exp["ok"], exp["failed"], exp["stopped"])
    for metric in ("ttft", "tpot", "e2e", "itl"):
        values = exp[metric][~np.isnan(exp[metric])]
        dist = block[f"{metric}_ms"]
        assert dist["count"] == values.size, metric
        if values.size:
            for key, q in (("p50", 50), ("p95", 95), ("p99", 99)):
                assert _close(dist[key], float(np.percentile(values, q))), (metric, key)
            assert _close(dist["mean"], float(values.mean())), metric
    th = block["throughput"]
    assert _close(th["requests_per_s"], exp["ok"] / seconds)
    assert _close(th["output_tokens_per_s"], exp["output"] / seconds)
    assert _close(th["total_tokens_per_s"], (exp["output"] + exp["prompt"]) / seconds)
    assert _close(block["goodput"]["requests_per_s"], exp["good"] / seconds)
    ended = exp["ok"] + exp["failed"]
    assert _close(block["goodput"]["good_fraction"], exp["good"] / ended if ended else None)


def test_window_equals_numpy_over_the_same_records():
    rows = _rows()
    objectives = parse_slo("ttft.p95<200ms,tpot.p50<25ms")
    w = LiveWindow(30.0, objectives, run_start=T0)
    w.add_rows(rows[:400])
    w.snapshot(end=T0 + 20)  # an early snapshot: later rows must still count in the next one
    w.add_rows(rows[400:])
    end = T0 + 50.0
    snap = w.snapshot(end=end)
    json.dumps(snap, allow_nan=False)  # strict JSON
    assert snap["window"]["start"] == end - 30.0 and snap["window"]["seconds"] == 30.0
    exp = _expected(rows, end - 30.0, end, objectives)
    assert snap["window"]["records"] == exp["ended"] > 100
    _check_block(snap["overall"], exp, 30.0)
    assert snap["overall"]["requests"]["by_error"]  # failures by class are reported
    for cls in ("short", "medium", "long"):
        sub = [r for r in rows if r[FIELD_NAMES.index("request_class")] == cls]
        _check_block(snap["by_class"][cls], _expected(sub, end - 30.0, end, objectives), 30.0)
    assert {v["objective"] for v in snap["overall"]["slo"]["objectives"]} == {"ttft.p95<200ms", "tpot.p50<25ms"}
    p95 = float(np.percentile(exp["ttft"], 95))
    assert snap["overall"]["slo"]["objectives"][0]["passed"] == (p95 < 200)
    assert snap["totals"]["records"] == len(rows)


def test_window_is_cut_at_the_run_start_and_forgets_old_records():
    rows = _rows(seed=2, n=300)
    w = LiveWindow(30.0, run_start=T0 + 5)
    w.add_rows(rows)
    snap = w.snapshot(end=T0 + 12)
    assert snap["window"]["start"] == T0 + 5 and math.isclose(snap["window"]["seconds"], 7.0)
    _check_block(snap["overall"], _expected(rows, T0 + 5, T0 + 12), 7.0)
    # far later: everything old is pruned, the window is empty but well-formed
    snap = w.snapshot(end=T0 + 500)
    assert snap["window"]["records"] == 0 and snap["overall"]["requests"]["ended"] == 0
    assert snap["overall"]["ttft_ms"]["p95"] is None and snap["overall"]["throughput"]["requests_per_s"] == 0
    assert sum(t.num_rows for t in w._tables) == 0
    json.dumps(snap, allow_nan=False)


def test_history_points_follow_snapshots():
    w = LiveWindow(30.0, run_start=T0)
    w.add_rows(_rows(seed=3, n=200))
    for i, end in enumerate((T0 + 20, T0 + 40, T0 + 60)):
        w.add_point(w.snapshot(end=end), seq=i + 1, users=10)
    assert [p["seq"] for p in w.history] == [1, 2, 3]
    assert all(p["users"] == 10 and p["output_tokens_per_s"] >= 0 for p in w.history)


def test_live_columns_are_record_fields():
    assert set(LIVE_COLUMNS) <= set(FIELD_NAMES)


# -- a real web-UI run -----------------------------------------------------------------------------------


def _get(url: str, timeout: float = 10.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read()


def _json(url: str):
    return json.loads(_get(url)[2])


def _wait(predicate, timeout: float, what: str, proc=None, log=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError):
            pass
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.5)
    tail = open(log).read()[-3000:] if log and os.path.exists(log) else ""
    pytest.fail(f"timed out waiting for {what}\n{tail}")


def start_group(*args: str, log_path: str) -> subprocess.Popen:
    """A Locust process in a session of its own, so that stop_group() also ends the workers that
    --processes forks (they would otherwise outlive a master that dies)."""
    out = open(log_path, "w")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([*LOCUST, *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=env)  # fmt: skip


def stop_group(proc: subprocess.Popen, timeout: float = 60) -> None:
    """SIGTERM to this process's own session (Locust shuts down cleanly), then SIGKILL to whatever
    of it is left."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


def _status(url: str) -> int:
    try:
        return _get(url)[0]
    except urllib.error.HTTPError as e:
        return e.code


def test_web_ui_run_with_processes_serves_the_records(tmp_path):
    """A web-UI run with --processes 2 (master + 2 forked workers, records shipped every 3 s):
    the LLM view's live numbers come from the merged records, and its final snapshot equals
    numpy over requests.parquet for the same window; the results folder and report are those of
    a headless run, served under /llm/report/."""
    port, master_port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    results = tmp_path / "results"
    log = str(tmp_path / "master.log")
    proc = start_group(
        "--processes", "2", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(master_port),
        "--master-host", "127.0.0.1", "--master-port", str(master_port), "--autostart", "--autoquit", "60", "-u", "6", "-r", "6", "-t", "16s",
        "--web-host", "127.0.0.1", "--web-port", str(port), "--sim-profile", "fixed", "--max-tokens-override", "24",
        "--slo", "ttft.p95<2s", "--results-dir", str(results), "--run-id", "ui", "--stop-timeout", "10",
        log_path=log,
    )  # fmt: skip
    try:
        # the start form carries the suite's options with their defaults
        index = _wait(lambda: _get(base + "/")[2].decode(), 60, "the web UI", proc, log)
        args = json.loads(re.search(r"window.templateArgs = (\{.*\})", index).group(1))
        extra = args["extra_options"]
        for name, default in (("model", ""), ("workload", ""), ("slo", "ttft.p95<2s"), ("endpoint", "chat"),
                              ("max_tokens_override", "24"), ("warmup", "0s"), ("steps", "")):  # fmt: skip
            assert extra[name]["default_value"] == default, name
        assert {"title": "LLM", "key": "llm"} in args["extended_tabs"]
        assert any(t["key"] == "llm" for t in args["extended_tables"])
        assert "llm-view-link" in index and "/llm" in index

        live = _wait(lambda: (lambda d: d if d["seq"] and d["overall"]["requests"]["ok"] and d["users"] else None)(
            _json(base + "/llm/stats")), 90, "live LLM statistics", proc, log)  # fmt: skip
        assert live["state"] in ("running", "spawning") and live["workers"] == 2
        assert live["overall"]["ttft_ms"]["p95"] > 0 and live["overall"]["throughput"]["output_tokens_per_s"] > 0
        assert live["run"]["id"] == "ui" and live["run"]["slo"] == ["ttft.p95<2s"] and live["run"]["report_url"] is None
        # a retained snapshot answers by number, the same as it was
        again = _json(f"{base}/llm/stats?seq={live['seq']}&history=0")
        assert again["overall"] == live["overall"] and again["window"] == live["window"]
        assert _status(f"{base}/llm/stats?seq=999999") == 404
        # the LLM tab's rows ride on Locust's /stats/requests
        tab = _wait(lambda: [e for e in _json(base + "/stats/requests")["extended_stats"] if e["key"] == "llm"][0]["data"],
                    30, "the LLM tab's rows", proc, log)  # fmt: skip
        assert tab[-1]["name"] == "All" and tab[-1]["ttft_p95"] > 0
        seq = int(re.search(r"#(\d+)", tab[-1]["updated"]).group(1))
        try:
            snap = _json(f"{base}/llm/stats?seq={seq}&history=0")
            assert tab[-1]["ttft_p95"] == round(snap["overall"]["ttft_ms"]["p95"], 1)
            assert tab[-1]["out_tok_s"] == round(snap["overall"]["throughput"]["output_tokens_per_s"], 1)
        except urllib.error.HTTPError:
            pass  # only on a very slow machine: that snapshot is gone already
        page = _get(base + "/llm")[2].decode()
        assert not re.search(r"<script[^>]+src=|<link[^>]+href=", page)
        assert set(re.findall(r"https?://[^\s\"'<>]+", page)) <= {"http://www.w3.org/2000/svg"}  # offline: nothing fetched

        final = _wait(lambda: (lambda d: d if d["run"]["finished"] and d["run"]["report_url"] else None)(
            _json(base + "/llm/stats")), 120, "the end of the run and its report", proc, log)  # fmt: skip
        history = final.pop("history")
        assert len(history) >= 4 and [p["seq"] for p in history] == sorted(p["seq"] for p in history)
        assert all(p["users"] is not None and "ttft_p95_ms" in p for p in history)
        assert max(p["users"] for p in history) == 6
        # the report and the results folder
        status, ctype, body = _get(base + final["run"]["report_url"])
        assert status == 200 and ctype.startswith("text/html") and b"<html" in body.lower()
        assert final["run"]["results_path"] == str(results / "ui")
        assert _get(base + final["run"]["summary_url"])[0] == 200
        assert _get(base + "/llm/report/latest")[2] == body  # redirect to the latest run's report
        for bad in ("/llm/report/..%2F..%2Fetc%2Fpasswd", "/llm/report/ui/..%2Frun.json", "/llm/report/ui/requests.parquet",
                    "/llm/report/nope", "/llm/report/ui/%2Fetc%2Fpasswd", "/llm/report/..", "/llm/report/ui/..%2F..%2Fui%2Freport.html"):  # fmt: skip
            assert _status(base + bad) == 404, bad
    finally:
        stop_group(proc)
    # the final snapshot is numpy over requests.parquet for its window
    table = pq.read_table(results / "ui" / "requests.parquet")
    rows = [tuple(r[name] for name in FIELD_NAMES) for r in table.to_pylist()]
    start, end = final["window"]["start"], final["window"]["end"]
    exp = _expected(rows, start, end, parse_slo("ttft.p95<2s"))
    assert final["window"]["records"] == exp["ended"] > 20
    _check_block(final["overall"], exp, end - start)
    assert final["totals"]["records"] == len(rows)
    summary = json.loads((results / "ui" / "summary.json").read_text())
    assert summary["records"]["total"] == len(rows)


def test_gauges_read_the_health_monitor_and_server_metrics_hooks():
    from types import SimpleNamespace

    from plugin.health import Health
    from plugin.server_metrics import ServerMetrics
    from plugin.state import SuiteState
    from webui.plugin import client_health, in_flight, server_gauges

    health, scraping = Health(), ServerMetrics()
    env = SimpleNamespace(llm=SuiteState("local", (health, scraping)))
    env.llm.plan = SimpleNamespace(server_metrics=())
    run = SimpleNamespace(run_id="r1")
    assert client_health(env) == {"state": "unknown"}
    health.snapshot = lambda: {"state": "client_bound", "cpu_percent": 97.5, "reasons": ["cpu"]}
    assert client_health(env) == {"state": "client_bound", "cpu_percent": 97.5, "reasons": ["cpu"]}
    health.snapshot = lambda: 1 / 0
    assert client_health(env)["state"] == "unknown"
    # plugin.health's board: no state of its own; derived from its workers, samples left out
    worker = {"worker": "w0", "index": 0, "bound": False, "contended": False, "reasons": [], "cpu_p95": 40.0,
              "loop_lag_p99_ms": 1.2, "samples": 12, "recent": [{"t": 1.0, "cpu": 40.0}]}  # fmt: skip
    board = {"running": True, "bound": False, "advice": "fine", "workers_needed": 1, "limits": {"cpu_pct": 70.0}, "workers": [worker]}
    health.snapshot = lambda: board
    h = client_health(env)
    assert h["state"] == "ok" and h["advice"] == "fine" and "recent" not in h["workers"][0] and h["workers"][0]["cpu_p95"] == 40.0
    worker["contended"] = True
    assert client_health(env)["state"] == "contended"
    board["bound"], worker["bound"] = True, True
    assert client_health(env)["state"] == "client bound"
    board["workers"] = []
    board["bound"] = False
    assert client_health(env)["state"] == "unknown"  # no sample yet

    assert server_gauges(env, run) is None  # --server-metrics off
    env.llm.plan = SimpleNamespace(server_metrics=("http://127.0.0.1:1/metrics",))
    assert server_gauges(env, run) == {"available": False, "running": None, "waiting": None, "kv_cache_usage": None}
    scraper = scraping.scraper = SimpleNamespace(latest=lambda: {"vllm:num_requests_running": 12, "vllm:num_requests_waiting": 3.0,
                                                                  "vllm:kv_cache_usage_perc": 0.42})  # fmt: skip
    assert server_gauges(env, run) == {"available": True, "running": 12.0, "waiting": 3.0, "kv_cache_usage": 0.42}
    scraper.latest = lambda: {"sglang:num_running_reqs": 5, "sglang:num_queue_reqs": 0, "sglang:token_usage": 0.1}
    assert server_gauges(env, run) == {"available": True, "running": 5.0, "waiting": 0.0, "kv_cache_usage": 0.1}
    scraper.latest = lambda: {"vllm:num_requests_running": 2, "vllm:kv_cache_usage_perc": 55.0}  # a percentage
    assert server_gauges(env, run) == {"available": True, "running": 2.0, "waiting": None, "kv_cache_usage": 0.55}

    snap = {"overall": {"e2e_ms": {"mean": 500.0, "count": 120}}, "window": {"seconds": 30.0}}
    assert in_flight(env, run, 8, snap) == {"value": None, "source": "unknown"}  # no run counting yet
    env.llm.context = SimpleNamespace(in_flight=17)
    assert in_flight(env, run, 64, snap) == {"value": 17.0, "source": "counted"}
