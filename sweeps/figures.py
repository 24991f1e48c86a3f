"""A point's figures read back from its results folder (through runfolder/ and stats/): the
capacity at the SLO with its interval, and the throughput and P95 TTFT with their intervals.

Which requests: a capacity search's figures are those of its capacity level (the highest level
met below the lowest missed: the load the deployment carries within the SLO); a run without load
levels (a fixed load, an open-loop rate) is its whole window.

The intervals: the capacity's is the capacity answer's own, [the level met, the level missed]
(summary.json `capacity.users` and `next_failing_users`; a search in requests/s: `capacity.rate`
and `next_failing_rate`, sweeps/capacity_unit.py): the true capacity lies between them, at the
search's resolution; with no level missed it is unbounded above. Throughput and P95 TTFT get
the block bootstrap's percentile interval (stats/block_bootstrap.py, stats/comparison.py) over the
same requests the figure is of.
"""

from __future__ import annotations

import math

import numpy as np

from metrics.diagnosis import level_evidence
from stats.block_bootstrap import Scope, measure, prepare, scopes
from stats.comparison import interval
from sweeps.capacity_unit import RATE, of_capacity

RESAMPLES = 1000
NO_LEVEL_BEFORE = 1 << 62  # a whole window's users: any count of running and waiting requests is drained
CONFIDENCE = 0.95
# rates of a search in requests/s are whole thousandths (docs/load-models.md): a level is at the
# answer's rate within half of one
RATE_TOLERANCE = 0.0005


def _finite(x) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def capacity_answer(cap) -> tuple[float | None, float | None, float | None]:
    """(capacity, lower end, upper end) of summary.json's `capacity`, in its own unit (users, or
    requests/s for a search in requests/s): the level met and the level missed; (0, 0, missed) when
    the lowest level tried missed; (None, None, missed) when levels below the miss were left
    undecided (the capacity is not known); upper end None: no level missed."""
    if cap is None:
        return None, None, None
    met, missed, undecided = _levels(cap)
    if met is not None:
        return met, met, missed
    if missed is not None and not any(u < missed for u in undecided):
        return 0, 0, missed  # missed at the lowest level tried: its capacity is below it, from 0
    return None, None, missed


def capacity_figures(cap) -> dict:
    """A point's capacity columns: its unit (sweeps/capacity_unit.py; None without a capacity
    search) and capacity_answer's three figures."""
    value, lo, hi = capacity_answer(cap)
    return {"capacity_unit": of_capacity(cap), "capacity": value, "capacity_lo": lo, "capacity_hi": hi}


def _levels(cap) -> tuple[float | None, float | None, list[float]]:
    """The answer's highest level met, lowest missed and those left undecided, in its own unit."""
    if of_capacity(cap) == RATE:
        return cap.rate, cap.next_failing_rate, cap.undecided_rates
    return cap.users, cap.next_failing_users, cap.undecided


def capacity_level(summary):
    """The by_step level of the capacity answer (None without one): the level at its users, or at
    its rate for a search in requests/s (whose levels' users are all the in-flight cap)."""
    cap = summary.capacity
    if cap is None or (met := _levels(cap)[0]) is None:
        return None
    if of_capacity(cap) == RATE:
        at = lambda st: st.rate is not None and abs(st.rate - met) <= RATE_TOLERANCE  # noqa: E731
    else:
        at = lambda st: st.rate is None and st.users == met  # noqa: E731
    found = [st for st in summary.by_step or [] if at(st) and not st.partial]
    return max(found, key=lambda st: st.steps, default=None)


def point_figures(
    run_folder: str, gpus: int | None = None, seed: int = 0, resamples: int = RESAMPLES, confidence: float = CONFIDENCE
) -> dict:
    """The figures of one point's results folder (see the module's docstring)."""
    p = prepare(run_folder)
    summary = p.run.summary
    per = gpus or 1
    cap = summary.capacity
    level = capacity_level(summary)
    sc = level_scope(p, level) if level is not None else scopes(p)["overall"]
    values, _blocks = measure(p, sc, seed, "point", resamples)
    alpha = (1 - confidence) / 2 * 100
    block = level if level is not None else summary.overall
    tput, tput_reps = values["total_tokens_per_s"]
    ttft, ttft_reps = values["ttft.p95"]
    tput_ci = interval(tput_reps, alpha)
    ttft_ci = interval(ttft_reps, alpha)
    judged = _objective(level, "ttft.p95") if level is not None else None
    if judged is not None and judged.value_ms is not None:
        # the level's own verdict: order-statistic bounds of its P95 (distribution-free, what it
        # was judged on), where a bootstrap of a level's few requests can collapse to one value
        ttft, ttft_ci = judged.value_ms, [judged.lower_ms, judged.upper_ms]
    out = {
        "run_id": p.run.run_id,
        "kind": "capacity" if cap is not None else "fixed",
        "scope": sc.key,
        # the capacity level's load: its users, or its rate (its users the in-flight cap)
        "users": level.users if level is not None and level.rate is None else None,
        "rate": level.rate if level is not None else None,
        "requests": int((sc.select & p.ok).sum()),
        "slo": cap.slo
        if cap is not None
        else (", ".join(o.objective for o in summary.slo.objectives) if summary.slo else None),
        "slo_state": _slo_state(summary),
        **capacity_figures(cap),
        "capacity_sentence": cap.sentence if cap else None,
        "throughput": _div(tput, per),
        "throughput_lo": _div(tput_ci[0], per),
        "throughput_hi": _div(tput_ci[1], per),
        "per_gpu": gpus is not None,
        "ttft_p95_ms": _finite(ttft),
        "ttft_p95_ms_lo": _finite(ttft_ci[0]),
        "ttft_p95_ms_hi": _finite(ttft_ci[1]),
        "requests_per_s": _finite(values["requests_per_s"][0]),
        "goodput_per_s": _finite(block.goodput.requests_per_s),
        "error_rate": _finite(values["error_rate"][0]),
        "confidence": confidence,
        **server_figures(p, sc, level.users if level is not None else None),
    }
    return out


def server_figures(p, sc: Scope, users: int | None) -> dict:
    """The server's own figures over the point's window, where the run scraped it (--server-metrics;
    in a sweep `--server-metrics auto`, sweeps/server_metrics.py): KV-cache use at its peak (0..1),
    requests waiting in its queue (mean), its preemption counter's increase, and the knee's diagnosis
    of a run with load levels (summary.json). None where not scraped. `users`: the capacity level's,
    whose server window starts once the level before it has drained (metrics/diagnosis.py); None for
    a whole window, which no level came before."""
    server = p.run.server
    out = {"kv_cache_peak": None, "waiting": None, "preemptions": None}
    if server is not None and not server.empty:
        (ev,), _names = level_evidence(server, [(0, NO_LEVEL_BEFORE if users is None else users, sc.start, sc.end)])
        out.update(kv_cache_peak=ev.kv_cache_peak, waiting=ev.waiting, preemptions=ev.preemptions)
    d = p.run.summary.diagnosis
    out["diagnosis"] = d.kind if d is not None else None
    return out


def level_scope(p, level) -> Scope:
    """The requests of a load level, every step it was held for (a capacity search extends an
    undecided level), sent inside its window."""
    inside = (p.wall >= level.window.start) & (p.wall <= level.window.end)
    steps = (p.step >= level.step) & (p.step < level.step + max(1, level.steps))
    load = f"{level.users} users" if level.rate is None else f"{level.rate:g} requests/s"
    return Scope(f"step:{level.step}", load, level.window.start, level.window.end, np.asarray(inside & steps))


def _objective(level, metric: str):
    if level.verdict is None:
        return None
    return next((o for o in level.verdict.objectives if o.metric == metric), None)


def _div(x, n: int) -> float | None:
    x = _finite(x)
    return None if x is None else x / n


def _slo_state(summary) -> str | None:
    if summary.capacity is not None:
        met, missed, _undecided = _levels(summary.capacity)
        if met is not None:
            return "met"
        return "missed" if missed is not None else "undecided"
    return summary.slo.state if summary.slo is not None else None


# The metrics an A/B compares: (name, the bootstrap's metric or None, higher is better, unit)
AB_METRICS = [
    ("ttft.p95", "ttft.p95", False, "ms"),
    ("tpot.p95", "tpot.p95", False, "ms"),
    ("e2e.p95", "e2e.p95", False, "ms"),
    ("total_tokens_per_s", "total_tokens_per_s", True, "tok/s"),
    ("goodput_per_s", None, True, "req/s"),  # summary.json's goodput; replicates from the completion rate
]


def run_values(run_folder: str, seed: int, roles: tuple[str, ...], resamples: int = RESAMPLES) -> dict:
    """One A/B run's figures over its whole window: {metric: (value, {role: bootstrap replicates}
    or None)}, and 'capacity': (level met, level missed) when the load was a capacity search, with
    'capacity_unit' (sweeps/capacity_unit.py).

    One set of replicates per role: runs resampled under the same `seed` and role draw the same
    block weights. The two runs of a round sent the same requests in the same order from their
    start, so block k of A and block k of B hold the same part of the load: under one shared role
    they are a paired block bootstrap, in which what they share (which requests were long, when the
    queue built up) cancels in their difference; under a role of their own, independent ones.
    Goodput's replicates are the completion rate's, scaled by the run's good share of it: the noise
    of the rate it is a part of."""
    p = prepare(run_folder)
    sc = scopes(p)["overall"]
    by_role = {role: measure(p, sc, seed, role, resamples)[0] for role in roles}
    summary = p.run.summary
    out = {}
    for name, boot, _higher, _unit in AB_METRICS:
        if boot is not None:
            value = _finite(by_role[roles[0]][boot][0])
            out[name] = (value, {role: v[boot][1] for role, v in by_role.items()})
        else:
            good = _finite(summary.overall.goodput.requests_per_s)
            rate = by_role[roles[0]]["requests_per_s"][0]
            share = good / rate if good is not None and rate else None
            out[name] = (
                good,
                {role: v["requests_per_s"][1] * share for role, v in by_role.items()} if share is not None else None,
            )
    cap = summary.capacity
    if cap is not None:
        value, lo, hi = capacity_answer(cap)
        out["capacity"] = None if value is None else (float(lo), None if hi is None else float(hi))
        out["capacity_unit"] = of_capacity(cap)
    return out
