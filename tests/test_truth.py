"""The suite's measurements against the simulator's own per-request timings (its truth log).

Both processes read CLOCK_MONOTONIC (time.perf_counter on Linux), so the client's send and
receive times and the server's arrival and first/last-token write times are on one clock.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers import ROOT, read_results, read_truth, run_locust, simulator

pytestmark = [pytest.mark.process, pytest.mark.timing]  # timing against the truth or a rate: tests/conftest.py


SHORT_MIX = """
name: short-replies
templates: {templates}
system_prompt: {{share: 0.3}}
classes:
  short:  {{weight: 0.4, input_chars: {{min: 20, max: 200}}, output_tokens: {{min: 8, max: 64}}}}
  medium: {{weight: 0.4, input_chars: {{min: 201, max: 800}}, output_tokens: {{min: 16, max: 96}}}}
  long:   {{weight: 0.2, input_chars: {{min: 801, max: 2000}}, output_tokens: {{min: 32, max: 128}}}}
"""


@pytest.fixture(scope="module")
def run50(tmp_path_factory):
    """50 users, the reference mix's inputs with shorter replies, the fixed profile (TTFT 100 ms,
    ITL 20 ms)."""
    tmp = tmp_path_factory.mktemp("truth")
    truth = str(tmp / "truth.jsonl")
    spec = tmp / "short.yaml"
    spec.write_text(SHORT_MIX.format(templates=os.path.join(ROOT, "workloads", "templates.jsonl")))
    with simulator("--profile", "fixed", truth_log=truth) as url:
        proc = run_locust(
            "--host",
            url,
            "-u",
            "50",
            "-r",
            "50",
            "-t",
            "12s",
            "--seed",
            "7",
            "--workload",
            str(spec),
            "--results-dir",
            str(tmp),
            "--run-id",
            "r50",
            "--stop-timeout",
            "20",
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, summary = read_results(str(tmp), "r50")
    return df, summary, read_truth(truth)


def test_every_request_once_and_all_ok(run50):
    df, summary, truth = run50
    assert len(df) >= 300
    assert df["request_id"].is_unique
    assert set(df["request_id"]) == {t["request_id"] for t in truth}
    assert df["ok"].all(), df.loc[~df["ok"], ["error", "error_detail"]].head()
    assert summary["overall"]["requests"]["ok"] == int(
        ((df["wall_send"] >= summary["window"]["start"]) & (df["wall_send"] <= summary["window"]["end"])).sum()
    )


def test_ttft_and_e2e_match_the_truth_log_within_2ms(run50):
    df, _, truth = run50
    t = {x["request_id"]: x for x in truth}
    truth_ttft = np.array([t[r]["first_token"] - t[r]["arrival"] for r in df["request_id"]])
    truth_e2e = np.array([t[r]["last_token"] - t[r]["arrival"] for r in df["request_id"]])
    d_ttft = (df["ttft_s"].to_numpy() - truth_ttft) * 1000
    d_e2e = (df["e2e_s"].to_numpy() - truth_e2e) * 1000
    assert abs(np.median(d_ttft)) < 2.0, np.percentile(d_ttft, [1, 50, 99])
    assert abs(np.median(d_e2e)) < 2.0, np.percentile(d_e2e, [1, 50, 99])
    # on one clock: the client saw the first token after the server wrote it, and not much later
    seen = df["t_send"].to_numpy() + df["ttft_s"].to_numpy()
    written = np.array([t[r]["first_token"] for r in df["request_id"]])
    lag_ms = (seen - written) * 1000
    assert (lag_ms > -0.5).all(), lag_ms.min()
    assert np.median(lag_ms) < 2.0


def test_output_tokens_and_chunks_match_the_truth(run50):
    df, _, truth = run50
    t = {x["request_id"]: x for x in truth}
    assert (df["output_tokens"] == [t[r]["output_tokens"] for r in df["request_id"]]).all()
    assert (df["tokens_source"] == "usage").all()
    assert (df["n_chunks"] == [t[r]["chunks"] for r in df["request_id"]]).all()
    assert (df["prompt_tokens"] == [t[r]["prompt_tokens"] for r in df["request_id"]]).all()


def test_summary_percentiles_are_exact_from_the_records(run50):
    df, summary, _ = run50
    w = summary["window"]
    sel = df[(df["wall_send"] >= w["start"]) & (df["wall_send"] <= w["end"]) & df["ok"]]
    for key, column in (("ttft_ms", "ttft_s"), ("e2e_ms", "e2e_s"), ("tpot_ms", "tpot_s")):
        for name, q in (("p50", 50), ("p95", 95), ("p99", 99)):
            assert summary["overall"][key][name] == pytest.approx(np.percentile(sel[column] * 1000, q), rel=1e-9)
    gaps = np.concatenate([np.diff(x) for x in sel["chunk_times"]]) * 1000
    assert summary["overall"]["itl_ms"]["count"] == gaps.size
    assert summary["overall"]["itl_ms"]["p50"] == pytest.approx(np.percentile(gaps, 50), rel=1e-9)
    # the fixed profile: TTFT 100 ms, ITL 20 ms
    assert 99 < summary["overall"]["ttft_ms"]["p50"] < 104
    assert 19.5 < summary["overall"]["itl_ms"]["p50"] < 20.5


LONG_REPLIES = """
name: long-replies
templates: {templates}
classes:
  long: {{weight: 1, input_chars: {{min: 100, max: 400}}, output_tokens: {{min: 150, max: 200}}}}
"""


def test_step_token_throughput_counts_tokens_where_they_arrived(tmp_path):
    """Replies of 3-4 s against steps of 4 s: each step's tokens/s must be the tokens the
    simulator sent inside that step's window (truth log), not those of the requests that happened
    to complete in it."""
    truth_path = str(tmp_path / "truth.jsonl")
    spec = tmp_path / "long.yaml"
    spec.write_text(LONG_REPLIES.format(templates=os.path.join(ROOT, "workloads", "templates.jsonl")))
    with simulator("--profile", "fixed", truth_log=truth_path) as url:
        proc = run_locust(
            "--host",
            url,
            "--steps",
            "4,8,16",
            "--step-time",
            "4s",
            "--step-warmup",
            "1s",
            "--seed",
            "3",
            "--workload",
            str(spec),
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "tok",
            "--stop-timeout",
            "1",
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, summary = read_results(str(tmp_path), "tok")
    truth = {t["request_id"]: t for t in read_truth(truth_path)}
    counted = df[df["ok"] | (df["error"] == "stopped")]
    assert df["ok"].sum() >= 20 and (df["error"] == "stopped").sum() > 0
    token_wall, first_wall, prompts = [], [], []
    for rid, wall_send, t_send, prompt in counted[["request_id", "wall_send", "t_send", "prompt_tokens"]].itertuples(
        index=False
    ):
        t = truth[rid]
        if not t["output_tokens"]:
            continue
        to_wall = wall_send - t_send  # the client's wall clock minus the shared monotonic clock
        n = t["output_tokens"]
        times = np.linspace(t["first_token"], t["last_token"], n) if n > 1 else np.array([t["first_token"]])
        token_wall.append(times + to_wall)
        first_wall.append(t["first_token"] + to_wall)
        prompts.append(max(prompt, 0))
    token_wall = np.concatenate(token_wall)
    first_wall, prompts = np.array(first_wall), np.array(prompts)
    late = 0.0
    for s in summary["by_step"]:
        start, end = s["window"]["start"], s["window"]["end"]
        window_s = end - start
        sent = ((token_wall >= start) & (token_wall <= end)).sum()
        prefilled = prompts[(first_wall >= start) & (first_wall <= end)].sum()
        got = s["throughput"]["output_tokens_per_s"] * window_s
        assert got == pytest.approx(sent, rel=0.01), (s["step"], got, sent)
        assert s["throughput"]["total_tokens_per_s"] * window_s == pytest.approx(sent + prefilled, rel=0.01)
        done = df[df["ok"] & (df["wall_send"] + df["e2e_s"] >= start) & (df["wall_send"] + df["e2e_s"] <= end)]
        late = max(late, abs(done["output_tokens"].sum() / sent - 1))
    assert late > 0.05  # counting at completion would have been this far off in some step
