"""A run's capacity (summary.json's `capacity`): the highest load level met below the lowest level
missed, from each level's one verdict, and the sentence that answers with it: the interval the
capacity lies in and its confidence, the objective that binds, a cliff, and for a capacity search
the levels in the order tried, why each ended, and whether -t ended it before its precision or
the run was stopped before it finished.

The interval runs from the highest level met (the answer) up to below the lowest missed. It holds
the capacity when both verdicts are right (latency growing with load): each is wrong with at most
1 - its confidence over all its looks (an adaptive search's level: 10 %, shapes/sequential.py; a
fixed hold: 10 % for each step it was held), so the interval's confidence is at least 1 less both.

A cliff: the highest level met left room (margin >= 0) and the lowest missed, within 25 % above
it, is over by at least half the threshold even at its lower bound (margin <= -0.5): the latency
does not grow with the load there, it jumps, and a deployment sized near the answer has no warning.
"""

from __future__ import annotations

from datetime import UTC, datetime

from metrics.console_table import fmt
from metrics.schema.figures import Step
from metrics.schema.level_endings import ending_words
from metrics.schema.verdicts import Capacity, SearchLevel, SloVerdict
from metrics.verdict import first_tokens_text, margin_text

CLIFF_MARGIN = -0.5  # the lowest miss at least this far over (a share of the threshold) ...
CLIFF_SPAN = 0.25  # ... within this share above the highest met


def _on(v: SloVerdict) -> str:
    """'267 requests', or '3 requests (ttft.p95 on 312 values, 4 still waiting at the cut)' where a
    first-token objective was judged on the first tokens of requests that had not ended."""
    tokens = first_tokens_text(v)
    return f"{v.requests} requests" + (f" ({'; '.join(tokens)})" if tokens else "")


def capacity(steps: list[Step], objectives, search: dict | None = None) -> Capacity:
    """The highest level met below the lowest level missed (levels may come in any order: a
    capacity search bisects), from each level's one verdict; undecided levels are named. `search`:
    a capacity search's account of itself (shapes.steps.StepPlan.search). Levels of open-loop
    rates (a search in requests/s, --rate-steps) answer in requests/s (`rate`), others in users."""
    steps = [st for st in steps if not st.partial]  # a step the run cut short: no rates to answer with
    rated = bool(steps) and all(getattr(st, "rate", None) is not None for st in steps)
    load = (lambda st: st.rate) if rated else (lambda st: st.users)
    unit = "requests/s" if rated else "users"
    state = lambda st: st.verdict.state if st.verdict is not None else "undecided"  # noqa: E731
    missed = [st for st in steps if state(st) == "missed"]
    failing = min(missed, key=load, default=None)
    upper = load(failing) if failing else None
    below = [st for st in steps if state(st) == "met" and (upper is None or load(st) < upper)]
    passing = max(below, key=load, default=None)
    undecided = sorted({load(st) for st in steps if state(st) == "undecided"})
    slo_text = " and ".join(o.text for o in objectives)
    confidence = next((st.verdict.confidence for st in steps if st.verdict is not None), None)
    levels = [SearchLevel.model_validate(e) for e in (search or {}).get("levels", ())]
    about = _search_fields(search, levels)
    binding = _binding(failing, passing, objectives)
    # a level below the answer left undecided is passed on the higher level's met verdict
    open_levels = [u for u in undecided if passing is None or u > load(passing)]
    tail = f"; undecided: {', '.join(f'{u:g}' for u in open_levels)} {unit}" if open_levels else ""
    tail += _levels_text(levels, search)
    if rated:  # the answer's fields in requests/s; `users` (each level's in-flight cap) stays None
        keys = {"unit": "rate", "next_failing_rate": upper, "undecided_rates": undecided, "undecided": []}
    else:
        keys = {"next_failing_users": upper, "undecided": undecided}
    if passing is None:
        # none missed either: every level was undecided (too few requests, or too close to call)
        what = (
            f"no level met it; missed at {upper:g} {unit} ({_on(failing.verdict)}{_why(failing)})"
            if failing
            else "no level was decided (met or missed)"
        )
        if about.get("timed_out"):
            what += f"; -t ended the search before a level {'met it' if failing else 'was decided'}"
        what += _stopped_text(about)
        if (about.get("crossing") or {}).get("within_precision"):  # the levels near the knee, undecided, still place it
            about["precision_reached"] = True
        return Capacity(
            slo=slo_text,
            **keys,
            confidence=confidence,
            next_failing_samples=failing.verdict.requests if failing else None,
            binding=binding,
            sentence=f"{slo_text}: {what}{_crossing_text(about.get('crossing'), about.get('precision'), unit)}{tail}",
            **about,
        )
    users = load(passing)
    plus_minus = (upper - users) / 2 if upper else None
    width = (upper - users) / users if upper else None
    sure = _interval_confidence(passing, failing, levels, search)
    cliff = bool(
        upper
        and width <= CLIFF_SPAN
        and (passing.verdict.margin or 0.0) >= 0
        and failing.verdict.margin is not None
        and failing.verdict.margin <= CLIFF_MARGIN
    )
    th = passing.throughput
    if upper:
        conf = f" at {sure:.0%} confidence" if sure is not None else ""
        bound = (
            # the interval from the answer up, not a ± around it: the answer is its lower end
            f" (from {users:g} to under {upper:g} {unit}{conf}, {width:.0%} wide; met at {users:g} "
            f"{unit} on {_on(passing.verdict)}, missed at {upper:g} on {_on(failing.verdict)}{_why(failing)})"
        )
    elif any(u > users for u in undecided):  # a higher level was tried and left undecided: not the highest tested
        bound = f" (the highest level met, none missed; met on {_on(passing.verdict)})"
    else:
        bound = f" (the highest level tested; met on {_on(passing.verdict)})"
    if about.get("precision") is not None:
        one = 0.001 if rated else 1  # the finest step of the levels (shapes/capacity.py RATE_GRAIN)
        about["precision_reached"] = None if width is None else width <= about["precision"] or upper - users <= one
        if (about.get("crossing") or {}).get("within_precision"):  # the curve's interval is within ±precision
            about["precision_reached"] = True
    notes = ""
    if len(objectives) > 1 and binding:
        notes += f"; {binding} binds"
    if cliff:
        notes += (
            f"; a cliff: met at {users:g} {unit} ({margin_text(passing.verdict.margin)}), at {upper:g} far over "
            f"({margin_text(failing.verdict.margin)})"
        )
    if about.get("timed_out"):
        notes += (
            f"; -t ended the search before its {about['precision']:.0%} precision ({width:.0%} wide)"
            if upper
            else "; -t ended the search before a level missed it"
        )
    notes += _stopped_text(about)
    notes += _crossing_text(about.get("crossing"), about.get("precision"), unit)
    measured = datetime.fromtimestamp(passing.window.end, UTC).strftime("%Y-%m-%d %H:%M UTC")
    sentence = (
        f"{slo_text} holds up to {users:g} {unit}{bound}: {fmt(th.total_tokens_per_s)} total tokens/s, "
        f"{fmt(th.requests_per_s, 2)} requests/s{' completed' if rated else ''}, measured {measured}{notes}{tail}"
    )
    return Capacity(
        slo=slo_text,
        **keys,
        **({"rate": users} if rated else {"users": users}),
        plus_minus=plus_minus,
        samples=passing.verdict.requests,
        next_failing_samples=failing.verdict.requests if failing else None,
        confidence=confidence,
        total_tokens_per_s=th.total_tokens_per_s,
        output_tokens_per_s=th.output_tokens_per_s,
        requests_per_s=th.requests_per_s,
        interval_confidence=sure,
        width=width,
        binding=binding,
        cliff=cliff,
        sentence=sentence,
        **about,
    )


def _why(failing: Step) -> str:
    """'; the server did not keep up ...': a missed open-loop level's reason (metrics/keep_up.py)."""
    reason = failing.verdict.reason if failing.verdict is not None else ""
    return f"; {reason}" if getattr(failing, "rate", None) is not None and reason else ""


def _search_fields(search: dict | None, levels: list[SearchLevel]) -> dict:
    if not search:
        return {}
    return {
        "policy": search.get("policy"),
        "precision": search.get("precision"),
        "timed_out": bool(search.get("timed_out")),
        "stopped": bool(search.get("stopped")),
        "levels": levels,
        "crossing": search.get("crossing"),
        "precheck": search.get("precheck"),
    }


def _stopped_text(about: dict) -> str:
    """'; the run was stopped before the search finished': a search that neither its policy nor -t
    ended (the web UI's STOP, Ctrl-C, ...: shapes.capacity.CapacitySearch.stop)."""
    return "; the run was stopped before the search finished" if about.get("stopped") else ""


def _binding(failing: Step | None, passing: Step | None, objectives) -> str | None:
    """The objective that sets the answer: the one missed by the most at the lowest missed level;
    with none missed, the one with the least room at the highest met."""
    for st, want in ((failing, "missed"), (passing, "met")):
        if st is None or st.verdict is None:
            continue
        judged = [e for e in st.verdict.objectives if e.state == want and e.margin is not None]
        if judged:
            return min(judged, key=lambda e: e.margin).objective
    return None


def _interval_confidence(
    passing: Step, failing: Step | None, levels: list[SearchLevel], search: dict | None
) -> float | None:
    """At least 1 less each end's chance of a wrong verdict (module doc); None without both ends."""
    if failing is None or passing.verdict is None or failing.verdict is None:
        return None

    def wrong(st: Step) -> float:
        per_look = 1.0 - (st.verdict.confidence or 0.9)
        family = (search or {}).get("family")
        if family is not None:
            return 1.0 - family
        looks = next(
            (lv.looks for lv in reversed(levels) if lv.users == st.users and lv.rate == getattr(st, "rate", None)),
            st.steps or 1,
        )
        return per_look * max(1, looks)

    return max(0.0, round(1.0 - wrong(passing) - wrong(failing), 4))


def _crossing_text(c: dict | None, precision: float | None, unit: str = "users") -> str:
    """'; the curve through the levels crosses it at 87.3 users (80% interval 84.1 to 90.2, -3.7/+3.3 %,
    between 80 and 92)', or nothing; a search in requests/s: '... at 7.62 requests/s (...)'."""
    if not c:
        return ""
    est = c["users"]
    num = (lambda x: f"{x:.1f}") if unit == "users" else (lambda x: f"{x:.3g}")
    side = lambda x: str(x) if x is None or unit == "users" else f"{x:g}"  # noqa: E731
    lo = "below the levels tried" if c["lower"] is None else num(c["lower"])
    hi = "above the levels tried" if c["upper"] is None else num(c["upper"])
    share = ""
    if c["lower"] is not None and c["upper"] is not None:
        share = f", -{(est - c['lower']) / est:.1%}/+{(c['upper'] - est) / est:.1%}"
    within = f", within ±{precision:.0%}" if c["within_precision"] and precision else ""
    return (
        f"; the curve through the levels crosses it at {num(est)} {unit} ({c['confidence']:.0%} interval {lo} to {hi}"
        f"{share}{within}, between {side(c['between'][0])} and {side(c['between'][1])})"
    )


def _levels_text(levels: list[SearchLevel], search: dict | None) -> str:
    """'; levels tried: 1 undecided (too few values, passed on the levels above), 2 met +52.3 % in 28s,
    8 missed -117.9 % in 6s, ..., 16 not judged (cut by -t in its warm-up) in 10s'."""
    if not levels:
        return ""
    parts = []
    for lv in levels:
        name = lv.users if lv.rate is None else f"{lv.rate:g}/s"
        words = ending_words(lv.ended, lv.seconds, lv.warmup_s)
        text = f"{name} {words.verdict or lv.state}"
        if words.sentence:
            text += f" ({words.sentence})"
        elif lv.margin is not None:
            text += f" {margin_text(lv.margin).replace('margin ', '')}"
        text += f" in {lv.seconds:.0f}s" if lv.seconds is not None else ""
        parts.append(text)
    return f"; levels tried ({search.get('policy')}): " + ", ".join(parts)
