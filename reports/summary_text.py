"""What the report reads of a run's summary.json and records as text: a plugin's section as
fields, the client's warning, the connection setup line and an objective's thresholds.
"""

from __future__ import annotations

import numpy as np

from metrics.schema import Summary
from runfolder.reading import RunData


def flatten(obj, prefix: str = "") -> dict:
    """A plugin's summary section (nested dicts and lists) as {"a.b.c": value} for a table."""
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(obj, list) and not all(isinstance(x, (dict, list)) for x in obj):
        out[prefix[:-1]] = ", ".join(str(x) for x in obj)
    elif not isinstance(obj, list):
        out[prefix[:-1]] = obj
    return out


def client_warning(summary: Summary) -> str:
    """One sentence when the load generator itself may have distorted the timings (client_bound)."""
    return summary.client_bound.warning() if summary.client_bound is not None else ""


CONNECT_MATERIAL_MS = 1.0  # connection setup p95 from this on is shown in the report's header


def connection_setup(run: RunData) -> str:
    """One line on the connections the run opened, when their setup time is material (p95 >= 1 ms):
    it is not in TTFT or E2E (they start when the request is written), but a client that opens a
    connection per request, or a gateway slow to accept, makes users wait that long too."""
    c = run.df["connect_s"].to_numpy(dtype=float) if "connect_s" in run.df else np.array([])
    c = c[np.isfinite(c)] * 1000
    if not len(c):
        return ""
    p50, p95, top = np.percentile(c, 50), np.percentile(c, 95), c.max()
    if p95 < CONNECT_MATERIAL_MS:
        return ""
    return (
        f"{len(c):,} new connections ({len(c) / max(1, len(run.df)):.0%} of requests): setup p50 {p50:,.1f} ms, "
        f"p95 {p95:,.1f} ms, max {top:,.1f} ms; not part of TTFT or E2E (record column connect_s)"
    )


def slo_threshold_ms(summary: Summary, metric: str) -> list[tuple[str, float]]:
    """(statistic, threshold ms) of every objective on `metric` (e.g. 'ttft'). From the overall
    block's objectives: a capacity search has no run-wide `slo` verdict, but its thresholds."""
    slo = summary.overall.slo
    if slo is None:
        return []
    return [(v.metric.split(".", 1)[1], v.threshold_ms) for v in slo.objectives if v.metric.startswith(metric + ".")]
