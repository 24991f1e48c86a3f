"""Live LLM statistics for the web UI: a sliding window over the exact merged records.

The process that writes results (master, or a local run) hands every record batch that
`plugin.events.rows_recorded` delivers to `LiveWindow.add_rows`. A snapshot takes the records that
*ended* inside the window (default the last 30 s; a record ends at wall_send + e2e_s, or at
wall_send when it has no e2e) and computes, per request class and overall, the same statistics
as summary.json with the same code (`metrics.summary.Measure`): exact numpy
percentiles of TTFT, TPOT, pooled ITL and E2E; requests, output and total tokens per second over
the window; goodput against the run's SLO objectives; failures by class. Nothing comes from
Locust's rounded statistics.

Differences from summary.json, all because the view is live: the window is cut by completion
time (not send time) so that it holds what finished recently, and so are its tokens (a record
exists once its request ended); --warmup is not applied; and the
window is never longer than the time since the run started. `requests.ended` counts the records
in the window ("sent" in summary.json).

This module has no Flask or Locust dependency; webui/plugin.py feeds it and serves it.
"""

from __future__ import annotations

import math
import time
from collections import deque

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metrics.record import ARROW_SCHEMA, FIELD_NAMES, NOT_SERVER_FAILURES, SCALAR_COLUMNS

WINDOW_S = 30.0
HISTORY_POINTS = 10_800  # 6 h of points at one per 2 s
SLICE_ROWS = 2_000  # rows converted at a time (the caller may yield to the event loop between slices)
MAX_TABLES = 64  # compact the window's tables beyond this many

# The record fields the live statistics read: the summary's scalars plus chunk_times.
LIVE_COLUMNS = (*SCALAR_COLUMNS, "chunk_times")
_INDEX = [FIELD_NAMES.index(c) for c in LIVE_COLUMNS]
_TYPES = [ARROW_SCHEMA.field(c).type for c in LIVE_COLUMNS]
SCHEMA = pa.schema([*(pa.field(c, t) for c, t in zip(LIVE_COLUMNS, _TYPES)), pa.field("ended", pa.float64())])


def ended_at(wall_send: np.ndarray, e2e_s: np.ndarray) -> np.ndarray:
    """Wall-clock time each record ended: wall_send + e2e_s, or wall_send when e2e_s is unknown."""
    wall_send = np.asarray(wall_send, dtype=float)
    e2e = np.asarray(e2e_s, dtype=float)
    return wall_send + np.where(np.isfinite(e2e), e2e, 0.0)


def rows_to_live_table(rows: list) -> pa.Table:
    """Rows in FIELD_NAMES order -> a table of LIVE_COLUMNS plus `ended`."""
    if rows:
        columns = [[row[i] for row in rows] for i in _INDEX]
    else:
        columns = [[] for _ in _INDEX]
    arrays = [pa.array(col, type=t) for col, t in zip(columns, _TYPES)]
    wall = arrays[LIVE_COLUMNS.index("wall_send")].to_numpy(zero_copy_only=False)
    e2e = arrays[LIVE_COLUMNS.index("e2e_s")].to_numpy(zero_copy_only=False)
    return pa.Table.from_arrays([*arrays, pa.array(ended_at(wall, e2e), type=pa.float64())], schema=SCHEMA)


def _clean(x):
    """JSON-safe: NaN and infinities become None, numpy scalars Python numbers."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return x if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


class LiveWindow:
    """The records of one run that ended recently, and a history of snapshot points for charts.

    `add_rows` and `take` belong to the event loop's thread; one `snapshot` at a time may run in
    a worker thread (webui/plugin.py does, so a long computation never stalls a local run's
    streams) given the rows `take` returned. Nothing else touches the window meanwhile.
    """

    def __init__(self, window_s: float = WINDOW_S, objectives=(), run_start: float | None = None):
        self.window_s = float(window_s)
        self.objectives = list(objectives)
        self.run_start = run_start
        self._pending: list = []
        self._tables: list[pa.Table] = []
        self.latest_end = -math.inf  # the latest end time of any record received
        self.totals = {"records": 0, "ok": 0, "failed": 0, "stopped": 0, "cancelled": 0, "output_tokens": 0}
        self.history: deque = deque(maxlen=HISTORY_POINTS)

    # -- input ---------------------------------------------------------------------------------

    def add_rows(self, rows) -> None:
        """Every record batch of the run (cheap: conversion waits for the next snapshot)."""
        self._pending.extend(rows)

    def take(self) -> list:
        """The rows received since the last call (to hand to `snapshot` in another thread)."""
        rows, self._pending = self._pending, []
        return rows

    def absorb(self, rows=None, pause=None) -> None:
        """Convert rows (default: those received since the last call) into the window's columns."""
        rows = self.take() if rows is None else rows
        for i in range(0, len(rows), SLICE_ROWS):
            table = rows_to_live_table(rows[i : i + SLICE_ROWS])
            self._count(table)
            self._tables.append(table)
            if pause is not None:
                pause()

    def _count(self, table: pa.Table) -> None:
        ok = table.column("ok").to_numpy(zero_copy_only=False).astype(bool)
        error = np.asarray(table.column("error").to_pylist(), dtype=object)
        out = table.column("output_tokens").to_numpy(zero_copy_only=False)
        t = self.totals
        t["records"] += table.num_rows
        t["ok"] += int(ok.sum())
        t["stopped"] += int((~ok & (error == "stopped")).sum())
        t["cancelled"] += int((~ok & (error == "cancelled")).sum())
        t["failed"] += int((~ok & ~np.isin(error, NOT_SERVER_FAILURES)).sum())
        t["output_tokens"] += int(np.clip(out[ok], 0, None).sum())
        if table.num_rows:
            self.latest_end = max(self.latest_end, float(np.nanmax(table.column("ended").to_numpy())))

    def prune(self, before: float) -> None:
        """Forget records that ended before `before` (they can no longer be in any window)."""
        kept = []
        for t in self._tables:
            if t.num_rows and pc.max(t.column("ended")).as_py() >= before:
                kept.append(t)
        if len(kept) > MAX_TABLES:
            merged = pa.concat_tables(kept)
            kept = [merged.filter(pc.greater_equal(merged.column("ended"), before))]
        self._tables = kept

    # -- output --------------------------------------------------------------------------------

    def select(self, start: float, end: float) -> pa.Table:
        """Records that ended in [start, end] (both inclusive, like summary.section's throughput)."""
        if not self._tables:
            return rows_to_live_table([])
        table = pa.concat_tables(self._tables)
        ended = table.column("ended")
        return table.filter(pc.and_(pc.greater_equal(ended, start), pc.less_equal(ended, end)))

    def bounds(self, end: float) -> tuple[float, float]:
        """The window ending at `end`: never longer than window_s, never before the run started."""
        start = end - self.window_s
        if self.run_start is not None:
            start = max(start, min(self.run_start, end))
        return start, end

    def snapshot(self, end: float | None = None, rows=None, final: bool = False) -> dict:
        """Statistics of the window ending at `end` (default now): {window, overall, by_class, totals}.

        `rows`: what `take()` returned, when the caller runs this in a worker thread while the
        event loop goes on receiving rows; by default the rows received so far. `final`: the run
        is over and every record is in; the window ends at the last record's end (or now)."""
        self.absorb(rows)
        end = time.time() if end is None else float(end)
        if final and math.isfinite(self.latest_end):
            end = min(end, self.latest_end)
        start, end = self.bounds(end)
        self.prune(end - self.window_s - 60.0)  # keep a minute of slack for late batches
        table = self.select(start, end)
        overall, by_class = compute(table, start, end, self.objectives)
        return _clean(
            {
                "window": {"start": start, "end": end, "seconds": end - start, "length_s": self.window_s,
                           "records": table.num_rows},
                "overall": overall,
                "by_class": by_class,
                "totals": dict(self.totals),
            }
        )  # fmt: skip

    def add_point(self, snap: dict, **extra) -> dict:
        """One history point for the charts, from a snapshot and the caller's gauges."""
        o = snap["overall"]
        th, gp = o["throughput"], o["goodput"]
        window_s = snap["window"]["seconds"] or None
        point = {
            "t": snap["window"]["end"],
            "ttft_p50_ms": o["ttft_ms"]["p50"],
            "ttft_p95_ms": o["ttft_ms"]["p95"],
            "tpot_p50_ms": o["tpot_ms"]["p50"],
            "e2e_p95_ms": o["e2e_ms"]["p95"],
            "requests_per_s": th["requests_per_s"],
            "output_tokens_per_s": th["output_tokens_per_s"],
            "total_tokens_per_s": th["total_tokens_per_s"],
            "goodput_per_s": gp["requests_per_s"],
            "errors_per_s": (o["requests"]["failed"] / window_s) if window_s else None,
            **extra,
        }
        point = _clean(point)
        if not self.history or point["t"] > self.history[-1]["t"]:  # time runs forward on the charts
            self.history.append(point)
        return point


def compute(table: pa.Table, start: float, end: float, objectives=()) -> tuple[dict, dict]:
    """(overall, by_class) blocks for the records of `table`, computed as summary.json's blocks
    (metrics.summary.Measure), reshaped for a live window."""
    from metrics.summary import Measure  # pandas: loaded by the web UI's process at its first snapshot

    df = table.select(list(SCALAR_COLUMNS)).to_pandas()
    chunk_times = table.column("chunk_times").combine_chunks() if table.num_rows else pa.array([], ARROW_SCHEMA.field("chunk_times").type)
    m = Measure(df, chunk_times, objectives)
    classes = df["request_class"].to_numpy()
    overall = block(m, np.ones(len(df), dtype=bool), start, end)
    by_class = {str(c): block(m, classes == c, start, end) for c in sorted(set(classes))}
    return overall, by_class


def block(m, mask: np.ndarray, start: float, end: float) -> dict:
    """One class's (or the overall) statistics: summary.json's block (`m`, a metrics.summary.Measure)
    of the records in `mask`.

    The live window holds the records that ended in it (a record exists once its request ended),
    so its tokens count at completion: (output, prompt) of its successful requests. `requests.ended`
    stands for summary.json's `requests.sent`; no `sent_per_s` and no token sources."""
    ok = m.df[mask & m.ok]
    tokens = (float(ok["output_tokens"].clip(lower=0).sum()), float(ok["prompt_tokens"].clip(lower=0).sum()))
    out = m.block(mask, start, end, group=mask, tokens=tokens).model_dump()
    requests = out["requests"]
    out["requests"] = {"ended": requests.pop("sent"), **requests}
    out["throughput"].pop("sent_per_s", None)
    out["tokens"].pop("source", None)
    return out
