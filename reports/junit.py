"""JUnit XML for a CI's test view: one test case per check, a failure carrying the measured value.

    a run (--junit FILE)        llm.run       complete, results written, requests (no server
                                              failure), schedule kept (open loop), client within
                                              its accuracy limits (self-health)
                                llm.slo       one case per --slo objective (the run's verdict; a run
                                              without load levels): fails missed or undecided
                                llm.capacity  a level met the SLO (a step ramp, --find-capacity)
    a compare (--junit FILE)    llm.compare   one case per --fail-on rule (reports/compare.py compare_cases)

Case names are the checks' own (an objective or a rule as written), so a CI can follow each one
from night to night. Every case but the client's health has its own exit code (docs/failures.md);
a run whose load generator was the bottleneck exits as its results say, and the JUnit view shows
the health case failed: its latency tails are not to be trusted.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from core.files import write_atomic
from metrics.record import NOT_SERVER_FAILURES
from metrics.schema import Summary
from metrics.verdict import margin_text, values_text


@dataclass(frozen=True, slots=True)
class Case:
    classname: str
    name: str
    failure: str | None = None  # the measured value and why it fails; None: passed
    measured: str = ""  # what was measured, for a case that passed too


def _ms(v: float | None) -> str:
    return "no value (no successful request)" if v is None else f"{v:,.1f} ms"


def run_cases(summary: Summary, not_written: list[str] | tuple = ()) -> list[Case]:
    """The checks of one run, from its summary (and the files its writer could not write)."""
    cases = [
        Case(
            "llm.run",
            "complete",
            None
            if summary.complete
            else f"the run did not do what was asked: {summary.reason or 'no reason recorded'}",
            f"{summary.records.total:,} requests recorded",
        ),
        Case(
            "llm.run",
            "results written",
            f"not written: {', '.join(not_written)}" if not_written else None,
            "requests.parquet, summary.json",
        ),
    ]
    failures = {k: n for k, n in summary.records.by_error.items() if k not in NOT_SERVER_FAILURES and n}
    total = summary.records.total
    text = ", ".join(f"{k} {n:,}" for k, n in sorted(failures.items(), key=lambda kv: -kv[1]))
    cases.append(
        Case(
            "llm.run",
            "requests",
            f"{sum(failures.values()):,} of {total:,} requests failed: {text}" if failures else None,
            f"{total:,} requests, none failed",
        )
    )
    if summary.open_loop is not None:
        ol = summary.open_loop
        cases.append(
            Case(
                "llm.run",
                "schedule kept",
                "behind schedule: " + "; ".join(ol.reasons) if ol.behind_schedule else None,
                f"target {ol.target_rate:g} req/s, sent {ol.sent_per_s or 0:g} req/s",
            )
        )
    cb = summary.client_bound
    if cb is not None:
        cases.append(
            Case(
                "llm.run",
                "client within accuracy limits",
                f"client bound: {cb.advice}" if cb.bound else None,
                cb.advice,
            )
        )
    if summary.slo is not None:  # the run's one verdict (metrics/verdict.py): undecided fails too (its own exit code)
        for v in summary.slo.objectives:
            measured = f"{v.metric} = {_ms(v.value_ms)}, threshold {v.threshold_ms:,.1f} ms"
            lo, hi = ("-" if x is None else f"{x:,.1f}" for x in (v.lower_ms, v.upper_ms))
            bounds = f"bounds {lo}..{hi} ms on {values_text(v)}" + (
                f", {margin_text(v.margin)}" if v.margin is not None else ""
            )
            cases.append(
                Case(
                    "llm.slo",
                    v.objective,
                    None if v.state == "met" else f"{v.state}: {measured} ({bounds})",
                    f"{measured} ({bounds})",
                )
            )
    cap = summary.capacity  # a run with load levels: judged per level, no pooled verdict
    if cap is not None:
        cases.append(
            Case(
                "llm.capacity",
                cap.slo,
                None if cap.users is not None or getattr(cap, "rate", None) is not None else cap.sentence,
                cap.sentence,
            )
        )
    return cases


def junit_xml(suite: str, cases: list[Case], seconds: float = 0.0) -> str:
    """The JUnit XML text of one test suite (the schema Jenkins, GitLab and GitHub test reporters read)."""
    failures = sum(c.failure is not None for c in cases)
    root = ET.Element(
        "testsuites",
        name="llm-load-test",
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        time=f"{seconds:.3f}",
    )
    ts = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        skipped="0",
        time=f"{seconds:.3f}",
    )
    for c in cases:
        tc = ET.SubElement(ts, "testcase", classname=c.classname, name=c.name, time="0")
        if c.failure is not None:
            ET.SubElement(tc, "failure", message=c.failure, type="failed").text = c.failure
        elif c.measured:
            ET.SubElement(tc, "system-out").text = c.measured
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(path: str, suite: str, cases: list[Case], seconds: float = 0.0) -> None:
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    write_atomic(path, junit_xml(suite, cases, seconds))
