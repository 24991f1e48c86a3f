"""The report's chart data: a run's records binned over time (rates, latencies, errors, requests
in flight on one time grid) and into distributions (histograms, CDFs, the ITL and tokens per
chunk of a sample of streams).

Everything here works on whole columns (pandas / pyarrow / numpy); no function loops over request
records. What is drawn is binned (time bins, histogram bins); the statistics in the tables come
from summary.json, which metrics/summary.py computed exactly from every record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from metrics.percentiles import percentile_by_group
from metrics.record import NOT_SERVER_FAILURES
from metrics.timing import pooled_itl
from runfolder.reading import RunData, tokens_by_interval

NICE_BINS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)


def bin_width(span_s: float, max_bins: int = 120) -> float:
    """A round time-bin width giving at most `max_bins` bins over the span."""
    for w in NICE_BINS:
        if span_s / w <= max_bins:
            return float(w)
    return float(math.ceil(span_s / max_bins / 3600) * 3600)


@dataclass
class TimeGrid:
    """Time bins of the charts: `n` bins of `width` seconds from `t0` (wall clock); the last bin
    ends at `t0 + span`. A partial last bin narrower than half a bin is merged into the one before
    (a rate over a sliver of a bin, a few requests over a few milliseconds, would draw a spike)."""

    t0: float  # origin (wall clock)
    width: float
    n: int
    span: float = math.inf  # seconds covered: the last bin may be partial (or up to 1.5 bins wide)

    @property
    def edges(self) -> np.ndarray:
        """Bin edges (wall clock), n + 1 of them; the last at the end of the span."""
        e = np.arange(self.n + 1) * self.width
        if math.isfinite(self.span):
            e[-1] = self.span
        return self.t0 + e

    @property
    def end_s(self) -> float:
        """Seconds from t0 to the grid's end."""
        return float(self.edges[-1] - self.t0)

    @property
    def widths(self) -> np.ndarray:
        """Each bin's covered seconds (rates divide by it)."""
        return np.clip(np.diff(self.edges - self.t0), 1e-9, None)

    @property
    def left(self) -> np.ndarray:
        return self.edges[:-1] - self.t0

    @property
    def mid(self) -> np.ndarray:
        return self.left + self.widths / 2

    def index(self, wall: np.ndarray) -> np.ndarray:
        """Bin of each wall-clock time; -1 outside the grid or NaN."""
        wall = np.asarray(wall, dtype=float)
        edges = self.edges
        idx = np.searchsorted(edges, wall, side="right") - 1
        idx[wall == edges[-1]] = self.n - 1  # the last edge belongs to the last bin
        idx[~np.isfinite(wall) | (idx < 0) | (idx >= self.n)] = -1
        return idx.astype(np.int64)


def grid_for(t0: float, span: float) -> TimeGrid:
    """Round bins over [t0, t0 + span]; a last bin narrower than half a bin joins the one before."""
    span = max(1.0, span)
    width = bin_width(span)
    full, rest = divmod(span, width)
    n = int(full) + (1 if rest >= width / 2 else 0)
    return TimeGrid(t0, width, max(1, n), span)


def time_grid(run: RunData) -> TimeGrid:
    df = run.df
    wall = df["wall_send"].to_numpy(dtype=float)
    done = wall + np.nan_to_num(df["e2e_s"].to_numpy(dtype=float), nan=0.0)
    end = float(np.nanmax(done)) if done.size else run.t0 + 1.0
    end = max(end, run.window[1])
    return grid_for(run.t0, end - run.t0)


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
    for metric in ("ttft", "tpot", "e2e"):
        values = df[f"{metric}_s"].to_numpy(dtype=float)[sel] * 1000
        for q, name in ((50, "p50"), (95, "p95")):
            res[f"{metric}_{name}"] = percentile_by_group(values, b, n, q)
    return res


def errors_over_time(run: RunData, grid: TimeGrid) -> list[tuple[str, np.ndarray]]:
    """Failures per second in each time bin, by failure class (by the time the failure ended)."""
    df = run.df
    err = df["error"]
    failed = ~df["ok"].to_numpy(dtype=bool) & ~err.isin((*NOT_SERVER_FAILURES, "")).to_numpy()
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
    pf = pq.ParquetFile(run.records_path, page_checksum_verification=True)
    sizes = np.array([pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)], dtype=np.int64)
    if total <= max_requests or sizes.size <= 1:
        table = pf.read(columns=columns)
        mask = keep
    else:
        every = max(1, int(math.ceil(total / max_requests)))
        groups = np.arange(0, sizes.size, every)
        table = pf.read_row_groups(groups.tolist(), columns=columns)
        starts = np.concatenate([[0], np.cumsum(sizes)])
        rows = np.concatenate(
            [np.arange(starts[g], starts[g + 1]) for g in groups.tolist()]
        )  # per row group, not per record
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
