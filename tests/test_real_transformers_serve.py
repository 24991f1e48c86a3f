"""The suite against `transformers serve --continuous-batching` serving the tiny model (CPU).

transformers serve never sends `data: [DONE]` (a finish_reason ends its streams), always puts
usage on the last chunk, rejects unknown fields such as `ignore_eos` with HTTP 422, and needs the
exact served model id (its /v1/models fails without a hub cache, so --model is given). It has no
/metrics: the checks are the records against usage and the pinned length. The tiny model's
weights are shaped so that it never emits end-of-sequence (bench/servers/model.py), which pins
the output length without ignore_eos.
"""

from __future__ import annotations

import pytest

from bench.servers import venvs
from tests.servers import checks, harness

pytestmark = [pytest.mark.servers, pytest.mark.timeout(900)]

USERS = 4


@pytest.fixture(scope="module")
def served():
    model = venvs.ensure_model()
    srv = harness.transformers_serve(model, blocks=256, block_size=32, threads=1).start(timeout=180)
    yield srv, str(model)
    srv.stop()


def test_chat_reference_mix(served, tmp_path):
    srv, model = served
    run = harness.run_suite(
        srv.url,
        "tserve-chat",
        tmp_path,
        users=USERS,
        run_time="8s",
        args=["--endpoint", "chat", "--model", model, "--max-tokens-override", "24", "--seed", "11"],
    )
    checks.check_all_succeeded(run, min_requests=8)
    checks.check_tokens_from_usage(run, pinned_max_tokens=24)
    checks.check_timings(run)
    assert set(run.records["finish_reason"]) == {"length"}


def test_completions_fixed_workload(served, tmp_path):
    srv, model = served
    workload = harness.write_workload(tmp_path / "fixed.yaml", input_chars=300, output_tokens=16)
    run = harness.run_suite(
        srv.url,
        "tserve-completions",
        tmp_path,
        users=USERS,
        run_time="8s",
        args=["--endpoint", "completions", "--model", model, "--workload", str(workload), "--seed", "12"],
    )
    checks.check_all_succeeded(run, min_requests=8)
    checks.check_tokens_from_usage(run, pinned_max_tokens=16)
    checks.check_timings(run)


def test_unknown_field_is_a_classified_http_4xx(served, tmp_path):
    """--ignore-eos sends a field transformers serve rejects: every request is an http_4xx record."""
    srv, model = served
    run = harness.run_suite(
        srv.url,
        "tserve-422",
        tmp_path,
        users=2,
        run_time="2s",
        args=["--endpoint", "chat", "--model", model, "--max-tokens-override", "8", "--ignore-eos"],
    )
    rec = run.records
    assert len(rec) >= 2 and run.returncode != 0
    assert (rec["status"] == 422).all() and (rec["error"] == "http_4xx").all() and not rec["ok"].any()
    in_window = len(rec) - run.summary["records"]["outside_window"]
    assert run.summary["overall"]["requests"]["by_error"] == {"http_4xx": in_window}
