"""A step ramp with --slo is judged per level, as a capacity search is: no verdict pooled over all
its steps. The run-wide answer is the highest level that met the SLO below the lowest that missed
it, and the console, summary.json, the report, JUnit and the exit code say the same."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

import pytest

from plugin import exit_codes
from tests.helpers import read_results, run_locust, simulator
from tests.test_ci_recipes import junit_cases

# 6 slots: 2 users are served at once (TTFT about one 20 ms step); 24 users queue for a slot
SIX_SLOTS = (
    "kind: batch\nscheduler: chunked\nmax_num_seqs: 6\nnum_gpu_blocks_override: 62500\nmax_num_batched_tokens: 8192\n"
    "step_base_s: 0.02\nper_seq_s: 0.0\nper_prefill_token_s: 0.0\nmax_model_len: 4096\n"
)


@pytest.mark.process
def test_a_step_ramp_answers_with_the_highest_level_met_and_exits_on_it(tmp_path):
    """2 users meet ttft.p95<150ms, 24 miss it: the run met the SLO up to 2 users and exits 0. The old
    code pooled both steps into one verdict (missed: the 24-user step's queueing) and exited 3."""
    profile = tmp_path / "six.yaml"
    profile.write_text(SIX_SLOTS)
    junit = str(tmp_path / "junit.xml")
    with simulator("--profile", str(profile)) as url:
        proc = run_locust(
            "--host",
            url,
            "--steps",
            "2,24",
            "--step-time",
            "6s",
            "--step-warmup",
            "1s",
            "--slo",
            "ttft.p95<150ms",
            "--max-tokens-override",
            "5",
            "--junit",
            junit,
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "r",
            "--stop-timeout",
            "10",
            timeout=120,
        )
    _, summary = read_results(str(tmp_path), "r")
    states = [(s["users"], s["verdict"]["state"]) for s in summary["by_step"]]
    assert states == [(2, "met"), (24, "missed")], (states, proc.stderr[-3000:])
    assert proc.returncode == exit_codes.DONE, proc.stderr[-3000:]
    assert (
        summary.get("slo") is None and summary["overall"]["slo"]["passed"] is False
    )  # pooled figures kept, not a verdict
    cap = summary["capacity"]
    assert (cap["users"], cap["next_failing_users"]) == (2, 24)
    assert f"Capacity: {cap['sentence']}" in proc.stdout and "holds up to 2 users" in cap["sentence"]
    assert "MISSED (measured" not in proc.stdout  # no pooled objective line
    assert junit_cases(junit)["ttft.p95<150ms"] == (None, cap["sentence"])
    classes = [c.get("classname") for c in ET.parse(junit).getroot().iter("testcase")]
    assert classes.count("llm.capacity") == 1 and "llm.slo" not in classes
    md = open(os.path.join(tmp_path, "r", "report.md"), encoding="utf-8").read()
    assert f"**Capacity:** {cap['sentence']}" in md and "### SLO" not in md
