"""The suite against llama.cpp's real server (prebuilt `xllamacpp` wheel) serving the tiny model.

A headless `locust -f locustfile.py --host ...` subprocess runs briefly with chat and with
completions; every request must succeed, its output tokens must be the server's usage count and
the pinned max_tokens, and the run's totals must equal the deltas of llama.cpp's own /metrics
counters, scraped before and after:

  llamacpp:tokens_predicted_total                                    == sum of output_tokens
  llamacpp:prompt_tokens_total + llamacpp:prompt_tokens_cached_total == sum of prompt_tokens
  (llama.cpp counts prompt tokens served from its prefix cache apart from the rest)

llama.cpp closes about one kept-alive connection in ten the moment a request arrives on it; the
client sends those once more (records marked `resent`), and the counters matching the records
shows the server ran none of them twice.

Needs .cache/venv-servers (bench/servers/venvs.py; .ci/run builds it, else the first test does).
"""

from __future__ import annotations

import pytest

from bench.servers import venvs
from tests.servers import checks, harness

pytestmark = [pytest.mark.servers, pytest.mark.timeout(900)]

USERS = 4  # = llama.cpp slots


@pytest.fixture(scope="module")
def server():
    model = venvs.ensure_model()
    srv = harness.llamacpp(model, parallel=USERS, threads=1).start(timeout=120)
    yield srv
    srv.stop()


def _check_counters(run: harness.SuiteRun, delta: harness.Scrape) -> None:
    rec = run.records
    assert delta.total("llamacpp:tokens_predicted_total") == rec["output_tokens"].sum()
    prompt = delta.total("llamacpp:prompt_tokens_total") + delta.total("llamacpp:prompt_tokens_cached_total")
    assert prompt == rec["prompt_tokens"].sum()


def test_chat_reference_mix_pinned_length(server, tmp_path):
    """The reference mix (short/medium/long prompts, English and Chinese), max_tokens pinned, ignore_eos."""
    before = harness.scrape(server.url)
    run = harness.run_suite(
        server.url,
        "llamacpp-chat",
        tmp_path,
        users=USERS,
        run_time="6s",
        args=[
            "--endpoint",
            "chat",
            "--model",
            "tiny-llama",
            "--max-tokens-override",
            "32",
            "--ignore-eos",
            "--seed",
            "7",
        ],
    )
    delta = harness.scrape(server.url) - before
    checks.check_all_succeeded(run, min_requests=8)
    checks.check_tokens_from_usage(run, pinned_max_tokens=32)
    checks.check_timings(run)
    # llama.cpp streams one token per chunk (the tiny model only emits whole ASCII tokens)
    assert (run.records["n_chunks"] == run.records["output_tokens"]).all()
    assert set(run.records["finish_reason"]) == {"length"}
    assert set(run.records["request_class"]) <= {"short", "medium", "long"}
    _check_counters(run, delta)


def test_completions_fixed_workload(server, tmp_path):
    """A fixed workload file: max_tokens comes from the workload (no override)."""
    workload = harness.write_workload(tmp_path / "fixed.yaml", input_chars=400, output_tokens=20)
    before = harness.scrape(server.url)
    run = harness.run_suite(
        server.url,
        "llamacpp-completions",
        tmp_path,
        users=USERS,
        run_time="6s",
        args=[
            "--endpoint",
            "completions",
            "--model",
            "tiny-llama",
            "--workload",
            str(workload),
            "--ignore-eos",
            "--seed",
            "8",
        ],
    )
    delta = harness.scrape(server.url) - before
    checks.check_all_succeeded(run, min_requests=8)
    checks.check_tokens_from_usage(run, pinned_max_tokens=20)
    checks.check_timings(run)
    assert (run.records["input_chars"] == 400).all()
    _check_counters(run, delta)
