"""Each limit the diagnosis names, produced by a simulator profile built to hit it
(simulator/profiles/{memory,scheduler,prefill,compute,front-end}-bound.yaml) and named from a real run with
--server-metrics: a two-level step ramp with the profile's SLO (bench/diagnosis_accuracy.py, which
measures how often over seeded runs). The figures it quotes agree with the server's configuration
and with its truth log; the same runs carry vLLM's per-request metrics, and their TTFT split agrees
with the truth log and adds up."""

from __future__ import annotations

import math
import os

import pandas as pd
import pytest

from bench.diagnosis_accuracy import locust_args
from tests.helpers import read_results, read_truth, run_locust, simulator


@pytest.mark.process
@pytest.mark.timing  # the levels' queues and step times are the simulator's, kept on time by a CPU to spare
@pytest.mark.parametrize(
    "limit", ["memory-bound", "scheduler-bound", "prefill-bound", "compute-bound", "front-end-bound"]
)
def test_a_simulator_limit_is_named_with_the_figures_it_rests_on(tmp_path, limit):
    truth_path = tmp_path / "truth.jsonl"
    with simulator("--profile", limit, truth_log=str(truth_path)) as url:
        proc = run_locust(*locust_args(limit, url, str(tmp_path), "r", 1), timeout=120)
    records, summary = read_results(str(tmp_path), "r")
    d = summary["diagnosis"]
    assert d["kind"] == limit and d["users"] == 24, (d["sentence"], proc.stderr[-2000:])
    low, knee = d["levels"]
    assert knee["scrapes"] >= 4 and knee["window_start"] >= low["window_start"]
    cfg = d["config"]  # the server's own statement of its limits, as its profile sets them
    truth = pd.DataFrame(read_truth(str(truth_path)))
    sent = truth[truth["outcome"] == "ok"]
    # a cap is never above the level's users: the running peak within 24, and within max_num_seqs
    assert knee["running_peak"] <= min(24, cfg["max_num_seqs"]) and knee["running"] <= knee["running_peak"]
    if limit == "memory-bound":
        assert cfg["num_gpu_blocks"] == 320 and f"KV cache of {cfg['num_gpu_blocks']:,.0f} blocks" in d["sentence"]
        assert knee["kv_cache_peak"] >= 0.9 or knee["preemptions"] > 0, knee
        assert knee["preemptions"] <= sent["preemptions"].sum()  # counted inside the window, of the run's
        assert any("vllm:num_preemptions_total" in e for e in d["evidence"]) and any(
            "vllm:kv_cache_usage_perc peak" in e for e in d["evidence"]
        )
    elif limit == "scheduler-bound":
        assert (
            cfg["max_num_seqs"] == 8
            and "8 run at the peak" in d["sentence"]
            and "at most 8 (its max_num_seqs)" in d["sentence"]
        )
        assert knee["running_peak"] == 8 and knee["waiting"] >= 1 and knee["kv_cache_peak"] < 0.1, knee
        assert any(
            "max_num_seqs 8 (vllm:cache_config_info, llm_simulator_scheduler_config_info)" in e for e in d["evidence"]
        )
    elif limit == "prefill-bound":
        budget = cfg["max_num_batched_tokens"]
        assert knee["step_tokens"] >= 0.8 * budget and knee["running_peak"] < cfg["max_num_seqs"], knee
        assert knee["step_ms"] < 1.5 * low["step_ms"] and knee["ttft_ms"] > 2 * low["ttft_ms"], (low, knee)
        assert any("vllm:iteration_tokens_total_sum / vllm:iteration_tokens_total_count" in e for e in d["evidence"])
    elif limit == "front-end-bound":
        # the first token later, the engine's own share as short as at 2 users, against the truth log's
        # queue and prefill (scheduled to first token) of the same requests
        assert knee["ttft_ms"] - low["ttft_ms"] >= 100 and knee["running_peak"] < cfg["max_num_seqs"], (low, knee)
        engine_ms = 1000 * (sent["queue_time"] + sent["first_token"] - sent["scheduled"])
        wait_ms = 1000 * (sent["first_token"] - sent["arrival"])
        assert engine_ms.mean() < 50 and wait_ms.quantile(0.9) > 200, (engine_ms.mean(), wait_ms.quantile(0.9))
        assert knee["queue_ms"] + knee["prefill_ms"] < 50, knee
        assert "outside the engine" in d["sentence"]
    else:
        assert knee["step_ms"] >= 1.5 * low["step_ms"] and knee["running"] > low["running"], (low, knee)
        assert knee["queue_ms"] <= 2 * knee["step_ms"], knee  # nothing waits but for the step in progress
    # vLLM's per-request metrics in every record, equal to the truth log's times; the split adds up
    ok = records[records["ok"]].set_index("request_id")
    both = ok.merge(sent.set_index("request_id"), left_index=True, right_index=True, suffixes=("", "_truth"))
    assert len(both) == len(ok) > 20
    assert (both["server_queue_s"] - both["queue_time"]).abs().max() < 2e-3
    assert (both["server_ttft_s"] - (both["first_token"] - both["scheduled"])).abs().max() < 2e-3
    split = summary["overall"]["ttft_split"]
    # the split counts every request: each carries the server's timing (a request that arrived while
    # the engine's loop was late planning a step once read as scheduled before it was queued, a
    # negative queue time the client rightly leaves out)
    assert ok["server_queue_s"].notna().all() and ok["server_ttft_s"].notna().all()
    assert split["requests"] == summary["overall"]["requests"]["ok"], split
    assert math.isclose(split["queue_ms"] + split["prefill_ms"] + split["rest_ms"], split["ttft_ms"], rel_tol=1e-9)
    assert split["rest_ms"] >= 0  # the front end, the network and the client come on top of the server's figures
    # the console and the report say it, with what it rests on
    assert f"Why the knee is there: {d['sentence']}" in proc.stdout
    md = open(os.path.join(tmp_path, "r", "report.md"), encoding="utf-8").read()
    line = next((x for x in md.splitlines() if x.startswith("**Why the knee is there:**")), "")
    assert line.startswith(f"**Why the knee is there:** {d['sentence']} (rests on: "), line
    assert "### The server at each level" in md
