"""Why the knee is there (metrics/diagnosis.py): simulator profiles built to hit a known limit are
diagnosed as that limit from a real step ramp with --server-metrics, in summary.json (typed, with
the evidence it rests on), the console, the report and the live view; the rule on figures, and the
prefix-cache hit rate that explains a knee when it falls. Each rule on hand-made figures: tests/test_limits.py."""

from __future__ import annotations

import json
import os
import time
import urllib.request

import pandas as pd
import pytest

from metrics.diagnosis import diagnose, level_evidence
from metrics.schema.server_side import LevelEvidence
from tests.helpers import free_port, read_results, run_locust, simulator, start_locust

BASE = (
    "kind: batch\nscheduler: chunked\nmax_num_batched_tokens: 8192\nstep_base_s: 0.02\nper_seq_s: 0.0\n"
    "per_prefill_token_s: 0.0\nmax_model_len: 4096\n"
)
PROFILES = {
    # 6 running at most, KV without limit: the 7th request waits for a slot while KV stays near empty
    "scheduler-bound": BASE + "max_num_seqs: 6\nnum_gpu_blocks_override: 62500\n",
}
MAX_TOKENS = {"scheduler-bound": "30"}
# A queue delays the first token. (Each limit profile bundled with the simulator is diagnosed end to
# end in tests/test_diagnosis_profiles.py.)
SLO = {"scheduler-bound": "ttft.p95<150ms"}
RAMP = (
    "--steps",
    "2,24",
    "--step-time",
    "6s",
    "--step-warmup",
    "2s",
    "--server-metrics-interval",
    "1s",
    "--stop-timeout",
    "10",
)


def _profile(tmp_path, limit: str) -> str:
    path = tmp_path / f"{limit}.yaml"
    path.write_text(PROFILES[limit])
    return str(path)


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


@pytest.mark.process
@pytest.mark.timing  # the live view must state it in the seconds between the knee's level ending and the run's end
def test_the_live_view_states_the_diagnosis_once_there_is_a_knee_and_then_summary_json_s(tmp_path):
    """A web-UI run of the slot-bound profile, 2, 24 and 26 users: while only the 2-user level is
    final (met: no knee yet) the view states no diagnosis (it used to diagnose the highest level so
    far); once the 24-user level is final and missed, it states the diagnosis at that knee while
    the run goes on; after the run its JSON carries summary.json's diagnosis, equal to it."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = str(tmp_path / "locust.log")
    ramp = [a if a != "2,24" else "2,24,26" for a in RAMP]
    with simulator("--profile", _profile(tmp_path, "scheduler-bound")) as url:
        proc = start_locust(
            "--host",
            url,
            *ramp,
            "--slo",
            SLO["scheduler-bound"],
            "--max-tokens-override",
            MAX_TOKENS["scheduler-bound"],
            "--server-metrics",
            url + "/metrics",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "ui",
            "--autostart",
            "--autoquit",
            "30",
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(port),
            "-t",
            "18s",
            log_path=log,
        )
        try:
            before_knee, live, end = [], None, time.monotonic() + 80
            while time.monotonic() < end and proc.poll() is None:
                try:
                    d = _get(base + "/llm/stats?history=0")
                except OSError:
                    d = {}
                final = [s["users"] for s in d.get("steps") or () if s["status"] == "final"]
                if final == [2] and not d.get("final"):
                    before_knee.append(d.get("diagnosis"))
                if d.get("diagnosis") and not d.get("final") and live is None:
                    live = d["diagnosis"]
                if d.get("final") and d.get("summary"):
                    break
                time.sleep(0.5)
            else:
                pytest.fail("the run did not finish: " + open(log).read()[-3000:])
            assert before_knee and before_knee == [None] * len(before_knee), before_knee[-1:]
            assert live is not None, open(log).read()[-3000:]
            # while the 26-user level runs: the 24-user level is final and missed it, the knee
            assert live["users"] == 24 and live["knee"] == "the lowest level that missed ttft.p95<150ms", live
            assert [lv["users"] for lv in live["levels"]] == [2, 24] and live["levels"][1]["scrapes"] >= 3
            assert live["kind"] == "scheduler-bound" and live["metrics"]["running"] == "vllm:num_requests_running"
            _, summary = read_results(str(tmp_path), "ui")
            assert d["diagnosis"] == summary["diagnosis"] == d["summary"]["diagnosis"]
            assert summary["diagnosis"]["kind"] == "scheduler-bound"
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_a_run_without_a_knee_does_not_say_it_has_one():
    """ "Why the knee is there" heads a diagnosis only where a level missed the SLO; a ramp whose
    levels all met it (or stayed undecided), or one without --slo, is diagnosed at its highest level
    under a heading that says there is no knee (the page said "Why the knee is there" after a ramp
    whose two levels were undecided)."""
    from types import SimpleNamespace

    from metrics.diagnosis import heading_of

    assert heading_of(SimpleNamespace(next_failing_users=24)) == "Why the knee is there"
    assert (
        heading_of(SimpleNamespace(next_failing_users=None))
        == "No level missed the SLO (no knee); what limits the highest level"
    )
    assert heading_of(None) == "What limits the highest level (no --slo, no knee)"
    g = LevelEvidence(step=1, users=24, scrapes=5, running=24, waiting=0.0, kv_cache_peak=0.5, preemptions=0.0)
    d = diagnose([g], 24, heading=heading_of(None))
    assert d.heading == "What limits the highest level (no --slo, no knee)" and d.model_dump()["heading"] == d.heading


def test_the_knee_without_a_miss_is_the_highest_load_in_users_or_in_requests_per_second():
    """With no level missed, the diagnosis looks at the highest level: by its rate where the levels
    are open-loop rates (their users all the same in-flight cap), else by its users; a by_step level
    and the server's evidence of it read the load alike."""
    from metrics.diagnosis import knee_of
    from metrics.schema.figures import Step

    # the level's figures do not bear on its load: a Step without them (model_construct)
    rated = [Step.model_construct(step=i, users=512, rate=r) for i, r in enumerate((2.5, 10.0, 5.0))]
    assert knee_of(rated, None) == (10.0, "the highest level (no --slo)")
    closed = [Step.model_construct(step=i, users=u) for i, u in enumerate((4, 16, 8))]
    assert knee_of(closed, None)[0] == 16.0
    evidence = [LevelEvidence(step=s.step, users=s.users, rate=s.rate, scrapes=0) for s in rated + closed]
    assert [g.load for g in evidence] == [2.5, 10.0, 5.0, 4.0, 16.0, 8.0]


def _scrapes(levels) -> pd.DataFrame:
    """Scrapes every second of vLLM's gauges and prefix-cache counters: for each (start, end,
    waiting, kv, queries/s, hits/s) level, the counters grow at those rates."""
    rows, hits, queries = [], 0.0, 0.0
    for start, end, waiting, kv, q, h in levels:
        for t in range(start, end + 1):
            queries, hits = queries + q, hits + h
            rows += [
                (float(t), "vllm:num_requests_running", 4.0),
                (float(t), "vllm:num_requests_waiting", waiting),
                (float(t), "vllm:kv_cache_usage_perc", kv),
                (float(t), "vllm:prefix_cache_queries_total", queries),
                (float(t), "vllm:prefix_cache_hits_total", hits),
            ]
    return pd.DataFrame(rows, columns=["timestamp", "metric", "value"])


def test_a_falling_prefix_cache_hit_rate_is_evidence_and_part_of_the_cause():
    """Hits over queries inside each level's window: 80 % at 4 users, 25 % at 32 where the KV cache
    is full; the diagnosis says memory-bound and names the fall and the counters it read."""
    server = _scrapes([(0, 20, 0.0, 0.5, 1000, 800), (21, 40, 9.0, 0.98, 1000, 250)])
    levels, names = level_evidence(server, [(0, 4, 2.0, 20.0), (1, 32, 23.0, 40.0)])
    assert [round(lv.prefix_cache_hit_rate, 3) for lv in levels] == [0.8, 0.25]
    assert (
        names["prefix_hits"] == "vllm:prefix_cache_hits_total"
        and names["prefix_queries"] == "vllm:prefix_cache_queries_total"
    )
    d = diagnose(levels, 32, names)
    assert d.kind == "memory-bound" and "prefix-cache hit rate fell from 80% at 4 users to 25%" in d.sentence
    assert any(
        "prefix-cache hit rate 25% (vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total; 80% at 4 users)"
        in e
        for e in d.evidence
    )
    # a steady hit rate is evidence, not a cause
    steady, names = level_evidence(
        _scrapes([(0, 20, 0.0, 0.5, 1000, 800), (21, 40, 9.0, 0.98, 1000, 790)]),
        [(0, 4, 2.0, 20.0), (1, 32, 23.0, 40.0)],
    )
    assert "prefix-cache" not in diagnose(steady, 32, names).sentence


@pytest.mark.process
def test_the_built_in_simulator_is_scraped_for_the_diagnosis(tmp_path):
    """No --host: the built-in simulator answers, and its own gauges reach the knee's diagnosis
    without a --server-metrics URL nobody could know before the run."""
    proc = run_locust(
        "--steps",
        "2,4",
        "--step-time",
        "5s",
        "--step-warmup",
        "1s",
        "--server-metrics-interval",
        "1s",
        "--max-tokens-override",
        "16",
        "--results-dir",
        str(tmp_path),
        "--run-id",
        "sim",
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, summary = read_results(str(tmp_path), "sim")
    d = summary["diagnosis"]
    assert d["metrics"]["waiting"] == "vllm:num_requests_waiting", d
    assert [lv["users"] for lv in d["levels"]] == [2, 4] and all(lv["scrapes"] >= 3 for lv in d["levels"]), d["levels"]
    assert d["kind"] != "unknown", d
    assert os.path.exists(os.path.join(tmp_path, "sim", "server_metrics.parquet"))
