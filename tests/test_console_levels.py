"""The progress line's TTFT during a capacity search: the level running now, all its steps (an
adaptive level is many 2 s slices, each a step of its own), with the first tokens of its streams
still open, against synthetic records and open-stream reports whose TTFTs are known."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from metrics.record import RequestRecord
from plugin.console import Console
from plugin.progress import FIELDS, OpenStreams

pytestmark = pytest.mark.unit

NAN = float("nan")
# an adaptive search's steps (2 s slices): 1 user for three, then 4 users since step 3
LEVELS = [1, 1, 1, 4, 4, 4, 4, 4]


def row(step: int, ttft: float) -> tuple:
    rec = RequestRecord("r", "0", "chat", "c", 10, 8, step=step)
    rec.ok, rec.ttft_s, rec.output_tokens = True, ttft, 8
    return rec.as_row()


def open_report(*streams: tuple[int, float]) -> dict:
    """A local run's open streams now (plugin/progress.py collect()): (step, TTFT; NaN: no first token yet)."""
    out = {k: [] for k in FIELDS}
    for step, ttft in streams:
        for k in FIELDS:
            out[k].append(NAN)
        out["step"][-1], out["ttft"][-1], out["cls"][-1] = step, ttft, "c"
    out["t"] = time.time()
    return out


def progress(levels: list[int], elapsed: float, rows: list[tuple], report: dict) -> str:
    streams = OpenStreams()
    streams.tracker = SimpleNamespace(collect=lambda now=None: report)
    env = SimpleNamespace(
        runner=SimpleNamespace(user_count=levels[-1]),
        llm=SimpleNamespace(plugin=lambda kind: streams if kind is OpenStreams else None, in_flight=lambda: 2),
    )
    run = SimpleNamespace(
        environment=env,
        started=time.time() - elapsed,
        steps=None,
        search=SimpleNamespace(levels=levels, rate_cap=None),
        plan=SimpleNamespace(step_s=2.0),
    )
    console = Console()
    console.rows_recorded(run, rows)
    return console.line(run, 0.0)


def test_a_searchs_progress_line_gives_the_running_levels_ttft():
    """At 15.5 s the slice running is step 7 and no request sent in it has ended: the line said
    "TTFT p50 -" through every level. The level (4 users, steps 3-7) has records of 300 and 500 ms
    and an open stream whose first token came at 700 ms; the level before's (100, 900 ms) are not
    its, nor is a stream still waiting for its first token."""
    rows = [row(0, 0.1), row(2, 0.1), row(3, 0.3), row(4, 0.5)]
    report = open_report((2, 0.9), (6, 0.7), (7, NAN))
    line = progress(LEVELS, 15.5, rows, report)
    assert "step 7 (level 4 since step 3)" in line and "TTFT p50 500 ms, p95 680 ms" in line, line
    # a new level whose requests gave no first token yet: a dash, not the level before's
    line = progress(LEVELS + [8], 17.0, rows, open_report((8, NAN)))
    assert "step 8 (level 8)" in line and "TTFT p50 -, p95 -" in line, line
