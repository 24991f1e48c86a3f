"""Several replicas, each with its own limit: the suite spreads a two-level step ramp over two
simulators alike but for their KV cache (one tight, one roomy), scrapes each one's /metrics, and
(1) diagnoses each replica from its own records and its own gauges, right against each simulator's
truth log (the tight one preempted, the roomy one never), naming the replica whose limit differs
in summary.json's `backends` and in the report; (2) while the run goes on, the web UI's live
snapshot flags the replica slowed by its queue, by the rule summary.json's flags follow, and the
console says so once."""

from __future__ import annotations

import json
import os
import time
import urllib.request

import pandas as pd
import pytest

from tests.helpers import free_port, read_results, read_truth, simulator, start_locust

# simulator/profiles/memory-bound.yaml with the KV cache as a parameter: 200 blocks of 16 tokens
# (3,200 tokens: the default mix's longest prompt and its reply fit) hold about half of the run's
# 16 users per replica, the others wait; 8,192 never fill
PROFILE = """kind: batch
scheduler: chunked
max_num_seqs: 64
max_num_batched_tokens: 4096
max_model_len: 3200
block_size: 16
num_gpu_blocks_override: {blocks}
step_base_s: 0.02
per_seq_s: 0.0002
per_prefill_token_s: 0.00002
enable_prompt_tokens_details: true
enable_per_request_metrics: true
"""


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


@pytest.mark.process
@pytest.mark.timing  # the tight replica's queue and the live view's seconds are the simulators', on time with a CPU to spare
def test_each_replica_is_diagnosed_from_its_own_metrics_and_a_slowed_one_is_flagged_live(tmp_path):
    profiles = {}
    for name, blocks in (("tight", 200), ("roomy", 8192)):
        profiles[name] = tmp_path / f"{name}.yaml"
        profiles[name].write_text(PROFILE.format(blocks=blocks))
    truths = {name: str(tmp_path / f"{name}.jsonl") for name in profiles}
    port = free_port()
    base, log = f"http://127.0.0.1:{port}", str(tmp_path / "locust.log")
    with (
        simulator("--profile", str(profiles["tight"]), truth_log=truths["tight"]) as tight,
        simulator("--profile", str(profiles["roomy"]), truth_log=truths["roomy"]) as roomy,
    ):
        proc = start_locust(
            *("--host", f"{tight},{roomy}", "--server-metrics", f"{tight}/metrics,{roomy}/metrics"),
            *("--steps", "2,32", "--step-time", "7s", "--step-warmup", "2s", "--server-metrics-interval", "1s"),
            *("--slo", "ttft.p95<300ms", "--max-tokens-override", "80", "--seed", "3", "--stop-timeout", "10"),
            *("--results-dir", str(tmp_path), "--run-id", "r", "-t", "14s"),
            *("--autostart", "--autoquit", "30", "--web-host", "127.0.0.1", "--web-port", str(port)),
            log_path=log,
        )
        try:
            live, d, end = None, {}, time.monotonic() + 90
            while time.monotonic() < end and proc.poll() is None:
                try:
                    d = _get(base + "/llm/stats?history=0&window=10")
                except OSError:
                    d = {}
                check = d.get("backends") or {}
                if live is None and not d.get("final") and tight in check.get("flagged", ()):
                    live = check
                if d.get("final") and d.get("summary"):
                    break
                time.sleep(0.5)
            else:
                pytest.fail("the run did not finish: " + open(log).read()[-3000:])
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    text = open(log).read()
    _, summary = read_results(str(tmp_path), "r")
    truth = {name: pd.DataFrame(read_truth(path)) for name, path in truths.items()}

    # (1) each replica's own diagnosis at the run's knee, right against its simulator's truth log
    assert summary["diagnosis"]["users"] == 32, summary["diagnosis"]["sentence"]
    mine = {name: summary["by_backend"][url]["diagnosis"] for name, url in (("tight", tight), ("roomy", roomy))}
    assert truth["tight"]["preemptions"].sum() > 0 and truth["roomy"]["preemptions"].sum() == 0
    assert mine["tight"]["kind"] == "memory-bound" and mine["tight"]["users"] == 32, mine["tight"]["sentence"]
    assert "KV cache of 200 blocks" in mine["tight"]["sentence"] and mine["tight"]["config"]["num_gpu_blocks"] == 200
    knee = mine["tight"]["levels"][1]
    assert 0 < knee["preemptions"] <= truth["tight"]["preemptions"].sum(), knee
    assert mine["roomy"]["kind"] == "no limit reached", mine["roomy"]["sentence"]
    assert mine["roomy"]["config"]["num_gpu_blocks"] == 8192 and mine["roomy"]["levels"][1]["kv_cache_peak"] < 0.2
    assert not mine["roomy"]["levels"][1]["preemptions"]
    # each replica's level holds its own requests: the two together are the run's level
    for i, step in enumerate(summary["by_step"]):
        rates = [mine[n]["levels"][i]["request_rate"] for n in mine]
        assert sum(rates) == pytest.approx(step["throughput"]["requests_per_s"], rel=1e-9)
    rows = {b["backend"]: b for b in summary["backends"]["backends"]}
    assert [f for f in rows[tight]["flags"] if f.startswith("limit: ")] == [
        "limit: memory-bound at 32 users; the other: no limit reached"
    ]
    assert not any(f.startswith("limit: ") for f in rows[roomy]["flags"]) and tight in summary["backends"]["flagged"]
    each = "; ".join(f"{u} {kind}" for u, kind in sorted([(tight, "memory-bound"), (roomy, "no limit reached")]))
    assert summary["diagnosis"]["sentence"].endswith(
        f". The replicas' limits differ, each from its own server metrics (summary.json by_backend): {each}"
    )
    md = open(os.path.join(tmp_path, "r", "report.md"), encoding="utf-8").read()
    assert "#### Each replica's limit, from its own server metrics" in md
    assert mine["tight"]["sentence"] in md and mine["roomy"]["sentence"] in md

    # (2) the live snapshot flagged the slowed replica while the run went on, by the same rule
    assert live is not None, text[-3000:]
    row = {b["backend"]: b for b in live["backends"]}[tight]
    assert any(f.startswith("slower: TTFT p50") for f in row["flags"]), row
    assert live["rule"] == summary["backends"]["rule"]
    said = [x for x in text.splitlines() if f"backend {tight} flagged while the run goes on: slower: TTFT" in x]
    assert len(said) == 1, said


def test_two_replicas_counters_pooled_add_up_and_each_replica_reads_only_its_own():
    """The whole run's diagnosis pools its sources at each moment with each one's latest reading:
    two replicas' preemption counters scraped in turn add up (taken in turn, 0, 1000, 10, 1001 read
    as resets: 1,000s of preemptions that never happened); a replica's own diagnosis reads its source alone."""
    from metrics.diagnosis import _increase, _series, of_source

    rows = []
    for i in range(5):
        rows += [
            (100.0 + i, "vllm:num_preemptions_total", 10.0 * i, "{}", "a"),
            (100.3 + i, "vllm:num_preemptions_total", 1000.0 + i, "{}", "b"),
        ]
        rows += [
            (100.0 + i, "vllm:num_requests_running", 4.0, "{}", "a"),
            (100.3 + i, "vllm:num_requests_running", 6.0, "{}", "b"),
        ]
    server = pd.DataFrame(rows, columns=["timestamp", "metric", "value", "labels", "source"])
    assert _increase(_series(server, "preemptions")[1]) == 40 + 4
    assert set(_series(server, "running")[1]) == {10.0}
    assert _increase(_series(of_source(server, "b"), "preemptions")[1]) == 4
    assert set(_series(of_source(server, "a"), "running")[1]) == {4.0} and of_source(server, "c") is None


def test_a_replica_at_a_limit_the_others_do_not_share_is_named():
    from metrics.schema.server_side import KneeDiagnosis
    from targets.diagnosis import limit_flags

    def D(kind: str, users: int) -> KneeDiagnosis:
        return KneeDiagnosis(kind=kind, users=users, sentence="")

    mem, none, unknown = (
        D(kind="memory-bound", users=24),
        D(kind="no limit reached", users=24),
        D(kind="unknown", users=24),
    )
    assert limit_flags({"a": mem, "b": none}) == {"a": "limit: memory-bound at 24 users; the other: no limit reached"}
    assert limit_flags({"a": mem, "b": mem, "c": mem}) == {} and limit_flags({"a": mem, "b": unknown}) == {}
    both = limit_flags({"a": mem, "b": D(kind="compute-bound", users=24), "c": mem})
    assert both["b"] == "limit: compute-bound at 24 users; the others: memory-bound" and set(both) == {"a", "b", "c"}


def test_the_console_says_a_backend_flag_once_by_the_summary_s_rule():
    """plugin/backend_flags.py over records: the flag of a replica four times slower to its first
    token is said when 10 successful requests of each back it, once; the share skew of a later
    window is a new kind, said once too."""
    from metrics.record import RequestRecord
    from plugin.backend_flags import BackendFlags

    a, b = "http://127.0.0.1:1", "http://127.0.0.1:2"
    p = BackendFlags()
    p.known, p.greenlet = (a, b), object()  # as run_started sets them for a spread over a and b

    def record(i: int, backend: str, ttft: float) -> tuple:
        return RequestRecord(
            f"{backend}-{i}",
            "w",
            "chat",
            "short",
            100,
            32,
            t_send=float(i),
            wall_send=1000.0 + i * 0.1,
            ok=True,
            status=200,
            ttft_s=ttft,
            e2e_s=0.5,
            tpot_s=0.02,
            output_tokens=20,
            backend=backend,
        ).as_row()

    p.rows_recorded(None, [record(i, b, 0.4) for i in range(9)] + [record(i, a, 0.1) for i in range(9)])
    assert p.check(1010.0) == []  # 9 each: below the rule's 10 successful requests
    p.rows_recorded(None, [record(9, b, 0.4), record(9, a, 0.1)])
    lines = p.check(1010.0)
    assert len(lines) == 1 and lines[0].startswith(
        f"backend {b} flagged while the run goes on: slower: TTFT p50 400.0 ms"
    )
    assert p.check(1011.0) == []
    p.rows_recorded(
        None, [record(100 + i, a, 0.1) for i in range(60)]
    )  # 70 of 80 on a: a skew, b's slowness said already
    assert p.check(1020.0) == [
        f"backend {a} flagged while the run goes on: share 87.5% of 80 requests against a fair 50.0% (+75%) "
        "(the requests that ended in the last 60 s; summary.json backends at the end)",
        f"backend {b} flagged while the run goes on: share 12.5% of 80 requests against a fair 50.0% (-75%) "
        "(the requests that ended in the last 60 s; summary.json backends at the end)",
    ]
    assert p.check(1100.0) == [] and not p.ended  # a minute later: nothing left in the window, nothing new said
