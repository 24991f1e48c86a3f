"""A load process frozen (SIGSTOP) for seconds, then continued: self-health names it a freeze and
says what it puts off, the ITL of the streams in flight (their chunks, sent on time by the server,
read together at its end), not a machine whose other processes took the CPU."""

from __future__ import annotations

import json
import signal
import time

import numpy as np
import pytest

from tests.edges import ended, kill_all, launch, records, slow_profile, truth_count, wait_for
from tests.helpers import read_truth, simulator

pytestmark = [pytest.mark.process, pytest.mark.timing]

FROZEN_S = 3.0


def test_a_frozen_process_is_named_a_freeze_that_puts_the_itl_of_its_streams_off(tmp_path):
    truth_path = str(tmp_path / "truth.jsonl")
    with simulator("--profile", slow_profile(tmp_path, 0.05, 0.05), truth_log=truth_path) as url:  # 2 s streams
        proc = launch("--headless", "-u", "4", "-r", "4", "-t", "10s", "--host", url, "--results-dir", str(tmp_path),
                      "--run-id", "frozen", "--model", "sim-model", "--max-tokens-override", "40",
                      log_path=tmp_path / "run.log")  # fmt: skip
        try:
            wait_for(lambda: truth_count(truth_path) >= 4, 40, "load began")
            proc.send_signal(signal.SIGSTOP)
            time.sleep(FROZEN_S)
            proc.send_signal(signal.SIGCONT)
            code = ended(proc, 60)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
            kill_all(proc)
        time.sleep(1.5)  # the truth log is flushed every second
    log = (tmp_path / "run.log").read_text()
    assert code is not None, log[-3000:]
    frozen = [line for line in log.splitlines() if "client frozen: the local process did not run for" in line]
    assert len(frozen) == 1 and "the ITL of the streams in flight then is off" in frozen[0], log[-3000:]
    seconds = float(frozen[0].split("did not run for ")[1].split(" s")[0])
    assert FROZEN_S - 0.5 <= seconds <= FROZEN_S + 1.5, frozen[0]
    assert "client contended" not in log, log[-3000:]
    with open(tmp_path / "frozen" / "summary.json") as f:
        health = json.load(f)["client_bound"]["workers"][0]
    assert len(health["freezes"]) == 1 and health["frozen_s"] == pytest.approx(seconds, abs=0.1)
    # what it puts off, against the server's own times: a stream the server sent evenly (every 50 ms)
    # has, in its record, one gap of about the freeze and a burst of gaps of zero
    truth = {t["request_id"]: t for t in read_truth(truth_path)}
    df = records(tmp_path / "frozen" / "requests.parquet")
    held = [np.diff(times) for rid, times in zip(df["request_id"], df["chunk_times"])
            if len(times) > 2 and truth[rid]["last_token"] - truth[rid]["first_token"] < 3]  # fmt: skip
    assert any(gaps.max() > FROZEN_S - 1 and (gaps < 0.005).sum() >= 10 for gaps in held), "no stream shows the freeze"
