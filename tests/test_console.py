"""The headless console a person reads: one progress line every 10 s, none of Locust's rounded
tables unless --locust-tables, then the exact LLM table and where the results are."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.helpers import read_results, run_locust

pytestmark = pytest.mark.process

PROGRESS = re.compile(
    r"progress 0:\d\d \| (\d+) users \| (\d+) ok, (\d+) failed \| ([\d,]+) output tok/s \| "
    r"TTFT p50 ([\d,]+) ms, p95 ([\d,]+) ms \| (\d+) in flight$"
)


def test_a_headless_run_prints_progress_lines_and_not_locusts_tables(tmp_path):
    proc = run_locust(
        "--headless",
        "-u",
        "3",
        "-r",
        "3",
        "-t",
        "30s",
        "--max-tokens-override",
        "8",
        "--results-dir",
        str(tmp_path),
        "--run-id",
        "c",
        "--stop-timeout",
        "5",
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = proc.stderr.splitlines()
    # before: Locust's table every 2 s, about 100 lines for this run; now the start, two or three
    # progress lines (the load starts a few seconds after Locust's clock on a busy machine) and the end
    assert len(err) <= 20, proc.stderr
    assert not [line for line in err if "Aggregated" in line or "|    " in line], proc.stderr
    progress = [m for m in map(PROGRESS.search, err) if m]
    assert 2 <= len(progress) <= 3, proc.stderr
    users, ok, failed, rate, p50, p95, flying = (int(g.replace(",", "")) for g in progress[-1].groups())
    # a line due at 0:30 can come as the run-time limit stops the users: it counts those left
    assert int(progress[0].group(1)) == 3 and users <= 3, proc.stderr
    assert failed == 0 and rate > 0 and 0 <= flying <= 3
    table, summary = read_results(str(tmp_path), "c")
    done = table[table.ok]
    assert 0 < int(progress[0].group(2)) < ok <= len(done)
    # the console's TTFT is the records' own (exact percentiles of the requests ended so far)
    ttft_ms = done.ttft_s.to_numpy() * 1000
    lo, hi = np.percentile(ttft_ms, [20, 80])
    assert lo - 1 <= p50 <= hi + 1, (p50, lo, hi)
    assert np.percentile(ttft_ms, 70) - 1 <= p95 <= ttft_ms.max() + 1, (p95, ttft_ms.max())
    out = proc.stdout.rstrip().splitlines()
    assert any(line.startswith("LLM results") for line in out)
    assert "Response time percentiles (approximated)" not in proc.stdout + proc.stderr
    assert out[-2] == f"results: {tmp_path / 'c'}"
    assert out[-1].startswith("Locust's own tables are left out")


def test_locust_tables_brings_back_locusts_periodic_and_final_tables(tmp_path):
    proc = run_locust(
        "--headless",
        "-u",
        "1",
        "-r",
        "1",
        "-t",
        "5s",
        "--max-tokens-override",
        "4",
        "--locust-tables",
        "--results-dir",
        str(tmp_path),
        "--run-id",
        "t",
        "--stop-timeout",
        "5",
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sum("Aggregated" in line for line in proc.stderr.splitlines()) >= 2, proc.stderr
    assert "Response time percentiles (approximated)" in proc.stdout + proc.stderr
    assert "left out" not in proc.stdout


def test_the_progress_line_numbers_steps_as_the_per_step_table_does():
    """The progress line's step is the step of the per-step table and summary.json's `by_step`
    (numbered from 0; a level held for more steps is one row, named by its first step): the line
    said "step 3/7 (level 20)" while the table's row for that step read "2 | 20 users"."""
    from types import SimpleNamespace

    from plugin.console import _step
    from shapes.steps import StepPlan

    ramp = StepPlan([5, 10, 20, 50, 80, 120, 160], 40.0, 10.0)
    rows = {level.first: level for level in ramp.levels_at(0.0)}  # the rows of by_step (metrics/summary.py)
    run = SimpleNamespace(steps=ramp, search=None)
    assert _step(run, 90.0) == ("step 2 of 0-6 (level 20)", 2, 2) and rows[2].users == 20
    assert _step(run, 0.0)[0] == "step 0 of 0-6 (level 5)" and _step(run, 1e6)[0] == "step 6 of 0-6 (level 160)"
    # a capacity search that held 5 and 80 users for more steps: by_step has one row for each, steps 1 and 4
    levels = [1, 5, 5, 10, 80, 80, 80]
    held = {level.first: level for level in StepPlan(levels, 40.0, 10.0).levels_at(0.0)}
    assert sorted(held) == [0, 1, 3, 4] and held[4].last == 6
    run = SimpleNamespace(
        steps=None, search=SimpleNamespace(levels=levels, rate_cap=None), plan=SimpleNamespace(step_s=40.0)
    )
    assert _step(run, 45.0) == ("step 1 (level 5)", 1, 1)
    assert _step(run, 85.0) == ("step 2 (level 5 since step 1)", 1, 2)
    assert _step(run, 130.0) == ("step 3 (level 10)", 3, 3)
    assert _step(run, 250.0) == ("step 6 (level 80 since step 4)", 4, 6)
    assert _step(SimpleNamespace(steps=None, search=None), 5.0) is None
