"""The results folder held by the run that writes it: an OS lock (fcntl.flock) from the start of a
named run to the end of its writing, released by the kernel when the process dies, so that
--overwrite never removes a run that is still going and two runs started with one --run-id cannot
both write one folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from plugin import exit_codes
from tests.edges import ended, kill_all, launch, record_ids, reports, slow_profile, truth_count, wait_for
from tests.helpers import LOCUST, ROOT, master_and_workers, simulator

pytestmark = pytest.mark.process

LOAD = ("--headless", "--model", "sim-model", "--seed", "3")


def run_json(folder) -> dict:
    with open(folder / "run.json") as f:
        return json.load(f)


def test_overwrite_refuses_a_run_whose_streams_are_all_longer_than_its_flushes(tmp_path):
    """A run whose every stream lasts 40 s writes nothing after run.json for that long: it still
    holds its folder, so --overwrite is refused with one line (exit 2) before any load, and so is
    `reports build`; once that run is killed (SIGKILL), the kernel has released its lock and
    --overwrite replaces it."""
    with simulator("--profile", slow_profile(tmp_path, 0.1, 2.0)) as url:
        args = (*LOAD, "--host", url, "--results-dir", str(tmp_path), "--run-id", "busy", "--max-tokens-override", "20")
        first = launch(*args, "-u", "1", "-r", "1", "-t", "60s", log_path=tmp_path / "first.log")
        try:
            wait_for(lambda: (tmp_path / "busy" / "run.json").exists(), 60, "the first run started")
            started = run_json(tmp_path / "busy")["started_at"]
            hour_ago = (
                time.time() - 3600
            )  # as if it had written nothing for an hour: no "written lately" guess holds it
            for name in os.listdir(tmp_path / "busy"):
                os.utime(tmp_path / "busy" / name, (hour_ago, hour_ago))
            second = subprocess.run(
                [*LOCUST, *args, "-u", "1", "-r", "1", "-t", "3s", "--overwrite"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert second.returncode == exit_codes.BAD_INPUT, (second.stdout + second.stderr)[-3000:]
            errors = [ln for ln in second.stderr.splitlines() if ln.startswith("error:")]
            assert len(errors) == 1 and "being written by a run now" in errors[0], second.stderr[-2000:]
            assert "Traceback" not in second.stderr
            assert run_json(tmp_path / "busy")["started_at"] == started, "the running run's folder was replaced"
            built = reports("build", str(tmp_path / "busy"))
            assert built.returncode == 2 and built.stderr.count("\n") == 1 and "being written" in built.stderr, (
                built.stderr
            )
            assert first.poll() is None
            first.send_signal(signal.SIGKILL)
            first.wait(10)
            again = subprocess.run(
                [*LOCUST, *args, "-u", "1", "-r", "1", "-t", "2s", "--stop-timeout", "0", "--overwrite"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert again.returncode in (0, exit_codes.INCOMPLETE), again.stderr[-3000:]
            assert run_json(tmp_path / "busy")["started_at"] > started
        finally:
            kill_all(first)


def test_of_two_runs_with_one_run_id_the_second_is_refused_before_its_users_start(tmp_path):
    """A master waiting for its worker has begun its run (its init has passed): a second run given
    the same --run-id meanwhile is refused with one line and exit 2 at once, no traceback, no
    request sent; the first then runs as asked, alone in its folder."""
    truth = str(tmp_path / "truth.jsonl")
    with simulator("--profile", slow_profile(tmp_path, 0.05, 0.02), truth_log=truth) as url:
        args = (
            *LOAD,
            "--host",
            url,
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "twice",
            "-u",
            "2",
            "-r",
            "2",
            "-t",
            "4s",
            "--max-tokens-override",
            "10",
        )
        with master_and_workers(
            *args, expect_workers=1, headless=False, log_path=tmp_path / "master.log", start=launch
        ) as run:
            wait_for(lambda: "Waiting for workers" in (tmp_path / "master.log").read_text(), 60, "the master's init")
            t0 = time.monotonic()
            second = subprocess.run([*LOCUST, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
            took = time.monotonic() - t0
            time.sleep(1.5)  # the simulator's truth log is flushed every second
            assert truth_count(truth) == 0, "the second run sent requests"
            worker = run.start_worker(log_path=tmp_path / "w.log")
            code = ended(run.master, 90)
            ended(worker, 30)
    assert second.returncode == exit_codes.BAD_INPUT and took < 20, (took, second.stderr[-3000:])
    errors = [ln for ln in second.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "twice" in errors[0] and "being written" in errors[0], second.stderr[-2000:]
    assert "Traceback" not in second.stderr + second.stdout
    log = (tmp_path / "master.log").read_text()
    assert code == 0 and "Traceback" not in log, log[-3000:]
    ids = record_ids(tmp_path / "twice" / "requests.parquet")
    assert len(ids) == len(set(ids)) == run_json(tmp_path / "twice")["records"] > 0
