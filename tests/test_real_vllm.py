"""The suite against vLLM's CPU build serving the tiny model, checked against vLLM's own metrics.

One headless suite run per endpoint (chat: the reference mix; completions: a fixed workload with
continuous usage stats), every request must succeed with output tokens = usage = max_tokens
(ignore_eos), and vLLM's counters must move by exactly the run's totals between a scrape before
and one after:

  vllm:request_success_total   == number of records
  vllm:prompt_tokens_total     == sum of prompt_tokens
  vllm:generation_tokens_total == sum of output_tokens

and our TTFT and E2E distributions must lie within vLLM's `vllm:time_to_first_token_seconds` and
`vllm:e2e_request_latency_seconds` histograms for the same requests, bucket by bucket, with one
bucket of slack: for every bound b_i, server_cum(b_{i-1}) <= ours_cum(b_i) <= server_cum(b_{i+1}).
(vLLM times from the request's arrival in its API process to the moment a token reaches that
process's output loop; we time from our send to the chunk's arrival, so ours run a little later:
HTTP, request validation, SSE writing. The upper side allows the requests whose tokens vLLM held
back and wrote together, see test_distributions_within_vllm_histograms.)

Not part of the default test run: vLLM's CPU build is a 3.5 GB venv that takes about 4.5 minutes
to install cold and 30-60 s to start here, which would take the CI run past its 20-minute budget
(measurements in bench/RESULTS.md "Real servers"). Run it with its own script,

    bash tests/servers/run_vllm_tests.sh          # builds .cache/venv-vllm, then LLM_TEST_VLLM=1 pytest

or `LLM_TEST_VLLM=1 python -m pytest tests/test_real_vllm.py` once the venv exists.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from bench.servers import venvs
from tests.servers import checks, harness

pytestmark = [
    pytest.mark.servers,
    pytest.mark.timeout(1500),
    pytest.mark.skipif(
        os.environ.get("LLM_TEST_VLLM") != "1",
        reason="vLLM (CPU build, 3.5 GB, ~5 min to install) runs outside CI: bash tests/servers/run_vllm_tests.sh "
        "or LLM_TEST_VLLM=1",
    ),
]

USERS = 4


@pytest.fixture(scope="module")
def server():
    model = venvs.ensure_model()
    srv = harness.vllm(model, threads=1, max_num_seqs=16).start(timeout=300)
    yield srv
    srv.stop()


def _run(server, tmp_path_factory, name, args, users=USERS, run_time="8s"):
    tmp = tmp_path_factory.mktemp(name)
    before = harness.scrape(server.url)
    run = harness.run_suite(server.url, name, tmp, users=users, run_time=run_time, args=args)
    return run, harness.scrape_settled(server.url, before, "vllm:request_success_total", len(run.records))


@pytest.fixture(scope="module")
def chat(server, tmp_path_factory):
    return _run(
        server,
        tmp_path_factory,
        "vllm-chat",
        ["--endpoint", "chat", "--model", "tiny-llama", "--max-tokens-override", "32", "--ignore-eos", "--seed", "21"],
    )


@pytest.fixture(scope="module")
def completions(server, tmp_path_factory):
    workload = harness.write_workload(tmp_path_factory.mktemp("wl") / "fixed.yaml", input_chars=500, output_tokens=24)
    extra = '{"stream_options": {"include_usage": true, "continuous_usage_stats": true}}'
    return _run(
        server,
        tmp_path_factory,
        "vllm-completions",
        [
            "--endpoint",
            "completions",
            "--model",
            "tiny-llama",
            "--workload",
            str(workload),
            "--ignore-eos",
            "--extra-body",
            extra,
            "--seed",
            "22",
        ],
    )


def _check_counters(run: harness.SuiteRun, delta: harness.Scrape) -> None:
    rec = run.records
    assert delta.total("vllm:request_success_total") == len(rec)
    assert delta.total("vllm:request_success_total", finished_reason="length") == len(rec)
    assert delta.total("vllm:prompt_tokens_total") == rec["prompt_tokens"].sum()
    assert delta.total("vllm:generation_tokens_total") == rec["output_tokens"].sum()


def test_chat_every_request_succeeds_with_usage_tokens(chat):
    run, _ = chat
    checks.check_all_succeeded(run, min_requests=8)
    checks.check_tokens_from_usage(run, pinned_max_tokens=32)
    checks.check_timings(run)
    assert set(run.records["finish_reason"]) == {"length"}


def test_chat_totals_equal_vllm_counters(chat):
    _check_counters(*chat)


def test_completions_continuous_usage(completions):
    run, delta = completions
    checks.check_all_succeeded(run, min_requests=8)
    checks.check_tokens_from_usage(run, pinned_max_tokens=24)
    checks.check_timings(run)
    # continuous_usage_stats: tokens per chunk are known exactly and add up to usage
    for tokens, n_chunks, total in zip(
        run.records["chunk_tokens"], run.records["n_chunks"], run.records["output_tokens"]
    ):
        assert len(tokens) == n_chunks and sum(tokens) == total and min(tokens) >= 1
    _check_counters(run, delta)


def _held_back(records, end: str) -> int:
    """Requests whose first (end="first") or last (end="last") token chunk arrived in the same read
    as its neighbour: vLLM held it back and wrote it together with the next (or previous) one."""

    def held(t):
        t = np.asarray(t)
        return len(t) > 1 and (t[1] == t[0] if end == "first" else t[-1] == t[-2])

    return int(sum(held(t) for t in records["chunk_times"]))


def _compare(ours_s: np.ndarray, server_buckets: dict[float, float], late_allowance: int = 0) -> list[str]:
    """Per-bucket cumulative counts, one bucket of slack each way:
    server_cum(b_{i-1}) - late_allowance <= ours_cum(b_i) <= server_cum(b_{i+1})."""
    bounds = list(server_buckets)
    server = [server_buckets[b] for b in bounds]
    assert server[-1] == len(ours_s), f"the histogram counted {server[-1]:.0f} requests, the run has {len(ours_s)}"
    ours = [int((ours_s <= b).sum()) for b in bounds]
    problems = []
    for i, b in enumerate(bounds):
        low = (server[i - 1] if i > 0 else 0) - late_allowance
        high = server[i + 1] if i + 1 < len(bounds) else server[-1]
        if not low <= ours[i] <= high:
            problems.append(f"le={b}: ours {ours[i]} not in [{low:.0f}, {high:.0f}] (server {server[i]:.0f})")
    return problems


@pytest.mark.parametrize(
    "metric, column, end",
    [("vllm:time_to_first_token_seconds", "ttft_s", "first"), ("vllm:e2e_request_latency_seconds", "e2e_s", "last")],
)
@pytest.mark.parametrize("which", ["chat", "completions"])
def test_distributions_within_vllm_histograms(request, which, metric, column, end):
    """Ours is never earlier than vLLM's own figure by more than a bucket (a role-only chunk
    counted as the first token, or a wrong send time, would show), and never later by more than a
    bucket, except for requests whose first (TTFT) or last (E2E) token vLLM held back and wrote
    together with the next or previous one: vLLM stamps TTFT and E2E when a token reaches its API
    process's output loop, before the SSE is written, and on a busy 2-core machine it sometimes
    writes tokens late and together (a raw socket client sees the same; bench/RESULTS.md "Real
    servers": sometimes every token of a request arrives in one read at the end, while vLLM's own
    TTFT says ~15 ms). Such requests may be late."""
    run, delta = request.getfixturevalue(which)
    held = _held_back(run.records, end)
    problems = _compare(run.records[column].to_numpy(), delta.buckets(metric), late_allowance=held)
    assert not problems, (problems, f"held back: {held} of {len(run.records)}")
