"""A capacity search judges its TTFT objectives on first tokens (metrics/verdict.py): against a
simulator whose replies (8 s) are longer than a level's judged part, a level is decided from the
first tokens of requests that had not ended by its cut (the requests that had ended: none, which
left it undecided for want of values), the queued requests still waiting at the cut prove a miss
by their minimums, and the live search, summary.json and the simulator's truth log say the same
for every level, with one process and with a worker."""

from __future__ import annotations

import re

import numpy as np
import pytest

from metrics.slo import parse_slo
from metrics.verdict import judge_objective
from tests.helpers import master_and_workers, read_results, read_truth, run_locust, simulator, stop

pytestmark = [pytest.mark.process, pytest.mark.timing]  # replies timed against the levels' cuts: tests/conftest.py

# 8 slots, one token per engine step of 20 ms: 425 tokens are an 8.5 s reply, whatever the batch;
# a request beyond the 8 slots waits for one to free (its TTFT then grows by seconds)
PROFILE = (
    "kind: batch\nscheduler: chunked\nmax_num_seqs: 8\nnum_gpu_blocks_override: 62500\nmax_num_batched_tokens: 8192\n"
    "step_base_s: 0.02\nper_seq_s: 0.0\nper_prefill_token_s: 0.0\nmax_model_len: 100000\n"
)
SLO = "ttft.p50<500ms"  # a P50 is met on 4 values at 90 %
# Levels of 16 s, the first 2 s a warm-up; the level's cut at 16 s (12 s with workers). 8 users (one
# per slot): a user's first request goes in the warm-up, its second (at ~8.8 s) in the window, its
# first token 20 ms later and its end (~17.3 s) after the cut: no request of the level ends by it.
# Then 24 users: 16 wait for a slot; those sent in the window (~25.8 s, as the first to get a slot
# end) are all still waiting at the cut (28 s, 32 s), seconds after their send.
ARGS = (
    "--find-capacity",
    "--capacity-policy",
    "walk",
    "--steps",
    "8,24",
    "--slo",
    SLO,
    "--step-time",
    "16s",
    "--step-warmup",
    "2s",
    "-t",
    "40s",
    "--max-tokens-override",
    "425",
    "--stop-timeout",
    "2",
)


def truth_set(df, level: dict, truth: dict) -> tuple[np.ndarray, np.ndarray]:
    """The level's first-token set from the simulator's own first-token times: (values, censored
    minimums) of the requests of its steps sent from its window's start to its cut less the
    objective's threshold."""
    cut, start = level["cut"], level["window"]["start"]
    first, last = level["step"], level["step"] + level["steps"] - 1
    by = cut - parse_slo(SLO)[0].threshold_s  # sent up to the cut less the threshold
    sel = df[(df["step"] >= first) & (df["step"] <= last) & (df["wall_send"] >= start) & (df["wall_send"] <= by)]
    values, censored = [], []
    for r in sel.itertuples():
        t = truth.get(r.request_id, {}).get("first_token")
        ttft = None if t is None else t - r.t_send  # both perf_counter clocks of this machine
        ended = r.wall_send + (r.e2e_s if r.e2e_s == r.e2e_s else 0.0) <= cut
        if ended and not r.ok:
            continue  # a failure
        if ttft is not None and r.wall_send + ttft <= cut:
            values.append(ttft)
        else:
            censored.append(cut - r.wall_send)
    return np.array(values), np.array(censored)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_search_with_long_replies_is_decided_on_first_tokens_live_as_after_and_as_the_truth(tmp_path, workers):
    profile = tmp_path / "slots.yaml"
    profile.write_text(PROFILE)
    truth_log = str(tmp_path / "truth.jsonl")
    args = ["--results-dir", str(tmp_path), "--run-id", "cap", *ARGS]
    with simulator("--profile", str(profile), truth_log=truth_log) as url:
        if not workers:
            proc = run_locust("--host", url, *args, timeout=200)
            assert proc.returncode == 0, proc.stderr[-3000:]
            log = proc.stderr
        else:
            master_log = tmp_path / "master.log"
            with master_and_workers(
                "--host", url, *args, expect_workers=1, log_path=str(master_log), worker_logs=[None]
            ) as run:
                assert stop(run.master, timeout=200) == 0, master_log.read_text()[-3000:]
            log = master_log.read_text()
    df, summary = read_results(str(tmp_path), "cap")
    truth = {t["request_id"]: t for t in read_truth(truth_log)}
    levels = {s["users"]: s for s in summary["by_step"]}
    assert sorted(levels) == [8, 24], summary["by_step"]
    first, more = levels[8], levels[24]

    # 8 users: decided after one step on first tokens, where no request had ended by the cut
    v = first["verdict"]
    assert first["steps"] == 1 and v["state"] == "met", v
    assert v["requests"] < 4 <= v["objectives"][0]["samples"], v  # the ended set could not bound a P50
    assert v["objectives"][0]["censored"] == 0 and v["objectives"][0]["upper_ms"] < 500, v
    # 24 users: the requests queued for a slot prove the miss, those still waiting by their minimum
    w = more["verdict"]
    assert w["state"] == "missed" and w["objectives"][0]["lower_ms"] >= 500, (w, log[-3000:])
    assert summary["capacity"]["users"] == 8 and summary["capacity"]["next_failing_users"] == 24

    # live: the search's log line for each level says the verdict and the values of summary.json
    logged = re.findall(
        r"capacity search: (\d+) users (met|missed|undecided) on (\d+) requests.*?"
        r"ttft\.p50 [^(]*\(90 ?% bounds .*? ms, (\d+) values(?:, (\d+) still waiting at the cut)?\)",
        log,
    )
    assert len(logged) == 2, log[-3000:]
    for users, state, requests, samples, waiting in logged:
        e = levels[int(users)]["verdict"]
        assert (state, int(requests)) == (e["state"], e["requests"]), (logged, e)
        assert (int(samples), int(waiting or 0)) == (e["objectives"][0]["samples"], e["objectives"][0]["censored"]), (
            logged,
            e,
        )

    # the truth: the same sets from the simulator's own first-token times give the same verdicts
    objective = parse_slo(SLO)[0]
    for level in (first, more):
        values, censored = truth_set(df, level, truth)
        true = judge_objective(objective, values, censored_s=censored)
        e = level["verdict"]["objectives"][0]
        assert (true.state, true.samples, true.censored) == (e["state"], e["samples"], e["censored"]), (
            level["users"],
            true,
            e,
        )
        # the level's TTFT figures (the per-step table's) are that set's: the simulator's own P50
        # within the client's few milliseconds of read time
        assert level["ttft_ms"]["count"] == true.samples, (level["ttft_ms"], true)
        assert abs(level["ttft_ms"]["p50"] - true.value_ms) < 5.0, (level["users"], level["ttft_ms"], true)
