"""Every run states its load and its target (plugin/setup.py): summary.json's typed `setup`, the
first rows of report.html and report.md, the live view's run block."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import read_results, run_locust, simulator

pytestmark = pytest.mark.process


def test_every_report_states_its_load_and_target_without_credentials(tmp_path):
    """A run of 3 users on 2 worker processes against a URL carrying a user and password: the
    setup names the load, the time, the workload and its hash, the server without the password,
    the model, the client's processes and the suite's version; so do both reports, first."""
    with simulator("--profile", "fixed") as url:
        host = url.replace("http://", "http://someone:s3cret@")
        proc = run_locust(
            "--host",
            host,
            "-u",
            "3",
            "-r",
            "3",
            "-t",
            "4s",
            "--processes",
            "2",
            "--slo",
            "ttft.p50<2s",
            "--max-tokens-override",
            "6",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "s",
            "--stop-timeout",
            "10",
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, summary = read_results(str(tmp_path), "s")
    setup = summary["setup"]
    run = json.load(open(os.path.join(tmp_path, "s", "run.json")))
    assert setup["load"] == {"kind": "closed", "text": "closed loop", "users": 3, "parameters": {}}
    assert setup["run_time_s"] == 4.0 and 3.0 < setup["measured_s"] < 6.0 and setup["slo"] == ["ttft.p50<2s"]
    assert setup["workload"] == "reference-mix" and setup["workload_hash"] == run["workload"]["hash"]
    assert setup["server"] == url and setup["model"] == "sim-model"
    assert setup["workers"] == 2 and len(setup["client_hosts"]) == 1 and setup["suite_version"]
    assert setup["suite_version"] == run["versions"]["suite"]  # read once, as the run started (run.json)
    md = open(os.path.join(tmp_path, "s", "report.md")).read()
    html = open(os.path.join(tmp_path, "s", "report.html")).read()
    head = md.split("\n\n")[1]  # the line under the title: the first thing read
    assert head.startswith("**load** closed loop, 3 users · **time** -t 4 s"), head
    assert f"content hash {setup['workload_hash'][:12]}" in head and f"**server** {url} serving sim-model" in head
    assert "2 processes running users" in head
    first = html[: html.index("<h2>")]  # before the first section: the page's first screen
    assert "closed loop, 3 users" in first and setup["workload_hash"][:12] in first and url in first
    for text in (md, html, json.dumps(summary), json.dumps(run)):
        assert "s3cret" not in text
