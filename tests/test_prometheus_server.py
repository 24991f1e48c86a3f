"""A real Prometheus server (Debian's `prometheus` package) scrapes the suite and the simulator.

The scrape configuration is deploy/prometheus/prometheus.yml with its compose targets replaced by
127.0.0.1 ports and a 1 s interval. After a short run, Prometheus's HTTP API must give the same
request count as the records and `histogram_quantile(0.95, ...)` of the client TTFT histogram within
one bucket of the exact P95 in summary.json; every query of the Grafana dashboard must return data
from a distributed run.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse

import pandas as pd
import pytest
import yaml

from plugin.prometheus import TTFT_BUCKETS
from tests.test_prometheus import NO_PROXY, ROOT, Simulator, free_port, locust, simulator, tail, wait_exit, wait_for  # noqa: F401 (fixture)

PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(
        PROMETHEUS is None, reason="needs the prometheus binary (apt-get install prometheus; .ci/run does)"
    ),
]


def scrape_config(client: str, server: str) -> dict:
    """deploy/prometheus/prometheus.yml, pointed at local ports, scraping every second."""
    with open(os.path.join(ROOT, "deploy", "prometheus", "prometheus.yml")) as f:
        config = yaml.safe_load(f)
    config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    targets = {"llm-loadtest": client, "llm-server": server}
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    assert jobs == set(targets), jobs
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": [targets[job["job_name"]]]}]
    return config


class Prometheus:
    def __init__(self, tmp_path, config: dict):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        conf = tmp_path / "prometheus.yml"
        conf.write_text(yaml.safe_dump(config))
        self.log = str(tmp_path / "prometheus.log")
        cmd = [
            PROMETHEUS,
            f"--config.file={conf}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        self.proc = subprocess.Popen(cmd, stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while True:
            assert self.proc.poll() is None, "prometheus exited:\n" + tail(self.log)
            try:
                with NO_PROXY.open(self.url + "/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "prometheus not ready:\n" + tail(self.log)
            time.sleep(0.2)

    def query(self, expr: str, at: float | None = None) -> list:
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        with NO_PROXY.open(f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=5) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]["result"]

    def range_query(self, expr: str, start: float, end: float, step: float) -> list:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        with NO_PROXY.open(f"{self.url}/api/v1/query_range?{urllib.parse.urlencode(params)}", timeout=5) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]["result"]

    def scalar(self, expr: str, at: float | None = None) -> float | None:
        result = self.query(expr, at)
        return float(result[0]["value"][1]) if result else None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _bucket(value: float) -> int:
    """Index of the histogram bucket holding `value` (le semantics)."""
    return bisect.bisect_left(TTFT_BUCKETS, value)


def test_prometheus_scrapes_client_and_server(tmp_path, simulator):  # noqa: F811 (the fixture)
    client_port = free_port()
    prom = Prometheus(tmp_path, scrape_config(f"127.0.0.1:{client_port}", simulator.hostport))
    results = tmp_path / "results"
    log = str(tmp_path / "locust.log")
    try:
        proc = locust(
            "--headless",
            "-u",
            "10",
            "-r",
            "10",
            "-t",
            "8s",
            "--host",
            simulator.url,
            "--max-tokens-override",
            "24",
            "--results-dir",
            str(results),
            "--run-id",
            "prom",
            "--prometheus-port",
            str(client_port),
            "--prometheus-linger",
            "6s",
            log_path=log,
        )
        t0 = time.time()
        try:
            rc = wait_exit(proc, 60, log)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert rc == 0, tail(log)
        summary = json.loads((results / "prom" / "summary.json").read_text())
        records = pd.read_parquet(
            results / "prom" / "requests.parquet", columns=["ok", "request_class", "output_tokens", "ttft_s"]
        )
        output = int(records["output_tokens"].clip(lower=0).sum())

        # The simulator is still up: wait until Prometheus has its final counters.
        deadline, gen = time.monotonic() + 10, None
        while time.monotonic() < deadline:
            gen = prom.scalar("sum(vllm:generation_tokens_total)")
            if gen == output:
                break
            time.sleep(0.3)
        assert gen == output, f"server generation tokens {gen}, client {output}"

        # The master is gone; it served its final counts for --prometheus-linger 6s (1 s scrapes).
        # Find the last moment Prometheus held them, and ask everything else at that moment.
        series = prom.range_query("sum(llm_requests_total)", t0, time.time(), 0.25)
        assert series, "Prometheus never scraped the client"
        final = [float(t) for t, v in series[0]["values"] if float(v) == len(records)]
        assert final, f"Prometheus saw {series[0]['values'][-1][1]} requests at most; the records hold {len(records)}"
        at = final[-1]

        # per class and outcome, exactly the records
        per_class = {
            r["metric"]["request_class"]: float(r["value"][1])
            for r in prom.query("sum by (request_class) (llm_requests_total)", at)
        }
        assert per_class == {k: float(v) for k, v in records.groupby("request_class").size().items()}
        ok = prom.scalar('sum(llm_requests_total{outcome="ok"})', at)
        assert ok == int(records["ok"].sum()) == prom.scalar("sum(llm_ttft_seconds_count)", at)

        # P95 TTFT from the histogram (whole run: cumulative buckets) vs the exact P95 of the records
        estimate = prom.scalar("histogram_quantile(0.95, sum by (le) (llm_ttft_seconds_bucket))", at)
        exact = summary["overall"]["ttft_ms"]["p95"] / 1000.0
        assert abs(_bucket(estimate) - _bucket(exact)) <= 1, (estimate, exact)
        for cls, section in summary["by_class"].items():
            est = prom.scalar(
                f'histogram_quantile(0.95, sum by (le) (llm_ttft_seconds_bucket{{request_class="{cls}"}}))', at
            )
            # the histogram holds every ok record of the class (the window's P95 leaves the warm-up out, and
            # a class of a few dozen records moves its P95 across buckets with it)
            counted = records[records["ok"] & (records["request_class"] == cls)]["ttft_s"].dropna()
            truth = float(counted.quantile(0.95, interpolation="higher"))
            assert abs(_bucket(est) - _bucket(truth)) <= 1, (cls, est, truth, section["ttft_ms"]["p95"])

        assert prom.scalar("max_over_time(llm_users[30s])", at) == 10

    finally:
        prom.stop()


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of the provisioned Grafana dashboard, and its variable's."""
    with open(os.path.join(ROOT, "deploy", "grafana", "dashboards", "llm-loadtest.json")) as f:
        dashboard = json.load(f)
    out = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]
    for v in dashboard["templating"]["list"]:  # label_values(METRIC, LABEL): that metric's series
        out.append((f"variable {v['name']}", re.match(r"label_values\(([^,]+),", v["query"]).group(1)))
    return out


def test_every_grafana_dashboard_query_has_data_from_a_real_run(tmp_path):
    """The dashboard of deploy/grafana, proven without Grafana: each of its queries, as Grafana sends
    it (the panel's rate interval and "All" classes), run against the Prometheus that scraped a
    distributed run (a master and two worker processes, so the master's and the workers' CPU
    panels have series) and the simulator, and each returns data above 0 (the target rate is 0 in
    a closed-loop run, by definition). The run lasts 24 s: Locust measures a process's CPU every
    10 s, and its first reading is 0."""
    sim = Simulator("v100-7b-tp8")  # a batching profile: running, waiting and KV-cache gauges move
    client_port = free_port()
    prom = Prometheus(tmp_path, scrape_config(f"127.0.0.1:{client_port}", sim.hostport))
    log = str(tmp_path / "locust.log")
    try:
        proc = locust(
            "--headless",
            "--processes",
            "2",
            "-u",
            "12",
            "-r",
            "12",
            "-t",
            "24s",
            "--host",
            sim.url,
            "--max-tokens-override",
            "32",
            "--results-dir",
            str(tmp_path / "results"),
            "--run-id",
            "dash",
            "--prometheus-port",
            str(client_port),
            "--prometheus-linger",
            "4s",
            log_path=log,
        )
        try:
            assert wait_exit(proc, 120, log) == 0, tail(log)
        finally:
            if proc.poll() is None:
                proc.kill()
        end = time.time()
        queries = dashboard_queries()
        assert len(queries) >= 25
        shown = []
        for title, expr in queries:
            q = expr.replace("$__rate_interval", "4s").replace("$request_class", ".*")
            # what a panel over the last 40 s draws: any point of the series at a 1 s step
            series = prom.range_query(q, end - 40, end, 1)
            values = [float(v) for s in series for _, v in s["values"] if v not in ("NaN", "+Inf", "-Inf")]
            assert values, f"{title}: no data for {q}"
            assert max(values) > 0 or expr == "llm_target_rate", f"{title}: only zeros for {q}"
            shown.append(f"{title}: {expr[:60]} -> {len(series)} series, max {max(values):.4g}")
        print("\n".join(shown))  # the evidence, with -s
    finally:
        prom.stop()
        sim.stop()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (Debian's prometheus package)")
def test_compose_scrape_config_is_valid():
    out = subprocess.run(
        ["promtool", "check", "config", os.path.join(ROOT, "deploy", "prometheus", "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stdout + out.stderr
