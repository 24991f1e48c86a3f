"""`--fail-on` rules of a compare: their grammar, their parse, and the verdict of each (`judge`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.errors import InputError
from stats.block_bootstrap import LATENCY

# ---------------------------------------------------------------------------------------------
# rules

_RULE = re.compile(
    r"^\s*(?:(?P<scope>[A-Za-z0-9_\-]+)\.)?(?P<metric>(?:ttft|ttfa|tpot|itl|e2e)\.(?:mean|p50|p90|p95|p99)|requests_per_s|"
    r"output_tokens_per_s|total_tokens_per_s|error_rate)\s*(?P<op>[<>])\s*(?P<sign>[+-]?)\s*(?P<value>\d+(?:\.\d*)?)\s*"
    r"(?P<unit>%|ms|s|pp)?\s*$"
)
RULE_HELP = (
    "write [CLASS.|stepN.]METRIC>+N% or METRIC<-N%, with METRIC one of ttft|ttfa|tpot|itl|e2e . mean|p50|p90|p95|p99, "
    "requests_per_s, output_tokens_per_s, total_tokens_per_s, error_rate; N% is a relative change, "
    "Nms/Ns an absolute one for latencies, Npp percentage points for error_rate; "
    "e.g. 'ttft.p95>+10%,output_tokens_per_s<-5%,short.e2e.p99>+200ms'"
)


@dataclass(frozen=True)
class Rule:
    text: str
    scope: str  # "overall", a class name, or "step:N"
    metric: str
    op: str  # ">" regression when the change is above the threshold, "<" below
    threshold: float
    relative: bool  # threshold in % of the base value, else in the metric's unit

    def describe(self) -> str:
        return self.text


def parse_rules(text: str) -> list[Rule]:
    rules = []
    for part in [p.strip() for p in (text or "").split(",") if p.strip()]:
        m = _RULE.match(part)
        if not m:
            hint = ""
            stat = re.match(r"^\s*(?:\w+\.)?(ttft|tpot|itl|e2e)\s*[<>]", part)
            if stat:
                hint = f" (name a statistic, e.g. {stat.group(1)}.p95)"
            raise InputError(f"--fail-on: cannot read rule '{part}'{hint}; {RULE_HELP}")
        metric, unit = m["metric"], m["unit"] or ""
        value = float(m["value"]) * (-1 if m["sign"] == "-" else 1)
        is_latency = metric.split(".")[0] in LATENCY
        example = f"{metric}{m['op']}{m['sign'] or '+'}{m['value']}%"
        if unit in ("ms", "s") and not is_latency:
            raise InputError(f"--fail-on: rule '{part}': {unit} applies to latencies only; use %, e.g. '{example}'")
        if unit == "pp" and metric != "error_rate":
            raise InputError(
                f"--fail-on: rule '{part}': pp (percentage points) applies to error_rate only; use %, e.g. '{example}'"
            )
        if unit == "" and m["value"]:
            raise InputError(
                f"--fail-on: rule '{part}': give a unit for the threshold: % (relative)"
                f"{', ms or s' if is_latency else (', pp' if metric == 'error_rate' else '')}; {RULE_HELP}"
            )
        if unit == "s":
            value *= 1000.0
        scope = m["scope"] or "overall"
        step = re.fullmatch(r"step(\d+)", scope)
        rules.append(Rule(part, f"step:{int(step.group(1))}" if step else scope, metric, m["op"], value, unit == "%"))
    return rules


def judge(result: dict, rules: list[Rule]) -> list[dict]:
    """Each rule's verdict: it fails when the change is beyond its threshold AND significant."""
    by_scope = {s["scope"]: {r["metric"]: r for r in s["metrics"]} for s in result["scopes"]}
    verdicts = []
    for rule in rules:
        scope = by_scope.get(rule.scope)
        if scope is None:
            known = ", ".join(sorted(k for k in by_scope if k != "overall")) or "none"
            raise InputError(
                f"--fail-on: rule '{rule.text}': '{rule.scope}' is not a request class or step of both runs "
                f"(classes and steps in both: {known})"
            )
        row = scope[rule.metric]
        change = row["delta_pct"] if rule.relative else row["delta"]
        beyond = change is not None and (change > rule.threshold if rule.op == ">" else change < rule.threshold)
        failed = bool(beyond and row["significant"])
        if change is None and row["base"] is not None:  # e.g. not one successful request in NEW
            failed = True
            reason = "no value in the new run (no successful request to measure) while the base has one"
        elif change is None:
            reason = "no value in the base run: nothing to compare with"
        elif failed:
            reason = "regression: beyond the threshold and beyond noise"
        elif beyond:
            reason = "beyond the threshold but within noise (the interval includes 0)"
        else:
            reason = "within the threshold"
        verdicts.append(
            {
                "rule": rule.text,
                "scope": rule.scope,
                "metric": rule.metric,
                "failed": failed,
                "change": change,
                "relative": rule.relative,
                "significant": row["significant"],
                "ci": row["ci"],
                "unit": row["unit"],
                "base": row["base"],
                "new": row["new"],
                "reason": reason,
            }
        )
    return verdicts
