"""Client metrics for Prometheus (plugin/prometheus.py).

Unit tests feed records into the collector; the end-to-end tests run the suite (a local process,
and a real master with one worker process) against the simulator with --prometheus-port, scrape
/metrics during and after the run, and check every count against requests.parquet.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pandas as pd
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from metrics.record import RequestRecord
from plugin.prometheus import E2E_BUCKETS, HISTOGRAMS, ITL_BUCKETS, TPOT_BUCKETS, TTFT_BUCKETS, ClientMetrics
from tests.helpers import free_port, master_and_workers, own_master_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "sk-test-secret-9f3c"
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 only, whatever *_proxy says


# -- helpers shared with tests/test_prometheus_server.py and tests/test_server_metrics.py ---------


class Simulator:
    """`python -m simulator` on a free 127.0.0.1 port."""

    def __init__(self, profile: str = "fixed"):
        cmd = [sys.executable, "-m", "simulator", "--host", "127.0.0.1", "--port", "0", "--profile", profile]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        assert "listening on " in line, line
        self.url = line.split("listening on ", 1)[1].split()[0]
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    @property
    def hostport(self) -> str:
        return self.url.split("://", 1)[1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture
def simulator():
    sim = Simulator()
    yield sim
    sim.stop()


def locust(*args: str, log_path: str, env: dict | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "locust", "-f", "locustfile.py", *own_master_port(args)]
    log = open(log_path, "w")
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})


def wait_exit(proc: subprocess.Popen, timeout: float, log_path: str) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        raise AssertionError("locust did not finish in time:\n" + tail(log_path)) from None


def tail(path: str, n: int = 40) -> str:
    try:
        with open(path) as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def scrape(url: str, timeout: float = 2.0) -> dict:
    """/metrics -> {sample name: {frozenset(labels.items()): value}}."""
    with NO_PROXY.open(url, timeout=timeout) as r:
        text = r.read().decode()
    out: dict = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    out["_text"] = text
    return out


def by_label(samples: dict, name: str, label: str, **match) -> dict:
    """Sum of a sample's values grouped by one label, over the label sets matching `match`."""
    out: dict = {}
    for labels, value in samples.get(name, {}).items():
        d = dict(labels)
        if all(d.get(k) == v for k, v in match.items()):
            out[d.get(label)] = out.get(d.get(label), 0) + value
    return out


def wait_for(path: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert proc.poll() is None or os.path.exists(path), f"process ended before {path} appeared"
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout}s"
        time.sleep(0.1)


# -- unit ------------------------------------------------------------------------------------------


def _rec(
    cls="short", step=-1, ok=True, error="", ttft=0.1, e2e=1.0, tpot=0.01, prompt=10, output=5, chunks=(0.1, 0.12, 0.15)
):
    return RequestRecord(
        request_id="r",
        worker="w",
        endpoint="chat",
        request_class=cls,
        input_chars=10,
        max_tokens=5,
        step=step,
        ok=ok,
        error=error,
        ttft_s=ttft,
        e2e_s=e2e,
        tpot_s=tpot,
        prompt_tokens=prompt,
        output_tokens=output,
        chunk_times=list(chunks),
    ).as_row()


def _collect(metrics: ClientMetrics) -> dict:
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(metrics)
    text = generate_latest(reg).decode()
    out: dict = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return out


def test_buckets_cover_llm_latencies():
    for bounds in (TTFT_BUCKETS, TPOT_BUCKETS, ITL_BUCKETS, E2E_BUCKETS):
        assert list(bounds) == sorted(set(bounds))
    assert TTFT_BUCKETS[-1] >= 300 and TTFT_BUCKETS[0] <= 0.01  # minutes of queueing, and a fast local server
    assert TPOT_BUCKETS[0] == ITL_BUCKETS[0] == 0.001
    assert E2E_BUCKETS[-1] >= 900
    # neighbouring bounds at most x2.5 apart: histogram_quantile stays within one bucket of the truth
    for bounds in (TTFT_BUCKETS, TPOT_BUCKETS, E2E_BUCKETS):
        assert max(b / a for a, b in zip(bounds, bounds[1:])) <= 2.5


def test_counts_labels_and_bucket_edges():
    m = ClientMetrics()
    rows = [
        _rec("short", ttft=0.1),  # exactly on a bound: counts in le="0.1"
        _rec("short", ttft=0.2, chunks=(0.2, 0.2, 0.3)),  # two chunks at once: ITL 0
        _rec("long", step=2, ttft=30.0, e2e=100.0, tpot=float("nan"), output=1, chunks=(30.0,)),
        _rec("long", ok=False, error="http_429", ttft=float("nan"), e2e=0.01, prompt=-1, output=-1, chunks=()),
        _rec("short", ok=False, error="stopped", chunks=(0.1, 0.2)),
        _rec("short", ok=False, error="weird_new_class"),
    ]
    m.observe_rows(rows[:3])
    m.observe_rows([list(r) for r in rows[3:]])  # rows after a msgpack round trip are lists
    s = _collect(m)
    assert by_label(s, "llm_requests_total", "outcome", request_class="short") == {"ok": 2, "stopped": 1, "other": 1}
    assert by_label(s, "llm_requests_total", "outcome", request_class="long") == {"ok": 1, "http_429": 1}
    # the step label exists only on step-shape records
    steps = {dict(k).get("step") for k in s["llm_ttft_seconds_count"]}
    assert steps == {None, "2"}
    ttft = by_label(s, "llm_ttft_seconds_count", "request_class")
    assert ttft == {"short": 2, "long": 1}
    short = {dict(k)["le"]: v for k, v in s["llm_ttft_seconds_bucket"].items() if dict(k)["request_class"] == "short"}
    assert short["0.075"] == 0 and short["0.1"] == 1 and short["0.2"] == 2 and short["+Inf"] == 2
    assert math.isclose(by_label(s, "llm_ttft_seconds_sum", "request_class")["short"], 0.3)
    # TPOT only where defined; ITL: every gap of successful requests, 0-gaps in the first bucket
    assert by_label(s, "llm_tpot_seconds_count", "request_class") == {"short": 2}
    assert by_label(s, "llm_itl_seconds_count", "request_class") == {"short": 4}
    itl = {dict(k)["le"]: v for k, v in s["llm_itl_seconds_bucket"].items() if dict(k)["request_class"] == "short"}
    assert itl["0.001"] == 1
    assert by_label(s, "llm_output_tokens_total", "request_class") == {"short": 10, "long": 1}
    assert by_label(s, "llm_prompt_tokens_total", "request_class") == {"short": 20, "long": 10}
    # cumulative buckets never decrease and end at the count
    for name in HISTOGRAMS:
        per_labels: dict = {}
        for k, v in s[name + "_bucket"].items():
            d = dict(k)
            le = float(d.pop("le"))
            per_labels.setdefault(frozenset(d.items()), []).append((le, v))
        for labels, pairs in per_labels.items():
            values = [v for _, v in sorted(pairs)]
            assert values == sorted(values) and values[-1] == s[name + "_count"][labels]


def test_gauges_without_a_runner_and_with_providers():
    from types import SimpleNamespace

    class Env:
        runner = None
        llm = SimpleNamespace(in_flight=lambda: 7, plan=SimpleNamespace(request_rate=12.5))
        shape_class = None
        parsed_options = None

    s = _collect(ClientMetrics(Env()))
    assert s["llm_users"][frozenset()] == 0
    assert s["llm_in_flight_requests"][frozenset()] == 7
    assert s["llm_target_rate"][frozenset()] == 12.5


def test_port_option():
    from argparse import Namespace

    from core.errors import InputError
    from plugin.plan import RunPlan

    def port(text):
        return RunPlan.from_options(Namespace(prometheus_port=text)).prometheus.port

    assert port("0") == 0 and port("9646") == 9646 and port("") == 0
    for bad in ("x", "70000", "-1"):
        with pytest.raises(InputError, match="--prometheus-port"):
            port(bad)


@pytest.mark.process
def test_taken_port_is_a_clear_error(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        log = str(tmp_path / "locust.log")
        proc = locust(
            "--headless",
            "-u",
            "1",
            "-r",
            "1",
            "-t",
            "1s",
            "--sim-profile",
            "fixed",
            "--results-dir",
            str(tmp_path / "results"),
            "--prometheus-port",
            str(port),
            log_path=log,
        )
        rc = wait_exit(proc, 40, log)
    assert rc == 2, tail(log)
    assert f"--prometheus-port: cannot listen on 127.0.0.1:{port}" in tail(log)


# -- end to end ------------------------------------------------------------------------------------


def _check_against_records(samples: dict, results: str) -> int:
    df = pd.read_parquet(
        os.path.join(results, "requests.parquet"),
        columns=["request_class", "ok", "error", "output_tokens", "chunk_times"],
    )
    assert len(df) > 0
    records = df.groupby("request_class").size().to_dict()
    ok = df[df["ok"]]
    assert by_label(samples, "llm_requests_total", "request_class") == {k: float(v) for k, v in records.items()}
    outcomes = df["error"].where(~df["ok"], "ok").value_counts().to_dict()
    assert by_label(samples, "llm_requests_total", "outcome") == {k: float(v) for k, v in outcomes.items()}
    ok_by_class = {k: float(v) for k, v in ok.groupby("request_class").size().items()}
    for name in ("llm_ttft_seconds_count", "llm_e2e_seconds_count"):
        assert by_label(samples, name, "request_class") == ok_by_class, name
    itl = (
        ok.groupby("request_class")["chunk_times"].apply(lambda s: float(sum(max(0, len(c) - 1) for c in s))).to_dict()
    )
    assert by_label(samples, "llm_itl_seconds_count", "request_class") == {k: v for k, v in itl.items() if v}
    out = ok.groupby("request_class")["output_tokens"].sum().to_dict()
    assert by_label(samples, "llm_output_tokens_total", "request_class") == {k: float(v) for k, v in out.items()}
    return len(df)


class Poller:
    """Scrapes a URL every 0.3 s in a thread, keeping the last good scrape taken during the run."""

    def __init__(self, url: str):
        self.url, self.during, self.stop = url, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                self.during.append(scrape(self.url, timeout=1.0))
            except OSError:
                pass
            self.stop.wait(0.3)

    def close(self):
        self.stop.set()
        self.thread.join(3)


def _check_during(scrapes: list, final: dict) -> None:
    """While the run went on: counts grew towards the final ones and stayed self-consistent."""
    live = [s for s in scrapes if s.get("llm_requests_total")]
    assert len(live) >= 2, "no scrape saw records during the run"
    totals = [sum(s["llm_requests_total"].values()) for s in live]
    assert totals == sorted(totals) and totals[-1] <= sum(final["llm_requests_total"].values())
    assert any(s["llm_users"][frozenset()] > 0 for s in live)
    # counted sends minus ends, never more than the users (closed loop), and seen above zero
    assert all(0 <= s["llm_in_flight_requests"][frozenset()] <= max(s["llm_users"][frozenset()], 1) for s in live)
    assert any(s["llm_in_flight_requests"][frozenset()] > 0 for s in live)
    for s in live:
        ok = sum(v for k, v in s["llm_requests_total"].items() if dict(k)["outcome"] == "ok")
        assert sum(s["llm_e2e_seconds_count"].values()) == ok


@pytest.mark.process
def test_local_run_metrics_equal_records(tmp_path, simulator):
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    results = tmp_path / "results"
    log = str(tmp_path / "locust.log")
    proc = locust(
        "--headless",
        "-u",
        "8",
        "-r",
        "8",
        "-t",
        "6s",
        "--host",
        simulator.url,
        "--max-tokens-override",
        "24",
        "--results-dir",
        str(results),
        "--run-id",
        "local",
        "--prometheus-port",
        str(port),
        "--prometheus-linger",
        "4s",
        "--api-key",
        SECRET,
        log_path=log,
    )
    poller = Poller(url)
    try:
        wait_for(str(results / "local" / "summary.json"), proc, 45)
        poller.close()
        final = scrape(url)  # the process lingers: the final counts are still served
        rc = wait_exit(proc, 30, log)
    finally:
        poller.close()
        if proc.poll() is None:
            proc.kill()
    assert rc == 0, tail(log)
    n = _check_against_records(final, str(results / "local"))
    _check_during(poller.during, final)
    assert "llm_worker_cpu_percent" in final and set(by_label(final, "llm_worker_cpu_percent", "worker")) == {"local"}
    assert final["llm_target_rate"][frozenset()] == 0
    for s in poller.during + [final]:
        assert SECRET not in s["_text"] and simulator.url not in s["_text"]
    summary = json.loads((results / "local" / "summary.json").read_text())
    assert summary["records"]["total"] == n


@pytest.mark.process
def test_distributed_run_metrics_equal_records(tmp_path):
    """A real master (serving /metrics, built-in simulator) and one worker process."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    results = tmp_path / "results"
    mlog, wlog = str(tmp_path / "master.log"), str(tmp_path / "worker.log")
    with master_and_workers(
        "-u",
        "8",
        "-r",
        "8",
        "-t",
        "7s",
        "--sim-profile",
        "fixed",
        "--max-tokens-override",
        "24",
        "--results-dir",
        str(results),
        "--run-id",
        "dist",
        "--prometheus-port",
        str(port),
        "--prometheus-linger",
        "4s",
        "--stop-timeout",
        "10",
        expect_workers=1,
        log_path=mlog,
        worker_logs=[wlog],
        start=locust,
    ) as run:
        poller = Poller(url)
        try:
            wait_for(str(results / "dist" / "summary.json"), run.master, 50)
            poller.close()
            final = scrape(url)
            rc = wait_exit(run.master, 30, mlog)
            wait_exit(run.workers[0], 20, wlog)
        finally:
            poller.close()
    assert rc == 0, tail(mlog)
    _check_against_records(final, str(results / "dist"))
    _check_during(poller.during, final)
    live_cpu = [s for s in poller.during if s.get("llm_worker_cpu_percent")]
    assert live_cpu and set(by_label(live_cpu[-1], "llm_worker_cpu_percent", "worker")) == {"0"}
    assert "llm_master_cpu_percent" in final  # the worker has quit by now: no sample for it


@pytest.mark.process
def test_web_ui_mode_serves_metrics(tmp_path):
    """Web UI mode (a run started by --autostart), options from environment variables."""
    port, web_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    results = tmp_path / "results"
    log = str(tmp_path / "locust.log")
    proc = locust(
        "--autostart",
        "--autoquit",
        "4",
        "-u",
        "4",
        "-r",
        "4",
        "-t",
        "4s",
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(web_port),
        "--sim-profile",
        "fixed",
        "--max-tokens-override",
        "16",
        "--results-dir",
        str(results),
        "--run-id",
        "ui",
        log_path=log,
        env={"LOCUST_PROMETHEUS_PORT": str(port), "LOCUST_PROMETHEUS_HOST": "127.0.0.1"},
    )
    poller = Poller(url)
    try:
        wait_for(str(results / "ui" / "summary.json"), proc, 40)
        poller.close()
        final = scrape(url)  # --autoquit keeps the process (and /metrics) up a few seconds
        rc = wait_exit(proc, 30, log)
    finally:
        poller.close()
        if proc.poll() is None:
            proc.kill()
    assert rc == 0, tail(log)
    _check_against_records(final, str(results / "ui"))
    _check_during(poller.during, final)


def test_grafana_dashboard_is_generated_and_uses_the_metrics():
    """deploy/grafana/dashboards/llm-loadtest.json is what deploy/grafana/build_dashboard.py writes."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "build_dashboard", os.path.join(ROOT, "deploy", "grafana", "build_dashboard.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with open(mod.OUT) as f:
        assert json.load(f) == json.loads(json.dumps(mod.dashboard())), "re-run deploy/grafana/build_dashboard.py"
    exprs = " ".join(t["expr"] for p in mod.dashboard()["panels"] for t in p.get("targets", []))
    for name in [
        *HISTOGRAMS,
        "llm_requests_total",
        "llm_output_tokens_total",
        "llm_users",
        "llm_in_flight_requests",
        "llm_target_rate",
        "llm_worker_cpu_percent",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
    ]:
        assert name in exprs, name
