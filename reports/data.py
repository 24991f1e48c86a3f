"""Reading a results folder and the vectorised tables the report draws.

Everything here works on whole columns (pandas / pyarrow / numpy); no function loops over request
records. What is drawn is binned (time bins, histogram bins); the statistics in the tables come
from summary.json, which metrics/summary.py computed exactly from every record.
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from metrics.timing import arrival_inputs, arrived_tokens, pooled_itl

SCALARS = [
    "request_class", "step", "wall_send", "ok", "error", "ttft_s", "e2e_s", "tpot_s",
    "prompt_tokens", "output_tokens", "tokens_source", "n_chunks",
]  # fmt: skip
STRINGS = ["request_class", "error", "tokens_source"]  # read as dictionaries: categoricals, 4x faster
NICE_BINS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)


class ReportError(Exception):
    """A results folder that cannot be read; the message says which file and why."""


@dataclass
class RunData:
    path: str
    run_id: str
    summary: dict
    run: dict
    df: pd.DataFrame  # the scalar columns of every record
    t0: float  # time origin of the charts: the run's start (wall clock)
    server: pd.DataFrame | None = None

    @property
    def records_path(self) -> str:
        return os.path.join(self.path, "requests.parquet")

    @functools.cached_property
    def chunk_times(self) -> pa.ChunkedArray:
        """Every record's chunk arrival times (read once: the charts and each compared scope use them)."""
        return pq.read_table(self.records_path, columns=["chunk_times"]).column("chunk_times")

    @property
    def window(self) -> tuple[float, float]:
        w = self.summary.get("window") or {}
        start, end = w.get("start"), w.get("end")
        if start is None or end is None:
            wall = self.df["wall_send"].to_numpy()
            return (float(np.nanmin(wall)), float(np.nanmax(wall))) if wall.size else (0.0, 0.0)
        return float(start), float(end)


def read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None


def load_run(path: str) -> RunData:
    """The records, summary.json, run.json and server metrics of one results folder."""
    path = os.path.abspath(path)
    records = os.path.join(path, "requests.parquet")
    if not os.path.isdir(path):
        raise ReportError(f"{path}: no such results folder; give results/<run-id>")
    if not os.path.isfile(records):
        raise ReportError(f"{path}: no requests.parquet in it; is it a results folder of a finished run?")
    try:
        schema = pq.read_schema(records)
        columns = [c for c in SCALARS if c in schema.names]
        table = pq.read_table(records, columns=columns, read_dictionary=[c for c in STRINGS if c in columns])
    except (pa.ArrowInvalid, OSError) as e:
        raise ReportError(f"{records}: cannot be read ({e})") from None
    df = table.to_pandas()
    for name in SCALARS:  # an older or partial file: add what is missing, empty
        if name not in df.columns:
            df[name] = np.nan if name.endswith("_s") or name == "wall_send" else ("" if name in STRINGS else 0)
    summary = read_json(os.path.join(path, "summary.json"))
    run = read_json(os.path.join(path, "run.json"))
    if not summary.get("overall"):
        summary = _summary_from_records(records, df, run, summary)
    t0 = run.get("started_at")
    if t0 is None or not math.isfinite(float(t0)):
        t0 = float(np.nanmin(df["wall_send"])) if len(df) else 0.0
    server = _server_metrics(os.path.join(path, "server_metrics.parquet"))
    return RunData(path, run.get("run_id") or summary.get("run_id") or os.path.basename(path), summary, run, df, float(t0), server)


def _summary_from_records(records: str, df: pd.DataFrame, run: dict, partial: dict) -> dict:
    """No summary.json (an interrupted writer): compute one with metrics.summary over every record."""
    from metrics.summary import summarize

    wall = df["wall_send"].to_numpy()
    if wall.size == 0:
        start = end = 0.0
    else:
        start, end = float(np.nanmin(wall)), float(np.nanmax(wall))
    out = summarize(pq.read_table(records), start, end)
    out["note"] = "summary.json was missing: computed over every record, no warm-up excluded"
    return {**partial, **out}


def _server_metrics(path: str) -> pd.DataFrame | None:
    if not os.path.isfile(path):
        return None
    try:
        df = pq.read_table(path).to_pandas()
    except (pa.ArrowInvalid, OSError):
        return None
    need = {"timestamp", "metric", "value"}
    if not need <= set(df.columns):
        return None
    if "labels" not in df.columns:
        df["labels"] = ""
    df["labels"] = df["labels"].map(_label_text) if df["labels"].dtype == object else df["labels"].astype(str)
    ts = df["timestamp"]
    if pd.api.types.is_datetime64_any_dtype(ts):
        df["timestamp"] = ts.astype("int64") / 1e9 if ts.dt.tz is None else ts.dt.tz_convert("UTC").astype("int64") / 1e9
    return df


def _label_text(v) -> str:
    if isinstance(v, dict):
        return ",".join(f"{k}={v[k]}" for k in sorted(v))
    if isinstance(v, (list, tuple, np.ndarray)):  # map<string,string> arrives as a list of pairs
        try:
            return ",".join(f"{k}={val}" for k, val in sorted(v))
        except (TypeError, ValueError):
            return str(v)
    return "" if v is None else str(v)


# ---------------------------------------------------------------------------------------------
# Binning


def bin_width(span_s: float, max_bins: int = 120) -> float:
    """A round time-bin width giving at most `max_bins` bins over the span."""
    for w in NICE_BINS:
        if span_s / w <= max_bins:
            return float(w)
    return float(math.ceil(span_s / max_bins / 3600) * 3600)


@dataclass
class TimeGrid:
    t0: float  # origin (wall clock)
    width: float
    n: int
    span: float = math.inf  # seconds covered: the last bin may be partial

    @property
    def widths(self) -> np.ndarray:
        """Each bin's covered seconds (rates divide by it, so a partial last bin is not low)."""
        return np.clip(np.minimum(self.width, self.span - np.arange(self.n) * self.width), 1e-9, None)

    @property
    def edges(self) -> np.ndarray:
        return self.t0 + np.minimum(np.arange(self.n + 1) * self.width, self.span)

    @property
    def left(self) -> np.ndarray:
        return np.arange(self.n) * self.width

    @property
    def mid(self) -> np.ndarray:
        return np.arange(self.n) * self.width + self.widths / 2

    def index(self, wall: np.ndarray) -> np.ndarray:
        """Bin of each wall-clock time; -1 outside the grid or NaN."""
        rel = (np.asarray(wall, dtype=float) - self.t0) / self.width
        idx = np.where(np.isfinite(rel), np.floor(rel), -1).astype(np.int64)
        idx[(idx < 0) | (idx >= self.n)] = -1
        return idx


def time_grid(run: RunData) -> TimeGrid:
    df = run.df
    wall = df["wall_send"].to_numpy(dtype=float)
    done = wall + np.nan_to_num(df["e2e_s"].to_numpy(dtype=float), nan=0.0)
    end = float(np.nanmax(done)) if done.size else run.t0 + 1.0
    end = max(end, run.window[1])
    span = max(1.0, end - run.t0)
    width = bin_width(span)
    return TimeGrid(run.t0, width, int(math.ceil(span / width)) or 1, span)


def tokens_by_interval(run: RunData, edges: np.ndarray, group: np.ndarray | bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(output, prompt) tokens of the run's records in `group` that arrived in each interval of
    `edges`, as summary.json counts them (metrics.timing.arrived_tokens: successful requests and
    those still streaming at the end, each token where it arrived)."""
    columns, counted = arrival_inputs(run.df)
    return arrived_tokens(edges, *columns, run.chunk_times, counted & group)


def over_time(run: RunData, grid: TimeGrid) -> dict[str, np.ndarray]:
    """Per time bin: requests completed and tokens arrived (throughput), and latency percentiles
    of the successful requests completed in it."""
    df = run.df
    ok = df["ok"].to_numpy(dtype=bool)
    wall = df["wall_send"].to_numpy(dtype=float)
    e2e = df["e2e_s"].to_numpy(dtype=float)
    idx = grid.index(wall + e2e)
    sel = ok & (idx >= 0)
    b = idx[sel]
    n = grid.n
    count = np.bincount(b, minlength=n).astype(float)
    w = grid.widths
    out_tok, prompt_tok = tokens_by_interval(run, grid.edges)
    res = {
        "requests_per_s": count / w,
        "output_tokens_per_s": out_tok / w,
        "total_tokens_per_s": (out_tok + prompt_tok) / w,
        "count": count,
    }
    frame = pd.DataFrame({"bin": b, "ttft": df["ttft_s"].to_numpy(dtype=float)[sel] * 1000,
                          "tpot": df["tpot_s"].to_numpy(dtype=float)[sel] * 1000, "e2e": e2e[sel] * 1000})
    grouped = frame.groupby("bin")
    for q, name in ((0.5, "p50"), (0.95, "p95")):
        qs = grouped[["ttft", "tpot", "e2e"]].quantile(q)
        for metric in ("ttft", "tpot", "e2e"):
            arr = np.full(n, np.nan)
            arr[qs.index.to_numpy(dtype=np.int64)] = qs[metric].to_numpy()
            res[f"{metric}_{name}"] = arr
    return res


def errors_over_time(run: RunData, grid: TimeGrid) -> list[tuple[str, np.ndarray]]:
    """Failures per second in each time bin, by failure class (by the time the failure ended)."""
    df = run.df
    err = df["error"]
    failed = ~df["ok"].to_numpy(dtype=bool) & ~err.isin(("stopped", "cancelled", "")).to_numpy()
    if not failed.any():
        return []
    wall = df["wall_send"].to_numpy(dtype=float)[failed]
    idx = grid.index(wall + np.nan_to_num(df["e2e_s"].to_numpy(dtype=float)[failed], nan=0.0))
    codes, names = pd.factorize(err[failed].astype(str), sort=True)
    keep = idx >= 0
    counts = np.bincount(codes[keep] * grid.n + idx[keep], minlength=len(names) * grid.n).reshape(len(names), grid.n)
    return [(str(name), counts[i] / grid.widths) for i, name in enumerate(names)]


def in_flight(run: RunData, grid: TimeGrid) -> tuple[np.ndarray, np.ndarray]:
    """Time-weighted mean and the maximum of requests in flight per bin (from wall_send and e2e_s).

    The integral of the in-flight count up to time T is sum(clip(T - send)) - sum(clip(T - finish)),
    evaluated at every bin edge from sorted sends and finishes with cumulative sums.
    """
    df = run.df
    send = df["wall_send"].to_numpy(dtype=float) - grid.t0  # seconds since the origin: exact cumsums
    finish = send + np.nan_to_num(df["e2e_s"].to_numpy(dtype=float), nan=0.0)
    good = np.isfinite(send)
    send, finish = np.sort(send[good]), np.sort(finish[good])
    edges = grid.edges - grid.t0

    def integral(sorted_t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(sorted_t, edges, side="right")
        csum = np.concatenate([[0.0], np.cumsum(sorted_t)])
        return k * edges - csum[k]

    area = integral(send) - integral(finish)
    mean = np.diff(area) / grid.widths
    # The peak in a bin: the level at the bin's start, or the level just after one of the bin's
    # sends (a peak always follows a send). After the i-th send (sorted) the level is i + 1 minus
    # the finishes up to that moment (a finish at the same instant counts first).
    at_start = np.searchsorted(send, edges[:-1], side="right") - np.searchsorted(finish, edges[:-1], side="right")
    peak = at_start.astype(float)
    if send.size:
        level = np.arange(1, send.size + 1) - np.searchsorted(finish, send, side="right")
        b = grid.index(send + grid.t0)
        keep = b >= 0
        if keep.any():
            bk, lk = b[keep], level[keep]
            starts = np.flatnonzero(np.r_[True, bk[1:] != bk[:-1]])  # sends are sorted: bins are runs
            np.maximum.at(peak, bk[starts], np.maximum.reduceat(lk, starts))
    return mean, peak


def log_hist(values: np.ndarray, bins_per_decade: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """Histogram on log-spaced bins (positive values): (bin centres, counts)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size == 0:
        return np.empty(0), np.empty(0)
    lo, hi = math.floor(math.log10(v.min()) * bins_per_decade), math.ceil(math.log10(v.max()) * bins_per_decade)
    nb = max(1, hi - lo)
    idx = np.clip((np.log10(v) * bins_per_decade).astype(np.int64) - lo, 0, nb - 1)
    counts = np.bincount(idx, minlength=nb).astype(float)
    centres = 10 ** ((np.arange(nb) + lo + 0.5) / bins_per_decade)
    return centres, counts


def int_hist(values: np.ndarray, max_bins: int = 100) -> tuple[np.ndarray, np.ndarray, float]:
    """Histogram of non-negative integers: unit bins when they fit, else `max_bins` equal bins.
    Returns (bin left edges, counts, bin width)."""
    v = np.asarray(values)
    v = v[v >= 0].astype(np.int64)
    if v.size == 0:
        return np.empty(0), np.empty(0), 1.0
    top = int(v.max())
    width = max(1, math.ceil((top + 1) / max_bins))
    counts = np.bincount(v // width, minlength=top // width + 1).astype(float)
    return np.arange(counts.size) * float(width), counts, float(width)


def sample_lists(run: RunData, max_requests: int = 40_000) -> tuple[pa.Table, int, int]:
    """chunk_times and chunk_tokens of the successful requests sent in the window, for drawing
    distributions. A big run is sampled by whole Parquet row groups spread evenly over the file
    (records are written in arrival order, so the sample spans the run); the exact statistics are
    in summary.json. Returns (table, requests in it, requests in the window)."""
    start, end = run.window
    wall = run.df["wall_send"].to_numpy(dtype=float)
    keep = run.df["ok"].to_numpy(dtype=bool) & (wall >= start) & (wall <= end)
    total = int(keep.sum())
    columns = ["chunk_times", "chunk_tokens"]
    pf = pq.ParquetFile(run.records_path)
    sizes = np.array([pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)], dtype=np.int64)
    if total <= max_requests or sizes.size <= 1:
        table = pf.read(columns=columns)
        mask = keep
    else:
        every = max(1, int(math.ceil(total / max_requests)))
        groups = np.arange(0, sizes.size, every)
        table = pf.read_row_groups(groups.tolist(), columns=columns)
        starts = np.concatenate([[0], np.cumsum(sizes)])
        rows = np.concatenate([np.arange(starts[g], starts[g + 1]) for g in groups.tolist()])  # per row group, not per record
        mask = keep[rows]
    table = table.filter(pa.array(mask))
    return table, table.num_rows, total


def itl_ms(lists: pa.Table) -> np.ndarray:
    """Pooled ITL in ms (metrics.timing.pooled_itl) of the given requests."""
    return pooled_itl(lists.column("chunk_times")) * 1000.0


def tokens_per_chunk(lists: pa.Table, df: pd.DataFrame) -> tuple[np.ndarray, str]:
    """Tokens carried by each token-bearing chunk, when the server said (continuous usage stats);
    otherwise each successful request's mean (output tokens / chunks). Returns (values, what)."""
    col = lists.column("chunk_tokens")
    known = pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False) > 0
    if known.any():
        flat = pc.list_flatten(col.filter(pa.array(known)))
        return np.asarray(flat.to_numpy(zero_copy_only=False)), "counted by the server (usage in every chunk)"
    ok = df[df["ok"]]
    n = ok["n_chunks"].to_numpy(dtype=float)
    tok = ok["output_tokens"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(n > 0, tok / n, np.nan)
    return mean[np.isfinite(mean)], "per request: output tokens / chunks (no per-chunk usage)"


def cdf_points(values: np.ndarray, points: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """(value, cumulative %) at `points` evenly spaced quantiles: the drawn CDF, from every value."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return np.empty(0), np.empty(0)
    q = np.linspace(0, 100, min(points, max(2, v.size)))
    return np.percentile(v, q), q


# ---------------------------------------------------------------------------------------------
# summary.json sections written by other features; read tolerantly (they may grow)


def flatten(obj, prefix: str = "") -> dict:
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(obj, list) and not all(isinstance(x, (dict, list)) for x in obj):
        out[prefix[:-1]] = ", ".join(str(x) for x in obj)
    elif not isinstance(obj, list):
        out[prefix[:-1]] = obj
    return out


def steps_frame(summary: dict) -> pd.DataFrame | None:
    """by_step as a flat table, one row per step, sorted by step index; None when absent."""
    steps = summary.get("by_step")
    if not steps:
        return None
    if isinstance(steps, dict):
        steps = [{"step": k, **v} for k, v in steps.items() if isinstance(v, dict)]
    rows = [flatten(s) for s in steps if isinstance(s, dict)]
    if not rows:
        return None
    frame = pd.DataFrame(rows)
    if "users" not in frame.columns:
        for alt in ("target_users", "user_count", "concurrency.target", "rate", "request_rate"):
            if alt in frame.columns:
                frame["users"] = frame[alt]
                break
    if "step" not in frame.columns:
        frame["step"] = np.arange(len(frame))
    return frame.reset_index(drop=True)


def first(frame: pd.DataFrame, *names: str) -> np.ndarray | None:
    for n in names:
        if n in frame.columns:
            return pd.to_numeric(frame[n], errors="coerce").to_numpy(dtype=float)
    return None


def client_warning(summary: dict) -> str:
    """One sentence when the load generator itself may have distorted the timings (client_bound)."""
    cb = summary.get("client_bound")
    if not isinstance(cb, dict):
        return ""
    advice = str(cb.get("advice") or "").strip()
    if cb.get("bound"):
        return "The load generator was client bound (out of CPU): its timings include client delay. " + advice
    if cb.get("contended"):
        return "The load generator's machine was contended (other processes took the CPU): timings may include client delay. " + advice
    return ""


def slo_objectives(summary: dict) -> list[dict]:
    slo = summary.get("slo")
    if isinstance(slo, dict):
        slo = slo.get("objectives", [])
    return [o for o in (slo or []) if isinstance(o, dict)]


def slo_threshold_ms(summary: dict, metric: str) -> list[tuple[str, float]]:
    """(statistic, threshold ms) of every objective on `metric` (e.g. 'ttft')."""
    out = []
    for o in slo_objectives(summary):
        key = str(o.get("metric") or o.get("objective") or "")
        if not key.startswith(metric + "."):
            continue
        thr = o.get("threshold_ms")
        if thr is None and o.get("threshold_s") is not None:
            thr = float(o["threshold_s"]) * 1000
        if thr is not None:
            out.append((key.split(".", 1)[1].split("<")[0], float(thr)))
    return out
