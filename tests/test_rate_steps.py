"""--rate-steps: an open loop whose rate steps up every --step-time (plugin/load_models/rate_steps.py),
each step judged on its own (summary.json by_step, its `rate`), the run ended after the last step."""

from __future__ import annotations

import json

import numpy as np
import pytest

from plugin.load_models.rate_steps import StepSchedule
from shapes.arrivals import START_DELAY_S
from tests.helpers import run_locust, simulator


def _times(schedule: StepSchedule, until: float) -> list[float]:
    out = []
    while (t := schedule.take()) < until:
        out.append(t)
    return out


def test_each_step_sends_at_its_own_rate_split_across_processes():
    """Constant arrivals at 2, 5 and 10 requests/s for 4 s each: 2 x (4 - 1) - 1 in the first step
    (the first arrival is one gap after START_DELAY_S, as an open loop's), 20 and 40 in the others
    (each from its step's start); two processes split every step
    between them, nothing twice; after the last step nothing more is due."""
    rates, step = (2.0, 5.0, 10.0), 4.0
    whole = _times(StepSchedule(rates, step, "constant", 1.0, 7, 1, 0, 100.0), 100.0 + 3 * step)
    counts = np.histogram(whole, bins=3, range=(100.0, 100.0 + 3 * step))[0].tolist()
    assert counts == [int(rates[0] * (step - START_DELAY_S)) - 1, 20, 40]
    parts = [_times(StepSchedule(rates, step, "constant", 1.0, 7, 2, i, 100.0), 100.0 + 3 * step) for i in (0, 1)]
    assert sorted(parts[0] + parts[1]) == whole
    assert (
        StepSchedule(rates, step, "constant", 1.0, 7, 1, 0, 100.0).count_between(100.0 + step, 100.0 + 2 * step) == 20
    )
    done = StepSchedule(rates, step, "constant", 1.0, 7, 1, 0, 100.0)
    _times(done, 100.0 + 3 * step)
    assert done.take() > 100.0 + 3 * step + 3600  # the shape has ended the run long before


@pytest.mark.process
@pytest.mark.timing  # a send late by more than 60 ms would move an arrival across a window's edge
def test_a_run_in_rate_steps_judges_each_step_at_its_rate(tmp_path):
    """2 then 6 requests/s, constant arrivals, 4 s steps with 1.1 s warm-up: the simulator's truth log
    has the arrivals of each step (2 x 3 - 1 and 24), the summary a level per rate with the
    requests sent in its window (after its warm-up), and the run ends after the last step without -t."""
    truth = tmp_path / "truth.jsonl"
    with simulator("--profile", "fixed", truth_log=str(truth)) as url:
        proc = run_locust(
            "--host",
            url,
            "--rate-steps",
            "2,6",
            "--step-time",
            "4s",
            "--step-warmup",
            "1.1s",
            "--arrival",
            "constant",
            "--max-concurrency",
            "16",
            "--max-tokens-override",
            "8",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "r",
            timeout=90,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in open(truth)]
    assert len(rows) == int(2 * (4 - START_DELAY_S)) - 1 + 24, len(rows)
    summary = json.load(open(tmp_path / "r" / "summary.json"))
    steps = summary["by_step"]
    assert [s["rate"] for s in steps] == [2.0, 6.0] and {s["users"] for s in steps} == {16}
    # the windows [1.1 s, 4 s] and [5.1 s, 8 s] of the run (no arrival near their edges): arrivals at
    # 1.5 .. 3.5 s, and at 5.17 .. 7.83 s
    assert [s["requests"]["sent"] for s in steps] == [5, 17]
    assert summary["setup"]["load"]["kind"] == "rate_steps"
    assert "open loop in steps 2,6 requests/s (constant), 4s each (1.1s warm-up)" in proc.stderr
