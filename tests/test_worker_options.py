"""A worker started with options of its own that its master's run overrides says so, one INFO line
for each, and runs the master's: the server saw the master's model and max_tokens only."""

from __future__ import annotations

import pytest

from tests.edges import ended, kill_all, launch, truth_ids
from tests.helpers import free_port, read_truth, simulator

pytestmark = pytest.mark.process


def test_a_worker_says_each_option_its_master_overrides(tmp_path):
    truth = str(tmp_path / "truth.jsonl")
    port = free_port()
    with simulator("--profile", "fixed", truth_log=truth) as url:
        master = launch("--master", "--headless", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                        "--expect-workers", "1", "-u", "4", "-r", "4", "-t", "3s", "--host", url, "--results-dir",
                        str(tmp_path), "--run-id", "theirs", "--model", "sim-model", "--max-tokens-override", "12",
                        log_path=tmp_path / "master.log")  # fmt: skip
        worker = launch("--worker", "--master-host", "127.0.0.1", "--master-port", str(port), "-u", "3", "--model",
                        "my-model", "--max-tokens-override", "12", "--seed", "5", log_path=tmp_path / "worker.log")  # fmt: skip
        try:
            code = ended(master, 60)
            ended(worker, 20)
        finally:
            kill_all(master, worker)
    log = (tmp_path / "worker.log").read_text()
    assert code == 0, (tmp_path / "master.log").read_text()[-3000:]
    lines = sorted(line.split("/llm: ", 1)[1] for line in log.splitlines() if "of this worker is overridden" in line)
    assert lines == [
        "option --model my-model of this worker is overridden by its master's: sim-model",
        "option --seed 5 of this worker is overridden by its master's: not set",
        "option --users 3 of this worker is overridden by its master's: 4",
    ], log[-3000:]  # --max-tokens-override: the same as the master's, no line
    served = read_truth(truth)
    assert truth_ids(truth) and {t["output_tokens"] for t in served} <= set(range(13)), served[:3]
