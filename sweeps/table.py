"""The sweep's table: one row per point (its settings, outcome and figures), written as CSV and
JSON beside the ranking. `users` or `rate`: the load of the level the figures are of (a search in
requests/s: its rate); `capacity_unit`: what `capacity` counts, users or requests/s."""

from __future__ import annotations

import csv
import io
import json
import math
import os

from core.files import write_atomic

TABLE_CSV, TABLE_JSON = "table.csv", "table.json"
COLUMNS = [
    "index",
    "point",
    "status",
    "exit_code",
    "users",
    "rate",
    "capacity_unit",
    "capacity",
    "capacity_lo",
    "capacity_hi",
    "throughput",
    "throughput_lo",
    "throughput_hi",
    "ttft_p95_ms",
    "ttft_p95_ms_lo",
    "ttft_p95_ms_hi",
    "requests_per_s",
    "goodput_per_s",
    "error_rate",
    "kv_cache_peak",
    "waiting",
    "preemptions",
    "diagnosis",
    "requests",
    "slo",
    "slo_state",
    "seconds",
    "folder",
]


def _clean(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def write_table(folder: str, rows: list[dict], settings: list[str], ranked: dict, meta: dict) -> tuple[str, str]:
    """table.csv (the settings' columns first, then COLUMNS) and table.json (rows, ranking, meta)."""
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow([*settings, *COLUMNS])
    for r in rows:
        w.writerow([*(r["settings"].get(s, "") for s in settings), *(_cell(r.get(c)) for c in COLUMNS)])
    csv_path, json_path = os.path.join(folder, TABLE_CSV), os.path.join(folder, TABLE_JSON)
    write_atomic(csv_path, out.getvalue())
    write_atomic(
        json_path, json.dumps(_clean({**meta, "ranking": ranked, "points": rows}), indent=2, default=str) + "\n"
    )
    return csv_path, json_path


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if not math.isfinite(v) else f"{v:.6g}"
    return str(v)
