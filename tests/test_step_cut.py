"""A ramp's step that -t ends early is marked partial ("cut" in the console's step table and the
report): its requests and latencies are those of the part that ran, without per-second rates (a
few requests over the fraction of a second after its warm-up made 13 requests/s of a step that had
not run), and the capacity answer does not rest on it."""

from __future__ import annotations

import pytest

from tests.helpers import read_results, run_locust, simulator

pytestmark = pytest.mark.process


def test_a_step_cut_by_the_run_time_is_marked_and_has_no_rates(tmp_path):
    # steps of 12 s (1 s warm-up): -t 29s ends the run at most 4 s into the third step's 11 s window
    # (Locust's -t counts from before the run starts: up to 3 s earlier on a busy machine)
    with simulator("--profile", "fixed") as host:
        proc = run_locust(
            "--headless",
            "--host",
            host,
            "--steps",
            "1,2,3",
            "--step-time",
            "12s",
            "--step-warmup",
            "1s",
            "-t",
            "29s",
            "--max-tokens-override",
            "8",
            "--slo",
            "ttft.p95<60s",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "cut",
            "--stop-timeout",
            "5",
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    table, summary = read_results(str(tmp_path), "cut")
    steps = summary["by_step"]
    assert [s["step"] for s in steps] == [0, 1, 2], steps
    full, cut = steps[:2], steps[2]
    for s in full:
        assert not s["partial"] and s["throughput"]["requests_per_s"] > 0, s
    assert cut["partial"] and cut["window"]["end"] - cut["window"]["start"] < 11 / 2
    assert cut["throughput"] == {
        "sent_per_s": None,
        "requests_per_s": None,
        "output_tokens_per_s": None,
        "total_tokens_per_s": None,
        "sessions_per_s": None,
    }
    assert cut["goodput"]["requests_per_s"] is None
    assert cut["requests"]["sent"] == int(
        (
            (table.step == 2) & (table.wall_send >= cut["window"]["start"]) & (table.wall_send <= cut["window"]["end"])
        ).sum()
    )
    assert summary["complete"] and summary["capacity"]["users"] == 2  # the highest full step
    row = [line for line in proc.stdout.splitlines() if line.split()[:2] == ["2", "3"]]
    assert row and row[0].split()[-1] == "cut" and " - " in row[0], proc.stdout
    assert "| 2 (cut) |" in (tmp_path / "cut" / "report.md").read_text()
