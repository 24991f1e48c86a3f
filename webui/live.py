"""Live LLM statistics for the web UI: short sliding windows over the exact merged records, and
what the streams still open have delivered so far.

The process that writes results (master, or a local run) hands every record batch that
`rows_recorded` delivers to `LiveWindow.add_rows`, and every load process reports its open
streams (plugin/progress.py). A snapshot ending at `end` computes, for each window length in
`WINDOWS` (the page picks one), per request class and overall, the same block as summary.json
with the same code (`metrics.measure.Measure.block`), counted where things happen:

  tokens      when they arrived: the records' chunk arrivals (`arrived_tokens`, as summary.json)
              plus the token events of the open streams, each spread evenly between its first
              token and its last counted read; an event counts as many tokens as the recent
              records carried per chunk. Prompt tokens count at the first token (an open
              stream's from its prompt's characters times the recent records' tokens per char)
  TTFT        when the first token came: records whose first token arrived in the window and
              open streams that have their first token (the SLO verdicts of TTFT objectives too)
  the rest    when the request ended: TPOT, ITL, E2E, requests/s, goodput and failures of the
              records that ended in the window

A stream is counted either as a record or as an open stream of its process's latest report,
never both: a worker sends its open streams in the same synchronous call that cuts its record
batch, and the master replaces that worker's entry when the batch arrives. On a master the
windows end at the oldest of the live workers' latest reports, so the newest seconds are
complete.

Load steps (a step ramp or a capacity search) and why the knee is there: webui/live_steps.py; one
block (records and open streams of a span): webui/live_blocks.py; the records' columns:
webui/live_table.py. --warmup is not applied to the windows; after the run the view shows the
run's summary.json.

This module has no Flask or Locust dependency; webui/view.py feeds it and webui/routes.py serves it.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from metrics.breakdown import groups
from metrics.record import NOT_SERVER_FAILURES
from webui.live_blocks import Flight, live_block, measure, ratios_of
from webui.live_steps import LiveSteps
from webui.live_table import clean, rows_to_live_table

if TYPE_CHECKING:  # pyarrow: loaded with the results' modules where records are kept (plugin/hooks.py)
    import pyarrow as pa

WINDOWS = (5.0, 10.0, 30.0, 60.0)  # window lengths offered by the page, seconds
DEFAULT_WINDOW = 5.0
HISTORY_POINTS = 10_800  # 6 h of points at one per 2 s
SLICE_ROWS = 2_000  # rows converted at a time
MAX_TABLES = 64  # compact the window's tables beyond this many
KEEP_SLACK_S = 60.0  # records are kept this long beyond the longest window (late batches)


def window_key(seconds: float) -> str:
    return f"{seconds:g}"


class LiveWindow:
    """The records of one run that ended recently, the open streams, and a history of points.

    `add_rows` and `take` belong to the event loop's thread; one `snapshot` at a time may run in
    a worker thread (webui/view.py does, so a long computation never stalls a local run's
    streams) given the rows `take` returned. Nothing else touches the window meanwhile.
    """

    def __init__(
        self,
        objectives=(),
        run_start: float | None = None,
        windows=WINDOWS,
        backends: tuple[str, ...] = (),
        backend_count: int | None = None,
    ):
        self.windows = tuple(float(w) for w in windows)
        # the replicas the run spreads over (several --host URLs) and --backend-count: each backend's
        # fair share, as summary.json's `backends` takes it (metrics/backends.py)
        self.backends, self.backend_count = tuple(backends), backend_count
        self.objectives = list(objectives)
        self.run_start = run_start
        self._pending: list = []
        self._tables: list[pa.Table] = []
        self.latest_end = -math.inf  # the latest end time of any record received
        self.totals = {"records": 0, "ok": 0, "failed": 0, "stopped": 0, "cancelled": 0, "output_tokens": 0}
        self.history: deque = deque(maxlen=HISTORY_POINTS)
        self.steps = LiveSteps(objectives)  # the load steps' rows

    # -- input ---------------------------------------------------------------------------------

    def add_rows(self, rows) -> None:
        """Every record batch of the run (cheap: conversion waits for the next snapshot)."""
        self._pending.extend(rows)

    def take(self) -> list:
        """The rows received since the last call (to hand to `snapshot` in another thread)."""
        rows, self._pending = self._pending, []
        return rows

    def absorb(self, rows=None) -> None:
        """Convert rows (default: those received since the last call) into the window's columns."""
        rows = self.take() if rows is None else rows
        for i in range(0, len(rows), SLICE_ROWS):
            table = rows_to_live_table(rows[i : i + SLICE_ROWS])
            self._count(table)
            self._tables.append(table)

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
        """Forget records that ended before `before` (they can no longer be in any window or step)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        kept = [t for t in self._tables if t.num_rows and pc.max(t.column("ended")).as_py() >= before]
        if len(kept) > MAX_TABLES:
            merged = pa.concat_tables(kept)
            kept = [merged.filter(pc.greater_equal(merged.column("ended"), before))]
        self._tables = kept

    def select(self, ended_from: float) -> pa.Table:
        """Records that ended at or after `ended_from`."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not self._tables:
            return rows_to_live_table([])
        table = pa.concat_tables(self._tables)
        return table.filter(pc.greater_equal(table.column("ended"), ended_from))

    def bounds(self, end: float, seconds: float) -> tuple[float, float]:
        """The window ending at `end`: never longer than `seconds`, never before the run started."""
        start = end - seconds
        if self.run_start is not None:
            start = max(start, min(self.run_start, end))
        return start, end

    # -- output --------------------------------------------------------------------------------

    def snapshot(
        self, end: float | None = None, rows=None, final: bool = False, flight: Flight | None = None, steps=None
    ) -> dict:
        """Statistics of every window ending at `end` (default now), and of the load steps.

        `rows`: what `take()` returned, when the caller runs this in a worker thread while the
        event loop goes on receiving rows. `final`: the run is over and every record is in; the
        windows end at the last record's end. `flight`: the open streams (a `Flight`). `steps`:
        a shapes.steps.StepPlan of the run's levels so far, with `run_start`."""
        self.absorb(rows)
        flight = flight if flight is not None and not final else Flight()
        end = time.time() if end is None else float(end)
        if final and math.isfinite(self.latest_end):
            end = min(end, self.latest_end)
        longest = max(self.windows)
        keep_from = end - longest - KEEP_SLACK_S
        step_rows = self.steps.rows(end, flight, steps, self.run_start, final)
        waiting = [r["start"] for r in self.steps.waiting(step_rows)]
        self.prune(min([keep_from, *waiting]))
        table = self.select(self.bounds(end, longest)[0])
        m, ended = measure(table, self.objectives)
        ratios = ratios_of(m)
        if waiting:
            self.steps.fill(step_rows, flight, ratios, self.select)
        out = {
            "end": end,
            "windows": {},
            "totals": dict(self.totals),
            "steps": step_rows,
            "ratios": ratios,
            "in_flight": {
                "streams": len(flight),
                "waiting_first_token": int(np.sum(~np.isfinite(flight.first))),
                "oldest_wait_s": float(end - np.min(flight.sent[~np.isfinite(flight.first)]))
                if np.any(~np.isfinite(flight.first))
                else None,
            },
        }
        classes = m.df["request_class"].to_numpy() if m is not None else np.empty(0, dtype=object)
        names = sorted(set(classes.tolist()) | set(flight.cls.tolist()))
        for seconds in self.windows:
            start, _ = self.bounds(end, seconds)
            overall = live_block(m, ended, start, end, None, flight, None, ratios, self.objectives)
            by_class = {
                str(c): live_block(m, ended, start, end, classes == c, flight, flight.cls == c, ratios, self.objectives)
                for c in names
            }
            records = int(np.sum((ended >= start) & (ended <= end))) if m is not None else 0
            backends = by_backend(m, ended, start, end, flight, ratios, self.objectives)
            out["windows"][window_key(seconds)] = {
                "window": {"start": start, "end": end, "seconds": end - start, "length_s": seconds, "records": records},
                "overall": overall,
                "by_class": by_class,
                "by_backend": backends,
                "backends": backend_flags(backends, self.backends, self.backend_count),
            }
        return clean(out)

    def add_point(self, snap: dict, **extra) -> dict | None:
        """One history point for the charts: every window's figures, and the caller's gauges."""
        point = {"t": snap["end"], **extra, "w": {}}
        for key, w in snap["windows"].items():
            o = w["overall"]
            th, gp = o["throughput"], o["goodput"]
            seconds = w["window"]["seconds"] or None
            point["w"][key] = {
                "ttft_p50_ms": o["ttft_ms"]["p50"],
                "ttft_p95_ms": o["ttft_ms"]["p95"],
                "ttfa_p95_ms": o["ttfa_ms"]["p95"],
                "tpot_p50_ms": o["tpot_ms"]["p50"],
                "tpot_p95_ms": o["tpot_ms"]["p95"],
                "e2e_p95_ms": o["e2e_ms"]["p95"],
                "requests_per_s": th["requests_per_s"],
                "output_tokens_per_s": th["output_tokens_per_s"],
                "total_tokens_per_s": th["total_tokens_per_s"],
                "goodput_per_s": gp["requests_per_s"],
                "errors_per_s": (o["requests"]["failed"] / seconds) if seconds else None,
            }
        point = clean(point)
        if not self.history or point["t"] > self.history[-1]["t"]:  # time runs forward on the charts
            self.history.append(point)
            return point
        return None


def by_backend(m, ended: np.ndarray, start: float, end: float, flight, ratios: dict, objectives) -> dict:
    """Several replicas or a balancer's header: one block per backend of the records that ended in
    the window, cut by summary.json's grouping (metrics/breakdown.py `groups`). The open streams are
    left out of these blocks: an open stream's backend is known once it has ended."""
    if m is None or not (m.df["backend"] != "").any():
        return {}
    backends = m.df["backend"].to_numpy()
    none = np.zeros(len(flight), dtype=bool)
    return {
        name: live_block(m, ended, start, end, mask, flight, none, ratios, objectives)
        for name, mask in groups(backends, (ended >= start) & (ended <= end) & (backends != ""))
    }


def backend_flags(blocks: dict, known: tuple[str, ...] = (), count: int | None = None) -> dict | None:
    """The window's backends judged by summary.json's one rule (metrics/backends.py
    `judge_backends`) on the window's blocks: each backend's share of the requests that ended in
    it, its p50s and flags; None with no backend. `known`: the replicas of the spread (each has its
    row), `count`: --backend-count."""
    from metrics.backends import RULE, judge_backends
    from metrics.schema.backends import BackendShare

    names = sorted(set(blocks) | set(known))
    if not names:
        return None
    rows = []
    for name in names:
        b = blocks.get(name)
        if b is None:
            rows.append(BackendShare(backend=name, sent=0))
            continue
        r = b["requests"]
        rows.append(
            BackendShare(
                backend=name,
                sent=r["ended"],
                ttft_p50_ms=b["ttft_ms"]["p50"],
                tpot_p50_ms=b["tpot_ms"]["p50"],
                e2e_p50_ms=b["e2e_ms"]["p50"],
                output_tokens_per_s=b["throughput"]["output_tokens_per_s"],
                failed=r["failed"],
                by_error=dict(r["by_error"]),
            )
        )
    flagged, unseen = judge_backends(rows, {n: b["requests"]["ok"] for n, b in blocks.items()}, count)
    return {"rule": RULE, "backends": [r.model_dump(mode="json") for r in rows], "flagged": flagged, "unseen": unseen}
