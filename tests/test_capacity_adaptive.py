"""The adaptive capacity search end to end, against a server whose capacity is known by its
construction and checked in its own truth log: a batch engine with 6 slots, where a 7th user waits
a whole reply (0.6 s) for a slot, far over a TTFT P95 of 150 ms. Levels far under the threshold
are passed after one look (and jumped past x4), each level ends at the look that decides it, and
the answer's interval covers the truth."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import read_results, read_truth, run_locust, simulator

pytestmark = [pytest.mark.process, pytest.mark.timing]  # verdicts on TTFTs the CPU's load can stretch

PROFILE = (
    "kind: batch\nscheduler: chunked\nmax_num_seqs: 6\nnum_gpu_blocks_override: 62500\nmax_num_batched_tokens: 8192\n"
    "step_base_s: 0.02\nper_seq_s: 0.0\nper_prefill_token_s: 0.0\nmax_model_len: 100000\n"
)
SLOTS = 6


def test_the_adaptive_search_ends_levels_once_decided_and_its_interval_covers_the_truth(tmp_path):
    profile = tmp_path / "six.yaml"
    profile.write_text(PROFILE)
    truth_log = str(tmp_path / "truth.jsonl")
    with simulator("--profile", str(profile), truth_log=truth_log) as url:
        proc = run_locust(
            "--host",
            url,
            "--find-capacity",
            "--slo",
            "ttft.p95<150ms",
            "--step-time",
            "8s",
            "--step-warmup",
            "2s",
            "-t",
            "60s",  # the search ends by itself in about 30 s; a crowded machine held its 6 users 22 s once
            "--max-users",
            "16",
            "--max-tokens-override",
            "30",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "cap",
            "--stop-timeout",
            "5",
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, summary = read_results(str(tmp_path), "cap")
    cap = summary["capacity"]

    # before it starts: what a level needs to be decided, and the ceiling (22 s judged at most: the looks at
    # 1/16 and 1/8 of it both fall at the shortest judged part, 4 s, so 4 looks, each at 98 %)
    assert "ttft.p95 needs 77 values per level to be met (98% bounds at each of up to 4 looks)" in proc.stderr
    assert "it tries 16 users at most" in proc.stderr

    # the truth: the simulator queued no request of the answer's level for a slot, and some of the lowest missed
    truth = {t["request_id"]: t for t in read_truth(truth_log)}
    levels = {s["users"]: s for s in summary["by_step"]}

    def queue_times(users: int) -> np.ndarray:
        level = levels[users]
        sent = df[(df["wall_send"] >= level["window"]["start"]) & (df["wall_send"] <= level["window"]["end"])]
        return np.array([truth[r]["queue_time"] or 0.0 for r in sent["request_id"] if r in truth])

    assert cap["users"] <= SLOTS < cap["next_failing_users"], cap["sentence"]
    assert queue_times(cap["users"]).max() < 0.05
    assert np.mean(queue_times(cap["next_failing_users"]) > 0.15) > 0.05  # over 5 % waited past the threshold

    # the answer says how sure it is, and how it got there
    assert cap["policy"] == "adaptive" and cap["interval_confidence"] == pytest.approx(0.8)
    assert cap["precision_reached"] and not cap["timed_out"] and cap["width"] <= 1 / cap["users"] + 1e-9
    tried = [lv["users"] for lv in cap["levels"]]
    # 1 user's first tokens are under a quarter of 150 ms: the probe jumps x4, then x2 from 4 (over a quarter)
    assert tried[:3] == [1, 4, 8] and len(set(tried)) == len(tried)
    assert all(lv["ended"] in ("short", "passed", "decided") for lv in cap["levels"]), cap[
        "levels"
    ]  # none held, none cut
    decided = [lv for lv in cap["levels"] if lv["ended"] == "decided"]
    assert all((lv["margin"] > 0) == (lv["state"] == "met") for lv in decided)
    assert min(lv["seconds"] for lv in decided) < 8, "no level ended before a fixed --step-time would have"
    assert f"from {cap['users']} to under {cap['next_failing_users']} users at 80% confidence" in cap["sentence"]
    assert "levels tried (adaptive): 1 " in cap["sentence"]
    for lv in decided:  # each level's verdict in summary.json is the one the search decided on, at 98 % per look
        v = levels[lv["users"]]["verdict"]
        assert (v["state"], v["confidence"]) == (lv["state"], pytest.approx(0.98)), (v, lv)
    # the levels either side of the answer, bounded by their own values; the answer is the capacity, not a
    # verdict pooled over the levels the search had to fail
    met, missed = levels[cap["users"]]["verdict"], levels[cap["next_failing_users"]]["verdict"]
    assert met["objectives"][0]["upper_ms"] < 150 <= missed["objectives"][0]["lower_ms"], (met, missed)
    assert cap["samples"] == met["requests"]
    assert summary.get("slo") is None and "MISSED (measured" not in proc.stdout
    assert "holds up to" in proc.stdout
    # what it said before it started stays with the answer: summary.json and the report
    assert "ttft.p95 needs 77 values per level to be met" in cap["precheck"] and "16 users at most" in cap["precheck"]
    report = (tmp_path / "cap" / "report.md").read_text(encoding="utf-8")
    assert f"Before it started: {cap['precheck']}" in report
