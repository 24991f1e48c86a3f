"""Records -> summary.json: exact percentiles, throughput over the window, per class and overall.

`summary.json` is a public contract (README "Results"); pipelines parse it. Every figure comes
from the per-request records with numpy; no rounded histogram is involved.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metrics.timing import DEFINITIONS, pooled_itl

PERCENTILES = (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99), ("p99.9", 99.9))
SCALAR_COLUMNS = [
    "request_class", "step", "wall_send", "t_send", "t_intended", "ok", "error", "ttft_s", "e2e_s", "tpot_s",
    "prompt_tokens", "output_tokens", "tokens_source", "worker",
]  # fmt: skip


def distribution(values_s) -> dict:
    """P = {count, mean, min, p50, p90, p95, p99, p99.9, max} in milliseconds; None when empty."""
    v = np.asarray(values_s, dtype=float)
    v = v[~np.isnan(v)] * 1000.0
    if v.size == 0:
        return {"count": 0, "mean": None, "min": None, **{k: None for k, _ in PERCENTILES}, "max": None}
    qs = np.percentile(v, [q for _, q in PERCENTILES])
    return {
        "count": int(v.size),
        "mean": float(v.mean()),
        "min": float(v.min()),
        **{k: float(x) for (k, _), x in zip(PERCENTILES, qs)},
        "max": float(v.max()),
    }


def _num(x) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def section(df: pd.DataFrame, itl_s: np.ndarray, window_s: float, start: float, end: float) -> dict:
    """One summary block (S) for the requests of `df` (already restricted to the window by send time)."""
    ok = df[df["ok"]]
    errors = df[~df["ok"] & (df["error"] != "stopped")]
    done_wall = ok["wall_send"] + ok["e2e_s"]
    finished_in_window = ok[(done_wall >= start) & (done_wall <= end)]
    prompt = finished_in_window["prompt_tokens"].clip(lower=0).sum()
    output = finished_in_window["output_tokens"].clip(lower=0).sum()
    per_s = (lambda x: float(x) / window_s) if window_s > 0 else (lambda x: None)
    speed = (1.0 / ok["tpot_s"]).replace([np.inf, -np.inf], np.nan)
    return {
        "requests": {
            "sent": int(len(df)),
            "ok": int(len(ok)),
            "failed": int(len(errors)),
            "stopped": int((df["error"] == "stopped").sum()),
            "by_error": {str(k): int(v) for k, v in errors["error"].value_counts().sort_index().items()},
        },
        "ttft_ms": distribution(ok["ttft_s"]),
        "tpot_ms": distribution(ok["tpot_s"]),
        "itl_ms": distribution(itl_s),
        "e2e_ms": distribution(ok["e2e_s"]),
        "stream_tokens_per_s": {"mean": _num(speed.mean()), "p50": _num(speed.median())},
        "throughput": {
            "requests_per_s": per_s(len(finished_in_window)),
            "output_tokens_per_s": per_s(output),
            "total_tokens_per_s": per_s(prompt + output),
        },
        "tokens": {
            "prompt": int(ok["prompt_tokens"].clip(lower=0).sum()),
            "output": int(ok["output_tokens"].clip(lower=0).sum()),
            "prompt_known": int((ok["prompt_tokens"] >= 0).sum()),
            "source": {str(k): int(v) for k, v in ok["tokens_source"].value_counts().sort_index().items()},
        },
    }


def summarize(table: pa.Table, window_start: float, window_end: float) -> dict:
    """The whole summary: definitions, window, overall and by_class (window in wall-clock seconds)."""
    df = table.select(SCALAR_COLUMNS).to_pandas()
    in_window = (df["wall_send"] >= window_start) & (df["wall_send"] <= window_end)
    window_s = max(0.0, window_end - window_start)
    mask = pa.array(in_window.to_numpy() & df["ok"].to_numpy())
    chunk_times = table.column("chunk_times").filter(mask)
    classes = df.loc[in_window, "request_class"].to_numpy()
    sel = df[in_window]
    itl_all = pooled_itl(chunk_times)
    by_class = {}
    ok_classes = sel.loc[sel["ok"], "request_class"].to_numpy()
    for name in sorted(set(classes)):
        class_mask = pa.array(ok_classes == name)
        by_class[str(name)] = section(
            sel[sel["request_class"] == name], pooled_itl(chunk_times.filter(class_mask)), window_s, window_start, window_end
        )
    return {
        "definitions": DEFINITIONS,
        "window": {"start": window_start, "end": window_end, "seconds": window_s},
        "records": {"total": int(len(df)), "outside_window": int((~in_window).sum())},
        "overall": section(sel, itl_all, window_s, window_start, window_end),
        "by_class": by_class,
        "concurrency": {"mean_in_flight": mean_in_flight(df, window_start, window_end)},
    }


def mean_in_flight(df: pd.DataFrame, start: float, end: float) -> float | None:
    """Time-weighted mean number of requests in flight inside the window."""
    if end <= start:
        return None
    begin = df["wall_send"].to_numpy()
    finish = begin + np.nan_to_num(df["e2e_s"].to_numpy(), nan=0.0)
    overlap = np.clip(np.minimum(finish, end) - np.maximum(begin, start), 0.0, None)
    return float(overlap.sum() / (end - start))


def _fmt(x, digits=0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def format_table(summary: dict) -> str:
    """The short console table printed at the end of a run."""
    head = (
        f"{'class':<10}{'ok':>7}{'fail':>6}{'TTFT mean':>11}{'p50':>8}{'p95':>8}{'p99':>8}"
        f"{'TPOT p50':>10}{'ITL p50':>9}{'E2E p50':>9}{'p95':>9}{'req/s':>8}{'out tok/s':>11}{'tot tok/s':>11}"
    )
    lines = ["LLM results (ms unless stated; exact, from per-request records)", head, "-" * len(head)]
    rows = [(name, s) for name, s in summary["by_class"].items()] + [("overall", summary["overall"])]
    for name, s in rows:
        t, r, th = s["ttft_ms"], s["requests"], s["throughput"]
        lines.append(
            f"{name:<10}{r['ok']:>7}{r['failed']:>6}{_fmt(t['mean']):>11}{_fmt(t['p50']):>8}{_fmt(t['p95']):>8}"
            f"{_fmt(t['p99']):>8}{_fmt(s['tpot_ms']['p50'], 1):>10}{_fmt(s['itl_ms']['p50'], 1):>9}"
            f"{_fmt(s['e2e_ms']['p50']):>9}{_fmt(s['e2e_ms']['p95']):>9}{_fmt(th['requests_per_s'], 2):>8}"
            f"{_fmt(th['output_tokens_per_s']):>11}{_fmt(th['total_tokens_per_s']):>11}"
        )
    errors = summary["overall"]["requests"]["by_error"]
    if errors:
        lines.append("failures: " + ", ".join(f"{k} {v}" for k, v in errors.items()))
    return "\n".join(lines)
