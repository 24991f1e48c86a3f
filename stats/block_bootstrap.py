"""The per-request data of one run a compare measures, its scopes (overall, each class, each load
step) and the block bootstrap of each metric: the method is described in stats/comparison.py."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from metrics.measure import distribution
from metrics.percentiles import LINEAR, ORDER
from metrics.record import NOT_SERVER_FAILURES
from metrics.timing import itl_gaps
from runfolder.reading import RunData, load_run, tokens_by_interval

LATENCY = ("ttft", "ttfa", "tpot", "itl", "e2e")
STATS = ("mean", "p50", "p90", "p95", "p99")
RATES = ("requests_per_s", "output_tokens_per_s", "total_tokens_per_s")
METRIC_NAMES = [f"{m}.{s}" for m in LATENCY for s in STATS] + list(RATES) + ["error_rate"]
UNITS = {
    **{f"{m}.{s}": "ms" for m in LATENCY for s in STATS},
    "requests_per_s": "req/s",
    "output_tokens_per_s": "tok/s",
    "total_tokens_per_s": "tok/s",
    "error_rate": "%",
}
MAX_GROUPS = 20_000  # exact up to this many values; above, rank groups of n / 20000 values


# ---------------------------------------------------------------------------------------------
# data of one run


@dataclass
class Prepared:
    run: RunData
    wall: np.ndarray
    done: np.ndarray
    ok: np.ndarray
    failed: np.ndarray  # failed, neither "stopped" nor "cancelled" (not server failures)
    cls: np.ndarray
    step: np.ndarray
    values: dict  # metric -> (sorted seconds of the successful records, the record of each value)


def prepare(path: str) -> Prepared:
    run = load_run(path)
    df = run.df
    wall = df["wall_send"].to_numpy(dtype=float)
    e2e = df["e2e_s"].to_numpy(dtype=float)
    ok = df["ok"].to_numpy(dtype=bool)
    failed = ~ok & ~df["error"].isin(NOT_SERVER_FAILURES).to_numpy()
    ok_idx = np.nonzero(ok)[0]
    gaps, rows = itl_gaps(run.chunk_times.filter(pa.array(ok)))
    values = {"itl": _sorted(gaps, ok_idx[rows])}  # sorted once; a scope's subset of a sorted array stays sorted
    for metric in ("ttft", "ttfa", "tpot", "e2e"):
        v = df[f"{metric}_s"].to_numpy(dtype=float)
        good = ok & ~np.isnan(v)
        values[metric] = _sorted(v[good], np.nonzero(good)[0])
    return Prepared(
        run,
        wall,
        wall + e2e,
        ok,
        failed,
        df["request_class"].astype(str).to_numpy(),
        df["step"].to_numpy(),
        values,
    )


def _sorted(v: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(v, kind="stable")
    return v[order], owner[order]


@dataclass
class Scope:
    key: str  # "overall" | class name | "step:N"
    label: str
    start: float
    end: float
    select: np.ndarray  # records of the scope sent in its window: latency and outcomes
    group: np.ndarray | bool = True  # records whose completions in the window count for throughput


def scopes(p: Prepared) -> dict[str, Scope]:
    """As metrics/measure.py cuts them: latency from the requests sent in the window; throughput
    from the successful requests of the group (all, or the class) completed in it, whenever sent."""
    start, end = p.run.window
    inside = (p.wall >= start) & (p.wall <= end)
    out = {"overall": Scope("overall", "overall", start, end, inside)}
    for name in sorted(set(p.cls[inside].tolist())):
        out[name] = Scope(name, f"class {name}", start, end, inside & (p.cls == name), p.cls == name)
    for st in p.run.summary.by_step or []:
        s, e = st.window.start, st.window.end
        out[f"step:{st.step}"] = Scope(
            f"step:{st.step}",
            f"step {st.step} ({st.users:g} users)",
            s,
            e,
            (p.step == st.step) & (p.wall >= s) & (p.wall <= e),
        )
    return out


# ---------------------------------------------------------------------------------------------
# the block bootstrap


def n_blocks(window_s: float) -> int:
    """Time blocks of the bootstrap in one stratum: about 2 s each, at least 10 and at most 40."""
    return int(np.clip(round(window_s / 2.0), 10, 40))


def block_starts(p: Prepared, sc: Scope) -> tuple[np.ndarray, list[int]]:
    """The bootstrap's time blocks of a scope: their start times (sorted) and blocks per stratum.

    A run with load steps is stratified by step: its blocks are resampled within each step, so a
    resample keeps the run's mix of load levels (resampling blocks across a ramp would mix 5-user
    and 160-user periods at random and inflate every interval). A stratum spans the send times of
    its step's records in the scope, cut into equal blocks; without steps the scope's window is."""
    idx = np.nonzero(sc.select)[0]
    steps = p.step[idx]
    stratified = idx.size > 0 and not sc.key.startswith("step:") and bool((steps >= 0).all())
    strata = np.unique(steps) if stratified else np.empty(0)
    if strata.size <= 1:
        k = n_blocks(sc.end - sc.start)
        return np.linspace(sc.start, sc.end, k + 1)[:-1], [k]
    spans = sorted(
        (float(p.wall[idx[steps == st]].min()), float(p.wall[idx[steps == st]].max())) for st in strata.tolist()
    )
    starts, sizes = [], []
    for lo, hi in spans:  # one stratum per load step (a handful)
        k = n_blocks(hi - lo)
        starts.append(np.linspace(lo, hi, k + 1)[:-1])
        sizes.append(k)
    return np.maximum.accumulate(np.concatenate(starts)), sizes


def block_at(starts: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The block of each time (before the first block: the first; after the last: the last)."""
    return np.clip(np.searchsorted(starts, t, side="right") - 1, 0, starts.size - 1).astype(np.int64)


def boot_quantiles(values: np.ndarray, blocks: np.ndarray, weights: np.ndarray, qs: list[float]) -> np.ndarray:
    """(B, len(qs)) bootstrap quantiles (numpy 'linear') of sorted `values` under block weights (B, K).

    counts[k, g] is how many values of rank group g lie in block k; with cum = cumsum over groups,
    the weighted count of values up to group g in resample b is weights[b] @ cum[:, g]. The group
    holding a given rank is found by a binary search run for all resamples at once: log2(groups)
    steps of a (B, K) product, never a (B, values) matrix."""
    b_count, k = weights.shape
    out = np.full((b_count, len(qs)), np.nan)
    n = values.size
    if n == 0:
        return out
    m = min(n, MAX_GROUPS)
    group = (np.arange(n) * m) // n  # consecutive ranks; one value per group when n <= MAX_GROUPS
    counts = np.bincount(blocks * m + group, minlength=k * m).reshape(k, m)
    cum = np.cumsum(counts, axis=1, dtype=np.float64)
    rep = np.bincount(group, weights=values, minlength=m) / np.bincount(group, minlength=m)
    total = weights @ cum[:, -1]

    def group_of(rank: np.ndarray) -> np.ndarray:
        """Smallest group g with weighted cum(g) > rank, per resample."""
        lo, hi = np.zeros(b_count, dtype=np.int64), np.full(b_count, m - 1, dtype=np.int64)
        for _ in range(int(math.ceil(math.log2(m))) + 1):
            mid = (lo + hi) // 2
            c = np.einsum("bk,kb->b", weights, cum[:, mid])
            right = c <= rank
            lo, hi = np.where(right, mid + 1, lo), np.where(right, hi, mid)
        return np.minimum(lo, m - 1)

    for j, q in enumerate(qs):
        h = (total - 1) * q / 100.0
        lo = np.floor(h)
        i_lo, i_hi = group_of(lo), group_of(np.minimum(lo + 1, total - 1))
        val = rep[i_lo] + (h - lo) * (rep[i_hi] - rep[i_lo])
        out[:, j] = np.where(total > 0, val, np.nan)
    return out


def boot_ratio(num_k: np.ndarray, den_k: np.ndarray, weights: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return (weights @ num_k) / (weights @ den_k)


def _weights(seed: int, key: str, role: str, b: int, sizes: list[int]) -> np.ndarray:
    """(b, sum(sizes)) multinomial block counts, drawn within each stratum."""
    rng = np.random.default_rng([seed, zlib.crc32(f"{role}|{key}".encode())])
    return np.hstack([rng.multinomial(k, np.full(k, 1.0 / k), size=b) for k in sizes]).astype(float)


def measure(p: Prepared, sc: Scope, seed: int, role: str, resamples: int) -> tuple[dict, int]:
    """Every metric of one scope: {metric: (exact value, bootstrap replicates)}, and the block count."""
    starts, sizes = block_starts(p, sc)
    weights = _weights(seed, sc.key, role, resamples, sizes)
    k = weights.shape[1]
    out = {}
    sel_ok = sc.select & p.ok
    blocks = np.full(p.wall.size, -1, dtype=np.int64)
    blocks[sc.select] = block_at(starts, p.wall[sc.select])  # latency: by send time
    for metric in LATENCY:
        sorted_s, owner = p.values[metric]
        keep = sel_ok[owner]
        vals_s, blk = sorted_s[keep], blocks[owner[keep]]
        vals = vals_s * 1000.0
        # the summary's own function: the same numbers (a load level's percentiles are order statistics)
        exact = distribution(vals_s, ORDER if sc.key.startswith("step:") else LINEAR)
        sums = np.bincount(blk, weights=vals, minlength=k)
        cnts = np.bincount(blk, minlength=k).astype(float)
        out[f"{metric}.mean"] = (exact.mean, boot_ratio(sums, cnts, weights))
        qs = boot_quantiles(vals, blk, weights, [50, 90, 95, 99])
        for j, stat in enumerate(("p50", "p90", "p95", "p99")):
            out[f"{metric}.{stat}"] = (exact.stat(stat), qs[:, j])
    # throughput: completions inside the window by completion time, tokens by arrival
    window = sc.end - sc.start
    fin = sc.group & p.ok & (p.done >= sc.start) & (p.done <= sc.end)
    completed = np.bincount(block_at(starts, p.done[fin]), minlength=k).astype(float)
    edges = np.maximum.accumulate(np.concatenate([[sc.start], starts[1:], [sc.end]]))
    out_tok, prompt_tok = tokens_by_interval(p.run, edges, sc.group)
    for name, per_block in (
        ("requests_per_s", completed),
        ("output_tokens_per_s", out_tok),
        ("total_tokens_per_s", out_tok + prompt_tok),
    ):
        value = float(per_block.sum() / window) if window > 0 else None
        out[name] = (value, (weights @ per_block) / window if window > 0 else np.full(weights.shape[0], np.nan))
    ended = sc.select & (p.ok | p.failed)
    f_k = np.bincount(blocks[sc.select & p.failed], minlength=k).astype(float)
    e_k = np.bincount(blocks[ended], minlength=k).astype(float)
    rate = float(f_k.sum() / e_k.sum() * 100) if e_k.sum() else None
    out["error_rate"] = (rate, boot_ratio(f_k, e_k, weights) * 100)
    return out, k
