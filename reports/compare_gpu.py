"""`compare`'s energy and cost per token: summary.json's `gpu` figures of both runs, side by side.

Energy per token and cost per million tokens come from GPU telemetry, --gpus and --gpu-hour-price
(metrics/gpu.py), not from the per-request records: they are point figures of each window (the
run's, each load level's), compared as they are, with no bootstrap interval. Levels are matched
by their place in the run and their user count. When only one run has GPU figures, the comparison
says so instead of leaving them out silently; a cost compared under two different GPU-hour prices
says that too.
"""

from __future__ import annotations

from metrics.schema import Summary

# (summary.json gpu figure, label, digits)
FIGURES = [
    ("joules_per_output_token", "J/output token", 3),
    ("joules_per_token", "J/token", 3),
    ("cost_per_million_output_tokens", "cost/M output tokens", 2),
    ("cost_per_million_tokens", "cost/M tokens", 2),
]


def gpu_comparison(base: Summary, new: Summary) -> dict | None:
    """{"scopes": [{"scope", "label", "rows": [{figure, label, base, new, delta, delta_pct}]}], "note"};
    None when neither run has GPU figures."""
    if base.gpu is None and new.gpu is None:
        return None
    if base.gpu is None or new.gpu is None:
        has, lacks = ("new", "base") if base.gpu is None else ("base", "new")
        return {
            "scopes": [],
            "note": f"only the {has} run has GPU figures (summary.json gpu); the {lacks} run was run "
            "without --gpu-telemetry or --gpus: energy and cost per token are not compared",
        }
    pairs = [("overall", "overall", base.gpu.overall, new.gpu.overall)]
    for i, (a, b) in enumerate(zip(base.gpu.by_step, new.gpu.by_step)):
        if a.users == b.users:
            pairs.append((f"step:{i}", f"step {i} ({a.users} users)", a, b))
    scopes = []
    for scope, label, a, b in pairs:
        rows = []
        for key, name, digits in FIGURES:
            va, vb = getattr(a, key), getattr(b, key)
            if va is None and vb is None:
                continue
            delta = vb - va if va is not None and vb is not None else None
            pct = delta / abs(va) * 100 if delta is not None and va else None
            rows.append(
                {
                    "figure": key,
                    "label": name,
                    "digits": digits,
                    "base": va,
                    "new": vb,
                    "delta": delta,
                    "delta_pct": pct,
                }
            )
        if rows:
            scopes.append({"scope": scope, "label": label, "rows": rows})
    note = ""
    pa, pb = base.gpu.gpu_hour_price, new.gpu.gpu_hour_price
    if pa is not None and pb is not None and pa != pb:
        note = f"the runs priced a GPU-hour differently (base {pa:g}, new {pb:g}): their costs differ by that too"
    elif not scopes:
        note = "both runs have a GPU section but no energy or cost figure (telemetry without power, or no --gpu-hour-price)"
    return {"scopes": scopes, "note": note}


def _num(x, digits: int, sign: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+,.{digits}f}" if sign else f"{x:,.{digits}f}"


HEADERS = ["figure", "base", "new", "delta", "delta %"]


def gpu_rows(scope: dict) -> list[list[str]]:
    """One table row per figure: its values, the change and the change in % (every output's)."""
    return [
        [
            r["label"],
            _num(r["base"], r["digits"]),
            _num(r["new"], r["digits"]),
            _num(r["delta"], r["digits"], True),
            "-" if r["delta_pct"] is None else f"{r['delta_pct']:+.1f}%",
        ]
        for r in scope["rows"]
    ]


def gpu_markdown(gpu: dict | None) -> list[str]:
    if gpu is None:
        return []
    lines = ["### Energy and cost per token (summary.json gpu; point figures, no interval)", ""]
    if gpu["note"]:
        lines += [f"_{gpu['note']}_", ""]
    for s in gpu["scopes"]:
        lines += [
            f"{s['label']}:",
            "",
            "| " + " | ".join(HEADERS) + " |",
            "| --- | " + " | ".join("---:" for _ in HEADERS[1:]) + " |",
        ]
        lines += ["| " + " | ".join(r) + " |" for r in gpu_rows(s)] + [""]
    return lines


def gpu_console(gpu: dict | None) -> list[str]:
    """The console's lines: the run's figures (levels in compare.md), or why there are none."""
    if gpu is None:
        return []
    lines = ["", "energy and cost per token (summary.json gpu; point figures, no interval):"]
    overall = next((s for s in gpu["scopes"] if s["scope"] == "overall"), None)
    if overall is not None:
        width = max(len(r["label"]) for r in overall["rows"])
        lines += [
            f"  {row[0]:<{width}}  base {row[1]}, new {row[2]}, delta {row[3]} ({row[4]})" for row in gpu_rows(overall)
        ]
    if gpu["note"]:
        lines.append(f"  {gpu['note']}")
    return lines
