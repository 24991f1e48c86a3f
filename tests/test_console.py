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
    proc = run_locust("--headless", "-u", "3", "-r", "3", "-t", "30s", "--max-tokens-override", "8",
                      "--results-dir", str(tmp_path), "--run-id", "c", "--stop-timeout", "5", timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = proc.stderr.splitlines()
    # before: Locust's table every 2 s, about 100 lines for this run; now the start, two or three
    # progress lines (the load starts a few seconds after Locust's clock on a busy machine) and the end
    assert len(err) <= 20, proc.stderr
    assert not [line for line in err if "Aggregated" in line or "|    " in line], proc.stderr
    progress = [m for m in map(PROGRESS.search, err) if m]
    assert 2 <= len(progress) <= 3, proc.stderr
    users, ok, failed, rate, p50, p95, flying = (int(g.replace(",", "")) for g in progress[-1].groups())
    assert users == 3 and failed == 0 and rate > 0 and 0 <= flying <= 3
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
    proc = run_locust("--headless", "-u", "1", "-r", "1", "-t", "5s", "--max-tokens-override", "4", "--locust-tables",
                      "--results-dir", str(tmp_path), "--run-id", "t", "--stop-timeout", "5", timeout=90)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sum("Aggregated" in line for line in proc.stderr.splitlines()) >= 2, proc.stderr
    assert "Response time percentiles (approximated)" in proc.stdout + proc.stderr
    assert "left out" not in proc.stdout
