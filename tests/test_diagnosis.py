"""Why the knee is there (metrics/diagnosis.py): simulator profiles built to hit a known limit are
diagnosed as that limit, in the report of a real step ramp with --server-metrics."""

from __future__ import annotations

import os

import pytest

from metrics.diagnosis import LevelGauges, diagnose
from tests.helpers import run_locust, simulator

BASE = ("kind: batch\nscheduler: chunked\nmax_num_batched_tokens: 8192\nstep_base_s: 0.02\nper_seq_s: 0.0\n"
        "per_prefill_token_s: 0.0\nmax_model_len: 4096\n")  # fmt: skip
PROFILES = {
    # 6 running at most, KV without limit: the 7th request waits for a slot
    "scheduler-bound": BASE + "max_num_seqs: 6\nkv_cache_tokens: 1000000\n",
    # slots enough, KV for about ten requests of the mix (prompt + 30 tokens reserved each)
    "memory-bound": BASE + "max_num_seqs: 128\nkv_cache_tokens: 4096\n",
}


@pytest.mark.process
@pytest.mark.parametrize("limit", sorted(PROFILES))
def test_a_known_limit_is_diagnosed_in_the_report(tmp_path, limit):
    profile = tmp_path / "p.yaml"
    profile.write_text(PROFILES[limit])
    with simulator("--profile", str(profile)) as url:
        proc = run_locust("--host", url, "--steps", "2,24", "--step-time", "6s", "--step-warmup", "2s",
                          "--slo", "ttft.p95<150ms", "--max-tokens-override", "30", "--server-metrics", url + "/metrics",
                          "--server-metrics-interval", "1s", "--results-dir", str(tmp_path), "--run-id", "r",
                          "--stop-timeout", "10", timeout=120)  # fmt: skip
    md = open(os.path.join(tmp_path, "r", "report.md")).read()
    line = next((x for x in md.splitlines() if x.startswith("**Why the knee is there:**")), "")
    assert line.startswith(f"**Why the knee is there:** {limit}: at 24 users"), (line, proc.stderr[-2000:])
    assert "### The server at each level" in md


def test_the_rule_on_gauges():
    g = lambda users, running, waiting, kv: LevelGauges(users, 5, running, waiting, kv, 0.0)  # noqa: E731
    assert diagnose([g(2, 2, 0, 0.01), g(24, 6, 17, 0.02)], 24).kind == "scheduler-bound"
    assert diagnose([g(2, 2, 0, 0.2), g(24, 10, 14, 0.97)], 24).kind == "memory-bound"
    assert diagnose([g(2, 2, 0, 0.2), g(24, 24, 0.2, 0.5)], 24).kind == "compute-bound"
    assert diagnose([], 24).kind == "unknown"
    # the server's gauges are its own: the limit stands when the client flagged itself, with a caveat
    late = diagnose([g(24, 6, 17, 0.02)], 24, "the client was late.")
    assert late.kind == "scheduler-bound" and "client was inaccurate" in late.sentence
    assert diagnose([], 24, "the client was late.").kind == "client inaccurate"
