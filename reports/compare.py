"""`python -m reports compare BASE NEW`: side-by-side metrics, deltas, and whether they are beyond
noise, by the block bootstrap of stats/comparison.py (its docstring states the method).
"""

from __future__ import annotations

import json
import math
import os

import numpy as np

from core.errors import InputError
from core.files import write_atomic
from reports.comparable import differences, label_of
from reports.compare_gpu import gpu_comparison, gpu_console, gpu_markdown
from reports.fail_on import Rule, judge, parse_rules
from reports.junit import Case, write_junit
from reports.summary_text import client_warning
from stats.block_bootstrap import METRIC_NAMES, UNITS, measure, prepare, scopes
from stats.comparison import difference, half_width, interval, length_for, percent_change

# ---------------------------------------------------------------------------------------------
# comparison


def compare(
    base_path: str,
    new_path: str,
    resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    rules: list[Rule] = (),
    allow_different: bool = False,
) -> dict:
    """The comparison of two runs; runs that measured different things (`differences`) are refused
    with one line naming them, unless `allow_different`, and then the differences head it."""
    base, new = prepare(base_path), prepare(new_path)
    differ = differences(base.run, new.run)
    if differ and not allow_different:
        raise InputError(
            f"the runs measured different things: {'; '.join(differ)}; compare runs of the same workload, "
            f"load, server (profile, version, configuration) and model, or pass --allow-different to compare "
            f"anyway"
        )
    sb, sn = scopes(base), scopes(new)
    common = [k for k in sb if k in sn]
    for rule in rules:  # before the bootstrap: a rule naming a missing class is a usage error
        if rule.scope not in common:
            known = ", ".join(k for k in common if k != "overall") or "none"
            raise InputError(
                f"--fail-on: rule '{rule.text}': '{rule.scope}' is not a request class or step of both runs "
                f"(classes and steps in both: {known})"
            )
    alpha = (1 - confidence) / 2 * 100
    # the time to first answer token is TTFT itself unless a reply reasoned first: its rows only then
    # (or when a rule names it)
    answers = any(
        p.values["ttfa"][0].size and not np.array_equal(p.values["ttfa"][0], p.values["ttft"][0]) for p in (base, new)
    ) or any(r.metric.startswith("ttfa.") for r in rules)
    names = METRIC_NAMES if answers else [m for m in METRIC_NAMES if not m.startswith("ttfa.")]
    result = {
        "base": {"path": base.run.path, "run_id": base.run.run_id, "label": label_of(base.run)},
        "new": {"path": new.run.path, "run_id": new.run.run_id, "label": label_of(new.run)},
        "method": {
            "bootstrap": "time blocks (see stats/comparison.py)",
            "resamples": resamples,
            "seed": seed,
            "confidence": confidence,
            "significant": "the confidence interval of new - base excludes 0",
        },
        "differences": differ,
        "scopes": [],
        "only_in_base": sorted(set(sb) - set(sn)),
        "only_in_new": sorted(set(sn) - set(sb)),
        "warnings": [
            f"{role} run: {w}"
            for role, w in (("base", client_warning(base.run.summary)), ("new", client_warning(new.run.summary)))
            if w
        ],
        "gpu": gpu_comparison(base.run.summary, new.run.summary),  # energy and cost per token (reports/compare_gpu.py)
    }
    for key in common:
        a, b = sb[key], sn[key]
        ma, ka = measure(base, a, seed, "base", resamples)
        mb, kb = measure(new, b, seed, "new", resamples)
        rows = []
        for metric in names:
            va, ra = ma[metric]
            vb, rb = mb[metric]
            row = {
                "metric": metric,
                "unit": UNITS[metric],
                "base": va,
                "new": vb,
                "delta": None,
                "delta_pct": None,
                "ci": [None, None],
                "significant": False,
                "base_ci": interval(ra, alpha),
                "new_ci": interval(rb, alpha),
            }
            if va is not None and vb is not None:
                row["delta"] = vb - va
                row["delta_pct"] = percent_change(va, vb)
                row["ci"], row["significant"] = difference(ra, rb, alpha)
            # the power: the smallest change these runs could have detected
            row["detectable"] = half_width(row["ci"])
            row["detectable_pct"] = row["detectable"] / abs(va) * 100 if row["detectable"] is not None and va else None
            rows.append(row)
        result["scopes"].append(
            {
                "scope": key,
                "label": b.label,
                "blocks": [ka, kb],
                "seconds": [a.end - a.start, b.end - b.start],
                "requests": [int(a.select.sum()), int(b.select.sum())],
                "metrics": rows,
            }
        )
    return result


# ---------------------------------------------------------------------------------------------
# output


def _v(x, unit: str) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    digits = 3 if unit == "%" else (2 if abs(x) < 100 else 0)
    return f"{x:,.{digits}f}"


def _d(x, unit: str) -> str:
    s = _v(x, unit)
    return s if s in ("-", "+inf", "-inf") or s.startswith("-") else "+" + s


def rows_for(scope: dict) -> list[list[str]]:
    out = []
    for r in scope["metrics"]:
        u = r["unit"]
        ci = r["ci"]
        ci_text = f"[{_d(ci[0], u)}, {_d(ci[1], u)}]" if ci[0] is not None else "-"
        pct = (
            "-"
            if r["delta_pct"] is None
            else (_d(r["delta_pct"], "") if math.isfinite(r["delta_pct"]) else _v(r["delta_pct"], ""))
        )
        pct = pct if pct == "-" or "inf" in pct else pct + "%"
        power = "-" if r.get("detectable_pct") is None else f"±{r['detectable_pct']:.1f}%"
        out.append(
            [
                f"{r['metric']} ({u})",
                _v(r["base"], u),
                _v(r["new"], u),
                _d(r["delta"], u),
                pct,
                ci_text,
                "yes" if r["significant"] else "",
                power,
            ]
        )
    return out


HEADERS = ["metric", "base", "new", "delta", "delta %", "CI of delta", "beyond noise", "smallest detectable"]


def power_note(verdict: dict, result: dict) -> str | None:
    """One line when a rule's threshold is below the smallest change the runs could detect: the
    rule could not fire on a change of its own size; with the run length that would let it."""
    scope = next(s for s in result["scopes"] if s["scope"] == verdict["scope"])
    row = next(r for r in scope["metrics"] if r["metric"] == verdict["metric"])
    detectable = row.get("detectable_pct") if verdict["relative"] else row.get("detectable")
    threshold = abs(verdict["threshold"])
    if detectable is None or threshold == 0 or threshold >= detectable:
        return None
    unit = "%" if verdict["relative"] else f" {row['unit']}"
    seconds = length_for(threshold, detectable, min(scope["seconds"]))
    return (
        f"rule '{verdict['rule']}': its threshold ({threshold:g}{unit}) is below the smallest change these runs "
        f"could detect (±{detectable:.3g}{unit}): it cannot fire on a change of its size; runs of about "
        f"{_length(seconds)} each would find one with 80 % power"
    )


def _length(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _label(side: dict) -> str:
    """' "prefix caching on"' for a run with a --label, '' otherwise."""
    return f' "{side["label"]}"' if side.get("label") else ""


def text_table(rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([line(HEADERS), "-" * (sum(widths) + 2 * (len(widths) - 1))] + [line(r) for r in rows])


def markdown(result: dict, verdicts: list[dict]) -> str:
    m = result["method"]
    lines = [
        f"## Compare: `{result['base']['run_id']}`{_label(result['base'])} (base) vs `{result['new']['run_id']}`"
        f"{_label(result['new'])} (new)",
        "",
    ]
    if result.get("differences"):
        lines += ["> **The runs measured different things** (compared with --allow-different):", ">"]
        lines += [f"> - {d}" for d in result["differences"]] + [""]
    if verdicts:
        failed = [v for v in verdicts if v["failed"]]
        lines.append(
            f"**{'REGRESSION: ' + ', '.join(_vname(v) for v in failed) if failed else 'No regression'}** "
            f"(rules: {', '.join('`' + v['rule'] + '`' for v in verdicts)})"
        )
        lines += ["", "| rule | change | beyond noise | verdict | why |", "| --- | ---: | --- | --- | --- |"]
        for v in verdicts:
            lines.append(
                f"| `{v['rule']}` | {change_text(v)} | {'yes' if v['significant'] else 'no'} | "
                f"{'**FAIL**' if v['failed'] else 'pass'} | {v['reason']} |"
            )
        lines.append("")
        lines += [f"> **Power:** {v['power']}" for v in verdicts if v.get("power")] + (
            [""] if any(v.get("power") for v in verdicts) else []
        )
    lines += [f"> **Warning:** {w}" for w in result.get("warnings", [])] + ([""] if result.get("warnings") else [])
    lines += [
        f"Deltas are new - base. *Beyond noise*: the {m['confidence']:.0%} bootstrap interval of the difference excludes 0 "
        f"({m['resamples']} resamples of time blocks, seed {m['seed']}). With many rows, about "
        f"{1 - m['confidence']:.0%} of unchanged metrics are flagged by chance; gate on a few named rules. "
        "*Smallest detectable*: half the interval's width in % of base, the least change these runs could tell "
        "from none.",
        "",
    ]
    for s in result["scopes"]:
        lines += [
            f"### {s['label']}",
            "",
            f"requests in window: base {s['requests'][0]:,}, new {s['requests'][1]:,}; "
            f"time blocks: base {s['blocks'][0]}, new {s['blocks'][1]}",
            "",
        ]
        lines.append("| " + " | ".join(HEADERS) + " |")
        lines.append("| --- | " + " | ".join("---:" for _ in HEADERS[1:]) + " |")
        lines += ["| " + " | ".join(r) + " |" for r in rows_for(s)]
        lines.append("")
    lines += gpu_markdown(result.get("gpu"))
    for side in ("only_in_base", "only_in_new"):
        if result[side]:
            lines.append(f"_{side.replace('_', ' ')}: {', '.join(result[side])}_")
    return "\n".join(lines) + "\n"


def _vname(v: dict) -> str:
    """The metric as a rule names it: ttft.p95, short.ttft.p95, step3.ttft.p95."""
    return v["metric"] if v["scope"] == "overall" else f"{v['scope'].replace(':', '')}.{v['metric']}"


def change_text(v: dict) -> str:
    """A rule verdict's change as every output writes it (the compare's table and console, JUnit):
    '+28.64 %' for a relative rule, '+12.5 ms' or '+1.2 pp' (a share's points) for an absolute one."""
    c = v["change"]
    if c is None:
        return "-"
    if math.isinf(c):
        return "+inf %" if c > 0 else "-inf %"
    unit = v.get("unit", "")
    return f"{c:+.2f} %" if v["relative"] else f"{c:+,.4g} {'pp' if unit == '%' else unit}".rstrip()


def compare_cases(verdicts: list[dict]) -> list[Case]:
    """The JUnit test cases of a compare: one per --fail-on rule (its verdict from `judge`)."""
    cases = []
    for v in verdicts:
        u = v.get("unit", "")
        measured = f"base {_num(v['base'], u)}, new {_num(v['new'], u)}, change {change_text(v)}; {v['reason']}"
        cases.append(Case("llm.compare", v["rule"], measured if v["failed"] else None, measured))
    return cases


def _num(x, unit: str) -> str:
    return "-" if x is None else f"{x:,.4g} {unit}".rstrip()


def run_compare(
    base: str,
    new: str,
    fail_on: str = "",
    out_dir: str | None = None,
    resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    junit: str | None = None,
    allow_different: bool = False,
) -> int:
    rules = parse_rules(fail_on)  # a bad rule is an error before any work
    if resamples < 100:
        raise InputError("--resamples: use at least 100 (default 1000)")
    if not 0.5 <= confidence < 1:
        raise InputError("--confidence: give a level between 0.5 and 1, e.g. 0.95")
    result = compare(base, new, resamples, seed, confidence, rules, allow_different)
    verdicts = judge(result, rules)
    for v, rule in zip(verdicts, rules):
        v["threshold"] = rule.threshold
        v["power"] = power_note(v, result)
    result["rules"] = verdicts
    result["regression"] = any(v["failed"] for v in verdicts)
    out_dir = out_dir or result["new"]["path"]
    os.makedirs(out_dir, exist_ok=True)
    write_atomic(os.path.join(out_dir, "compare.json"), json.dumps(_json_safe(result), indent=2) + "\n")
    write_atomic(os.path.join(out_dir, "compare.md"), markdown(result, verdicts))
    if junit:
        write_junit(junit, f"compare {result['base']['run_id']} -> {result['new']['run_id']}", compare_cases(verdicts))
    m = result["method"]
    for d in result["differences"]:
        print(f"DIFFERENT {d}")
    print(
        f"compare: base {result['base']['run_id']}{_label(result['base'])} ({result['base']['path']})\n"
        f"         new  {result['new']['run_id']}{_label(result['new'])} ({result['new']['path']})\n"
        f"delta = new - base; beyond noise = the {m['confidence']:.0%} bootstrap interval of the delta excludes 0 "
        f"({m['resamples']} resamples of time blocks, seed {m['seed']})"
    )
    for s in result["scopes"]:
        if s["scope"].startswith("step:"):
            continue
        print(f"\n{s['label']} (requests: base {s['requests'][0]:,}, new {s['requests'][1]:,})")
        print(text_table(rows_for(s)))
    steps = [s for s in result["scopes"] if s["scope"].startswith("step:")]
    if steps:
        print(f"\n{len(steps)} load steps compared (full tables in compare.md); changes beyond noise and >= 5 %:")
        for s in steps:
            flagged = [
                f"{r['metric']} {_d(r['delta_pct'], '')}%"
                for r in s["metrics"]
                if r["significant"]
                and r["delta_pct"] is not None
                and math.isfinite(r["delta_pct"])
                and abs(r["delta_pct"]) >= 5
            ]
            more = f" and {len(flagged) - 6} more" if len(flagged) > 6 else ""
            print(f"  {s['label']}: {', '.join(flagged[:6]) + more if flagged else 'none'}")
    for line in gpu_console(result["gpu"]):
        print(line)
    print(
        f"\nwritten: {os.path.join(out_dir, 'compare.md')}, {os.path.join(out_dir, 'compare.json')}"
        + (f", {junit}" if junit else "")
    )
    for w in result["warnings"]:
        print(f"\nwarning: {w}")
    if verdicts:
        print("\nrules:")
        for v in verdicts:
            print(f"  {'FAIL' if v['failed'] else 'pass'}  {v['rule']}: {change_text(v)} ({v['reason']})")
            if v.get("power"):
                print(f"  power: {v['power']}")
        failed = [v for v in verdicts if v["failed"]]
        if failed:
            print(f"REGRESSION: {', '.join(_vname(v) for v in failed)}")
            return 1
        print("no regression")
    return 0


def _json_safe(x):
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    return x


__all__ = ["compare", "run_compare"]
