"""Records -> summary.json: exact percentiles, throughput over the window, per class and overall.

`summary.json` is a public contract (metrics/schema/, docs/results.md); pipelines parse it.
Every figure comes from the per-request records (metrics/measure.py); this module cuts them into
the summary's scopes: the window overall, per class, per turn and per load level, with the
capacity (metrics/capacity.py) and the open loop's schedule check (metrics/open_loop_check.py).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pyarrow as pa

from metrics.backends import backend_check
from metrics.capacity import capacity
from metrics.measure import Measure, records_frame
from metrics.open_loop_check import busy_when_due, open_loop, sent_on_schedule
from metrics.record import with_all_columns
from metrics.schema import Summary
from metrics.schema.figures import Concurrency, Goodput, Records, Step, Throughput, Window
from metrics.timing import DEFINITIONS


def over_max_tokens(table: pa.Table) -> int:
    """Replies longer than the max_tokens each asked for, by the tokens the server's usage or the
    stream's chunks counted (a client-side tokenizer's count of the text may differ from the
    server's by a token or two, and is left out)."""
    asked = table.column("max_tokens").to_numpy(zero_copy_only=False)
    got = table.column("output_tokens").to_numpy(zero_copy_only=False)
    counted = np.isin(table.column("tokens_source").to_numpy(zero_copy_only=False), ("usage", "chunks"))
    return int(((asked > 0) & (got > asked) & counted).sum())


def summarize(
    table: pa.Table,
    window_start: float,
    window_end: float,
    run_start: float | None = None,
    plan=None,
    objectives=(),
    target_rate: float | None = None,
    scheduled: int | None = None,
    backends: tuple[str, ...] = (),
    backend_count: int | None = None,
) -> Summary:
    """The whole summary (wall-clock window): definitions, window, overall, by_class, and by_step,
    slo and capacity when the run had steps and objectives; open_loop with `target_rate` and
    `scheduled`, the arrivals the schedule had due inside the window. `backends`: the replicas a run
    spread over (several --host URLs) and `backend_count` those behind its balancer (--backend-count),
    for each one's fair share (metrics/backends.py)."""
    table = with_all_columns(table)  # a results file of an older version lacks the newer columns
    df = records_frame(table)
    m = Measure(df, table.column("chunk_times"), objectives)

    wall = df["wall_send"].to_numpy()
    in_window = (wall >= window_start) & (wall <= window_end)
    failed = df[~df["ok"] & (df["error"] != "")]
    summary = Summary(
        definitions=DEFINITIONS,
        window=Window(start=window_start, end=window_end, seconds=max(0.0, window_end - window_start)),
        records=Records(
            total=int(len(df)),
            outside_window=int((~in_window).sum()),
            by_error={str(k): int(v) for k, v in failed["error"].value_counts().sort_index().items()},
            over_max_tokens=over_max_tokens(table),
        ),
        overall=m.block(in_window, window_start, window_end),
        by_class=m.by("request_class", in_window, window_start, window_end),
        concurrency=Concurrency(mean_in_flight=mean_in_flight(df, window_start, window_end)),
    )
    if "turn" in table.column_names:  # conversations: one block per turn number (turn 1 = first message)
        turns = table.column("turn").to_numpy(zero_copy_only=False)
        present = sorted(set(turns[in_window & (turns >= 1)].tolist()))
        if present:
            summary.by_turn = {str(t): m.block(in_window & (turns == t), window_start, window_end) for t in present}
    if (df["backend"] != "").any():  # several replicas, or a balancer's header: one block per backend
        summary.by_backend = m.by("backend", in_window, window_start, window_end)
        summary.backends = backend_check(summary.by_backend, df, window_start, window_end, backends, backend_count)
    if plan is not None and run_start is not None:
        summary.by_step = by_step(plan, run_start, window_end, m)
        if objectives:
            summary.capacity = capacity(summary.by_step, objectives, getattr(plan, "search", None))
    if objectives and plan is None:
        # the whole run's verdict is its overall block's (metrics/verdict.py's one rule). A run with
        # load levels (a step ramp or a capacity search) is judged per level, and answers with the
        # highest level met: one verdict pooled over levels of different loads would judge none of
        # them (summary.overall.slo keeps the pooled figures)
        summary.slo = summary.overall.slo
    if target_rate:
        summary.open_loop = open_loop(
            summary.overall,
            target_rate,
            scheduled,
            sent_on_schedule(df, table, window_start, window_end),
            busy_when_due(df, table),
        )
    return summary


# a ramp's step whose window the run's end left less than this share of is partial (Step.partial):
# Locust's -t and the run's start are a few seconds apart on a busy machine, so a full last step
# may lose a second or two of its window, never half
PARTIAL_SHARE = 0.5


def by_step(plan, run_start: float, run_end: float, m: Measure) -> list[Step]:
    """One block and verdict per load level, over its declared set (Measure.level). A step ramp's
    step that the run ended early is partial: a few requests over the fraction of a second after
    its warm-up made "13 requests/s" of a step that had not run; its rates are left out. (A
    capacity search's levels end as the search decides: `cut`, metrics/verdict.py.)"""
    ramp = getattr(plan, "cut_lag_s", None) is None
    out = []
    for level in plan.levels_at(run_start):
        partial = False
        if level.end > run_end:  # the run stopped inside this level: its window ends with the run
            partial = ramp and run_end - level.start < PARTIAL_SHARE * (level.end - level.start)
            level = replace(level, end=run_end, cut=None if level.cut is None else min(level.cut, run_end))
        if level.end <= level.start:
            break  # the run stopped before this level was measured
        step = m.level(level)
        if partial:
            step = step.model_copy(
                update={
                    "partial": True,
                    "throughput": Throughput(),
                    "goodput": Goodput(good_fraction=step.goodput.good_fraction),
                }
            )
        out.append(step)
    return out


def mean_in_flight(df: pd.DataFrame, start: float, end: float) -> float | None:
    """Time-weighted mean number of requests in flight inside the window."""
    if end <= start:
        return None
    begin = df["wall_send"].to_numpy()
    finish = begin + np.nan_to_num(df["e2e_s"].to_numpy(), nan=0.0)
    overlap = np.clip(np.minimum(finish, end) - np.maximum(begin, start), 0.0, None)
    return float(overlap.sum() / (end - start))
