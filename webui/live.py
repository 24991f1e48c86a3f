"""Live LLM statistics for the web UI: short sliding windows over the exact merged records, and
what the streams still open have delivered so far.

The process that writes results (master, or a local run) hands every record batch that
`rows_recorded` delivers to `LiveWindow.add_rows`, and every load process reports its open
streams (webui/progress.py). A snapshot ending at `end` computes, for each window length in
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

Load steps (a step ramp or a capacity search): once a step's time is over, its row is computed
from the records exactly as summary.json's `by_step` (the requests sent in its window, its
warm-up excluded; tokens that arrived in it); "pending" while requests sent before its end are
still open, "final" after. --warmup is not applied to the windows; after the run the view shows
the run's summary.json.

Why the knee is there (`live_diagnosis`): once a level's row is final, the diagnosis of
metrics/diagnosis.py over the final levels, from the server's metrics scraped so far; after the
run the view shows summary.json's.

This module has no Flask or Locust dependency; webui/view.py feeds it and webui/routes.py serves it.
"""

from __future__ import annotations

import math
import time
from collections import deque

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metrics.record import ARROW_SCHEMA, FIELD_NAMES, NOT_SERVER_FAILURES, SCALAR_COLUMNS
from shapes.steps import Level
from webui.progress import FIELDS as FLIGHT_FIELDS

WINDOWS = (5.0, 10.0, 30.0, 60.0)  # window lengths offered by the page, seconds
DEFAULT_WINDOW = 5.0
HISTORY_POINTS = 10_800  # 6 h of points at one per 2 s
SLICE_ROWS = 2_000  # rows converted at a time
MAX_TABLES = 64  # compact the window's tables beyond this many
KEEP_SLACK_S = 60.0  # records are kept this long beyond the longest window (late batches)
PROMPT_TOKENS_PER_CHAR = 0.25  # before any record says better (core/text.py's estimate)

# The record fields the live statistics read: the summary's scalars, chunk_times, input_chars.
LIVE_COLUMNS = (*SCALAR_COLUMNS, "input_chars", "chunk_times")
_INDEX = [FIELD_NAMES.index(c) for c in LIVE_COLUMNS]
_TYPES = [ARROW_SCHEMA.field(c).type for c in LIVE_COLUMNS]
SCHEMA = pa.schema([*(pa.field(c, t) for c, t in zip(LIVE_COLUMNS, _TYPES)), pa.field("ended", pa.float64())])


def window_key(seconds: float) -> str:
    return f"{seconds:g}"


def ended_at(wall_send: np.ndarray, e2e_s: np.ndarray) -> np.ndarray:
    """Wall-clock time each record ended: wall_send + e2e_s, or wall_send when e2e_s is unknown."""
    wall_send = np.asarray(wall_send, dtype=float)
    e2e = np.asarray(e2e_s, dtype=float)
    return wall_send + np.where(np.isfinite(e2e), e2e, 0.0)


def rows_to_live_table(rows: list) -> pa.Table:
    """Rows in FIELD_NAMES order -> a table of LIVE_COLUMNS plus `ended`."""
    columns = [[row[i] for row in rows] for i in _INDEX] if rows else [[] for _ in _INDEX]
    arrays = [pa.array(col, type=t) for col, t in zip(columns, _TYPES)]
    wall = arrays[LIVE_COLUMNS.index("wall_send")].to_numpy(zero_copy_only=False)
    e2e = arrays[LIVE_COLUMNS.index("e2e_s")].to_numpy(zero_copy_only=False)
    return pa.Table.from_arrays([*arrays, pa.array(ended_at(wall, e2e), type=pa.float64())], schema=SCHEMA)


def clean(x):
    """JSON-safe: NaN and infinities become None, numpy scalars Python numbers."""
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return x if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


class Flight:
    """The open streams of every load process (webui/progress.py entries, merged) as arrays."""

    def __init__(self, reports=()):
        cols = {k: [] for k in FLIGHT_FIELDS}
        for r in reports:
            for k in FLIGHT_FIELDS:
                cols[k].extend(r[k])
        self.cls = np.asarray(cols["cls"], dtype=object)
        self.sent, self.chars, self.first, self.ttft, self.last, self.events = (
            np.asarray(cols[k], dtype=float) for k in ("sent", "chars", "first", "ttft", "last", "events")
        )

    def __len__(self) -> int:
        return len(self.cls)

    def events_in(self, start: float, end: float) -> np.ndarray:
        """Each stream's token events that arrived in [start, end] (spread evenly between its first
        token and its last counted read)."""
        first, last, n = self.first, self.last, self.events
        has = np.isfinite(first) & (n > 0)
        span = np.where(has, last - first, 0.0)
        lo, hi = np.maximum(first, start), np.minimum(last, end)
        share = np.where(span > 0, np.clip(hi - lo, 0.0, None) / np.where(span > 0, span, 1.0),
                         ((first >= start) & (first <= end)).astype(float))  # fmt: skip
        return np.where(has, n * share, 0.0)

    def first_in(self, start: float, end: float) -> np.ndarray:
        return np.isfinite(self.first) & (self.first >= start) & (self.first <= end)


class LiveWindow:
    """The records of one run that ended recently, the open streams, and a history of points.

    `add_rows` and `take` belong to the event loop's thread; one `snapshot` at a time may run in
    a worker thread (webui/view.py does, so a long computation never stalls a local run's
    streams) given the rows `take` returned. Nothing else touches the window meanwhile.
    """

    def __init__(self, objectives=(), run_start: float | None = None, windows=WINDOWS):
        self.windows = tuple(float(w) for w in windows)
        self.objectives = list(objectives)
        self.run_start = run_start
        self._pending: list = []
        self._tables: list[pa.Table] = []
        self.latest_end = -math.inf  # the latest end time of any record received
        self.totals = {"records": 0, "ok": 0, "failed": 0, "stopped": 0, "cancelled": 0, "output_tokens": 0}
        self.history: deque = deque(maxlen=HISTORY_POINTS)
        self.final_steps: dict[int, dict] = {}  # step index -> its final row

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
        kept = [t for t in self._tables if t.num_rows and pc.max(t.column("ended")).as_py() >= before]
        if len(kept) > MAX_TABLES:
            merged = pa.concat_tables(kept)
            kept = [merged.filter(pc.greater_equal(merged.column("ended"), before))]
        self._tables = kept

    def select(self, ended_from: float) -> pa.Table:
        """Records that ended at or after `ended_from`."""
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

    def snapshot(self, end: float | None = None, rows=None, final: bool = False, flight: Flight | None = None,
                 steps=None) -> dict:  # fmt: skip
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
        step_rows = self._step_rows(end, flight, steps, final)
        waiting = [r["start"] for r in step_rows or () if r["status"] in ("pending", "final") and r["step"] not in self.final_steps]
        self.prune(min([keep_from, *waiting]))
        table = self.select(self.bounds(end, longest)[0])
        m, ended = _measure(table, self.objectives)
        ratios = _ratios(m, table)
        if waiting:
            self._step_blocks(step_rows, flight, ratios)
        out = {"end": end, "windows": {}, "totals": dict(self.totals), "steps": step_rows, "ratios": ratios,
               "in_flight": {"streams": len(flight), "waiting_first_token": int(np.sum(~np.isfinite(flight.first))),
                             "oldest_wait_s": float(end - np.min(flight.sent[~np.isfinite(flight.first)]))
                             if np.any(~np.isfinite(flight.first)) else None}}  # fmt: skip
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
            out["windows"][window_key(seconds)] = {
                "window": {"start": start, "end": end, "seconds": end - start, "length_s": seconds, "records": records},
                "overall": overall,
                "by_class": by_class,
            }
        return clean(out)

    def _step_rows(self, end: float, flight: Flight, steps, final: bool) -> list | None:
        """The levels begun so far: "running" until the level's time is over, then "pending" while
        requests sent before its end are still open (or a capacity search may still hold it for
        another step), then "final" (kept as it is)."""
        if steps is None or self.run_start is None:
            return None
        plan, run_start = steps
        levels = plan.levels_at(run_start)
        rows = []
        for level in levels:
            if level.begin > end:
                break
            if level.first in self.final_steps:
                rows.append(self.final_steps[level.first])
                continue
            row = {"step": level.first, "last": level.last, "users": level.users, "begin": level.begin,
                   "start": level.start, "end": level.end, "cut": level.cut, "open": None, "block": None}  # fmt: skip
            if end < level.end and not final:
                row["status"] = "running"
            else:
                still_open = int(np.sum(flight.sent < level.end))
                may_grow = plan.cut_lag_s is not None and level is levels[-1] and not final
                row.update(status="final" if still_open == 0 and not may_grow else "pending", open=still_open)
            rows.append(row)
        return rows

    def _step_blocks(self, rows: list, flight: Flight, ratios: dict) -> None:
        """The blocks of the levels whose time is over, as summary.json's by_step computes them
        (metrics.measure.Measure.level: the level's declared set, its one verdict); a pending
        level's open streams add what they delivered in the window so far."""
        todo = [r for r in rows if r["status"] in ("pending", "final") and r["step"] not in self.final_steps]
        table = self.select(min(r["start"] for r in todo))
        m, _ = _measure(table, self.objectives)
        for r in todo:
            start, end = r["start"], r["end"]
            if m is not None:
                level = Level(r["step"], r["last"], r["users"], r["begin"], start, end, r["cut"])
                mask = m.in_level(level)
                block = m.level(level).model_dump(exclude={"step", "users", "window", "steps", "cut"})
                rec_ttft = m.df["ttft_s"].to_numpy()[mask & m.ok]
            else:
                block, rec_ttft = _empty_block(end - start, self.objectives), np.empty(0)
            if r["status"] == "pending":  # what the open streams delivered in the step's window so far
                sent_in = (flight.sent >= start) & (flight.sent <= end) & np.isfinite(flight.ttft)
                _add_open_streams(block, flight, start, end, ratios, np.concatenate([rec_ttft, flight.ttft[sent_in]]))
                block["verdict"] = None  # judged once its set is complete
            r["block"] = block
            if r["status"] == "final":
                self.final_steps[r["step"]] = clean(r)

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


def live_diagnosis(step_rows, objectives, server, client) -> dict | None:
    """Why the knee is there, over the levels whose rows are final so far: the levels as
    summary.json's by_step holds them, judged into a capacity as summary.json's is, and the same
    diagnosis (metrics/diagnosis.py) from the server's metrics scraped so far (`server`, a frame;
    None without --server-metrics) and the client's self-health (`client`, a ClientBound)."""
    from metrics.diagnosis import diagnose_levels
    from metrics.schema.figures import Step
    from metrics.capacity import capacity

    final = [r for r in step_rows or () if r["status"] == "final" and r.get("block")]
    if not final:
        return None
    steps = [Step.model_validate({**r["block"], "step": r["step"], "users": r["users"], "steps": r["last"] - r["step"] + 1,
                                  "window": {"start": r["start"], "end": r["end"]}, "cut": r["cut"]}) for r in final]  # fmt: skip
    cap = capacity(steps, objectives) if objectives else None
    return diagnose_levels(steps, cap, server, client).model_dump(mode="json")


def _measure(table: pa.Table, objectives):
    """A metrics.measure.Measure over the records of `table`, and their end times; (None, empty)
    when there are none."""
    if table.num_rows == 0:
        return None, np.empty(0)
    from metrics.measure import Measure  # pandas: loaded by the web UI's process at its first snapshot

    df = table.select(list(SCALAR_COLUMNS)).to_pandas()
    m = Measure(df, table.column("chunk_times").combine_chunks(), objectives)
    m.input_chars = table.column("input_chars").to_numpy(zero_copy_only=False).astype(float)
    m.chunks = pc.list_value_length(table.column("chunk_times")).fill_null(0).to_numpy(zero_copy_only=False).astype(float)
    return m, table.column("ended").to_numpy()


def _ratios(m, table) -> dict:
    """Tokens per token event (chunk) and prompt tokens per prompt character, from the recent
    successful records: what an open stream's counts stand for."""
    if m is None:
        return {"tokens_per_event": 1.0, "prompt_tokens_per_char": PROMPT_TOKENS_PER_CHAR}
    ok = m.ok
    out = m.df["output_tokens"].to_numpy(dtype=float)
    prompt = m.df["prompt_tokens"].to_numpy(dtype=float)
    sel = ok & (m.chunks > 0) & (out > 0)
    per_event = float(out[sel].sum() / m.chunks[sel].sum()) if sel.any() else 1.0
    sel = ok & (prompt >= 0) & (m.input_chars > 0)
    per_char = float(prompt[sel].sum() / m.input_chars[sel].sum()) if sel.any() else PROMPT_TOKENS_PER_CHAR
    return {"tokens_per_event": per_event, "prompt_tokens_per_char": per_char}


def live_block(m, ended: np.ndarray, start: float, end: float, group, flight: Flight, flight_group, ratios: dict,
               objectives=()) -> dict:  # fmt: skip
    """One class's (or the overall) statistics over [start, end]: summary.json's block (`m`, a
    metrics.measure.Measure) of the records that ended in the window, with tokens counted where
    they arrived and TTFT where the first token came, the open streams included (module doc).
    `requests.ended` stands for summary.json's `requests.sent`; no `sent_per_s`, no token sources."""
    fsel = np.ones(len(flight), dtype=bool) if flight_group is None else flight_group
    seconds = max(0.0, end - start)
    if m is not None:
        g = np.ones(len(m.df), dtype=bool) if group is None else group
        in_window = g & (ended >= start) & (ended <= end)
        out = m.block(in_window, start, end, group=g).model_dump()
        first = m.df["wall_send"].to_numpy() + m.df["ttft_s"].to_numpy()
        rec_ttft = m.df["ttft_s"].to_numpy()[g & m.ok & (first >= start) & (first <= end)]
    else:
        out = _empty_block(seconds, objectives)
        rec_ttft = np.empty(0)
    # the open streams: tokens that arrived, prompts whose first token came, their TTFT
    first_in = flight.first_in(start, end) & fsel
    ttft = np.concatenate([rec_ttft, flight.ttft[first_in]])
    _add_open_streams(out, flight, start, end, ratios, ttft, fsel)
    if out.get("slo") and objectives:
        _rejudge_ttft(out["slo"], objectives, ttft)
    requests = out["requests"]
    out["requests"] = {"ended": requests.pop("sent"), **requests}
    out["throughput"].pop("sent_per_s", None)
    out["tokens"].pop("source", None)
    return out


def _add_open_streams(block: dict, flight: Flight, start: float, end: float, ratios: dict, ttft_s: np.ndarray,
                      select=None) -> None:  # fmt: skip
    """Add to a block what the open streams (`select` of `flight`) delivered in [start, end]:
    output tokens that arrived, prompt tokens of first tokens that came; TTFT becomes the
    distribution of `ttft_s`."""
    from metrics.measure import distribution  # pandas

    sel = np.ones(len(flight), dtype=bool) if select is None else select
    first_in = flight.first_in(start, end) & sel
    out_tokens = float(flight.events_in(start, end)[sel].sum()) * ratios["tokens_per_event"]
    prompt_tokens = float(flight.chars[first_in].sum()) * ratios["prompt_tokens_per_char"]
    block["ttft_ms"] = distribution(ttft_s).model_dump()
    th, seconds = block["throughput"], max(0.0, end - start)
    if seconds > 0:
        th["output_tokens_per_s"] = (th["output_tokens_per_s"] or 0.0) + out_tokens / seconds
        th["total_tokens_per_s"] = (th["total_tokens_per_s"] or 0.0) + (out_tokens + prompt_tokens) / seconds
    block["open_streams"] = {"counted": int(np.sum(sel)), "first_token_in_window": int(np.sum(first_in)),
                             "output_tokens": out_tokens, "prompt_tokens": prompt_tokens}  # fmt: skip


def _rejudge_ttft(slo: dict, objectives, ttft_s: np.ndarray) -> None:
    """TTFT objectives judged on the TTFTs whose first token came in the window."""
    by_text = {o.text: o for o in objectives}
    for v in slo["objectives"]:
        obj = by_text.get(v["objective"])
        if obj is None or obj.metric != "ttft":
            continue
        value = obj.statistic(ttft_s)
        v["value_ms"] = None if value is None else value * 1000
        v["passed"] = value is not None and value < obj.threshold_s
    slo["passed"] = all(v["passed"] for v in slo["objectives"])


def _empty_block(seconds: float, objectives=()) -> dict:
    """A block of no records (what summary.json's block says for an empty window)."""
    from metrics.measure import Measure

    df = rows_to_live_table([]).select(list(SCALAR_COLUMNS)).to_pandas()
    m = Measure(df, pa.array([], ARROW_SCHEMA.field("chunk_times").type), objectives)
    return m.block(np.zeros(0, dtype=bool), 0.0, seconds).model_dump()
