"""Replies of 100,000 one-token chunks, faster than the client can parse them: the users wait for
the finisher and the finisher for the writer (bounded memory), the drain at the end yields to the
writer, and every request the server saw is recorded, none dropped on a disk with room."""

from __future__ import annotations

import time

import psutil
import pytest

from plugin import exit_codes
from runfolder.unwritten import UNWRITTEN_LIMIT_ENV
from tests.edges import ended, kill_all, launch, record_ids, slow_profile, summary_of, truth_ids
from tests.helpers import simulator

pytestmark = pytest.mark.process

SECONDS = 15
USERS = 8
CHUNKS = 100_000
LIMIT = "32MB"  # the writer holds this much of unwritten rows (8 rows of 100,000 chunks), then drops
# the local process's peak memory: 1,168-1,212 MB measured when it runs alone on 2 cores (the client
# then reads fastest), 1,041 MB beside the suite's other tests; 1,000 MB failed alone, at any commit
RSS_LIMIT = 1_500 << 20


def test_replies_of_100000_chunks_are_all_recorded_in_bounded_memory_and_the_run_ends_on_time(tmp_path, monkeypatch):
    monkeypatch.setenv(UNWRITTEN_LIMIT_ENV, LIMIT)
    truth = str(tmp_path / "truth.jsonl")
    with simulator("--profile", slow_profile(tmp_path, 0.01, 0.0), truth_log=truth) as url:
        proc = launch(
            "--headless",
            "--host",
            url,
            "--model",
            "sim-model",
            "-u",
            str(USERS),
            "-r",
            str(USERS),
            "-t",
            f"{SECONDS}s",
            "--max-tokens-override",
            str(CHUNKS),
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "huge",
            log_path=tmp_path / "huge.log",
        )
        peak, t0 = 0, time.monotonic()
        try:
            ps = psutil.Process(proc.pid)
            while proc.poll() is None and time.monotonic() - t0 < SECONDS + 120:
                try:
                    peak = max(peak, ps.memory_info().rss)
                except psutil.NoSuchProcess:
                    break
                time.sleep(0.2)
            code = ended(proc, 5)
            took = time.monotonic() - t0
        finally:
            kill_all(proc)
    served = truth_ids(truth)  # complete: the simulator flushed it as it stopped
    log = (tmp_path / "huge.log").read_text()
    assert code == exit_codes.DONE, log[-3000:]
    assert "dropped" not in log and "Traceback" not in log, log[-3000:]
    ids = record_ids(tmp_path / "huge" / "requests.parquet")
    assert len(served) >= USERS and sorted(ids) == sorted(served), (len(ids), len(served))
    assert summary_of(tmp_path / "huge")["complete"] is True
    # the start, the run, the drain of the streams in flight and the writing: 15-20 s on a loaded
    # machine of 2 cores, the same as for replies of a few chunks there
    assert took < SECONDS + 40, f"{took:.0f} s to exit"
    assert peak < RSS_LIMIT, f"peak RSS {peak >> 20} MB"
