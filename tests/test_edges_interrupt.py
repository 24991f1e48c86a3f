"""Interrupted runs are marked as such: SIGINT (Ctrl-C) and SIGTERM (`docker compose stop`,
Kubernetes) end a run with `complete: false`, a reason and exit code 130, and every request the
server saw has exactly one record, the streams cut by the interruption recorded as `stopped`."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from plugin import exit_codes
from tests.edges import ended, kill_all, launch, records, slow_profile, summary_of, truth_count, truth_ids, wait_for
from tests.helpers import load_options, master_and_workers, run_locust, simulator

pytestmark = pytest.mark.process

LOAD = ("--model", "sim-model", "--max-tokens-override", "30", "--seed", "4")


def exactly_once(truth: list[str], df) -> None:
    seen = Counter(df["request_id"])
    twice = [k for k, n in seen.items() if n > 1]
    assert not twice, f"{len(twice)} requests recorded twice"
    missing = set(truth) - set(seen)
    assert not missing, f"{len(missing)} of {len(set(truth))} requests the server saw have no record"
    assert set(seen) <= set(truth), "records of requests the server never saw"


def interrupt_local_run(tmp_path, run_id: str, *signals: int) -> tuple[int | None, str, str]:
    """A local run of 10 users on 3 s streams, sent `signals` (0.05 s apart) while the streams of
    its second round are in flight: (exit code, console log, the simulator's truth log)."""
    truth = str(tmp_path / "truth.jsonl")
    log_path = tmp_path / f"{run_id}.log"
    with simulator("--profile", slow_profile(tmp_path, 0.1, 0.1), truth_log=truth) as url:  # 3 s streams
        proc = launch(
            "--headless",
            "--host",
            url,
            "-u",
            "10",
            "-r",
            "10",
            "-t",
            "40s",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            run_id,
            *LOAD,
            log_path=log_path,
        )
        try:
            wait_for(lambda: truth_count(truth) >= 10, 40, "load began")
            time.sleep(1.0)  # streams of the second round are in flight
            for k, sig in enumerate(signals):
                if k:
                    time.sleep(0.05)
                proc.send_signal(sig)
            code = ended(proc, 30)
        finally:
            kill_all(proc)
    return code, log_path.read_text(), truth


def test_ctrl_c_on_a_local_run_records_every_stream_and_exits_130(tmp_path):
    code, log, truth = interrupt_local_run(tmp_path, "sigint", signal.SIGINT)
    assert code == exit_codes.INTERRUPTED, log[-3000:]
    summary = summary_of(tmp_path / "sigint")
    assert summary["complete"] is False and "SIGINT" in summary["reason"], summary.get("reason")
    df = records(tmp_path / "sigint" / "requests.parquet")
    exactly_once(truth_ids(truth), df)
    assert (df["error"] == "stopped").sum() >= 5, df["error"].value_counts()
    assert "interrupted" in log
    assert "Traceback" not in log, log[-3000:]  # an interrupt is not an error


def test_sigterm_on_a_worker_then_the_master_loses_nothing_and_exits_130(tmp_path):
    truth = str(tmp_path / "truth.jsonl")
    with simulator("--profile", slow_profile(tmp_path, 0.1, 0.1), truth_log=truth) as url:
        with master_and_workers(
            *load_options(url, tmp_path, "term", 16, 40, 20),
            *LOAD,
            expect_workers=2,
            log_path=tmp_path / "master.log",
            worker_logs=[tmp_path / f"w{i}.log" for i in range(2)],
            start=launch,
        ) as run:
            workers = run.workers
            wait_for(lambda: truth_count(truth) >= 16, 40, "load began")
            time.sleep(1.0)
            workers[0].send_signal(signal.SIGTERM)
            worker_code = ended(workers[0], 20)
            time.sleep(2.0)
            run.master.send_signal(signal.SIGTERM)
            code = ended(run.master, 40)
            other = ended(workers[1], 20)
    log = (tmp_path / "master.log").read_text()
    assert worker_code == exit_codes.INTERRUPTED, (tmp_path / "w0.log").read_text()[-3000:]
    assert code == exit_codes.INTERRUPTED, log[-3000:]
    assert other == exit_codes.INTERRUPTED, (tmp_path / "w1.log").read_text()[-3000:]
    summary = summary_of(tmp_path / "term")
    assert summary["complete"] is False and "SIGTERM" in summary["reason"], summary.get("reason")
    df = records(tmp_path / "term" / "requests.parquet")
    exactly_once(truth_ids(truth), df)
    assert (df["error"] == "stopped").sum() >= 8, df["error"].value_counts()
    assert df["worker"].nunique() == 2


def test_a_server_that_never_sends_a_token_is_not_a_success(tmp_path):
    """Headers at once, then no token until the run ends: every request is cut at the end
    (`stopped`), none failed, none succeeded. The drain is announced when it starts."""
    with simulator("--profile", "fixed", "--fault", "stall_first=1.0:60") as url:
        proc = launch(
            "--headless",
            "--host",
            url,
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "4s",
            "--stop-timeout",
            "2",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "mute",
            *LOAD,
            log_path=tmp_path / "mute.log",
        )
        try:
            code = ended(proc, 40)
        finally:
            kill_all(proc)
    log = (tmp_path / "mute.log").read_text()
    assert code == exit_codes.INCOMPLETE, log[-3000:]
    assert "stopping: waiting up to 2 s for 4 streams in flight (--stop-timeout)" in log, log[-3000:]
    reason = [ln for ln in log.splitlines() if "run incomplete" in ln]
    assert len(reason) == 1 and "no request succeeded" in reason[0], log[-3000:]
    summary = summary_of(tmp_path / "mute")
    assert summary["complete"] is False and "no request succeeded" in summary["reason"]


def test_a_run_without_a_record_is_not_a_success(tmp_path):
    # an open loop whose first arrival is due 100 s after a 3 s run: nothing is sent (0 users is refused as bad input)
    proc = run_locust(
        "--request-rate",
        "0.01",
        "--arrival",
        "constant",
        "-t",
        "3s",
        "--results-dir",
        str(tmp_path),
        "--run-id",
        "none",
        timeout=60,
    )
    assert proc.returncode == exit_codes.INCOMPLETE, proc.stderr[-3000:]
    assert "run incomplete (exit 4): no request was recorded" in proc.stderr
    summary = summary_of(tmp_path / "none")
    assert summary["complete"] is False and summary["reason"] == "no request was recorded"


def test_a_repeated_sigterm_does_not_cut_the_interrupt_short(tmp_path):
    """An orchestrator (or a wrapper and the process both) may send SIGTERM twice: the second must
    not run Locust's shutdown again in the middle of the suite's, losing the streams in flight."""
    code, log, truth = interrupt_local_run(tmp_path, "twice", signal.SIGTERM, signal.SIGTERM)
    assert code == exit_codes.INTERRUPTED, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    summary = summary_of(tmp_path / "twice")
    assert summary["complete"] is False and "SIGTERM" in summary["reason"], summary.get("reason")
    df = records(tmp_path / "twice" / "requests.parquet")
    exactly_once(truth_ids(truth), df)
    assert (df["error"] == "stopped").sum() >= 5, df["error"].value_counts()
