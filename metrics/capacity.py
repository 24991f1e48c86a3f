"""A run's capacity (summary.json's `capacity`): the highest load level met below the lowest level
missed, from each level's one verdict, and the sentence that answers with it."""

from __future__ import annotations

from datetime import datetime, timezone

from metrics.console_table import fmt
from metrics.schema.figures import Step
from metrics.schema.verdicts import Capacity, SloVerdict
from metrics.verdict import first_tokens_text


def _on(v: SloVerdict) -> str:
    """'267 requests', or '3 requests (ttft.p95 on 312 values, 4 still waiting at the cut)' where a
    first-token objective was judged on the first tokens of requests that had not ended."""
    tokens = first_tokens_text(v)
    return f"{v.requests} requests" + (f" ({'; '.join(tokens)})" if tokens else "")


def capacity(steps: list[Step], objectives) -> Capacity:
    """The highest level met below the lowest level missed (levels may come in any order: a
    capacity search bisects), from each level's one verdict; undecided levels are named."""
    steps = [st for st in steps if not st.partial]  # a step the run cut short: no rates to answer with
    state = lambda st: st.verdict.state if st.verdict is not None else "undecided"  # noqa: E731
    missed = [st for st in steps if state(st) == "missed"]
    failing = min(missed, key=lambda st: st.users, default=None)
    upper = failing.users if failing else None
    below = [st for st in steps if state(st) == "met" and (upper is None or st.users < upper)]
    passing = max(below, key=lambda st: st.users, default=None)
    undecided = sorted({st.users for st in steps if state(st) == "undecided"})
    slo_text = " and ".join(o.text for o in objectives)
    confidence = next((st.verdict.confidence for st in steps if st.verdict is not None), None)
    tail = f"; undecided: {', '.join(map(str, undecided))} users" if undecided else ""
    if passing is None:
        # none missed either: every level was undecided (too few requests, or too close to call)
        what = f"no level met it; missed at {upper} users ({_on(failing.verdict)})" if failing else \
            "no level was decided (met or missed)"
        return Capacity(slo=slo_text, next_failing_users=upper, undecided=undecided, confidence=confidence,
                        next_failing_samples=failing.verdict.requests if failing else None,
                        sentence=f"{slo_text}: {what}{tail}")  # fmt: skip
    users = passing.users
    plus_minus = (upper - users) / 2 if upper else None
    th = passing.throughput
    if upper:
        bound = f" (±{plus_minus:g}; met at {users} users on {_on(passing.verdict)}, missed at {upper} on {_on(failing.verdict)})"
    elif any(u > users for u in undecided):  # a higher level was tried and left undecided: not the highest tested
        bound = f" (the highest level met, none missed; met on {_on(passing.verdict)})"
    else:
        bound = f" (the highest level tested; met on {_on(passing.verdict)})"
    measured = datetime.fromtimestamp(passing.window.end, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sentence = (
        f"{slo_text} holds up to {users} users{bound}: {fmt(th.total_tokens_per_s)} total tokens/s, "
        f"{fmt(th.requests_per_s, 2)} requests/s, measured {measured}{tail}"
    )
    return Capacity(
        slo=slo_text, users=users, next_failing_users=upper, plus_minus=plus_minus,
        samples=passing.verdict.requests, next_failing_samples=failing.verdict.requests if failing else None,
        undecided=undecided, confidence=confidence,
        total_tokens_per_s=th.total_tokens_per_s, output_tokens_per_s=th.output_tokens_per_s,
        requests_per_s=th.requests_per_s, sentence=sentence,
    )  # fmt: skip
