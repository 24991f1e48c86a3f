"""The web form runs what the same options run headless.

The same step ramp against the built-in simulator, once headless and once from the web form
(posted to Locust's /swarm as Locust's page posts it, by a process started without the run's
options: its simulator on the default profile until the form asks for `fixed`). Both runs'
run.json `plan` are the same but for where the results go and the simulator's port, and their
summary.json have the same sections, each with the same keys: the simulator's metrics scraped
(`server_metrics`: a form's run was not scraped) and the knee's diagnosis made in both, checked
against the simulator's own counters.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import urllib.parse
import urllib.request

import pytest

from tests.helpers import LOCUST, ROOT, free_port
from tests.test_webui import _json, _wait, start_group, stop_group

pytestmark = pytest.mark.process

# the run, as options: a step ramp of 1 then 2 users, 4 s each, replies of 20 tokens, an SLO
RUN = {
    "sim_profile": "fixed",
    "steps": "1,2",
    "step_time": "4s",
    "step_warmup": "1s",
    "max_tokens_override": "20",
    "seed": "7",
    "slo": "ttft.p95<5s",
    "run_id": "same",
}
RUN_TIME = "8s"


def _load(folder: str) -> tuple[dict, dict]:
    with open(os.path.join(folder, "run.json")) as f:
        run = json.load(f)
    with open(os.path.join(folder, "summary.json")) as f:
        return run, json.load(f)


def _plan(run: dict) -> dict:
    """The plan, less where its results went and the simulator's port (each process has its own)."""
    plan = dict(run["plan"])
    plan.pop("results_dir")
    plan["server_metrics"] = [re.sub(r":\d+/", ":PORT/", u) for u in plan["server_metrics"]]
    return plan


def test_the_web_form_runs_what_headless_runs(tmp_path):
    headless_dir, form_dir = tmp_path / "headless", tmp_path / "form"
    args = [a for k, v in RUN.items() for a in (f"--{k.replace('_', '-')}", v)]
    done = subprocess.run(
        [*LOCUST, "--headless", "-t", RUN_TIME, "--results-dir", str(headless_dir), "--stop-timeout", "5", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert os.path.exists(headless_dir / "same" / "summary.json"), done.stderr[-3000:]

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = str(tmp_path / "web.log")
    proc = start_group("--web-host", "127.0.0.1", "--web-port", str(port), "--stop-timeout", "5", log_path=log)
    try:
        _wait(lambda: _json(base + "/stats/requests")["state"] == "ready", 60, "the web UI", proc, log)
        form = urllib.parse.urlencode(
            {"user_count": 1, "spawn_rate": 1, "run_time": RUN_TIME, "results_dir": str(form_dir), **RUN}
        ).encode()
        with urllib.request.urlopen(urllib.request.Request(base + "/swarm", data=form), timeout=60) as r:
            answer = json.loads(r.read())
        assert answer["success"], answer
        _wait(lambda: glob.glob(str(form_dir / "same" / "report.html")), 90, "the form's run and its report", proc, log)
        sim = re.search(r"built-in simulator at (http://\S+)", open(log).read()).group(1)
        with urllib.request.urlopen(sim + "/metrics", timeout=10) as r:
            finished = sum(
                float(line.rsplit(" ", 1)[1])
                for line in r.read().decode().splitlines()
                if line.startswith("vllm:request_success_total")
            )
    finally:
        stop_group(proc)

    (h_run, h_sum), (f_run, f_sum) = _load(str(headless_dir / "same")), _load(str(form_dir / "same"))
    assert f_run["started_from"] == "web form"
    assert _plan(f_run) == _plan(h_run)
    assert f_run["plan"]["server_metrics"] == [sim + "/metrics"] and f_run["plan"]["sim_profile"] == "fixed"
    assert sorted(f_sum) == sorted(h_sum)
    for key, section in h_sum.items():
        other = f_sum[key]
        assert type(other) is type(section), (key, section, other)
        if isinstance(section, dict) and key not in ("by_class", "gpu"):
            assert sorted(other) == sorted(section), key
    assert (
        [(s["step"], s["users"]) for s in f_sum["by_step"]]
        == [(s["step"], s["users"]) for s in h_sum["by_step"]]
        == [(0, 1), (1, 2)]
    )
    for summary in (h_sum, f_sum):
        # the simulator scraped: the requests it counted as finished (the only run on the form's simulator)
        sources = summary["server_metrics"]["by_source"]
        assert summary["server_metrics"]["scrapes"] >= 2 and len(sources) == 1
        assert summary["diagnosis"] and summary["diagnosis"]["kind"] and summary["diagnosis"]["sentence"]
    (source,) = f_sum["server_metrics"]["by_source"].values()
    assert (
        source["counter_deltas"]["vllm:request_success_total"]
        == finished
        == f_sum["server_metrics"]["client_counts"]["requests_ok"]
        > 0
    )
