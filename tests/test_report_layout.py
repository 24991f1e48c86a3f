"""The report's layout where a clean run left charts with nothing to say, and where a table is
wider than the page: a chart that would show nothing (failures over time with none, tokens per
chunk at 100 % in one bar) is left out with one line saying what it would have shown, and a
chart with something to show is kept; every table sits in a box that scrolls it, so the per-step
table's last column no longer runs off the page at 1400 px."""

from __future__ import annotations

import re

import numpy as np
import pytest

from metrics.record import RequestRecord, rows_to_table

pytestmark = pytest.mark.unit

T0 = 1_700_000_000.0


def _records(n: int, failed: int, tokens_per_chunk: list[int]) -> list[tuple]:
    """n requests over 60 s, 10 chunks each carrying `tokens_per_chunk[i % len]` tokens (the
    server's usage in every chunk), the last `failed` of them http_5xx."""
    rows = []
    for i in range(n):
        wall = T0 + 12.0 + 45.0 * i / n
        per = tokens_per_chunk[i % len(tokens_per_chunk)]
        ok = i < n - failed
        rows.append(
            RequestRecord(
                f"r{i}",
                "w",
                "chat",
                "short",
                100,
                50,
                wall_send=wall,
                t_intended=float(i),
                t_send=float(i),
                status=200 if ok else 500,
                ok=ok,
                error="" if ok else "http_5xx",
                ttft_s=0.1,
                e2e_s=0.3,
                tpot_s=0.02 if ok else float("nan"),
                prompt_tokens=20,
                output_tokens=10 * per if ok else 0,
                tokens_source="usage",
                n_chunks=10 if ok else 0,
                chunk_times=list(np.linspace(0.1, 0.3, 10)) if ok else [],
                chunk_tokens=[per] * 10 if ok else [],
            ).as_row()
        )
    return rows


def _report(folder, rows) -> str:
    from bench.report_scale import write_run
    from reports.build import build

    write_run(str(folder), rows_to_table(rows), T0, 60.0, steps=None, slo="")
    with open(build(str(folder))["html"], encoding="utf-8") as f:
        return f.read()


def test_a_clean_runs_empty_charts_are_left_out_with_one_line(tmp_path):
    html = _report(tmp_path / "clean", _records(60, failed=0, tokens_per_chunk=[1]))
    charts = re.findall(r'data-chart="([^"]+)"', html)
    assert "errors_over_time" not in charts and "tokens_per_chunk_hist" not in charts, charts
    assert "No failed request: no chart of failures over time." in html
    assert (
        "Tokens per chunk: every chunk carried 1 token (counted by the server (usage in every chunk)); no chart of its distribution."
        in html
    )
    assert "ttft_over_time" in charts and "itl_hist" in charts


def test_charts_with_something_to_show_are_kept(tmp_path):
    html = _report(tmp_path / "failures", _records(60, failed=3, tokens_per_chunk=[1, 2]))
    charts = re.findall(r'data-chart="([^"]+)"', html)
    assert "errors_over_time" in charts and "tokens_per_chunk_hist" in charts, charts
    assert "no chart of failures over time" not in html and "no chart of its distribution" not in html


def test_every_table_scrolls_in_its_own_box(tmp_path):
    html = _report(tmp_path / "tables", _records(30, failed=0, tokens_per_chunk=[1]))
    body = html.split("<body>", 1)[1]
    header_table = 1  # the run's header rows: two columns, never wider than the page
    assert body.count("<table>") == body.count('<div class="table-scroll"><table>') + header_table
    assert ".table-scroll{max-width:100%;overflow-x:auto;" in html
