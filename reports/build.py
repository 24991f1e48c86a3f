"""`python -m reports build RUN_DIR`: report.html (self-contained, offline) and report.md (CI summary).

The tables are summary.json's exact figures (metrics/summary.py), read as fields; the charts are
drawn from the records in requests.parquet, binned with vectorised pandas/numpy (reports/series.py)
and rendered as inline SVG (reports/svg.py). Both files render one content model
(reports/report_model.py, built by reports/rows.py) through a Jinja2 template each (reports/templates/); `FORMATS` names them. The
page loads nothing: no script, no stylesheet, no font, no image.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

import jinja2
import numpy as np
import pandas as pd
from markupsafe import Markup

from core.files import write_atomic
from core.numbers import auto, utc
from metrics.gpu import read_readings
from metrics.schema import Summary, as_summary
from metrics.schema.figures import Step
from reports import rows as R
from reports import series as S
from reports import summary_text
from reports.report_model import ChartGroup
from reports.svg import CSS, PALETTE, Chart, Ref, Series, render, render_bars, render_stacked
from runfolder import reading as D
from runfolder.layout import REPORT_HTML, REPORT_MD

LATENCY_METRICS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E latency"))


# ---------------------------------------------------------------------------------------------
# charts


def latency_by_class_charts(summary: Summary) -> list[str]:
    blocks = summary.blocks()
    cats = [name for name, _ in blocks]
    out = []
    metrics = LATENCY_METRICS
    if summary.overall.tokens.reasoning:  # the first answer token came after reasoning: its own chart
        metrics = (*metrics[:1], ("ttfa", "Time to first answer token"), *metrics[1:])
    for key, label in metrics:
        groups = [
            (p, np.array([_num(b.latency(key).stat(p)) for _, b in blocks], dtype=float))
            for p in ("p50", "p90", "p95", "p99")
        ]
        out.append(
            render_bars(
                f"{key}_by_class",
                f"{label} percentiles by request class",
                cats,
                groups,
                f"{label} (ms)",
                "request class",
                value_fmt=lambda v: f"{v:,.1f} ms",
            )
        )
    return out


def _num(v) -> float:
    return np.nan if v is None else float(v)


def step_charts(summary: Summary) -> list[str]:
    steps = summary.by_step
    if not steps:
        return []
    # open-loop levels (a search in requests/s, --rate-steps) are rates: the x axis and the capacity in requests/s
    rated = all(st.rate is not None for st in steps)
    load = (lambda st: st.rate) if rated else (lambda st: st.users)
    axis, unit = ("requests/s asked", "requests/s") if rated else ("users (concurrent)", "users")
    cap = summary.capacity
    cap_at = (cap.rate if rated else cap.users) if cap is not None else None
    refs_x = [Ref("x", float(cap_at), f"capacity: {auto(cap_at)} {unit}")] if cap_at is not None else []
    steps = sorted(steps, key=load)  # a capacity search runs its levels in any order
    x = np.array([load(st) for st in steps], dtype=float)

    def s(name, value, **kw):
        return Series(name, x, np.array([_num(value(st)) for st in steps], dtype=float), markers=True, **kw)

    charts = [
        render(
            Chart(
                "step_requests",
                "Requests per second by load step",
                axis,
                "requests/s",
                [
                    s("requests/s", lambda st: st.throughput.requests_per_s),
                    s("goodput requests/s", lambda st: st.goodput.requests_per_s, dash=True),
                ],
                refs=list(refs_x),
            )
        ),
        render(
            Chart(
                "step_tokens",
                "Token throughput by load step",
                axis,
                "tokens/s",
                [
                    s("output tokens/s", lambda st: st.throughput.output_tokens_per_s),
                    s("total tokens/s", lambda st: st.throughput.total_tokens_per_s),
                ],
                refs=list(refs_x),
            )
        ),
    ]
    ttft = [
        s("TTFT p50", lambda st: st.ttft_ms.p50),
        s("TTFT p95", lambda st: st.ttft_ms.p95),
        s("TTFT mean", lambda st: st.ttft_ms.mean, dash=True),
    ]
    refs = list(refs_x) + [
        Ref("y", thr, f"SLO ttft.{stat} < {thr:,.0f} ms")
        for stat, thr in summary_text.slo_threshold_ms(summary, "ttft")
    ]
    charts.append(
        render(
            Chart(
                "step_ttft",
                "TTFT P50/P95 by load step, with the SLO and the capacity point",
                axis,
                "TTFT (ms)",
                ttft,
                refs=refs,
            )
        )
    )
    for key, label in (("tpot", "TPOT"), ("e2e", "E2E latency")):
        ser = [
            s(f"{label} p50", lambda st, k=key: st.latency(k).p50),
            s(f"{label} p95", lambda st, k=key: st.latency(k).p95),
        ]
        refs = list(refs_x) + [
            Ref("y", thr, f"SLO {key}.{stat} < {thr:,.1f} ms")
            for stat, thr in summary_text.slo_threshold_ms(summary, key)
        ]
        charts.append(
            render(
                Chart(
                    f"step_{key}",
                    f"{label} P50/P95 by load step",
                    axis,
                    f"{label} (ms)",
                    ser,
                    refs=refs,
                )
            )
        )
    return charts


def time_charts(run: D.RunData, grid: S.TimeGrid, left_out: list[str]) -> list[str]:
    """The charts over time; a chart that would say nothing is left out, and `left_out` gets the one
    line that says so."""
    start, end = run.window
    steps = run.summary.by_step or []
    bands = []
    if start > run.t0:
        bands.append((0.0, start - run.t0, "warm-up: outside the measurement window"))
    t_end = grid.end_s
    if end - run.t0 < t_end:
        bands.append((end - run.t0, t_end, "after the window: drain"))
    prev = max(0.0, start - run.t0)
    for a, b in sorted((st.window.start - run.t0, st.window.end - run.t0) for st in steps):  # each step's own warm-up
        if a > prev + 1e-6:
            bands.append((prev, a, "step warm-up: outside the step's window"))
        prev = max(prev, b)
    x = grid.mid
    ot = S.over_time(run, grid)
    note = f"{grid.width:g} s bins: requests and latency by completion time, tokens by arrival"
    rng = Series("", np.array([0.0, t_end]), np.array([np.nan, np.nan]))  # pins a shared time axis
    common = dict(x_label="time since start (s)", bands=bands, x_time=True, note=note)

    def chart(cid, title, ylabel, series, **kw):
        return render(Chart(cid, title, y_label=ylabel, series=[rng] + series, **{**common, **kw}))

    def lat(name, key):  # bins without a completion are skipped, not drawn as zero
        v = ot[key]
        return Series(name, x, v, connect=True, markers=int(np.isfinite(v).sum()) <= 60)

    charts = [
        chart(
            "ttft_over_time",
            "TTFT over time (P50, P95)",
            "TTFT (ms)",
            [lat("TTFT p50", "ttft_p50"), lat("TTFT p95", "ttft_p95")],
            refs=[
                Ref("y", thr, f"SLO ttft.{stat}") for stat, thr in summary_text.slo_threshold_ms(run.summary, "ttft")
            ],
        ),
        chart(
            "tpot_over_time",
            "TPOT over time (P50, P95)",
            "TPOT (ms per token)",
            [lat("TPOT p50", "tpot_p50"), lat("TPOT p95", "tpot_p95")],
        ),
        chart(
            "e2e_over_time",
            "End-to-end latency over time (P50, P95)",
            "E2E latency (ms)",
            [lat("E2E p50", "e2e_p50"), lat("E2E p95", "e2e_p95")],
        ),
        chart(
            "requests_over_time",
            "Completed requests per second over time",
            "requests/s",
            [Series("requests/s", x, ot["requests_per_s"], fill=True)],
        ),
        chart(
            "tokens_over_time",
            "Token throughput over time",
            "tokens/s",
            [
                Series("output tokens/s", x, ot["output_tokens_per_s"]),
                Series("total tokens/s", x, ot["total_tokens_per_s"]),
            ],
        ),
    ]
    mean, peak = S.in_flight(run, grid)
    conc = [
        Series("in flight (time-weighted mean)", x, mean, fill=True),
        Series("in flight (peak)", x, peak, dash=True),
    ]
    target = _target_users(run, steps)
    if target is not None:
        conc.append(Series("target users", target[0], target[1], color="#777777", step=True))
    charts.append(
        chart(
            "concurrency_over_time",
            "Requests in flight over time (from wall_send and e2e)",
            "requests in flight",
            conc,
            note=f"{grid.width:g} s bins",
        )
    )
    errs = S.errors_over_time(run, grid)
    if errs:
        charts.append(
            render_stacked(
                "errors_over_time",
                "Failures by class over time",
                grid.left,
                grid.widths,
                errs,
                "time since start (s)",
                "failures/s",
            )
        )
    else:  # a flat line at zero took a chart's space in every clean report
        left_out.append("No failed request: no chart of failures over time.")
    charts += server_charts(run, grid, common, rng)
    charts += gpu_charts(run, grid, common, rng)
    return charts


def _target_users(run: D.RunData, steps: list[Step]):
    """The users the load shape asked for over time: per step, or the run's -u."""
    if steps:
        s = np.array([st.window.start for st in steps]) - run.t0
        e = np.array([st.window.end for st in steps]) - run.t0
        u = np.array([st.users for st in steps], dtype=float)
        xs = np.column_stack([s, e, np.full(s.size, np.nan)]).ravel()
        ys = np.column_stack([u, u, np.full(u.size, np.nan)]).ravel()
        return xs, ys
    users = run.run.closed_loop_users
    if users is not None:
        start, end = run.window
        return np.array([start - run.t0, end - run.t0]), np.array([float(users), float(users)])
    return None


SERVER_GROUPS = [
    (
        "server_queue",
        "Server: running and waiting requests",
        "requests",
        "sum",
        ("vllm:num_requests_running", "vllm:num_requests_waiting", "sglang:num_running_reqs", "sglang:num_queue_reqs"),
    ),
    (
        "server_kv_cache",
        "Server: KV-cache usage",
        "KV cache used (%)",
        "mean",
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    ),
]


def server_charts(run: D.RunData, grid: S.TimeGrid, common: dict, rng: Series) -> list[str]:
    sm = run.server
    if sm is None or sm.empty:
        return []
    out = []
    t_end = grid.end_s
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
            out.append(
                render(
                    Chart(
                        cid,
                        title,
                        y_label=ylabel,
                        series=[rng] + keep,
                        **{**common, "note": "scraped from the server's /metrics"},
                    )
                )
            )
    return out


GPU_CHARTS = [
    ("gpu_util", "GPU utilisation", "GPU utilisation (%)", "utilization_pct"),
    ("gpu_power", "GPU power draw", "power (W)", "power_w"),
]


def gpu_charts(run: D.RunData, grid: S.TimeGrid, common: dict, rng: Series) -> list[str]:
    """Each GPU's utilisation and power over time, from gpu_telemetry.parquet (--gpu-telemetry)."""
    readings = read_readings(run.path)
    if readings is None or readings.empty:
        return []
    t_all = readings["timestamp"].to_numpy(dtype=float) - run.t0
    inside = (t_all >= 0) & (t_all <= grid.end_s)
    out = []
    for cid, title, ylabel, column in GPU_CHARTS:
        series = []
        for i, (gid, g) in enumerate(readings[inside].groupby("gpu", sort=True)):
            if i >= len(PALETTE):  # more GPUs than colours: the first ones (the table has them all)
                break
            g = g.sort_values("timestamp")
            t, v = g["timestamp"].to_numpy(dtype=float) - run.t0, g[column].to_numpy(dtype=float)
            if np.isfinite(v).any():
                step = max(1, int(math.ceil(t.size / 2000)))  # draw at most ~2000 points per series
                series.append(Series(f"GPU {gid}", t[::step], v[::step], color=PALETTE[i]))
        if series:
            out.append(
                render(
                    Chart(
                        cid,
                        title,
                        y_label=ylabel,
                        series=[rng] + series,
                        **{**common, "note": "--gpu-telemetry readings, each GPU"},
                    )
                )
            )
    return out


def distribution_charts(run: D.RunData, left_out: list[str] | None = None) -> tuple[list[str], str]:
    """The distributions; a chart of one bar at 100 % is left out, and `left_out` gets the line
    that says what it would have shown."""
    left_out = [] if left_out is None else left_out
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
        groups = [
            (
                f"{names.get(n, n)} ({int(masks[n].sum()):,} requests)",
                np.array([float((masks[n] & (tok == v)).sum()) for v in distinct.tolist()]),
            )
            for n in sources
        ]  # <= 24 x sources
        charts.append(
            render_bars(
                "output_tokens_hist",
                title,
                [str(v) for v in distinct.tolist()],
                groups,
                "requests",
                "output tokens per request (tokens)",
            )
        )
    else:
        _, _, width = S.int_hist(tok)
        series = []
        for i, name in enumerate(sources):
            left, counts, _ = S.int_hist(tok[masks[name]], max_bins=max(1, int(math.ceil((tok.max() + 1) / width))))
            series.append(
                Series(f"{names.get(name, name)} ({counts.sum():,.0f} requests)", left, counts, step=True, fill=i == 0)
            )
        charts.append(
            render(
                Chart(
                    "output_tokens_hist",
                    title,
                    f"output tokens per request (tokens; {width:g}-token bins)",
                    "requests",
                    series,
                )
            )
        )
    lists, sampled, total = S.sample_lists(run)
    sample_note = "" if sampled >= total else f"drawn from {sampled:,} of {total:,} requests (row-group sample)"
    values, what = S.tokens_per_chunk(lists, df)
    title = "Tokens per chunk"
    one = np.unique(np.round(values.astype(float), 2)) if values.size else values
    if values.size and one.size == 1:  # one bar at 100 %: the line says it
        count = f"{one[0]:g} token{'' if one[0] == 1 else 's'}"
        left_out.append(
            f"Tokens per chunk: every chunk carried {count} ({what}); no chart of its distribution."
            if values.dtype.kind in "iu"
            else f"Tokens per chunk: every request's chunks carried {count} on average ({what}); no chart of its distribution."
        )
    elif values.dtype.kind in "iu" and values.size and 0 <= values.min() and values.max() < 40:
        counts = np.bincount(values.astype(np.int64))
        shown = np.nonzero(counts)[0]
        share = counts[shown] / counts.sum() * 100
        charts.append(
            render_bars(
                "tokens_per_chunk_hist",
                title,
                [str(v) for v in shown.tolist()],
                [("share of chunks", share)],
                "chunks (%)",
                "tokens in the chunk (tokens)",
                value_fmt=lambda v: f"{v:.2f} %",
                note=f"{what}; {sample_note}".strip("; "),
                y_max=100.0,
            )
        )
    elif values.size and np.unique(np.round(values, 2)).size <= 24:
        rounded, counts = np.unique(np.round(values.astype(float), 2), return_counts=True)
        charts.append(
            render_bars(
                "tokens_per_chunk_hist",
                title,
                [f"{v:g}" for v in rounded.tolist()],
                [("share of requests", counts / counts.sum() * 100)],
                "requests (%)",
                "tokens per chunk (tokens)",
                value_fmt=lambda v: f"{v:.2f} %",
                note=what,
                y_max=100.0,
            )
        )
    else:
        v = values.astype(float)
        lo, hi = (float(v.min()), float(v.max())) if v.size else (0.0, 1.0)
        edges = np.linspace(lo, hi if hi > lo else lo + 1, 61)
        counts, _ = np.histogram(v, edges)
        share = counts / max(1, counts.sum()) * 100
        unit = "chunks" if values.dtype.kind in "iu" else "requests"
        charts.append(
            render(
                Chart(
                    "tokens_per_chunk_hist",
                    title,
                    "tokens per chunk (tokens)",
                    f"{unit} (%)",
                    [Series(unit, (edges[:-1] + edges[1:]) / 2, share, step=True, fill=True)],
                    note=f"{what}; {sample_note}".strip("; "),
                )
            )
        )
    itl = S.itl_ms(lists)
    cx, cy = S.log_hist(itl)
    itl = run.summary.overall.itl_ms
    itl_refs = [Ref("x", float(v), f"p{p}", color="#555555") for p, v in (("50", itl.p50), ("99", itl.p99)) if v]
    charts.append(
        render(
            Chart(
                "itl_hist",
                "Inter-token latency distribution (pooled gaps between chunks)",
                "ITL (ms, log scale)",
                "gaps per bin",
                [Series("ITL", cx, cy, fill=True)],
                x_log=True,
                refs=itl_refs,
                note=sample_note,
            )
        )
    )
    # latency CDFs by class (every successful request in the window)
    start, end = run.window
    inside = ok[(ok["wall_send"] >= start) & (ok["wall_send"] <= end)]
    for key, label in (("ttft_s", "TTFT"), ("e2e_s", "E2E latency")):
        series = []
        for name, g in inside.groupby("request_class", observed=True):  # one group per class
            xs, qs = S.cdf_points(g[key].to_numpy(dtype=float) * 1000)
            series.append(Series(str(name), xs, qs))
        xs_all = np.concatenate([s.x for s in series]) if series else np.empty(0)
        log_x = bool(xs_all.size) and xs_all.min() > 0 and xs_all.max() / xs_all.min() > 20
        charts.append(
            render(
                Chart(
                    f"{key[:-2]}_cdf",
                    f"{label} distribution by request class (CDF)",
                    f"{label} (ms{', log scale' if log_x else ''})",
                    "requests at or below (%)",
                    series,
                    x_log=log_x,
                    y_max=100.0,
                )
            )
        )
    return charts, sample_note


# ---------------------------------------------------------------------------------------------
# the files


@dataclass(frozen=True)
class Format:
    """One report file: its name in the results folder and the template that renders it."""

    filename: str
    template: str


# The report formats, by name: each renders the same reports.report_model.Report.
FORMATS: dict[str, Format] = {
    "html": Format(REPORT_HTML, "report.html.j2"),
    "md": Format(REPORT_MD, "report.md.j2"),
}

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")


def _md_cell(text) -> str:
    """Text safe inside a Markdown table cell: one line, pipes escaped."""
    return str(text).replace("\r", " ").replace("\n", " ").replace("|", "\\|")


def environment(templates: str = TEMPLATES) -> jinja2.Environment:
    """The templates' environment: HTML escaped, Markdown cells through the `md` filter, a missing
    value an error. Another report (a sweep's) passes its own folder of templates."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default_for_string=False),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["md"] = _md_cell
    return env


def charts(run: D.RunData) -> list[ChartGroup]:
    """Every chart of the page, in groups, as inline SVG."""
    s = run.summary
    grid = S.time_grid(run)
    quiet_time, quiet_dist = [], []  # the charts left out because they would say nothing, one line each
    dist, _ = distribution_charts(run, quiet_dist)
    groups = [ChartGroup("Latency by request class", latency_by_class_charts(s))]
    by_step = step_charts(s)
    if by_step:
        groups.append(ChartGroup("Load steps", by_step))
    over_time = time_charts(run, grid, quiet_time)
    groups += [
        ChartGroup(
            "Over time",
            over_time,
            " ".join(
                [
                    "Shaded: outside the measurement window (warm-up, drain). Latency and requests "
                    "by completion time, tokens by arrival.",
                    *quiet_time,
                ]
            ),
        ),
        ChartGroup("Distributions", dist, " ".join(quiet_dist)),
    ]
    for g in groups:
        g.charts = [Markup(svg) for svg in g.charts]  # built by reports/svg.py, which escapes every text it holds
    return groups


def build(path: str, summary: Summary | dict | None = None, formats: dict[str, Format] | None = None) -> dict[str, str]:
    """Write the report files (report.html and report.md by default) into the results folder;
    returns {format name: path}. `summary`: the run's, when the caller has it (else summary.json)."""
    t_start = time.perf_counter()
    formats = FORMATS if formats is None else formats
    run = D.load_run(path)
    if summary:
        run.summary = as_summary(summary)
    report = R.report(run, charts(run))
    report.files = {name: os.path.join(run.path, f.filename) for name, f in formats.items()}
    report.built_at = utc(time.time())
    report.build_s = time.perf_counter() - t_start
    env = environment()
    for name, f in formats.items():
        write_atomic(report.files[name], env.get_template(f.template).render(r=report, css=Markup(CSS)))
    return dict(report.files)
