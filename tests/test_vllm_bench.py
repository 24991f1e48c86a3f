"""A `vllm bench serve` user's habits (docs/vllm-bench.md): prompts sized in tokens by the client
tokenizer (--input-tokens), a fixed number of requests (--num-requests), a label, and vLLM's result
JSON (--save-vllm-json), checked against the simulator's truth log (its own prompt count, by the
same tokenizer) and read by a script that knows only vLLM's field names."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import gevent
import numpy as np
import pytest
from gevent.event import Event

from bench.servers.model import build_tokenizer
from core.text import CHAT_TOKENS_PER_MESSAGE, estimate_tokens
from plugin.request_budget import BudgetPacer, share
from tests.helpers import ROOT, run_locust, simulator
from workloads import load_spec
from workloads.token_prompts import TokenPrompts, pool_text

# -- unit: the pieces ------------------------------------------------------------------------------


def test_a_budget_is_split_exactly_across_processes():
    for total in (1, 7, 40, 1001):
        for processes in (1, 2, 3, 8):
            parts = [share(total, processes, i) for i in range(processes)]
            assert sum(parts) == total and max(parts) - min(parts) <= 1
    assert share(40, 2, 2) == 0  # a worker that joined after the split sends nothing


def test_users_waiting_on_a_schedule_cannot_overdraw_the_share():
    """Eight users ask at once a pacer that makes each wait (an open loop's schedule): the share of
    5 is handed out 5 times, its end said once."""

    class Slow:
        def next(self):
            gevent.sleep(0.01)
            return 0.0, "request"

    said = []
    pacer = BudgetPacer(Slow(), 5, Event(), said.append)
    got = []

    def user():
        for _ in range(3):
            item = pacer.next()
            if item is not None:
                got.append(item)

    pacer.stopping.set()  # a spent share's users do not wait out IDLE_WAIT_S here
    gevent.joinall([gevent.spawn(user) for _ in range(8)])
    assert len(got) == 5 and said == [5]


def test_prompts_have_the_token_count_asked_by_the_estimate():
    """Without a tokenizer the count is core/text.py's estimate, what the simulator counts without
    one: every prompt has exactly the length drawn."""
    prompts = TokenPrompts(pool_text(load_spec(None)), None, 2048)
    rng = random.Random(3)
    for tokens in (1, 2, 17, 512, 2048):
        for _ in range(20):
            assert estimate_tokens(prompts.prompt(tokens, rng)) == tokens


# -- a run on the simulator ------------------------------------------------------------------------

REQUESTS, TOKENS = 40, 512


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("tok")
    build_tokenizer(Path(ROOT), out)
    return str(out)


def _truth(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def vllm_style_run(tmp_path_factory, tokenizer_dir):
    """`--input-tokens 512 --num-requests 40 --save-vllm-json` against a simulator that counts
    prompts with the same tokenizer, 8 users; -t far longer than the run needs."""
    tmp = tmp_path_factory.mktemp("vllm")
    truth = str(tmp / "truth.jsonl")
    out = str(tmp / "out.json")
    with simulator("--profile", "fixed", "--tokenizer", tokenizer_dir, truth_log=truth) as url:
        proc = run_locust(
            "--host",
            url,
            "-u",
            "8",
            "-r",
            "8",
            "-t",
            "120s",
            "--input-tokens",
            str(TOKENS),
            "--num-requests",
            str(REQUESTS),
            "--tokenizer",
            tokenizer_dir,
            "--max-tokens-override",
            "16",
            "--label",
            "512 in",
            "--save-vllm-json",
            out,
            "--results-dir",
            str(tmp),
            "--run-id",
            "r",
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "r", truth, out, proc.stderr


@pytest.mark.process
def test_exactly_n_requests_of_n_tokens_reach_the_server(vllm_style_run):
    """The simulator's own log: exactly 40 requests, each prompt 512 tokens by the tokenizer plus its
    chat template's 4 (one message). Tolerance: none; the client's cut is exact by its count, and the
    server counts with the same tokenizer."""
    folder, truth, _, log = vllm_style_run
    rows = _truth(truth)
    assert len(rows) == REQUESTS, len(rows)
    assert {r["prompt_tokens"] for r in rows} == {TOKENS + CHAT_TOKENS_PER_MESSAGE}
    assert "--num-requests: all 40 requests were sent" in log
    assert json.load(open(folder / "run.json"))["plan"]["label"] == "512 in"


def read_like_a_dashboard(path: str) -> dict:
    """What a script written against `vllm bench serve --save-result --save-detailed` reads: its
    field names and types, nothing of this suite."""
    r = json.load(open(path))
    for key in ("date", "backend", "model_id"):
        assert isinstance(r[key], str), key
    for key in (
        "num_prompts",
        "completed",
        "failed",
        "total_input_tokens",
        "total_output_tokens",
        "max_concurrent_requests",
    ):
        assert isinstance(r[key], int), key
    assert r["request_rate"] == "inf" or isinstance(r["request_rate"], float)
    assert r["max_concurrency"] is None or isinstance(r["max_concurrency"], int)
    for key in (
        "duration",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "max_output_tokens_per_s",
    ):
        assert isinstance(r[key], float), key
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p99"):
            assert isinstance(r[f"{stat}_{metric}_ms"], float), (stat, metric)
    n = r["num_prompts"]
    for key in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "generated_texts", "errors"):
        assert isinstance(r[key], list) and len(r[key]) == n, key
    assert all(isinstance(x, list) and all(isinstance(g, float) for g in x) for x in r["itls"])
    return r


@pytest.mark.process
def test_the_vllm_json_reads_as_vllms_and_says_what_the_summary_says(vllm_style_run):
    """Its statistics, computed from the per-request lists it carries, equal summary.json's (which
    the suite computes from the records on its own), and its totals are the truth log's."""
    folder, truth, out, _ = vllm_style_run
    r = read_like_a_dashboard(out)
    overall = json.load(open(folder / "summary.json"))["overall"]
    rows = _truth(truth)
    assert r["num_prompts"] == r["completed"] == REQUESTS and r["failed"] == 0
    assert r["label"] == "512 in" and r["backend"] == "openai-chat"
    assert r["total_input_tokens"] == overall["tokens"]["prompt"] == sum(x["prompt_tokens"] for x in rows)
    assert r["total_output_tokens"] == overall["tokens"]["output"] == sum(x["output_tokens"] for x in rows)
    assert set(r["input_lens"]) == {TOKENS + CHAT_TOKENS_PER_MESSAGE} and set(r["output_lens"]) == {16}
    ttfts = np.array(r["ttfts"]) * 1000
    for stat, value in (("mean", ttfts.mean()), ("p50", np.median(ttfts)), ("p99", np.percentile(ttfts, 99))):
        assert value == pytest.approx(overall["ttft_ms"][stat], rel=1e-9)
    assert r["mean_ttft_ms"] == pytest.approx(overall["ttft_ms"]["mean"], rel=1e-9)
    assert r["std_ttft_ms"] == pytest.approx(ttfts.std(), rel=1e-9)
    gaps = np.array([g for lst in r["itls"] for g in lst]) * 1000
    assert len(gaps) == overall["itl_ms"]["count"] == REQUESTS * 15
    assert (
        r["p99_itl_ms"] == pytest.approx(overall["itl_ms"]["p99"], rel=1e-9) == pytest.approx(np.percentile(gaps, 99))
    )
    latencies = np.array(r["latencies"]) * 1000
    assert (
        r["median_e2el_ms"] == pytest.approx(overall["e2e_ms"]["p50"], rel=1e-9) == pytest.approx(np.median(latencies))
    )
    assert r["mean_tpot_ms"] == pytest.approx(overall["tpot_ms"]["mean"], rel=1e-9)
    assert r["request_throughput"] == pytest.approx(overall["throughput"]["requests_per_s"], rel=1e-9)
    assert r["output_throughput"] == pytest.approx(overall["throughput"]["output_tokens_per_s"], rel=1e-9)
    assert 1 <= r["max_concurrent_requests"] <= 8
    assert "ttft" in r["definitions"] and "duration" in r["definitions"]


@pytest.mark.process
def test_num_requests_is_exact_across_workers(tmp_path):
    """Two worker processes: 17 requests in all, split 9 and 8, whatever each one's pace."""
    truth = str(tmp_path / "truth.jsonl")
    with simulator("--profile", "fixed", truth_log=truth) as url:
        proc = run_locust(
            "--host",
            url,
            "--processes",
            "2",
            "-u",
            "6",
            "-r",
            "6",
            "-t",
            "120s",
            "--num-requests",
            "17",
            "--max-tokens-override",
            "8",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "d",
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(_truth(truth)) == 17
    assert "every worker sent its share, 17 requests in all" in proc.stderr
    assert os.path.isfile(tmp_path / "d" / "summary.json")
