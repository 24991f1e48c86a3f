"""`python -m reports plan RUN --rpm N [--gpus G]`: the capacity in the deployment's terms, and the
replicas a target traffic needs at the SLO.

From a capacity search's (or a step ramp's) `summary.json`: the level that met the SLO and the
lowest that missed it bracket one replica's capacity. Its requests per minute lie between the met
level's (what was seen to hold) and the missed level's (what was seen to fail), both with this
workload's mix. A target of N requests/min then needs ceil(N / met rate) replicas (the plan: the
rate seen to hold) and at least ceil(N / missed rate) (fewer cannot hold it, as the missed level
already failed at that rate); the gap between the two is the uncertainty of the answer, which a
finer search narrows. With --gpus G (GPUs per replica), every figure is also per GPU.
"""

from __future__ import annotations

import math

from core.errors import InputError
from metrics.schema import Summary


def plan(summary: Summary, rpm: float, gpus: int | None = None) -> dict:
    cap = summary.capacity
    if cap is None or cap.users is None:
        raise InputError("plan: this run found no capacity (summary.json capacity.users is empty): "
                         "run a capacity search (--find-capacity --slo ...) that meets its SLO at some level")  # fmt: skip
    if not rpm > 0:
        raise InputError("--rpm: give the target traffic in requests per minute, above 0, e.g. --rpm 600")
    if gpus is not None and gpus < 1:
        raise InputError("--gpus: give the GPUs of one replica, a whole number >= 1")
    levels = {st.users: st for st in summary.by_step or []}
    met, missed = levels.get(cap.users), levels.get(cap.next_failing_users)
    rate = lambda st: (st.throughput.requests_per_s or 0.0) * 60 if st is not None else None  # noqa: E731
    held, failed = rate(met), rate(missed)
    if not held:
        raise InputError(f"plan: the level that met the SLO ({cap.users} users) completed no request in its window")
    per_gpu = (lambda x: None if x is None else x / gpus) if gpus else (lambda x: None)  # noqa: E731
    th = met.throughput
    out = {
        "slo": cap.slo, "users": cap.users, "next_failing_users": cap.next_failing_users,
        "requests_per_min": held, "requests_per_min_missed": failed,
        "output_tokens_per_s": th.output_tokens_per_s, "total_tokens_per_s": th.total_tokens_per_s,
        "gpus_per_replica": gpus, "requests_per_min_per_gpu": per_gpu(held),
        "output_tokens_per_s_per_gpu": per_gpu(th.output_tokens_per_s),
        "target_requests_per_min": rpm, "replicas": math.ceil(rpm / held),
        "replicas_at_least": math.ceil(rpm / failed) if failed and failed > held else None,
    }
    out["gpus"] = out["replicas"] * gpus if gpus else None
    return out


def describe(p: dict) -> str:
    gpu = f" ({p['requests_per_min_per_gpu']:,.1f} requests/min, {p['output_tokens_per_s_per_gpu']:,.0f} output tokens/s per GPU)" \
        if p["gpus_per_replica"] else ""
    lines = [
        f"one replica at {p['slo']}: {p['users']} users, {p['requests_per_min']:,.1f} requests/min, "
        f"{p['output_tokens_per_s'] or 0:,.0f} output and {p['total_tokens_per_s'] or 0:,.0f} total tokens/s{gpu}",
    ]
    if p["requests_per_min_missed"] is not None and p["next_failing_users"] is not None:
        lines.append(f"  (it missed at {p['next_failing_users']} users, {p['requests_per_min_missed']:,.1f} requests/min)")
    at_least = p["replicas_at_least"]
    spread = f"; at least {at_least} (the missed level's rate)" if at_least is not None and at_least != p["replicas"] else ""
    gpus = f" = {p['gpus']} GPUs" if p["gpus"] else ""
    lines.append(f"{p['target_requests_per_min']:,.0f} requests/min with this mix: {p['replicas']} replicas{gpus} "
                 f"(the met level's rate){spread}")  # fmt: skip
    return "\n".join(lines)
