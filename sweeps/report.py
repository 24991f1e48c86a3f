"""The sweep's report (report.html and report.md in the sweep folder): the ranking sentence, the
table of points with their intervals, the failed points with their logs' tails, and two charts:
the capacity at the SLO per point, and throughput against P95 TTFT with the Pareto front."""

from __future__ import annotations

import os

from markupsafe import Markup

from core.files import write_atomic
from reports.build import environment
from reports.svg import CSS
from sweeps import charts

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
REPORT_HTML, REPORT_MD = "report.html", "report.md"


def _fmt(v, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, (int,)) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.{digits}g}"
    return str(v)


def _iv(row: dict, key: str, unbounded: str = "∞") -> str:
    lo, hi = row.get(f"{key}_lo"), row.get(f"{key}_hi")
    if row.get(key) is None:
        return "-"
    return f"[{_fmt(lo)}, {_fmt(hi) if hi is not None else unbounded}]"


def build_charts(rows: list[dict], meta: dict) -> list[str]:
    labels = [r["label"] for r in rows]
    per_gpu = " per GPU" if meta.get("gpus") else ""
    if any(r.get("capacity") is not None for r in rows):
        first = charts.per_point(
            "capacity",
            "Capacity at the SLO per point",
            _unit(meta),
            labels,
            [r.get("capacity") for r in rows],
            [r.get("capacity_lo") for r in rows],
            [r.get("capacity_hi") for r in rows],
            note="bar: [level met, level missed); an arrow: no level missed",
        )
    else:
        first = charts.per_point(
            "capacity",
            f"Throughput per point (no capacity search){per_gpu}",
            f"total tokens/s{per_gpu}",
            labels,
            [r.get("throughput") for r in rows],
            [r.get("throughput_lo") for r in rows],
            [r.get("throughput_hi") for r in rows],
            note="bar: 95 % bootstrap interval",
        )
    second = charts.pareto(
        "pareto",
        f"Throughput{per_gpu} against P95 TTFT",
        "P95 TTFT (ms)",
        f"total tokens/s{per_gpu}",
        labels,
        *(
            [r.get(k) for r in rows]
            for k in ("ttft_p95_ms", "ttft_p95_ms_lo", "ttft_p95_ms_hi", "throughput", "throughput_lo", "throughput_hi")
        ),
        note="at each point's capacity level (or its whole run); bars: 95 % intervals",
    )
    return [first, second]


def _unit(meta: dict) -> str:
    """The capacity's unit: users, or requests/s for searches in requests/s (sweeps/ranking.py)."""
    return meta.get("capacity_unit") or "users"


def view(rows: list[dict], ranked: dict, meta: dict) -> dict:
    per_gpu = " per GPU" if meta.get("gpus") else ""
    headers = [
        "point",
        "status",
        f"capacity ({_unit(meta)})",
        "interval",
        f"throughput{per_gpu} (tok/s)",
        "interval",
        "P95 TTFT (ms)",
        "interval",
        "goodput (req/s)",
        "error %",
    ]
    # the server's own figures, where the points were scraped (--server-metrics auto)
    scraped = any(r.get("kv_cache_peak") is not None or r.get("diagnosis") for r in rows)
    if scraped:
        headers += ["KV cache peak", "diagnosis"]
    table = []
    for r in rows:
        kv = r.get("kv_cache_peak")
        server = [f"{kv:.0%}" if kv is not None else "-", r.get("diagnosis") or "-"] if scraped else []
        table.append(
            [
                r["label"],
                r["status"],
                _fmt(r.get("capacity")),
                _iv(r, "capacity"),
                _fmt(r.get("throughput")),
                _iv(r, "throughput"),
                _fmt(r.get("ttft_p95_ms")),
                _iv(r, "ttft_p95_ms"),
                _fmt(r.get("goodput_per_s")),
                _fmt(r.get("error_rate")),
                *server,
            ]
        )
    failed = [r for r in rows if r["status"] != "done"]
    others = [o["sentence"] for o in (meta.get("other_rankings") or {}).values()]
    return {
        "title": os.path.basename(os.path.abspath(meta["folder"])),
        "ranked": ranked,
        "headers": headers,
        "table": table,
        "failed": failed,
        "others": others,
        "command": meta.get("command", ""),
        "load": " ".join(meta.get("load") or []),
    }


def write_report(folder: str, rows: list[dict], ranked: dict, meta: dict) -> list[str]:
    v = view(rows, ranked, meta)
    env = environment(TEMPLATES)
    svgs = [Markup(s) for s in build_charts(rows, meta)]  # drawn by reports/svg.py's helpers, which escape every text
    html_path, md_path = os.path.join(folder, REPORT_HTML), os.path.join(folder, REPORT_MD)
    write_atomic(html_path, env.get_template("sweep.html.j2").render(v=v, charts=svgs, css=Markup(CSS)))
    write_atomic(md_path, env.get_template("sweep.md.j2").render(v=v))
    return [html_path, md_path]
