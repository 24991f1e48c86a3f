"""The live view's gauges read from the rest of the run: requests in flight, the client's health
(plugin/health.py's board), the server's own gauges (plugin/server_metrics.py's scraper) and the
GPUs' newest reading (plugin/gpu.py).
"""

from __future__ import annotations

import json
import math

from metrics.schema.client_health import ClientBound
from plugin.gpu import GpuTelemetry
from plugin.health import Health
from plugin.health_board import crowded, stall_help
from plugin.server_metrics import ServerMetrics

# Server gauges shown from --server-metrics, by engine (first name found wins).
SERVER_GAUGES = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
}


def _number(value) -> float | None:
    try:
        value = float(value() if callable(value) else value)
    except Exception:
        return None
    return value if math.isfinite(value) else None


def in_flight(env, run, users: int, snap: dict) -> dict:
    """Requests on the wire: counted by every load process for each run (plugin/state.py; workers
    report theirs every 3 s)."""
    value = _number(env.llm.in_flight())
    return {"value": value, "source": "counted" if value is not None else "unknown"}


HEALTH_WORKER_KEYS = (
    "worker",
    "index",
    "bound",
    "contended",
    "reasons",
    "cpu_last",
    "cpu_p95",
    "loop_lag_p99_ms",
    "token_lag_p99_ms",
    "samples",
)


def client_health(env) -> dict:
    """The client-health monitor's live state (`Health.snapshot()`, plugin/health.py),
    condensed for the view: {state, checks, bound, advice, workers_needed, limits, workers: [...]},
    each worker without its recent samples. `checks` holds every value the card shows with its
    limit (the worst over the workers: CPU p95, loop lag p99, token lag p99 when measured) and
    whether it is over. `state` is the snapshot's own when it has one, else "client bound" (a
    worker went past the accuracy limits, sustained while busy), "over limit" (a value is above its
    limit, not sustained), "contended" (late while idle: other processes took the CPU), "ok"
    (every value within its limit), or "unknown" (no monitor, or no sample yet). A contended worker
    is named so even when its lag is over the limit: the lag is the crowded machine's, and the
    card's "over limit" beside a stall line saying "add workers" had told a crowded machine to
    start more processes that would wait too. `stall_note`: the card's line on the first tokens a
    loop stall may have stamped late, with what helps."""
    health = env.llm.plugin(Health)
    if health is None:
        return {"state": "unknown"}
    try:
        data = health.snapshot()
        data = json.loads(json.dumps(data, default=str))  # JSON-safe, and a copy
    except Exception as e:
        return {"state": "unknown", "error": f"{type(e).__name__}: {e}"}
    if not isinstance(data, dict):
        return {"state": "unknown"}
    workers = [w for w in data["workers"] if isinstance(w, dict)] if isinstance(data.get("workers"), list) else None
    checks = health_checks(workers or [], data.get("limits") or {})
    if data.get("state"):
        state = str(data["state"])
    elif data.get("bound"):
        state = "client bound"
    elif workers and any(w.get("contended") for w in workers):
        state = "contended"
    elif any(c["over"] for c in checks):
        state = "over limit"
    elif workers and any(w.get("samples") for w in workers):
        state = "ok"
    else:
        state = "unknown"
    out = {
        "state": state,
        "checks": checks,
        **{k: v for k, v in data.items() if k not in ("state", "workers", "recent")},
    }
    if workers is not None:
        out["workers"] = [{k: w.get(k) for k in HEALTH_WORKER_KEYS if k in w} for w in workers]
    note = stall_note(
        data.get("stamp_suspect"), crowded(workers or [], (data.get("limits") or {}).get("cpu_pct", 100.0))
    )
    if note:
        out["stall_note"] = note
    return out


def stall_note(suspect, crowded: bool) -> str:
    """The Client card's line on the first tokens a stall of the client's loop may have stamped
    late, with what helps in the console's words (plugin.health_board.stall_help: on a crowded
    machine a quieter machine or more machines, not more worker processes, which would wait for a
    CPU too). "" with none."""
    n = int(suspect) if isinstance(suspect, (int, float)) else 0
    if n <= 0:
        return ""
    return (
        f"{n:,} request{'s' if n != 1 else ''} waited for their first token through a client stall: TTFT may read "
        f"high. {stall_help(crowded)}"
    )


# (label, the workers' key, the limits' key, unit) of the values the Client card shows
HEALTH_CHECKS = (
    ("CPU p95", "cpu_p95", "cpu_pct", "%"),
    ("loop lag p99", "loop_lag_p99_ms", "loop_lag_ms", "ms"),
    ("token lag p99", "token_lag_p99_ms", "token_lag_ms", "ms"),
)


def health_checks(workers: list[dict], limits: dict) -> list[dict]:
    """The worst value over the workers of each health figure, with its limit."""
    out = []
    for label, key, limit_key, unit in HEALTH_CHECKS:
        values = [w[key] for w in workers if isinstance(w.get(key), (int, float))]
        limit = limits.get(limit_key)
        if not values or not isinstance(limit, (int, float)):
            continue
        value = max(values)
        out.append({"name": label, "value": value, "limit": limit, "unit": unit, "over": value > limit})
    return out


def server_gauges(env, run) -> dict | None:
    """The server's latest running/waiting requests and KV-cache usage from --server-metrics;
    None when it is off. Metric names are matched as in SERVER_GAUGES (vLLM, SGLang, TGI)."""
    if env.llm.plan is None or not env.llm.plan.server_metrics:
        return None
    latest = _latest_server_values(env, run)
    out = {"available": latest is not None}
    for key, names in SERVER_GAUGES.items():
        value = None
        for name in names:
            if latest and name in latest:
                value = _number(latest[name])
                break
        out[key] = value
    if out["kv_cache_usage"] is not None and out["kv_cache_usage"] > 1.0:
        out["kv_cache_usage"] /= 100.0  # a percentage where a fraction was expected
    return out


def _latest_server_values(env, run) -> dict | None:
    """The run's --server-metrics scraper's newest values (plugin/server_metrics.py)."""
    scraper = env.llm.plugin(ServerMetrics)
    return scraper.latest() if scraper is not None else None


def live_client(env) -> ClientBound | None:
    """The client's self-health so far, as summary.json's client_bound states it (bound, inaccurate,
    advice): what the live diagnosis says of the client."""
    health = env.llm.plugin(Health)
    if health is None:
        return None
    try:
        data = health.snapshot()
        workers = [w for w in data.get("workers") or [] if isinstance(w, dict)]
        return ClientBound(
            bound=bool(data.get("bound")),
            advice=str(data.get("advice") or ""),
            inaccurate=any(w.get("inaccurate") or w.get("bound") for w in workers),
            stamp_suspect=int(data.get("stamp_suspect") or 0),
        )
    except Exception:
        return None


def server_frame(env):
    """The run's --server-metrics scraper's diagnosis metrics so far (a frame; None when off)."""
    scraper = env.llm.plugin(ServerMetrics)
    return scraper.frame() if scraper is not None else None


def gpu_gauges(env) -> dict | None:
    """The GPUs' newest readings from --gpu-telemetry (plugin/gpu.py: utilisation and memory per GPU
    averaged, power summed); None when it is off."""
    if env.llm.plan is None or not env.llm.plan.gpu_telemetry:
        return None
    telemetry = env.llm.plugin(GpuTelemetry)
    latest = telemetry.latest() if telemetry is not None else None
    return {"available": latest is not None, **(latest or {})}
