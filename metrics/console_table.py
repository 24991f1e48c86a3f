"""The short console table printed at the end of a run (and by `python -m reports show`): classes,
steps, SLO verdicts, capacity and diagnosis sentences."""

from __future__ import annotations

from metrics.schema import Summary, as_summary
from metrics.schema.figures import Step
from metrics.schema.verdicts import SloVerdict
from metrics.verdict import count, describe, held, margin_text, values_text


def fmt(x, digits=0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def format_slo(slo: SloVerdict) -> list[str]:
    """The run's verdict (metrics/verdict.py), then one line per objective: its verdict, the measured
    value and its confidence bounds, rounded to 0.1 ms, and its margin."""
    conf = "" if slo.confidence is None else f"{slo.confidence:.0%} "
    head = f"SLO: {VERDICT_WORD[slo.state]} on {slo.requests:,} requests" + (
        f" ({slo.failed:,} failed)" if slo.failed else ""
    )
    head += (f", {margin_text(slo.margin)}" if slo.margin is not None else "") + (
        f": {slo.reason}" if slo.reason else ""
    )
    return [
        head,
        *(
            f"SLO {v.objective}: {VERDICT_WORD[v.state]} (measured {fmt(v.value_ms, 1)} ms, threshold "
            f"{v.threshold_ms:,.1f} ms; {conf}bounds {fmt(v.lower_ms, 1)}..{fmt(v.upper_ms, 1)} ms on "
            f"{values_text(v)}" + (f", {margin_text(v.margin)}" if v.margin is not None else "") + ")"
            for v in slo.objectives
        ),
    ]


def format_table(summary: Summary | dict) -> str:
    """The short console table printed at the end of a run."""
    summary = as_summary(summary)
    head = (
        f"{'class':<10}{'ok':>7}{'fail':>6}{'TTFT mean':>11}{'p50':>8}{'p95':>8}{'p99':>8}"
        f"{'TPOT p50':>10}{'ITL p50':>9}{'E2E p50':>9}{'p95':>9}{'req/s':>8}{'out tok/s':>11}{'tot tok/s':>11}"
    )
    lines = ["LLM results (ms unless stated; exact, from per-request records)"]
    setup = summary.setup
    if setup is not None:  # what the run was and what it ran against, before its numbers
        if setup.label:
            lines.append(f"run: {setup.label}")
        if setup.target is not None:
            lines.append(f"against: {setup.server} serving {setup.target.text()}")
    lines += [head, "-" * len(head)]
    for name, s in summary.blocks():
        t, r, th = s.ttft_ms, s.requests, s.throughput
        lines.append(
            f"{name:<10}{r.ok:>7}{r.failed:>6}{fmt(t.mean):>11}{fmt(t.p50):>8}{fmt(t.p95):>8}"
            f"{fmt(t.p99):>8}{fmt(s.tpot_ms.p50, 1):>10}{fmt(s.itl_ms.p50, 1):>9}"
            f"{fmt(s.e2e_ms.p50):>9}{fmt(s.e2e_ms.p95):>9}{fmt(th.requests_per_s, 2):>8}"
            f"{fmt(th.output_tokens_per_s):>11}{fmt(th.total_tokens_per_s):>11}"
        )
    emb = summary.overall.embeddings
    if emb is not None:  # no TTFT, TPOT or ITL: the latency is E2E
        lines.append(
            f"embeddings: {emb.inputs:,} inputs, {fmt(emb.batch_size_mean, 1)} per request, "
            f"{fmt(emb.inputs_per_s, 1)} inputs/s, {fmt(emb.input_tokens_per_s)} input tokens/s"
        )
    errors = summary.overall.requests.by_error
    if errors:
        lines.append("failures: " + ", ".join(f"{k} {v}" for k, v in errors.items()))
    if summary.by_step:
        lines += ["", format_steps(summary.by_step)]
    if summary.slo is not None:
        lines += ["", *format_slo(summary.slo)]
    if summary.capacity is not None:
        lines.append(f"Capacity: {summary.capacity.sentence}")
    warning = summary.client_bound.warning() if summary.client_bound is not None else ""
    if warning:  # said once: the diagnosis refers to it
        lines.append(f"Client warning: {warning}")
    if summary.diagnosis is not None:
        lines.append(f"{summary.diagnosis.heading}: {summary.diagnosis.sentence}")
    return "\n".join(lines)


def format_steps(steps: list[Step]) -> str:
    rated = any(s.rate is not None for s in steps)  # an open loop in steps: the rate asked for, requests/s
    head = (
        f"{'step':>4}{'rate' if rated else 'users':>7}{'ok':>7}{'fail':>6}{'req/s':>8}{'out tok/s':>11}{'tot tok/s':>11}"
        f"{'TTFT mean':>11}{'p50':>8}{'p95':>8}{'p99':>8}{'TPOT p50':>10}{'E2E p50':>9}{'goodput':>9}{'SLO':>11}"
    )
    lines = ["Per step (warm-up of each step excluded; ms unless stated)", head, "-" * len(head)]
    for s in steps:
        t, th, r = s.ttft_ms, s.throughput, s.requests
        slo = VERDICT_WORD[s.verdict.state] if s.verdict is not None else "-"
        slo = "cut" if s.partial else slo  # its verdict, if any, is in the lines below
        good = s.goodput.good_fraction
        lines.append(
            f"{s.step:>4}{(f'{s.rate:g}' if rated else s.users):>7}{r.ok:>7}{r.failed:>6}{fmt(th.requests_per_s, 2):>8}"
            f"{fmt(th.output_tokens_per_s):>11}{fmt(th.total_tokens_per_s):>11}{fmt(t.mean):>11}"
            f"{fmt(t.p50):>8}{fmt(t.p95):>8}{fmt(t.p99):>8}{fmt(s.tpot_ms.p50, 1):>10}"
            f"{fmt(s.e2e_ms.p50):>9}{fmt(None if good is None else good * 100, 0) + '%':>9}{slo:>11}"
        )
    judged = [s for s in steps if s.verdict is not None]
    if judged:
        lines.append(
            f"SLO: each level's verdict on its own requests, with {judged[0].verdict.confidence:.0%} confidence bounds:"
        )
        lines += [
            f"  {f'{s.rate:g} requests/s' if rated else count(s.users, 'user')}{f' ({held(s.steps, s.window.end - s.window.start)})' if s.steps > 1 else ''}: "
            f"{describe(s.verdict)}"
            for s in judged
        ]
    return "\n".join(lines)


VERDICT_WORD = {"met": "met", "missed": "MISSED", "undecided": "undecided"}
