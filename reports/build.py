"""`python -m reports build RUN_DIR`: report.html (self-contained, offline) and report.md (CI summary).

The tables are summary.json's exact figures (metrics/summary.py); the charts are drawn from the
records in requests.parquet, binned with vectorised pandas/numpy (reports/data.py) and rendered as
inline SVG (reports/svg.py). The page loads nothing: no script, no stylesheet, no font, no image.
"""

from __future__ import annotations

import math
import os
import time
from datetime import datetime, timezone
from html import escape

import numpy as np
import pandas as pd

from reports import data as D
from reports.svg import CSS, PALETTE, Chart, Ref, Series, render, render_bars, render_stacked

LATENCY_METRICS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E latency"))
KNOWN_SECTIONS = {"run_id", "complete", "definitions", "window", "records", "overall", "by_class", "by_step", "slo",
                  "capacity", "note", "by_turn"}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# formatting


def fmt(v, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        return f"{float(v):,.{digits}f}"
    return str(v)


def auto(v) -> str:
    """A number with sensible digits for its size (tables of sections we do not know)."""
    if isinstance(v, (float, np.floating)) and math.isfinite(v) and not float(v).is_integer():
        a = abs(float(v))
        return fmt(v, 0 if a >= 100 else (2 if a >= 1 else 4))
    text = fmt(v)
    return text if len(text) <= 300 else text[:297] + "..."


def utc(ts) -> str:
    try:
        return datetime.fromtimestamp(float(ts), timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return "-"


def html_table(headers: list[str], rows: list[list], left: int = 1, row_classes: list[str] | None = None,
               text: tuple[int, ...] = ()) -> str:
    """A table; the first `left` columns (and those in `text`) are left-aligned text, the rest numbers."""
    is_text = lambda i: i < left or i in text  # noqa: E731
    head = "".join(f'<th class="l">{escape(h)}</th>' if is_text(i) else f"<th>{escape(h)}</th>" for i, h in enumerate(headers))
    body = []
    for r, row in enumerate(rows):
        cls = f' class="{row_classes[r]}"' if row_classes and row_classes[r] else ""
        cells = "".join(f'<td class="l">{c}</td>' if is_text(i) else f"<td>{c}</td>" for i, c in enumerate(row))
        body.append(f"<tr{cls}>{cells}</tr>")
    thead = f"<thead><tr>{head}</tr></thead>" if any(headers) else ""
    return f"<table>{thead}<tbody>{''.join(body)}</tbody></table>"


def md_table(headers: list[str], rows: list[list], left: int = 1) -> str:
    align = ["---" if i < left else "---:" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _g(d: dict | None, *path, default=None):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return default
        d = d[p]
    return d


# ---------------------------------------------------------------------------------------------
# tables (summary.json)

SUMMARY_HEADERS = ["class", "sent", "ok", "failed", "TTFT mean", "TTFT p50", "TTFT p90", "TTFT p95", "TTFT p99",
                   "TPOT p50", "TPOT p95", "ITL p50", "ITL p95", "E2E p50", "E2E p95", "E2E p99",
                   "stream tok/s p50", "req/s", "out tok/s", "total tok/s"]  # fmt: skip


def summary_rows(summary: dict, key: str = "by_class", label: str = "class") -> tuple[list[str], list[list[str]], list[str]]:
    """Rows of a summary table: one per entry of summary[key] (classes, conversation turns) and overall."""
    sections = [(str(name), s) for name, s in (summary.get(key) or {}).items() if isinstance(s, dict)]
    sections += [("overall", summary.get("overall") or {})]
    headers = [label] + SUMMARY_HEADERS[1:]
    goodput = any(_g(s, "goodput") for _, s in sections) and bool(D.slo_objectives(summary))
    lag = any(_g(s, "schedule_lag_ms") for _, s in sections)
    if goodput:
        headers += ["goodput req/s", "good %"]
    if lag:
        headers += ["TTFT p95 from intended", "schedule lag p95"]
    rows = []
    for name, s in sections:
        r, t = s.get("requests", {}), s.get("throughput", {})
        row = [escape(name), fmt(r.get("sent")), fmt(r.get("ok")), fmt(r.get("failed")),
               *(fmt(_g(s, "ttft_ms", k)) for k in ("mean", "p50", "p90", "p95", "p99")),
               fmt(_g(s, "tpot_ms", "p50"), 1), fmt(_g(s, "tpot_ms", "p95"), 1),
               fmt(_g(s, "itl_ms", "p50"), 1), fmt(_g(s, "itl_ms", "p95"), 1),
               *(fmt(_g(s, "e2e_ms", k)) for k in ("p50", "p95", "p99")),
               fmt(_g(s, "stream_tokens_per_s", "p50"), 1),
               fmt(t.get("requests_per_s"), 2), fmt(t.get("output_tokens_per_s")), fmt(t.get("total_tokens_per_s"))]  # fmt: skip
        if goodput:
            gf = _g(s, "goodput", "good_fraction")
            row += [fmt(_g(s, "goodput", "requests_per_s"), 2), fmt(None if gf is None else gf * 100, 1)]
        if lag:
            row += [fmt(_g(s, "ttft_from_intended_ms", "p95")), fmt(_g(s, "schedule_lag_ms", "p95"), 1)]
        rows.append(row)
    return headers, rows, ["overall" if n == "overall" else "" for n, _ in sections]


STEP_COLUMNS = [
    ("step", ("step",), 0), ("users", ("users",), 0), ("sent", ("requests.sent",), 0), ("ok", ("requests.ok",), 0),
    ("failed", ("requests.failed",), 0), ("req/s", ("throughput.requests_per_s", "requests_per_s"), 2),
    ("out tok/s", ("throughput.output_tokens_per_s", "output_tokens_per_s"), 0),
    ("total tok/s", ("throughput.total_tokens_per_s", "total_tokens_per_s"), 0),
    ("TTFT mean", ("ttft_ms.mean",), 0), ("TTFT p50", ("ttft_ms.p50",), 0), ("TTFT p95", ("ttft_ms.p95",), 0),
    ("TPOT p50", ("tpot_ms.p50",), 1), ("TPOT p95", ("tpot_ms.p95",), 1), ("ITL p95", ("itl_ms.p95",), 1),
    ("E2E p50", ("e2e_ms.p50",), 0), ("E2E p95", ("e2e_ms.p95",), 0),
    ("stream tok/s p50", ("stream_tokens_per_s.p50",), 1), ("goodput req/s", ("goodput.requests_per_s",), 2),
    ("SLO", ("slo.passed",), 0),
]  # fmt: skip


def step_rows(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    cols = [(label, next((n for n in names if n in frame.columns), None), d) for label, names, d in STEP_COLUMNS]
    cols = [c for c in cols if c[1] is not None]
    rows = []
    for rec in frame.to_dict("records"):  # one row per load step (a handful)
        row = []
        for label, name, digits in cols:
            v = rec.get(name)
            if label == "SLO" and v is not None and v == v:
                row.append('<span class="pass">pass</span>' if v else '<span class="fail">miss</span>')
            else:
                row.append(fmt(v if not (isinstance(v, float) and math.isnan(v)) else None, digits)
                           if label not in ("step", "users") else auto(v))
        rows.append(row)
    return [c[0] for c in cols], rows


def failure_rows(run: D.RunData) -> list[list[str]]:
    """Failure class, count, share of ended requests, per class, and an example message."""
    df = run.df
    start, end = run.window
    wall = df["wall_send"].to_numpy(dtype=float)
    inside = (wall >= start) & (wall <= end)
    err = df["error"]  # categorical: comparisons work on the codes
    failed = (~df["ok"].to_numpy(dtype=bool)) & (err != "").to_numpy()
    if not failed.any():
        return []
    f = pd.DataFrame({"error": err[failed].astype(str), "cls": df["request_class"][failed].astype(str), "inside": inside[failed]})
    not_failure = err.isin(("stopped", "cancelled")).to_numpy()  # as metrics.summary: counted apart
    ended = int((inside & ~not_failure).sum())
    counts = f.groupby("error").agg(all=("inside", "size"), window=("inside", "sum"))
    by_cls = f[f["inside"]].groupby(["error", "cls"]).size()
    detail = _error_details(run, failed)
    rows = []
    for name, row in counts.sort_values("all", ascending=False).iterrows():
        per_cls = ", ".join(f"{c} {n}" for (e, c), n in by_cls.items() if e == name)
        share = row["window"] / ended * 100 if ended and name not in ("stopped", "cancelled") else None
        rows.append([escape(str(name)), fmt(int(row["all"])), fmt(int(row["window"])), fmt(share, 2), escape(per_cls),
                     escape(detail.get(name, ""))])
    return rows


def _error_details(run: D.RunData, failed: np.ndarray) -> dict[str, str]:
    """The most common error_detail of each failure class (read for failures only)."""
    import pyarrow.parquet as pq

    try:
        t = pq.read_table(run.records_path, columns=["error", "error_detail"], read_dictionary=["error", "error_detail"])
    except (KeyError, ValueError, OSError):
        return {}
    f = t.to_pandas()[failed]
    f = f[f["error_detail"].astype(str) != ""]
    if f.empty:
        return {}
    top = f.groupby(["error", "error_detail"], observed=True).size().reset_index(name="n")
    top = top.sort_values("n", ascending=False).drop_duplicates("error")
    return {str(e): str(d)[:200] for e, d in zip(top["error"], top["error_detail"])}


def generic_section(name: str, obj) -> tuple[str, str]:
    """A summary.json section we have no special view for (workers, client_bound, ...)."""
    if isinstance(obj, list) and obj and all(isinstance(x, dict) for x in obj):
        rows = [D.flatten(x) for x in obj[:200]]
        keys = list(dict.fromkeys(k for r in rows for k in r))[:24]
        body = [[escape(auto(r.get(k))) for k in keys] for r in rows]
        return html_table(keys, body, left=1), md_table(keys, body)
    if isinstance(obj, dict) and obj and all(isinstance(v, dict) for v in obj.values()):  # e.g. workers by id
        rows = {str(k): D.flatten(v) for k, v in list(obj.items())[:200]}
        keys = list(dict.fromkeys(k for r in rows.values() for k in r))[:24]
        body = [[escape(name)] + [escape(auto(r.get(k))) for k in keys] for name, r in rows.items()]
        return html_table([name] + keys, body, left=1), md_table([name] + keys, body)
    if isinstance(obj, dict):
        flat = D.flatten(obj)
        rows = [[escape(k), escape(auto(v))] for k, v in list(flat.items())[:200]]
        return html_table(["field", "value"], rows, left=2), md_table(["field", "value"], rows, left=2)
    text = escape(auto(obj))
    return f"<p>{text}</p>", text


# ---------------------------------------------------------------------------------------------
# charts


def latency_by_class_charts(summary: dict) -> list[str]:
    sections = list((summary.get("by_class") or {}).items()) + [("overall", summary.get("overall") or {})]
    cats = [name for name, _ in sections]
    out = []
    for key, label in LATENCY_METRICS:
        groups = [(p, np.array([_g(s, f"{key}_ms", p) if _g(s, f"{key}_ms", p) is not None else np.nan for _, s in sections], dtype=float))
                  for p in ("p50", "p90", "p95", "p99")]
        out.append(render_bars(f"{key}_by_class", f"{label} percentiles by request class", cats, groups,
                               f"{label} (ms)", "request class", value_fmt=lambda v: f"{v:,.1f} ms"))
    return out


def step_charts(summary: dict, frame: pd.DataFrame | None) -> list[str]:
    if frame is None or frame.empty:
        return []
    users = D.first(frame, "users")
    if users is None:
        return []
    cap_users = _g(summary, "capacity", "users")
    refs_x = [Ref("x", float(cap_users), f"capacity: {auto(cap_users)} users")] if isinstance(cap_users, (int, float)) else []
    order = np.argsort(users, kind="stable")
    x = users[order]

    def s(name, *cols, **kw):
        v = D.first(frame, *cols)
        return Series(name, x, v[order], markers=True, **kw) if v is not None else None

    charts = []
    rps = [s("requests/s", "throughput.requests_per_s", "requests_per_s"), s("goodput requests/s", "goodput.requests_per_s", dash=True)]
    charts.append(render(Chart("step_requests", "Requests per second by load step", "users (concurrent)", "requests/s",
                               [q for q in rps if q is not None], refs=list(refs_x))))
    tps = [s("output tokens/s", "throughput.output_tokens_per_s", "output_tokens_per_s"),
           s("total tokens/s", "throughput.total_tokens_per_s", "total_tokens_per_s")]
    charts.append(render(Chart("step_tokens", "Token throughput by load step", "users (concurrent)", "tokens/s",
                               [q for q in tps if q is not None], refs=list(refs_x))))
    ttft = [s("TTFT p50", "ttft_ms.p50"), s("TTFT p95", "ttft_ms.p95"), s("TTFT mean", "ttft_ms.mean", dash=True)]
    refs = list(refs_x) + [Ref("y", thr, f"SLO ttft.{stat} < {thr:,.0f} ms") for stat, thr in D.slo_threshold_ms(summary, "ttft")]
    charts.append(render(Chart("step_ttft", "TTFT P50/P95 by load step, with the SLO and the capacity point",
                               "users (concurrent)", "TTFT (ms)", [q for q in ttft if q is not None], refs=refs)))
    other = [(k, lbl) for k, lbl in (("tpot", "TPOT"), ("e2e", "E2E latency")) if f"{k}_ms.p95" in frame.columns]
    for key, label in other:
        ser = [s(f"{label} p50", f"{key}_ms.p50"), s(f"{label} p95", f"{key}_ms.p95")]
        refs = list(refs_x) + [Ref("y", thr, f"SLO {key}.{stat} < {thr:,.1f} ms") for stat, thr in D.slo_threshold_ms(summary, key)]
        charts.append(render(Chart(f"step_{key}", f"{label} P50/P95 by load step", "users (concurrent)", f"{label} (ms)",
                                   [q for q in ser if q is not None], refs=refs)))
    return charts


def time_charts(run: D.RunData, grid: D.TimeGrid, frame: pd.DataFrame | None) -> list[str]:
    start, end = run.window
    bands = []
    if start > run.t0:
        bands.append((0.0, start - run.t0, "warm-up: outside the measurement window"))
    t_end = min(grid.n * grid.width, grid.span)
    if end - run.t0 < t_end:
        bands.append((end - run.t0, t_end, "after the window: drain"))
    if frame is not None and "window.start" in frame.columns:  # each load step's own warm-up
        ws = pd.to_numeric(frame["window.start"], errors="coerce").to_numpy(dtype=float) - run.t0
        we = pd.to_numeric(frame["window.end"], errors="coerce").to_numpy(dtype=float) - run.t0
        prev = max(0.0, start - run.t0)
        for a, b in sorted(zip(ws.tolist(), we.tolist())):  # one per step
            if a > prev + 1e-6:
                bands.append((prev, a, "step warm-up: outside the step's window"))
            prev = max(prev, b)
    x = grid.mid
    ot = D.over_time(run, grid)
    note = f"{grid.width:g} s bins: requests and latency by completion time, tokens by arrival"
    rng = Series("", np.array([0.0, t_end]), np.array([np.nan, np.nan]))  # pins a shared time axis
    common = dict(x_label="time since start (s)", bands=bands, x_time=True, note=note)

    def chart(cid, title, ylabel, series, **kw):
        return render(Chart(cid, title, y_label=ylabel, series=[rng] + series, **{**common, **kw}))

    def lat(name, key):  # bins without a completion are skipped, not drawn as zero
        v = ot[key]
        return Series(name, x, v, connect=True, markers=int(np.isfinite(v).sum()) <= 60)

    charts = [
        chart("ttft_over_time", "TTFT over time (P50, P95)", "TTFT (ms)", [lat("TTFT p50", "ttft_p50"), lat("TTFT p95", "ttft_p95")],
              refs=[Ref("y", thr, f"SLO ttft.{st}") for st, thr in D.slo_threshold_ms(run.summary, "ttft")]),
        chart("tpot_over_time", "TPOT over time (P50, P95)", "TPOT (ms per token)", [lat("TPOT p50", "tpot_p50"), lat("TPOT p95", "tpot_p95")]),
        chart("e2e_over_time", "End-to-end latency over time (P50, P95)", "E2E latency (ms)",
              [lat("E2E p50", "e2e_p50"), lat("E2E p95", "e2e_p95")]),
        chart("requests_over_time", "Completed requests per second over time", "requests/s",
              [Series("requests/s", x, ot["requests_per_s"], fill=True)]),
        chart("tokens_over_time", "Token throughput over time", "tokens/s",
              [Series("output tokens/s", x, ot["output_tokens_per_s"]), Series("total tokens/s", x, ot["total_tokens_per_s"])]),
    ]
    mean, peak = D.in_flight(run, grid)
    conc = [Series("in flight (time-weighted mean)", x, mean, fill=True), Series("in flight (peak)", x, peak, dash=True)]
    target = _target_users(run, frame)
    if target is not None:
        conc.append(Series("target users", target[0], target[1], color="#777777", step=True))
    charts.append(chart("concurrency_over_time", "Requests in flight over time (from wall_send and e2e)", "requests in flight", conc,
                        note=f"{grid.width:g} s bins"))
    errs = D.errors_over_time(run, grid)
    if errs:
        charts.append(render_stacked("errors_over_time", "Failures by class over time", grid.left, grid.width, errs,
                                     "time since start (s)", "failures/s"))
    else:
        charts.append(chart("errors_over_time", "Failures by class over time (none)", "failures/s",
                            [Series("failures/s", x, np.zeros(grid.n))], note="no failed request"))
    charts += server_charts(run, grid, common, rng)
    return charts


def _target_users(run: D.RunData, frame: pd.DataFrame | None):
    if frame is not None and "window.start" in frame.columns and "users" in frame.columns:
        s = pd.to_numeric(frame["window.start"], errors="coerce").to_numpy(dtype=float) - run.t0
        e = pd.to_numeric(frame["window.end"], errors="coerce").to_numpy(dtype=float) - run.t0
        u = pd.to_numeric(frame["users"], errors="coerce").to_numpy(dtype=float)
        xs = np.column_stack([s, e, np.full(s.size, np.nan)]).ravel()
        ys = np.column_stack([u, u, np.full(u.size, np.nan)]).ravel()
        return xs, ys
    users = _g(run.run, "options", "num_users")
    if isinstance(users, (int, float)) and not _g(run.run, "options", "request_rate"):
        start, end = run.window
        return np.array([start - run.t0, end - run.t0]), np.array([float(users), float(users)])
    return None


SERVER_GROUPS = [
    ("server_queue", "Server: running and waiting requests", "requests", "sum",
     ("vllm:num_requests_running", "vllm:num_requests_waiting", "sglang:num_running_reqs", "sglang:num_queue_reqs")),
    ("server_kv_cache", "Server: KV-cache usage", "KV cache used (%)", "mean",
     ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")),
    ("server_gpu", "GPU utilisation", "GPU utilisation (%)", "labels", ("DCGM_FI_DEV_GPU_UTIL",)),
]


def server_charts(run: D.RunData, grid: D.TimeGrid, common: dict, rng: Series) -> list[str]:
    sm = run.server
    if sm is None or sm.empty:
        return []
    out = []
    t_end = min(grid.n * grid.width, grid.span)
    for cid, title, ylabel, how, names in SERVER_GROUPS:
        series = []
        for name in names:
            part = sm[sm["metric"] == name]
            if part.empty:
                continue
            t = part["timestamp"].to_numpy(dtype=float) - run.t0
            v = part["value"].to_numpy(dtype=float)
            if ylabel.endswith("(%)") and np.nanmax(v) <= 1.0:
                v = v * 100
            frame = pd.DataFrame({"t": np.round(t, 3), "v": v, "labels": part["labels"].to_numpy()})
            if how == "labels" and frame["labels"].nunique() <= 8:
                for lab, g in frame.groupby("labels"):
                    g = g.sort_values("t")
                    series.append(Series(f"{name} {lab}".strip(), g["t"].to_numpy(), g["v"].to_numpy()))
            else:
                agg = frame.groupby("t")["v"].agg("mean" if how != "sum" else "sum").sort_index()
                series.append(Series(name, agg.index.to_numpy(), agg.to_numpy()))
        if series:
            keep = [Series(s.name, s.x, s.y, color=PALETTE[i % len(PALETTE)]) for i, s in enumerate(series)]
            for s in keep:
                inside = (s.x >= 0) & (s.x <= t_end)
                s.x, s.y = s.x[inside], s.y[inside]
                if s.x.size > 2000:  # draw at most ~2000 points per series
                    step = int(math.ceil(s.x.size / 2000))
                    s.x, s.y = s.x[::step], s.y[::step]
            out.append(render(Chart(cid, title, y_label=ylabel, series=[rng] + keep,
                                    **{**common, "note": "scraped from the server's /metrics"})))
    return out


def distribution_charts(run: D.RunData) -> tuple[list[str], str]:
    df = run.df
    ok = df[df["ok"]]
    charts = []
    # output tokens per request, by where the count came from
    src_col = ok["tokens_source"]
    tok = ok["output_tokens"].to_numpy()
    sources = sorted({str(x) for x in pd.unique(src_col)} - {""})
    masks = {n: (src_col == n).to_numpy() for n in sources}
    names = {"usage": "server usage", "tokenizer": "client tokenizer", "chunks": "chunk count"}
    title = "Output tokens per request, by token source"
    distinct = np.unique(tok[tok >= 0])
    if 0 < distinct.size <= 24:
        groups = [(f"{names.get(n, n)} ({int(masks[n].sum()):,} requests)",
                   np.array([float((masks[n] & (tok == v)).sum()) for v in distinct.tolist()])) for n in sources]  # <= 24 x sources
        charts.append(render_bars("output_tokens_hist", title, [str(v) for v in distinct.tolist()], groups, "requests",
                                  "output tokens per request (tokens)"))
    else:
        _, _, width = D.int_hist(tok)
        series = []
        for i, name in enumerate(sources):
            left, counts, _ = D.int_hist(tok[masks[name]], max_bins=max(1, int(math.ceil((tok.max() + 1) / width))))
            series.append(Series(f"{names.get(name, name)} ({counts.sum():,.0f} requests)", left, counts, step=True, fill=i == 0))
        charts.append(render(Chart("output_tokens_hist", title, f"output tokens per request (tokens; {width:g}-token bins)",
                                   "requests", series)))
    lists, sampled, total = D.sample_lists(run)
    sample_note = "" if sampled >= total else f"drawn from {sampled:,} of {total:,} requests (row-group sample)"
    values, what = D.tokens_per_chunk(lists, df)
    title = "Tokens per chunk"
    if values.dtype.kind in "iu" and values.size and 0 <= values.min() and values.max() < 40:
        counts = np.bincount(values.astype(np.int64))
        shown = np.nonzero(counts)[0]
        share = counts[shown] / counts.sum() * 100
        charts.append(render_bars("tokens_per_chunk_hist", title, [str(v) for v in shown.tolist()], [("share of chunks", share)],
                                  "chunks (%)", "tokens in the chunk (tokens)", value_fmt=lambda v: f"{v:.2f} %",
                                  note=f"{what}; {sample_note}".strip("; "), y_max=100.0))
    elif values.size and np.unique(np.round(values, 2)).size <= 24:
        rounded, counts = np.unique(np.round(values.astype(float), 2), return_counts=True)
        charts.append(render_bars("tokens_per_chunk_hist", title, [f"{v:g}" for v in rounded.tolist()],
                                  [("share of requests", counts / counts.sum() * 100)], "requests (%)",
                                  "tokens per chunk (tokens)", value_fmt=lambda v: f"{v:.2f} %", note=what, y_max=100.0))
    else:
        v = values.astype(float)
        lo, hi = (float(v.min()), float(v.max())) if v.size else (0.0, 1.0)
        edges = np.linspace(lo, hi if hi > lo else lo + 1, 61)
        counts, _ = np.histogram(v, edges)
        share = counts / max(1, counts.sum()) * 100
        unit = "chunks" if values.dtype.kind in "iu" else "requests"
        charts.append(render(Chart("tokens_per_chunk_hist", title, "tokens per chunk (tokens)", f"{unit} (%)",
                                   [Series(unit, (edges[:-1] + edges[1:]) / 2, share, step=True, fill=True)],
                                   note=f"{what}; {sample_note}".strip("; "))))
    itl = D.itl_ms(lists)
    cx, cy = D.log_hist(itl)
    itl_refs = [Ref("x", float(v), f"p{p}", color="#555555") for p, v in
                (("50", _g(run.summary, "overall", "itl_ms", "p50")), ("99", _g(run.summary, "overall", "itl_ms", "p99"))) if v]
    charts.append(render(Chart("itl_hist", "Inter-token latency distribution (pooled gaps between chunks)", "ITL (ms, log scale)",
                               "gaps per bin", [Series("ITL", cx, cy, fill=True)], x_log=True, refs=itl_refs, note=sample_note)))
    # latency CDFs by class (every successful request in the window)
    start, end = run.window
    inside = ok[(ok["wall_send"] >= start) & (ok["wall_send"] <= end)]
    for key, label in (("ttft_s", "TTFT"), ("e2e_s", "E2E latency")):
        series = []
        for name, g in inside.groupby("request_class", observed=True):  # one group per class
            xs, qs = D.cdf_points(g[key].to_numpy(dtype=float) * 1000)
            series.append(Series(str(name), xs, qs))
        xs_all = np.concatenate([s.x for s in series]) if series else np.empty(0)
        log_x = bool(xs_all.size) and xs_all.min() > 0 and xs_all.max() / xs_all.min() > 20
        charts.append(render(Chart(f"{key[:-2]}_cdf", f"{label} distribution by request class (CDF)",
                                   f"{label} (ms{', log scale' if log_x else ''})", "requests at or below (%)",
                                   series, x_log=log_x, y_max=100.0)))
    return charts, sample_note


# ---------------------------------------------------------------------------------------------
# the page


def header_rows(run: D.RunData) -> list[tuple[str, str]]:
    info, summary = run.run, run.summary
    opts = info.get("options") or {}
    start, end = run.window
    model = opts.get("model") or _g(info, "model") or "-"
    rows = [
        ("run id", run.run_id),
        ("host", info.get("host") or opts.get("host") or "-"),
        ("model", model),
        ("started", utc(info.get("started_at"))),
        ("ended", utc(info.get("ended_at"))),
        ("measurement window", f"{utc(start)} + {end - start:,.1f} s" if end > start else "-"),
        ("records", f"{len(run.df):,} ({_g(summary, 'records', 'outside_window', default=0):,} outside the window)"),
        ("complete", "yes" if summary.get("complete", info.get("complete", True)) else "no: interrupted, partial results"),
        ("role", str(info.get("role") or "-")),
        ("command", " ".join(str(a) for a in info.get("argv") or []) or "-"),
    ]
    wl = info.get("workload")
    if isinstance(wl, dict):
        rows.append(("workload", f"{wl.get('name') or wl.get('path') or ''} hash {str(wl.get('hash', ''))[:12]}".strip()))
    if summary.get("note"):
        rows.append(("note", summary["note"]))
    return rows


def build(path: str, summary: dict | None = None) -> dict[str, str]:
    """Write report.html and report.md into the results folder; returns their paths."""
    t_start = time.perf_counter()
    run = D.load_run(path)
    if summary:
        run.summary = summary
    s = run.summary
    frame = D.steps_frame(s)
    grid = D.time_grid(run)

    head, rows, rcls = summary_rows(s)
    sections_html: list[str] = []
    md: list[str] = [f"## LLM load test: `{run.run_id}`", ""]
    hrows = header_rows(run)
    sections_html.append(html_table(["", ""], [[escape(k), escape(str(v))] for k, v in hrows], left=2))
    md.append(" · ".join(f"**{k}** {v}" for k, v in hrows if k in ("host", "model", "started", "measurement window", "records")))
    md.append("")
    if not s.get("complete", True):
        md += ["> **Interrupted run:** the results are partial.", ""]

    warning = D.client_warning(s)
    if warning:
        sections_html.append(f'<div class="capacity warn"><b>Warning:</b> {escape(warning)}</div>')
        md += [f"> **Warning:** {warning}", ""]
    cap = s.get("capacity")
    if isinstance(cap, dict) and cap.get("sentence"):
        sections_html.append(f'<div class="capacity"><b>Capacity:</b> {escape(cap["sentence"])}</div>')
        md += [f"**Capacity:** {cap['sentence']}", ""]
    elif isinstance(cap, str):
        sections_html.append(f'<div class="capacity"><b>Capacity:</b> {escape(cap)}</div>')
        md += [f"**Capacity:** {cap}", ""]
    objectives = D.slo_objectives(s)
    if objectives:
        srows = []
        for o in objectives:
            passed = o.get("passed")
            srows.append([escape(str(o.get("objective") or o.get("metric"))), fmt(o.get("value_ms"), 1), fmt(o.get("threshold_ms"), 1),
                          '<span class="pass">pass</span>' if passed else '<span class="fail">FAIL</span>'])
        verdict = _g(s, "slo", "passed")
        sections_html.append("<h2>Service-level objectives</h2>" + (
            f"<p>Run verdict: {'<span class=pass>pass</span>' if verdict else '<span class=fail>FAIL</span>'}</p>" if verdict is not None else "")
            + html_table(["objective", "value (ms)", "threshold (ms)", "verdict"], srows))
        md += ["### SLO" + (f": {'pass' if verdict else 'FAIL'}" if verdict is not None else ""), "",
               md_table(["objective", "value (ms)", "threshold (ms)", "verdict"],
                        [r[:3] + ["pass" if "pass" in r[3] else "**FAIL**"] for r in srows]), ""]

    sections_html.append("<h2>Summary</h2><p class=muted>Milliseconds unless stated; exact percentiles from every "
                         "request record in the measurement window (summary.json).</p>" + html_table(head, rows, row_classes=rcls))
    md += ["### Summary (ms unless stated)", "", md_table(head, [[_strip(c) for c in r] for r in rows]), ""]
    if isinstance(s.get("by_turn"), dict) and s["by_turn"]:  # conversations: one row per turn number
        th, tr, tc = summary_rows(s, "by_turn", "turn")
        sections_html.append("<h2>By conversation turn</h2>" + html_table(th, tr, row_classes=tc))
        md += ["### By conversation turn", "", md_table(th, [[_strip(c) for c in r] for r in tr]), ""]
    if frame is not None:
        sh, sr = step_rows(frame)
        sections_html.append("<h2>Load steps</h2>" + html_table(sh, sr, left=0))
        md += ["### Load steps", "", md_table(sh, [[_strip(c) for c in r] for r in sr], left=0), ""]
    fr = failure_rows(run)
    fh = ["failure", "all records", "in window", "% of ended (window)", "by class (window)", "most common detail"]
    if fr:
        sections_html.append("<h2>Failures</h2>" + html_table(fh, fr, left=1, text=(4, 5)))
        md += ["### Failures", "", md_table(fh, [[_strip(c) for c in r] for r in fr]), ""]
    else:
        sections_html.append("<h2>Failures</h2><p>No failed request.</p>")
        md += ["No failed request.", ""]

    charts = latency_by_class_charts(s)
    charts_steps = step_charts(s, frame)
    charts_time = time_charts(run, grid, frame)
    charts_dist, _ = distribution_charts(run)
    sections_html.append("<h2>Latency by request class</h2><div class=charts>" + "".join(charts) + "</div>")
    if charts_steps:
        sections_html.append("<h2>Load steps</h2><div class=charts>" + "".join(charts_steps) + "</div>")
    sections_html.append("<h2>Over time</h2><p class=muted>Shaded: outside the measurement window (warm-up, drain). "
                         "Latency and requests by completion time, tokens by arrival.</p><div class=charts>" + "".join(charts_time) + "</div>")
    sections_html.append("<h2>Distributions</h2><div class=charts>" + "".join(charts_dist) + "</div>")

    extra = [k for k in s if k not in KNOWN_SECTIONS]
    for key in extra:
        h, m = generic_section(key, s[key])
        sections_html.append(f"<h2>{escape(key.replace('_', ' ').capitalize())}</h2>{h}")
        md += [f"<details><summary>{key}</summary>", "", m, "", "</details>", ""]

    defs = s.get("definitions") or {}
    drows = [[f"<code>{escape(k)}</code>", escape(str(v))] for k, v in defs.items()]
    sections_html.append("<h2>Metric definitions</h2>" + html_table(["metric", "definition"], drows, left=2))
    md += ["<details><summary>Metric definitions</summary>", "",
           md_table(["metric", "definition"], [[f"`{k}`", str(v)] for k, v in defs.items()], left=2),
           "", "</details>", ""]
    opts = run.run.get("options") or {}
    vers = run.run.get("versions") or {}
    sections_html.append(
        "<h2>Options and versions</h2><details><summary>options</summary>"
        + html_table(["option", "value"], [[escape(k), escape(auto(v))] for k, v in sorted(opts.items())], left=2)
        + "</details><details open><summary>versions</summary>"
        + html_table(["package", "version"], [[escape(k), escape(str(v))] for k, v in vers.items()], left=2) + "</details>"
    )
    elapsed = time.perf_counter() - t_start
    title = f"LLM load test report: {run.run_id}"
    page = (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width, initial-scale=1'>"
        # no network at all: the page is inline SVG and CSS, and forbids itself any fetch
        "<meta http-equiv=Content-Security-Policy content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1><p class=muted>Built {utc(time.time())} from {escape(run.path)} in {elapsed:.1f} s.</p>"
        + "\n".join(sections_html) + "</body></html>\n"
    )
    html_path = os.path.join(run.path, "report.html")
    md_path = os.path.join(run.path, "report.md")
    _write(html_path, page)
    md.append(f"_Charts: `{os.path.join(run.path, 'report.html')}`_")
    _write(md_path, "\n".join(md) + "\n")
    return {"html": html_path, "md": md_path}


def _strip(cell: str) -> str:
    """HTML cell -> Markdown text."""
    import re
    from html import unescape

    text = unescape(re.sub(r"<[^>]+>", "", str(cell)))
    return "**FAIL**" if text in ("FAIL", "miss") else text


def _write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
