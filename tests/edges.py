"""Helpers of the tests/test_edges_*.py tests: runs that go wrong (killed, interrupted, a full
disk, a lost master), watched from outside with real processes and signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq

from tests.helpers import LOCUST, ROOT, load_options, read_truth

PYTHON = sys.executable


def slow_profile(tmp, ttft: float = 0.1, itl: float = 0.1) -> str:
    """A simulator profile whose streams take ttft + tokens x itl seconds, whatever the load."""
    path = tmp / f"slow-{ttft:g}-{itl:g}.yaml"
    path.write_text(f"kind: fixed\nmodel: sim-model\nttft_s: {ttft}\nitl_s: {itl}\nmax_model_len: 1048576\n")
    return str(path)


def launch(*args: str, log_path, cwd: str = ROOT, path: tuple[str, ...] = ()) -> subprocess.Popen:
    """A Locust process of the suite (locustfile by absolute path) started from `cwd`, SIGINT at
    its default (a terminal's Ctrl-C reaches it), its output in `log_path`; `path`: folders whose
    modules come before the suite's and the installed ones."""
    out = open(log_path, "w")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join((*path, ROOT))}
    return subprocess.Popen(
        [*LOCUST, *args],
        cwd=cwd,
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for(predicate, timeout: float, what: str, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"not within {timeout:g}s: {what}")


def wait_for_text(path, text: str, timeout: float) -> None:
    wait_for(
        lambda: os.path.exists(path) and text in open(path, errors="replace").read(), timeout, f"{text!r} in {path}"
    )


def truth_count(path: str) -> int:
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return sum(1 for _ in f)


def ended(proc: subprocess.Popen, timeout: float) -> int | None:
    """The exit code, or None (the process is killed) when it did not exit within `timeout`."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        return None


def kill_all(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(5)


def truth_ids(path: str) -> list[str]:
    return [t["request_id"] for t in read_truth(path) if t.get("request_id")]


def reports(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "reports", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def summary_of(folder) -> dict:
    with open(os.path.join(folder, "summary.json")) as f:
        return json.load(f)


def record_ids(path) -> list[str]:
    return pq.read_table(str(path), columns=["request_id"]).column("request_id").to_pylist()


def records(path):
    return pq.read_table(str(path)).to_pandas()


def fill(folder) -> None:
    """Fill the file system of `folder` up to the last byte (ENOSPC)."""
    with open(os.path.join(folder, "filler"), "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


def run_on_a_full_disk(tmp, disk, load: tuple, users: int, seconds: int, *said: str) -> tuple[int | None, str, int]:
    """A headless run writing to `disk` (a small tmpfs), filled to its last byte as load begins and
    left full: each text of `said` must be in the log while the run still goes (said at once, not
    at the end). Returns the exit code, the log and the number of requests the simulator served."""
    from tests.helpers import simulator

    truth = str(tmp / "truth.jsonl")
    log_path = tmp / "full.log"
    with simulator("--profile", slow_profile(tmp, 0.05, 0.02), truth_log=truth) as url:
        proc = launch(*load, *load_options(url, disk, "full", users, seconds, 10), log_path=log_path)
        try:
            wait_for(lambda: os.path.exists(disk / "full" / "run.json") and truth_count(truth) >= 5, 30, "load began")
            fill(disk)
            for text in said:
                wait_for_text(log_path, text, 15)
            assert proc.poll() is None, "said only at the end"
            code = ended(proc, 60)
        finally:
            kill_all(proc)
    served = len(truth_ids(truth))  # complete: the simulator flushed it as it stopped
    return code, log_path.read_text(), served
