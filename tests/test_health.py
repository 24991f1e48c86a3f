"""Client self-health (plugin/health.py): an overloaded worker marks its run client_bound, a light
run does not.

The overloaded run floods one worker process (master + 1 worker, `--processes 1`) with far more
tokens than one core can read (200 streams at 1 ms ITL against the simulator: 200,000 tokens/s
asked), so its CPU demand, loop lag and token lag all pass their limits, whatever the machine. The
simulator serves it from two processes: with one, on two cores, the server could be the slower
side, its tokens sent late and read on time, and the client rightly not bound.
The light run (5 streams at 20 ms ITL, a local process) stays far below every limit; on a machine
crowded by other processes it may be late (contended) but is never client bound: it hardly uses
the CPU.
"""

from __future__ import annotations

import contextlib

import pytest

from tests.helpers import free_port, read_results, run_locust, simulator

pytestmark = pytest.mark.process

FLOOD = "kind: fixed\nmodel: sim-model\nttft_s: 0.02\nitl_s: 0.001\nmax_model_len: 1000000\n"
LIGHT = "kind: fixed\nmodel: sim-model\nttft_s: 0.1\nitl_s: 0.02\nmax_model_len: 1000000\n"


def _run(tmp_path, profile: str, run_id: str, *args: str, sim_processes: int = 1):
    prof = tmp_path / f"{run_id}.yaml"
    prof.write_text(profile)
    with contextlib.ExitStack() as servers:
        if sim_processes == 1:
            url = servers.enter_context(simulator("--profile", str(prof)))
        else:  # several processes on one port (SO_REUSEPORT), so that the server outpaces the client
            port = free_port()
            for _ in range(sim_processes):
                url = servers.enter_context(simulator("--profile", str(prof), "--reuse-port", port=port))
        proc = run_locust(
            "--host",
            url,
            "--sim-timestamps",
            "--model",
            "sim-model",
            "--endpoint",
            "completions",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            run_id,
            "--stop-timeout",
            "3",
            *args,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, summary = read_results(str(tmp_path), run_id)
    return summary, proc.stdout + proc.stderr


@pytest.mark.alone
def test_overloaded_worker_marks_the_run_client_bound(tmp_path):
    summary, console = _run(
        tmp_path,
        FLOOD,
        "flood",
        "--processes",
        "1",
        "-u",
        "200",
        "-r",
        "200",
        "-t",
        "16s",
        "--max-tokens-override",
        "400",
        sim_processes=2,
    )
    cb = summary["client_bound"]
    assert cb["bound"] is True, cb
    (worker,) = cb["workers"]
    assert worker["bound"] and worker["since"] is not None
    assert set(worker["reasons"]) & {"cpu", "loop_lag", "token_lag"}
    assert worker["index"] == 0
    assert cb["workers_needed"] >= 2 and "worker processes" in cb["advice"]
    # the console said so once for this worker, at the time, not only in the summary
    lines = [line for line in console.splitlines() if "client_bound:" in line]
    assert len(lines) == 1, lines
    assert "worker 0" in lines[0]


@pytest.mark.alone
def test_light_run_is_not_client_bound(tmp_path):
    summary, console = _run(
        tmp_path,
        LIGHT,
        "light",
        "-u",
        "5",
        "-r",
        "5",
        "-t",
        "12s",
        "--max-tokens-override",
        "64",
    )
    cb = summary["client_bound"]
    assert cb["bound"] is False, cb
    (local,) = cb["workers"]
    assert local["worker"] == "local" and not local["bound"] and local["reasons"] == []
    assert local["samples"] >= 8
    assert local["cpu_p95"] < 50
    assert local["token_lag_p99_ms"] is not None  # --sim-timestamps: token lag was watched
    assert "client_bound:" not in console
    assert cb["limits"]["cpu_pct"] == 70 and cb["limits"]["loop_lag_ms"] == 10 and cb["limits"]["token_lag_ms"] == 5


@pytest.mark.parametrize("flag,value", [("--health-cpu-limit", "lots"), ("--health-sustain", "0s")])
def test_bad_health_options_fail_before_load(tmp_path, flag, value):
    proc = run_locust(
        "--sim-profile", "fixed", "-u", "1", "-t", "2s", "--results-dir", str(tmp_path), flag, value, timeout=60
    )
    assert proc.returncode == 2
    assert f"error: {flag}" in proc.stderr
