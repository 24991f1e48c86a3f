"""`python -m reports plan RUN --rpm N [--gpus G]`: the capacity in the deployment's terms, and the
replicas a target traffic needs at the SLO.

From a capacity search's (or a step ramp's) `summary.json`: the level that met the SLO and the
lowest that missed it bracket one replica's capacity. Its requests per minute lie between the met
level's (what was seen to hold) and the missed level's (what was seen to fail), both with this
workload's mix. A target of N requests/min then needs ceil(N / met rate) replicas (the plan: the
rate seen to hold) and at least ceil(N / missed rate) (fewer cannot hold it, as the missed level
already failed at that rate); the gap between the two is the uncertainty of the answer, which a
finer search narrows. With --gpus G (GPUs per replica; default the run's --gpus, or the GPUs its
--gpu-telemetry saw) every figure is also per GPU, and with a GPU-hour price (--gpu-hour-price,
default the run's) the cost per million tokens and of the replicas per hour. The met level's
figures are the run's summary.json `gpu` figures for that level (metrics/gpu.py: the same
arithmetic, its energy per token kept), recomputed for the GPUs and price given here.
"""

from __future__ import annotations

from core.errors import InputError
from metrics.gpu import figures
from metrics.schema import Summary
from metrics.schema.figures import Span
from metrics.schema.server_side import GpuFigures
from targets.planner import Assumptions, replicas_for


def plan(summary: Summary, rpm: float, gpus: int | None = None, price: float | None = None) -> dict:
    """The plan for `rpm` requests/min; `gpus` (GPUs per replica) and `price` (per GPU-hour) default
    to the run's (summary.json gpu: --gpus or the GPUs its telemetry saw, --gpu-hour-price)."""
    cap = summary.capacity
    # a search in requests/s: its answer is `rate`
    by_rate = cap is not None and getattr(cap, "unit", "users") == "rate"
    if cap is None or (cap.rate if by_rate else cap.users) is None:
        raise InputError(
            "plan: this run found no capacity (summary.json capacity.users and capacity.rate are empty): "
            "run a capacity search (--find-capacity --slo ...) that meets its SLO at some level"
        )
    if not rpm > 0:
        raise InputError("--rpm: give the target traffic in requests per minute, above 0, e.g. --rpm 600")
    if gpus is not None and gpus < 1:
        raise InputError("--gpus: give the GPUs of one replica, a whole number >= 1")
    if price is not None and not price > 0:
        raise InputError("--gpu-hour-price: give the price of one GPU-hour, above 0, e.g. 2.5")
    assumptions = (
        Assumptions()
    )  # the replica planner's (targets/planner.py): the policy, linear scaling, its efficiency
    section = summary.gpu
    gpus = gpus or (section.gpus if section is not None else None)
    price = price or (section.gpu_hour_price if section is not None else None)
    key = (lambda st: st.rate) if by_rate else (lambda st: st.users)
    levels = {key(st): st for st in summary.by_step or [] if not st.partial}
    if by_rate:  # an open loop's levels are the rates asked: the rate met is the answer, per minute
        met, missed = levels.get(cap.rate), levels.get(cap.next_failing_rate)
        held, failed = cap.rate * 60, cap.next_failing_rate * 60 if cap.next_failing_rate is not None else None
    else:
        met, missed = levels.get(cap.users), levels.get(cap.next_failing_users)
        rate = lambda st: (st.throughput.requests_per_s or 0.0) * 60 if st is not None else None  # noqa: E731
        held, failed = rate(met), rate(missed)
    if not held:
        raise InputError(f"plan: the level that met the SLO ({cap.users} users) completed no request in its window")
    # the met level in the deployment's terms (metrics/gpu.py), its telemetry kept (energy per token; the
    # telemetry's levels are users, one for every level of a search in requests/s)
    seen = section.at(cap.users) if section is not None and not by_rate else None
    start, end = met.window.start, met.window.end
    f = figures(
        seen or GpuFigures(window=Span(start=start, end=end)), met.users, met.throughput, end - start, gpus, price
    )
    out = {
        "slo": cap.slo,
        "users": cap.users,
        "next_failing_users": cap.next_failing_users,
        "rate": cap.rate,
        "next_failing_rate": cap.next_failing_rate,
        "requests_per_min": held,
        "requests_per_min_missed": failed,
        "sessions_per_min": f.sessions_per_min,
        "output_tokens_per_s": f.output_tokens_per_s,
        "total_tokens_per_s": f.total_tokens_per_s,
        "gpus_per_replica": gpus,
        "requests_per_min_per_gpu": f.requests_per_min_per_gpu,
        "output_tokens_per_s_per_gpu": f.output_tokens_per_s_per_gpu,
        "total_tokens_per_s_per_gpu": f.total_tokens_per_s_per_gpu,
        "joules_per_output_token": f.joules_per_output_token,
        "joules_per_token": f.joules_per_token,
        "gpu_hour_price": price,
        "cost_per_million_output_tokens": f.cost_per_million_output_tokens,
        "cost_per_million_tokens": f.cost_per_million_tokens,
        "target_requests_per_min": rpm,
        "replicas": replicas_for(rpm, held, assumptions),
        "replicas_at_least": replicas_for(rpm, failed, assumptions) if failed and failed > held else None,
        "assumes": assumptions.text(),
    }
    out["gpus"] = out["replicas"] * gpus if gpus else None
    out["cost_per_hour"] = out["gpus"] * price if out["gpus"] and price else None
    return out


def _n(x, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def describe(p: dict) -> str:
    sessions = f", {_n(p['sessions_per_min'], 1)} sessions/min" if p["sessions_per_min"] is not None else ""
    gpu = (
        (
            f" ({_n(p['requests_per_min_per_gpu'], 1)} requests/min, {_n(p['output_tokens_per_s_per_gpu'])} output and "
            f"{_n(p['total_tokens_per_s_per_gpu'])} total tokens/s per GPU)"
        )
        if p["gpus_per_replica"]
        else ""
    )
    level = f"{p['rate']:g} requests/s" if p.get("rate") is not None else f"{p['users']} users"
    lines = [
        f"one replica at {p['slo']}: {level}, {p['requests_per_min']:,.1f} requests/min{sessions}, "
        f"{p['output_tokens_per_s'] or 0:,.0f} output and {p['total_tokens_per_s'] or 0:,.0f} total tokens/s{gpu}",
    ]
    if p["requests_per_min_missed"] is not None and p.get("next_failing_rate") is not None:
        lines.append(
            f"  (it missed at {p['next_failing_rate']:g} requests/s, {p['requests_per_min_missed']:,.1f} requests/min)"
        )
    elif p["requests_per_min_missed"] is not None and p["next_failing_users"] is not None:
        lines.append(
            f"  (it missed at {p['next_failing_users']} users, {p['requests_per_min_missed']:,.1f} requests/min)"
        )
    if p["joules_per_output_token"] is not None:
        lines.append(
            f"  energy: {_n(p['joules_per_output_token'], 3)} J per output token, {_n(p['joules_per_token'], 3)} J per token"
        )
    if p["cost_per_million_output_tokens"] is not None:
        lines.append(
            f"  cost: {_n(p['cost_per_million_output_tokens'], 2)} per million output tokens, "
            f"{_n(p['cost_per_million_tokens'], 2)} per million tokens at {p['gpu_hour_price']:g} per GPU-hour"
        )
    at_least = p["replicas_at_least"]
    spread = (
        f"; at least {at_least} (the missed level's rate)" if at_least is not None and at_least != p["replicas"] else ""
    )
    gpus = f" = {p['gpus']} GPUs" if p["gpus"] else ""
    per_hour = f", {p['cost_per_hour']:,.2f} per hour" if p["cost_per_hour"] is not None else ""
    lines.append(
        f"{p['target_requests_per_min']:,.0f} requests/min with this mix: {p['replicas']} replicas{gpus}{per_hour} "
        f"(the met level's rate){spread}"
    )
    lines.append(f"  {p['assumes']}")
    return "\n".join(lines)
