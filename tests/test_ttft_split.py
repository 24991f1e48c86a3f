"""The server's own timing of each request beside the client's (metrics/ttft_split.py): a vLLM
stream whose final usage chunk carries its per-request `metrics` object, read by the real client,
keeps the server's figures in its record; summary.json and the report split the client's TTFT
into the server's queue, its prefill and the rest, and the parts add up. Records of a server that
sends nothing have no split."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from metrics.record import rows_to_table
from tests.test_stream_corpus import CORPUS, load, replay

T0 = 1_700_000_000.0


def _records(case: str, n: int, first_id: int):
    """`n` records of one corpus case, each replayed through the real client over a socket, placed
    one per second inside a run's window."""
    meta, _, script = load(CORPUS / "vllm" / f"{case}.json")
    out = []
    for i in range(n):
        rec, _, _, _ = replay(meta, script)
        out.append(dataclasses.replace(rec, request_id=f"r{first_id + i}", wall_send=T0 + 12.0 + first_id + i))
    return out


def test_a_vllm_stream_with_per_request_metrics_is_split_and_the_parts_add_up(tmp_path):
    from bench.report_scale import write_run
    from reports.build import build

    timed = _records("chat_per_request_metrics", 3, 0)
    silent = _records("chat_continuous_usage", 2, 10)  # a server that sends no timing of its own
    for r in timed:  # the record keeps the server's figures, in seconds
        assert (r.server_queue_s, r.server_ttft_s, r.server_generation_s, r.server_itl_s, r.cached_tokens) == (
            0.0125,
            0.03125,
            0.048,
            0.016,
            1024,
        )
    for r in silent:
        assert math.isnan(r.server_queue_s) and math.isnan(r.server_ttft_s) and r.cached_tokens == -1
    summary = write_run(str(tmp_path), rows_to_table([r.as_row() for r in timed + silent]), T0, 60, steps=(), slo="")
    split = summary.overall.ttft_split
    assert split is not None and split.requests == 3
    client_ms = sum(r.ttft_s for r in timed) / 3 * 1000.0
    assert split.ttft_ms == pytest.approx(client_ms)  # the client's TTFT of the reported requests only
    assert (split.queue_ms, split.prefill_ms) == (pytest.approx(12.5), pytest.approx(31.25))
    assert split.queue_ms + split.prefill_ms + split.rest_ms == pytest.approx(split.ttft_ms)
    # the client reads the first token a replay's pause after the request: the rest is that, not the server's
    assert split.rest_ms == pytest.approx(client_ms - 43.75) and split.rest_ms > 0
    assert (split.cached_tokens, split.cached_known) == (3 * 1024, 3)
    assert split.cached_share == pytest.approx(1024 / 1061)
    # the report states the same figures, and they add up as printed
    md = Path(build(str(tmp_path))["md"]).read_text(encoding="utf-8")
    assert "### TTFT split by the server's own timing (ms)" in md
    row = next(line for line in md.splitlines() if line.startswith("| overall |") and line.count("|") == 9)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "3" and float(cells[3]) == 12.5 and float(cells[4]) == pytest.approx(31.2, abs=0.06)
    assert float(cells[2]) == pytest.approx(float(cells[3]) + float(cells[4]) + float(cells[5]), abs=0.15)
    assert cells[7] == f"{1024 / 1061 * 100:.1f}"


def test_records_of_a_server_that_sends_nothing_have_no_split(tmp_path):
    from bench.report_scale import write_run
    from reports.build import build

    silent = _records("chat_continuous_usage", 2, 0)
    summary = write_run(str(tmp_path), rows_to_table([r.as_row() for r in silent]), T0, 60, steps=(), slo="")
    assert summary.overall.ttft_split is None and all(b.ttft_split is None for b in summary.by_class.values())
    assert "TTFT split" not in Path(build(str(tmp_path))["md"]).read_text(encoding="utf-8")


def test_the_live_view_splits_ttft_as_summary_json_does(tmp_path):
    """The live view's window block (webui/live_blocks.py) of the same records carries the same split
    the page shows in its TTFT card, and the page's line is bound to it."""
    from metrics.summary import summarize
    from webui.live_blocks import Flight, live_block, measure, ratios_of
    from webui.live_table import rows_to_live_table

    rows = [r.as_row() for r in _records("chat_per_request_metrics", 2, 0) + _records("chat_continuous_usage", 1, 5)]
    m, ended = measure(rows_to_live_table(rows), ())
    live = live_block(m, ended, T0, T0 + 60, None, Flight(), None, ratios_of(m))
    whole = summarize(rows_to_table(rows), T0, T0 + 60).overall.ttft_split
    assert live["ttft_split"] == whole.model_dump() and whole.requests == 2
    page = (Path(__file__).parents[1] / "webui" / "llm.html").read_text(encoding="utf-8")
    for key in ("ttft_split.ttft_ms", "ttft_split.queue_ms", "ttft_split.prefill_ms", "ttft_split.rest_ms"):
        assert f'data-f="{key}"' in page
