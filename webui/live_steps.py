"""The live view's load steps (a step ramp or a capacity search) and why the knee is there.

Once a step's time is over, its row is computed from the records exactly as summary.json's
`by_step` (the requests sent in its window, its warm-up excluded; tokens that arrived in it);
"pending" while requests sent before its end are still open (or a capacity search may still hold
it for another step), "final" after, and then kept as it is. A row says what its verdict rests on
as the report's per-step table does (metrics/verdict.py `judged_on`: its requests, and the time
measured of a level a capacity search held longer than one step).

Why the knee is there (`live_diagnosis`): once a final level has missed the SLO (the knee), the
diagnosis of metrics/diagnosis.py over the final levels, from the server's metrics scraped so far;
none before (a search doubling its load has no knee yet, and the highest level so far is not one).
After the run the view shows summary.json's.
"""

from __future__ import annotations

import numpy as np

from metrics.percentiles import ORDER
from metrics.schema.level_endings import ending_words
from metrics.schema.verdicts import SloVerdict
from metrics.verdict import held, judged_on
from shapes.steps import Level
from webui.live_blocks import Flight, add_open_streams, empty_block, measure
from webui.live_table import clean


class LiveSteps:
    """The rows of the levels begun so far; a final row is kept as it is."""

    def __init__(self, objectives=()):
        self.objectives = list(objectives)
        self.final: dict[int, dict] = {}  # step index -> its final row

    def rows(self, end: float, flight: Flight, steps, run_start: float | None, final: bool) -> list | None:
        """The levels begun so far: "running" until the level's time is over, then "pending" while
        requests sent before its end are still open (or a capacity search may still hold it for
        another step), then "final" (kept as it is). `steps`: (StepPlan, run start) or None."""
        if steps is None or run_start is None:
            return None
        plan, run_start = steps
        levels = plan.levels_at(run_start)
        rows = []
        for level in levels:
            if level.begin > end:
                break
            if level.first in self.final:
                rows.append(self.final[level.first])
                continue
            row = {
                "step": level.first,
                "last": level.last,
                "users": level.users,
                "begin": level.begin,
                "start": level.start,
                "end": level.end,
                "cut": level.cut,
                "held": held(level.steps, level.end - level.start),
                "open": None,
                "block": None,
                "judged_on": None,
                "confidence": level.confidence,
                "rate": level.rate,  # an open loop in steps, a search in requests/s: the level's rate
            }
            if plan.search is not None:
                row["held"] = search_text(plan.search, len(rows))
                row["judged"] = len(rows) < len(plan.search.get("levels", []))  # the search has ended it
            if end < level.end and not final:
                # how long it has run: a capacity search holds an undecided level up to its longest hold
                # (minutes), and a bare "running…" all that time read as a status that never updates
                row.update(status="running", so_far_s=round(max(0.0, end - level.begin), 1))
            else:
                still_open = int(np.sum(flight.sent < level.end))
                may_grow = plan.cut_lag_s is not None and level is levels[-1] and not final
                row.update(status="final" if still_open == 0 and not may_grow else "pending", open=still_open)
            rows.append(row)
        return rows

    def waiting(self, rows) -> list[dict]:
        """The rows whose time is over and that are not kept yet: their records are still needed."""
        return [r for r in rows or () if r["status"] in ("pending", "final") and r["step"] not in self.final]

    def fill(self, rows: list, flight: Flight, ratios: dict, select) -> None:
        """The blocks of the levels whose time is over, as summary.json's by_step computes them
        (metrics.measure.Measure.level: the level's declared set, its one verdict); a pending
        level's open streams add what they delivered in the window so far. `select(t)`: the
        records that ended at or after t."""
        todo = self.waiting(rows)
        m, _ = measure(select(min(r["start"] for r in todo)), self.objectives)
        for r in todo:
            start, end = r["start"], r["end"]
            level = Level(
                r["step"], r["last"], r["users"], r["begin"], start, end, r["cut"], r.get("confidence"), r.get("rate")
            )
            if r["status"] == "pending" and r.get("judged") and level.cut is not None and m is not None:
                # a capacity search has judged it at its cut: the figures of the set its verdict rests on
                # (the requests ended by the cut, the first tokens of the streams still open), not the
                # open streams' later figures, which had read under the SLO beside "decided ... missed"
                step = m.level(level, flight.open_columns())
                r["block"] = step.model_dump(mode="json", exclude={"step", "users", "window", "steps", "cut"})
                r["judged_on"] = judged_on(step.verdict, level.steps, end - start) if step.verdict else None
                continue
            if m is not None:
                mask = m.in_level(level)
                block = m.level(level).model_dump(exclude={"step", "users", "window", "steps", "cut"})
                rec_ttft = m.df["ttft_s"].to_numpy()[mask & m.ok]
            else:
                block, rec_ttft = empty_block(end - start, self.objectives), np.empty(0)
            if r["status"] == "pending":  # what the open streams delivered in the step's window so far
                sent_in = (flight.sent >= start) & (flight.sent <= end) & np.isfinite(flight.ttft)
                add_open_streams(
                    block, flight, start, end, ratios, np.concatenate([rec_ttft, flight.ttft[sent_in]]), method=ORDER
                )
                block["verdict"] = None  # judged once its set is complete
            r["block"] = block
            if block.get("verdict"):
                r["judged_on"] = judged_on(SloVerdict.model_validate(block["verdict"]), level.steps, end - start)
            if r["status"] == "final":
                self.final[r["step"]] = clean(r)


def search_text(search: dict, k: int) -> str:
    """Why a capacity search ended its k-th level and the bracket it left: "decided in 12s (2 looks);
    bracket 6..8 users (33 %)"; "" while the level runs."""
    from shapes.search import Tried, bracket

    ended = search.get("levels", [])
    if k >= len(ended):
        return ""
    e = ended[k]
    looks = f"{e['looks']} look{'s' if e['looks'] != 1 else ''}"
    why = ending_words(e["ended"], e["seconds"], e.get("warmup_s")).live.format(seconds=e["seconds"], looks=looks)
    rated = e.get("rate") is not None  # a search in requests/s: its levels are rates (`users` the cap)
    b = bracket([Tried(x["rate"] if rated else x["users"], x["state"], x["margin"]) for x in ended[: k + 1]])
    if b.lo is not None and b.hi is not None:
        why += f"; bracket {b.lo:g}..{b.hi:g} {'requests/s' if rated else 'users'} ({b.width / b.lo:.0%})"
    elif b.lo is not None:
        why += f"; highest met {b.lo:g}"
    return why


def live_diagnosis(step_rows, objectives, server, client) -> dict | None:
    """Why the knee is there, once a final level missed the SLO (module doc): the levels final so
    far as summary.json's by_step holds them, judged into a capacity as summary.json's is, and the
    same diagnosis (metrics/diagnosis.py) from the server's metrics scraped so far (`server`, a
    frame; None without --server-metrics) and the client's self-health (`client`, a ClientBound).
    None while no level has missed: no knee yet."""
    from metrics.capacity import capacity
    from metrics.diagnosis import diagnose_levels
    from metrics.schema.figures import Step

    final = [r for r in step_rows or () if r["status"] == "final" and r.get("block")]
    if not final or not objectives:
        return None
    steps = [
        Step.model_validate(
            {
                **r["block"],
                "step": r["step"],
                "users": r["users"],
                "steps": r["last"] - r["step"] + 1,
                "window": {"start": r["start"], "end": r["end"]},
                "cut": r["cut"],
            }
        )
        for r in final
    ]
    cap = capacity(steps, objectives)
    if cap.next_failing_users is None:
        return None
    return diagnose_levels(steps, cap, server, client).model_dump(mode="json")
