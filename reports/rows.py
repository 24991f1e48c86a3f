"""The report's content as data: the rows of the model that every format renders
(reports/report_model.py, reports/templates/).

Everything the report says is built here once, from summary.json's fields (metrics/schema/)
and the results folder's records and run.json, as plain text in cells and tables. A template
decides only how it looks: the HTML page escapes the text and colours a verdict, the Markdown
summary bolds a failure. No number is formatted in a template.
"""

from __future__ import annotations

from core.numbers import auto, fmt, utc
from metrics.record import NOT_SERVER_FAILURES
from metrics.schema import Summary
from metrics.schema.figures import Step
from metrics.verdict import count as count_of
from metrics.verdict import judged_on, margin_text
from reports import summary_text
from reports.report_model import Cell, ChartGroup, Extra, Report, Table, cells
from runfolder import reading as D
from targets.backends import address

# ---------------------------------------------------------------------------------------------
# tables from summary.json

SUMMARY_HEADERS = [
    "class",
    "sent",
    "ok",
    "failed",
    "TTFT mean",
    "TTFT p50",
    "TTFT p90",
    "TTFT p95",
    "TTFT p99",
    "TPOT p50",
    "TPOT p95",
    "ITL p50",
    "ITL p95",
    "E2E p50",
    "E2E p95",
    "E2E p99",
    "stream tok/s p50",
    "req/s",
    "out tok/s",
    "total tok/s",
]


def summary_table(summary: Summary, by: str = "by_class", label: str = "class") -> Table:
    """One row per class (or conversation turn) and one for the whole run."""
    blocks = summary.blocks(by)
    goodput = summary.slo is not None
    lag = any(b.schedule_lag_ms is not None for _, b in blocks)
    # reasoning or tool calls: the time to first answer token and the output's split
    agentic = any(b.tokens.reasoning or b.requests.tool_calls for _, b in blocks)
    headers = [label, *SUMMARY_HEADERS[1:]]
    if goodput:
        headers += ["goodput req/s", "good %"]
    if lag:
        headers += ["TTFT p95 from intended", "schedule lag p95"]
    if agentic:
        headers += ["TTFA p50", "TTFA p95", "reasoning tok", "answer tok", "tool calls"]
    rows = []
    for name, b in blocks:
        r, t = b.requests, b.throughput
        row = [
            name,
            fmt(r.sent),
            fmt(r.ok),
            fmt(r.failed),
            *(fmt(b.ttft_ms.stat(k)) for k in ("mean", "p50", "p90", "p95", "p99")),
            fmt(b.tpot_ms.p50, 1),
            fmt(b.tpot_ms.p95, 1),
            fmt(b.itl_ms.p50, 1),
            fmt(b.itl_ms.p95, 1),
            *(fmt(b.e2e_ms.stat(k)) for k in ("p50", "p95", "p99")),
            fmt(b.stream_tokens_per_s.p50, 1),
            fmt(t.requests_per_s, 2),
            fmt(t.output_tokens_per_s),
            fmt(t.total_tokens_per_s),
        ]
        if goodput:
            gf = b.goodput.good_fraction
            row += [fmt(b.goodput.requests_per_s, 2), fmt(None if gf is None else gf * 100, 1)]
        if lag:
            row += [
                fmt(b.ttft_from_intended_ms.p95 if b.ttft_from_intended_ms else None),
                fmt(b.schedule_lag_ms.p95 if b.schedule_lag_ms else None, 1),
            ]
        if agentic:
            row += [
                fmt(b.ttfa_ms.p50),
                fmt(b.ttfa_ms.p95),
                fmt(b.tokens.reasoning),
                fmt(b.tokens.answer),
                fmt(b.requests.tool_calls),
            ]
        rows.append(cells(*row))
    return Table(headers, rows, row_classes=["overall" if n == "overall" else "" for n, _ in blocks])


def backend_tables(summary: Summary) -> dict:
    """Several replicas or a balancer's header: the summary table per backend (the by_class table's
    rows), each backend's share and flags, and its failures in time (summary.json by_backend, backends)."""
    check = summary.backends
    if not summary.by_backend or check is None:
        return {
            "backends": None,
            "backend_shares": None,
            "backend_rule": "",
            "outages": None,
            "backend_diagnoses": None,
        }
    served = server_counts(summary)
    shares = Table(
        [
            "backend",
            "sent",
            "share %",
            "fair share %",
            "off by %",
            "TTFT p50",
            "TPOT p50",
            "E2E p50",
            "out tok/s",
            "failed",
            "failures by class",
            "flags",
        ],
        [
            cells(
                b.backend,
                fmt(b.sent),
                fmt(None if b.share is None else b.share * 100, 1),
                fmt(None if b.fair_share is None else b.fair_share * 100, 1),
                fmt(None if b.share_off is None else b.share_off * 100, 1),
                fmt(b.ttft_p50_ms),
                fmt(b.tpot_p50_ms, 1),
                fmt(b.e2e_p50_ms),
                fmt(b.output_tokens_per_s),
                fmt(b.failed),
                ", ".join(f"{k} {v}" for k, v in b.by_error.items()),
                "; ".join(b.flags) or "-",
            )
            for b in check.backends
        ],
        text=(10, 11),
        row_classes=["flagged" if b.flags else "" for b in check.backends],
    )
    if served:  # each replica's own count beside the client's, where --server-metrics scraped it
        shares.headers.insert(2, "server ok, whole run (its metrics)")
        for row, b in zip(shares.rows, check.backends):
            row.insert(2, cells(fmt(served.get(address(b.backend))))[0])
        shares.text = (11, 12)
    start = summary.window.start
    outages = (
        Table(
            [
                "backend",
                "failed",
                "by class",
                "first failure (s into the window)",
                "last failure",
                "recovered",
                "recovery s",
            ],
            [
                cells(
                    o.backend,
                    fmt(o.failed),
                    ", ".join(f"{k} {v}" for k, v in o.by_error.items()),
                    fmt(o.first_failure - start, 1),
                    fmt(o.last_failure - start, 1),
                    fmt(None if o.recovered_at is None else o.recovered_at - start, 1),
                    fmt(o.recovery_s, 1),
                )
                for o in check.outages
            ],
            text=(2,),
        )
        if check.outages
        else None
    )
    return {
        "backends": summary_table(summary, "by_backend", "backend"),
        "backend_shares": shares,
        "backend_rule": check.rule
        + (
            f". Behind the balancer, {check.unseen} of the replicas --backend-count names "
            "were named in no reply: they served nothing"
            if check.unseen
            else ""
        ),
        "outages": outages,
        "backend_diagnoses": backend_diagnoses(summary),
    }


def backend_diagnoses(summary: Summary) -> Table | None:
    """Each replica's own diagnosis at the knee, from its own /metrics (summary.json
    by_backend[...].diagnosis, targets/diagnosis.py), a replica whose limit differs from the
    others' marked; None where no replica has one."""
    said = [(name, b.diagnosis) for name, b in (summary.by_backend or {}).items() if b.diagnosis is not None]
    if not said:
        return None
    flags = {b.backend: b.flags for b in summary.backends.backends} if summary.backends is not None else {}
    odd = {name for name, f in flags.items() if any(x.startswith("limit: ") for x in f)}
    return Table(
        ["backend", "limit", "why (its own server metrics)"],
        [
            cells(name, d.kind, d.sentence + (f" (rests on: {'; '.join(d.evidence)})" if d.evidence else ""))
            for name, d in said
        ],
        left=3,
        row_classes=["flagged" if name in odd else "" for name, _ in said],
    )


def server_counts(summary: Summary) -> dict[str, float]:
    """host:port -> the requests the server there counted as served during the run
    (vllm:request_success_total's increase), from each --server-metrics URL."""
    scrapes = summary.server_metrics
    out = {}
    for url, source in (scrapes.by_source if scrapes is not None else {}).items():
        value = (source.get("counter_deltas") or {}).get("vllm:request_success_total")
        if value is not None:
            out[address(url)] = value
    return out


TTFT_SPLIT_HEADERS = [
    "scope",
    "requests",
    "client TTFT mean",
    "server queue mean",
    "server prefill mean",
    "rest mean",
    "rest p95",
    "cached prompt %",
]


def ttft_split_table(summary: Summary) -> Table | None:
    """The client's TTFT split by the server's own timing (summary.json `ttft_split`): one row per
    class, the run and each level that has one; the means add up, client TTFT = queue + prefill + rest
    (the rest: front end, network and client). None where no server sent its timing or cached tokens."""
    scopes = [(name, b) for name, b in summary.blocks()]
    scopes += [(f"{count_of(s.users, 'user')} (step {s.step})", s) for s in summary.by_step or ()]
    rows = []
    for name, b in scopes:
        t = b.ttft_split
        if t is None:
            continue
        share = None if t.cached_share is None else t.cached_share * 100
        rows.append(
            cells(
                name,
                fmt(t.requests),
                fmt(t.ttft_ms, 1),
                fmt(t.queue_ms, 1),
                fmt(t.prefill_ms, 1),
                fmt(t.rest_ms, 1),
                fmt(t.rest_p95_ms, 1),
                fmt(share, 1),
            )
        )
    if not rows:
        return None
    return Table(TTFT_SPLIT_HEADERS, rows)


# (header, the step's value, digits)
STEP_COLUMNS = [
    ("step", lambda s: s.step, 0),
    ("users", lambda s: s.users, 0),
    ("sent", lambda s: s.requests.sent, 0),
    ("ok", lambda s: s.requests.ok, 0),
    ("failed", lambda s: s.requests.failed, 0),
    ("req/s", lambda s: s.throughput.requests_per_s, 2),
    ("out tok/s", lambda s: s.throughput.output_tokens_per_s, 0),
    ("total tok/s", lambda s: s.throughput.total_tokens_per_s, 0),
    ("TTFT mean", lambda s: s.ttft_ms.mean, 0),
    ("TTFT p50", lambda s: s.ttft_ms.p50, 0),
    ("TTFT p95", lambda s: s.ttft_ms.p95, 0),
    ("TPOT p50", lambda s: s.tpot_ms.p50, 1),
    ("TPOT p95", lambda s: s.tpot_ms.p95, 1),
    ("ITL p95", lambda s: s.itl_ms.p95, 1),
    ("E2E p50", lambda s: s.e2e_ms.p50, 0),
    ("E2E p95", lambda s: s.e2e_ms.p95, 0),
    ("stream tok/s p50", lambda s: s.stream_tokens_per_s.p50, 1),
    ("goodput req/s", lambda s: s.goodput.requests_per_s, 2),
]


def steps_table(steps: list[Step]) -> Table:
    """One row per load level, in the order they ran; with --slo, the level's one verdict
    (metrics/verdict.py) and what it rests on: the requests, the statistic's confidence bounds."""
    with_slo = any(s.verdict is not None for s in steps)
    rated = any(s.rate is not None for s in steps)  # an open loop in steps: the rate asked for beside the cap
    columns = [*STEP_COLUMNS[:1], ("rate asked", lambda s: s.rate, 2), *STEP_COLUMNS[1:]] if rated else STEP_COLUMNS
    rows = []
    for s in steps:
        row = cells(*(fmt(value(s), digits) for _, value, digits in columns))
        if s.partial:  # the run ended early in it: no rates (metrics/summary.py by_step)
            row[0] = Cell(f"{s.step} (cut)")
        if with_slo:
            row += level_verdict(s)
        rows.append(row)
    heads = [h for h, _, _ in columns]
    if with_slo:
        heads += ["SLO", "judged on", "statistic in its bounds (ms)"]
    return Table(heads, rows, left=0, text=tuple(range(len(columns), len(heads))) if with_slo else ())


def level_verdict(s: Step) -> list[Cell]:
    """[verdict, requests (and the time measured, a level held longer than a step), each objective's statistic and confidence bounds] of a
    level: the statistic the verdict states, an order statistic that lies within its bounds."""
    v = s.verdict
    if v is None:
        return cells("-", "-", "-")
    status = {"met": "pass", "missed": "fail"}.get(v.state, "")
    bounds = "; ".join(
        f"{e.metric} {fmt(e.value_ms, 0)} in {fmt(e.lower_ms, 0)}..{fmt(e.upper_ms, 0)}" for e in v.objectives
    )
    return [
        Cell(v.state, status),
        Cell(judged_on(v, s.steps, s.window.end - s.window.start)),
        Cell(f"{bounds} ({v.confidence:.0%})"),
    ]


STATUS = {"met": "pass", "missed": "fail"}  # undecided: neither, uncoloured


def slo_verdict(summary: Summary) -> Cell | None:
    """The run's one verdict (metrics/verdict.py): 'met on 312 requests, margin +8.3 %'."""
    v = summary.slo
    if v is None:
        return None
    text = f"{v.state} on {v.requests:,} requests" + (f" ({v.failed:,} failed)" if v.failed else "")
    text += (f", {margin_text(v.margin)}" if v.margin is not None else "") + (f": {v.reason}" if v.reason else "")
    return Cell(text, STATUS.get(v.state, ""))


def slo_table(summary: Summary) -> Table | None:
    """Each objective of the run's verdict: its statistic, confidence bounds, threshold, margin, state."""
    if summary.slo is None:
        return None
    conf = "" if summary.slo.confidence is None else f"{summary.slo.confidence:.0%} "
    rows = [
        [
            Cell(v.objective),
            Cell(fmt(v.value_ms, 1)),
            Cell(f"{fmt(v.lower_ms, 1)}..{fmt(v.upper_ms, 1)}"),
            Cell(fmt(v.threshold_ms, 1)),
            Cell(margin_text(v.margin).removeprefix("margin ") or "-"),
            Cell(v.state, STATUS.get(v.state, "")),
        ]
        for v in summary.slo.objectives
    ]
    return Table(["objective", "value (ms)", f"{conf}bounds (ms)", "threshold (ms)", "margin", "verdict"], rows)


FAILURE_HEADERS = [
    "failure",
    "all records",
    "in window",
    "% of ended (window)",
    "by class (window)",
    "most common detail",
]


def failures_table(summary: Summary, details: dict[str, str]) -> Table | None:
    """Each failure class (stopped and cancelled too, counted apart): every record, those sent in
    the window, their share of the requests that ended there (server failures only), per class;
    from summary.json. `details`: the most common message of each class (from the records)."""
    every = summary.records.by_error
    if not every:
        return None
    overall = summary.overall.requests
    rows = []
    for name, count in sorted(every.items(), key=lambda kv: (-kv[1], kv[0])):
        window = overall.count(name)
        share = window / overall.ended * 100 if overall.ended and name not in NOT_SERVER_FAILURES else None
        per_class = ", ".join(
            f"{c} {b.requests.count(name)}" for c, b in summary.by_class.items() if b.requests.count(name)
        )
        rows.append(cells(name, fmt(count), fmt(window), fmt(share, 2), per_class, details.get(name, "")))
    return Table(FAILURE_HEADERS, rows, left=1, text=(4, 5))


def error_details(run: D.RunData) -> dict[str, str]:
    """The most common error_detail of each failure class (read for failures only)."""
    import pyarrow.parquet as pq

    failed = (~run.df["ok"].to_numpy(dtype=bool)) & (run.df["error"] != "").to_numpy()
    if not failed.any():
        return {}
    try:
        t = pq.read_table(
            run.records_path,
            columns=["error", "error_detail"],
            read_dictionary=["error", "error_detail"],
            page_checksum_verification=True,
        )
    except (KeyError, ValueError, OSError):
        return {}
    f = t.to_pandas()[failed]
    f = f[f["error_detail"].astype(str) != ""]
    if f.empty:
        return {}
    top = f.groupby(["error", "error_detail"], observed=True).size().reset_index(name="n")
    top = top.sort_values("n", ascending=False).drop_duplicates("error")
    return {str(e): str(d)[:200] for e, d in zip(top["error"], top["error_detail"])}


def extra_section(key: str, obj) -> Extra:
    """A section we have no special view for (a plugin's workers, client_bound, ...)."""
    if isinstance(obj, list) and obj and all(isinstance(x, dict) for x in obj):
        rows = [summary_text.flatten(x) for x in obj[:200]]
        keys = list(dict.fromkeys(k for r in rows for k in r))[:24]
        return Extra(key, Table(keys, [cells(*(auto(r.get(k)) for k in keys)) for r in rows]))
    if isinstance(obj, dict) and obj and all(isinstance(v, dict) for v in obj.values()):  # e.g. workers by id
        rows = {str(k): summary_text.flatten(v) for k, v in list(obj.items())[:200]}
        keys = list(dict.fromkeys(k for r in rows.values() for k in r))[:24]
        return Extra(
            key, Table([key] + keys, [cells(name, *(auto(r.get(k)) for k in keys)) for name, r in rows.items()])
        )
    if isinstance(obj, dict):
        flat = summary_text.flatten(obj)
        return Extra(key, Table(["field", "value"], [cells(k, auto(v)) for k, v in list(flat.items())[:200]], left=2))
    return Extra(key, text=auto(obj))


# Summary fields with a view of their own; every other section is shown as an Extra.
OWN_VIEW = {
    "schema_version",
    "run_id",
    "complete",
    "reason",
    "note",
    "definitions",
    "window",
    "records",
    "overall",
    "by_class",
    "by_turn",
    "by_backend",
    "backends",
    "by_step",
    "slo",
    "capacity",
    "gpu",
    "diagnosis",
    "users_off_plan",
}


def extras(summary: Summary) -> list[Extra]:
    data = summary.model_dump()
    return [extra_section(k, v) for k, v in data.items() if k not in OWN_VIEW and v is not None]


def setup_rows(setup) -> list[tuple[str, str]]:
    """summary.json's `setup`: the load and the target, stated first (plugin/setup.py)."""
    load = setup.load
    users = f", {load.users} users" if load.users is not None else ""
    asked = f"-t {setup.run_time_s:g} s" if setup.run_time_s is not None else "until stopped"
    source = f" ({setup.server_version_source})" if setup.server_version_source else ""
    version = f", version {setup.server_version}{source}" if setup.server_version else ""
    hosts = ", ".join(setup.client_hosts)
    return [
        *([("label", setup.label)] if setup.label else []),
        ("load", f"{load.text}{users}"),
        ("time", f"{asked}; measured {fmt(setup.measured_s, 1)} s"),
        ("SLO", ", ".join(setup.slo) or "none"),
        ("workload", f"{setup.workload} (content hash {setup.workload_hash[:12]})"),
        ("server", f"{setup.server} serving {setup.model}{version}"),
        *([("against", setup.target.stated())] if setup.target is not None else []),
        ("client", f"{setup.workers} process{'es' if setup.workers != 1 else ''} running users on {hosts}"),
        ("suite", setup.suite_version),
    ]


def header(run: D.RunData) -> list[tuple[str, str]]:
    info, summary = run.run, run.summary
    start, end = run.window
    rows = (
        setup_rows(summary.setup)
        if summary.setup is not None
        else [
            ("host", info.host or "-"),  # a run of a version without `setup`
            ("model", info.model or "-"),
        ]
    )
    rows += [
        ("run id", run.run_id),
        ("started", utc(info.started_at)),
        ("ended", utc(info.ended_at)),
        ("measurement window", f"{utc(start)} + {end - start:,.1f} s" if end > start else "-"),
        ("records", f"{len(run.df):,} ({summary.records.outside_window:,} outside the window)"),
        ("complete", "yes" if summary.complete else f"no: {summary.reason or 'interrupted'}, partial results"),
        *([("users", summary.users_off_plan.line())] if summary.users_off_plan is not None else []),
        ("role", info.role or "-"),
        ("web form settings" if info.started_from == "web form" else "command", " ".join(info.argv) or "-"),
    ]
    wl = info.workload
    if wl is not None and summary.setup is None:
        rows.append(("workload", f"{wl.name or wl.path} hash {wl.hash[:12]}".strip()))
    if summary.note:
        rows.append(("note", summary.note))
    connect = summary_text.connection_setup(run)
    if connect:
        rows.append(("connection setup", connect))
    return rows


def knee(run: D.RunData) -> dict:
    """{diagnosis, server_levels}: why the knee is there (summary.json's diagnosis; computed the same
    way from the folder's server metrics for results written before it had one)."""
    from metrics.diagnosis import diagnose_levels

    s = run.summary
    if not s.by_step:
        return {"diagnosis": "", "diagnosis_heading": "", "server_levels": None}
    d = s.diagnosis or diagnose_levels(s.by_step, s.capacity, run.server, s.client_bound, s.gpu)
    pct = lambda x: fmt(None if x is None else x * 100, 0)  # noqa: E731
    # the server's own figures of each level; a column the server sent nothing for is left out
    columns = [
        ("scrapes", lambda g: fmt(g.scrapes)),
        ("running (mean)", lambda g: fmt(g.running, 1)),
        ("running (peak)", lambda g: fmt(g.running_peak, 0)),
        ("waiting (mean)", lambda g: fmt(g.waiting, 1)),
        ("KV cache peak %", lambda g: pct(g.kv_cache_peak)),
        ("preemptions", lambda g: fmt(g.preemptions, 0)),
        ("prefix-cache hits %", lambda g: pct(g.prefix_cache_hit_rate)),
        ("GPU busy %", lambda g: pct(g.gpu_utilisation)),
        ("queue ms (mean)", lambda g: fmt(g.queue_ms, 0)),
        ("prefill ms (mean)", lambda g: fmt(g.prefill_ms, 0)),
        ("tokens per step", lambda g: fmt(g.step_tokens, 1)),
    ]
    measured = [g for g in d.levels if g.scrapes]
    shown = [(h, f) for i, (h, f) in enumerate(columns) if i < 8 or any(f(g) != "-" for g in measured)]
    by_rate = any(g.rate is not None for g in measured)  # a search in requests/s: its levels are rates
    rows = [cells(fmt(g.rate, 2) if by_rate else fmt(g.users), *(f(g) for _, f in shown)) for g in measured]
    table = Table(["requests/s" if by_rate else "users", *(h for h, _ in shown)], rows) if rows else None
    text = d.sentence + (f" (rests on: {'; '.join(d.evidence)})" if d.evidence else "")
    return {"diagnosis": text, "diagnosis_heading": d.heading, "server_levels": table}


# (header, the level's GpuFigures field, digits); a column no level has a value for is left out
GPU_COLUMNS = [
    ("readings", "readings", 0),
    ("GPU util mean %", "utilization_pct_mean", 0),
    ("GPU util p95 %", "utilization_pct_p95", 0),
    ("memory peak MiB", "memory_used_mib_peak", 0),
    ("power W", "power_w_mean", 0),
    ("J/output token", "joules_per_output_token", 3),
    ("J/token", "joules_per_token", 3),
    ("req/min", "requests_per_min", 1),
    ("sessions/min", "sessions_per_min", 1),
    ("req/min per GPU", "requests_per_min_per_gpu", 1),
    ("out tok/s per GPU", "output_tokens_per_s_per_gpu", 0),
    ("total tok/s per GPU", "total_tokens_per_s_per_gpu", 0),
    ("cost/M output tokens", "cost_per_million_output_tokens", 2),
    ("cost/M tokens", "cost_per_million_tokens", 2),
]


def gpu_block(summary: Summary) -> dict:
    """{gpu, gpu_note, gpu_levels}: summary.json's `gpu` (metrics/gpu.py): the sentence, where the
    figures come from, and one row per level and one for the run's window."""
    g = summary.gpu
    if g is None:
        return {}
    gpus = (
        f"{g.gpus} GPU{'s' if g.gpus != 1 else ''} ({'--gpus' if g.gpus_from == '--gpus' else 'as the telemetry saw'})"
        if g.gpus
        else "GPU count unknown (--gpus)"
    )
    seen = "; ".join(f"GPU {d.id} {d.name} ({fmt(d.memory_total_mib)} MiB)".replace("  ", " ") for d in g.devices)
    if g.source:
        note = (
            f"Telemetry: {g.source} every {g.interval_s:g} s, {fmt(g.readings)} readings ({fmt(g.failed_readings)} failed"
            f"{': ' + g.last_error if g.last_error else ''}); {seen or 'no GPU seen'}. Figures for {gpus}."
        )
    else:
        note = f"No GPU telemetry (--gpu-telemetry): figures for {gpus}."
    if g.gpu_hour_price is not None:
        note += f" Cost at {g.gpu_hour_price:g} per GPU-hour."
    levels = [*g.by_step, g.overall]
    shown = [(h, key, d) for h, key, d in GPU_COLUMNS if any(getattr(f, key) is not None for f in levels)]
    rows = [
        cells(fmt(f.users) if f.users is not None else "run", *(fmt(getattr(f, key), d) for _, key, d in shown))
        for f in levels
    ]
    table = Table(["users", *(h for h, _, _ in shown)], rows, row_classes=[""] * len(g.by_step) + ["overall"])
    return {"gpu": g.sentence, "gpu_note": note, "gpu_levels": table}


def report(run: D.RunData, charts: list[ChartGroup]) -> Report:
    """The report of one results folder: its tables from summary.json, the given charts."""
    s = run.summary
    opts = run.run.options
    versions = run.run.versions
    return Report(
        title=f"LLM load test report: {run.run_id}" + (f" ({run.run.plan.label})" if run.run.plan.label else ""),
        run_id=run.run_id,
        path=run.path,
        header=header(run),
        complete=s.complete,
        reason=s.reason or "",
        warning=summary_text.client_warning(s),
        capacity=s.capacity.sentence if s.capacity is not None else "",
        capacity_check=(s.capacity.precheck or "") if s.capacity is not None else "",
        **knee(run),
        slo_verdict=slo_verdict(s),
        slo=slo_table(s),
        summary=summary_table(s),
        turns=summary_table(s, "by_turn", "turn") if s.by_turn else None,
        **backend_tables(s),
        steps=steps_table(s.by_step) if s.by_step else None,
        ttft_split=ttft_split_table(s),
        failures=failures_table(s, error_details(run)),
        charts=charts,
        extras=extras(s),
        definitions=Table(
            ["metric", "definition"], [[Cell(k, code=True), Cell(str(v))] for k, v in s.definitions.items()], left=2
        ),
        options=Table(["option", "value"], [cells(k, auto(v)) for k, v in sorted(opts.items())], left=2),
        versions=Table(["package", "version"], [cells(k, str(v)) for k, v in versions.items()], left=2),
        **gpu_block(s),
    )
