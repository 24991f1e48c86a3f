"""Records -> summary.json: exact percentiles, throughput over the window, per class and overall.

`summary.json` is a public contract (metrics/schema/, docs/results.md); pipelines parse it.
Every figure comes from the per-request records with numpy; no rounded histogram is involved.
A scope's statistics (a `Block`) are computed by one function, `Measure.block`, for the summary
and for the web UI's live window (webui/live.py) alike.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metrics.percentiles import percentiles
from metrics.record import NOT_SERVER_FAILURES, SCALAR_COLUMNS, with_all_columns
from metrics.schema import Summary, as_summary
from metrics.schema.base import PERCENTILES
from metrics.schema.client_health import OpenLoop
from metrics.schema.figures import (
    Block, Concurrency, Distribution, Embeddings, Goodput, Records, Requests, Span, Step, StreamSpeed, Throughput,
    Tokens, Window,
)
from metrics.schema.verdicts import Capacity, Slo
from metrics.slo import good_mask, objective_stats
from metrics.slo import verdicts as slo_verdicts
from metrics.timing import DEFINITIONS, arrival_inputs, arrived_tokens, pooled_itl
from metrics.verdict import describe, judge, level_values


def distribution(values_s) -> Distribution:
    """{count, mean, min, p50, p90, p95, p99, p99.9, max} in milliseconds; None when empty."""
    v = np.asarray(values_s, dtype=float)
    v = v[~np.isnan(v)] * 1000.0
    if v.size == 0:
        return Distribution()
    qs = percentiles(v, [q for _, q in PERCENTILES])
    return Distribution(count=int(v.size), mean=float(v.mean()), min=float(v.min()), max=float(v.max()),
                        **{name: x for (name, _), x in zip(PERCENTILES, qs)})  # fmt: skip


def section(df: pd.DataFrame, finished_in_window: pd.DataFrame, itl_s: np.ndarray, window_s: float,
            tokens_in_window: tuple[float, float]) -> Block:
    """One block's figures. Latency and outcomes come from `df`, the requests sent inside the
    window; request throughput from `finished_in_window`, the successful requests that completed
    inside it, whenever they were sent; token throughput from `tokens_in_window`, (output, prompt)
    tokens that arrived inside it (metrics.timing.arrived_tokens). Both frames carry a boolean
    column `good` (succeeded and met every SLO; equal to `ok` without SLOs)."""
    ok = df[df["ok"]]
    # "stopped" (in flight at the end) and "cancelled" (aborted on purpose, --cancel-rate) are not
    # server failures: counted apart, outside the good fraction's denominator
    errors = df[~df["ok"] & ~df["error"].isin(NOT_SERVER_FAILURES)]
    output, prompt = tokens_in_window
    per_s = (lambda x: float(x) / window_s) if window_s > 0 else (lambda x: None)
    speed = (1.0 / ok["tpot_s"]).replace([np.inf, -np.inf], np.nan)
    ended = len(ok) + len(errors)
    split = (ok["reasoning_tokens"] >= 0) & (ok["answer_tokens"] >= 0)
    out = Block(
        requests=Requests(
            sent=int(len(df)),
            ok=int(len(ok)),
            failed=int(len(errors)),
            stopped=int((df["error"] == "stopped").sum()),
            cancelled=int((df["error"] == "cancelled").sum()),
            retries=int(df["retry"].sum()) if "retry" in df else 0,
            resent=int(df["resent"].sum()),
            by_error={str(k): int(v) for k, v in errors["error"].value_counts().sort_index().items()},
            by_finish_reason={str(k): int(v) for k, v in ok["finish_reason"].value_counts().sort_index().items() if k},
            tool_calls=int(ok["tool_calls"].sum()),
        ),
        ttft_ms=distribution(ok["ttft_s"]),
        tpot_ms=distribution(ok["tpot_s"]),
        itl_ms=distribution(itl_s),
        e2e_ms=distribution(ok["e2e_s"]),
        ttfa_ms=distribution(ok["ttfa_s"]),
        stream_tokens_per_s=StreamSpeed(mean=speed.mean(), p50=speed.median()),
        throughput=Throughput(
            sent_per_s=per_s(len(df)),
            requests_per_s=per_s(len(finished_in_window)),
            output_tokens_per_s=per_s(output),
            total_tokens_per_s=per_s(prompt + output),
            # a conversation begins with its first turn (turn -1: a single request)
            sessions_per_s=per_s(int((finished_in_window["turn"] == 1).sum())) if (df["turn"] >= 1).any() else None,
        ),
        goodput=Goodput(
            requests_per_s=per_s(int(finished_in_window["good"].sum())),
            good_fraction=(float(df["good"].sum()) / ended) if ended else None,
        ),
        tokens=Tokens(
            prompt=int(ok["prompt_tokens"].clip(lower=0).sum()),
            output=int(ok["output_tokens"].clip(lower=0).sum()),
            prompt_known=int((ok["prompt_tokens"] >= 0).sum()),
            source={str(k): int(v) for k, v in ok["tokens_source"].value_counts().sort_index().items()},
            reasoning=int(ok["reasoning_tokens"][split].sum()),
            answer=int(ok["answer_tokens"][split].sum()),
            split_known=int(split.sum()),
        ),
    )
    if (ok["inputs"] > 0).any():  # embeddings or rerank
        out.embeddings = Embeddings(
            inputs=int(ok["inputs"].sum()), batch_size_mean=float(ok["inputs"].mean()),
            inputs_per_s=per_s(int(finished_in_window["inputs"].sum())), input_tokens_per_s=per_s(prompt),
        )  # fmt: skip
    lag = (ok["t_send"] - ok["t_intended"]).to_numpy()
    if np.isfinite(lag).any():  # open loop: latency from the intended send time as well
        out.schedule_lag_ms = distribution(df["t_send"] - df["t_intended"])
        out.ttft_from_intended_ms = distribution(ok["ttft_s"] + lag)
        out.e2e_from_intended_ms = distribution(ok["e2e_s"] + lag)
    return out


class Measure:
    """The records (a frame of SCALAR_COLUMNS and their chunk_times), prepared once, and the one
    way a scope's statistics are computed from them: `block`."""

    def __init__(self, df: pd.DataFrame, chunk_times: pa.Array | pa.ChunkedArray, objectives=()):
        self.df = df
        self.chunk_times = chunk_times
        self.objectives = list(objectives)
        df["good"] = good_mask(self.objectives, df, chunk_times)
        self.ok = df["ok"].to_numpy(dtype=bool)
        self.done = (df["wall_send"] + df["e2e_s"]).to_numpy(dtype=float)
        self.arrival, self.counted = arrival_inputs(df)  # tokens count where they arrived

    def block(self, select: np.ndarray, start: float, end: float, group: np.ndarray | bool = True,
              tokens: tuple[float, float] | None = None) -> Block:
        """The statistics of the records in `select` (latency, outcomes: the requests sent in
        [start, end]); request throughput from the successful records of `group` that completed
        in [start, end]; token throughput from the tokens of `group` that arrived in it, unless
        `tokens` gives (output, prompt) counted otherwise (the live view counts at completion)."""
        itl = pooled_itl(self.chunk_times.filter(pa.array(select & self.ok)))
        sub = self.df[select]
        finished = self.df[group & self.ok & (self.done >= start) & (self.done <= end)]
        if tokens is None:
            output, prompt = arrived_tokens([start, end], *self.arrival, self.chunk_times, group & self.counted)
            tokens = (float(output[0]), float(prompt[0]))
        out = section(sub, finished, itl, max(0.0, end - start), tokens)
        if self.objectives:
            judged = slo_verdicts(self.objectives, objective_stats(self.objectives, sub[sub["ok"]], itl))
            out.slo = Slo(passed=all(v.passed for v in judged), objectives=judged)
        return out

    def in_level(self, level) -> np.ndarray:
        """The level's declared set (metrics/verdict.py): the requests of its steps sent in its
        window and, when it has a cut, ended by the cut (a failure ends where it failed)."""
        wall = self.df["wall_send"].to_numpy()
        steps = self.df["step"].to_numpy()
        mask = (steps >= level.first) & (steps <= level.last) & (wall >= level.start) & (wall <= level.end)
        if level.cut is not None:
            done = wall + np.nan_to_num(self.df["e2e_s"].to_numpy(dtype=float), nan=0.0)
            mask &= done <= level.cut
        return mask

    def level(self, level) -> Step:
        """A load level's statistics and its one verdict, both over its declared set."""
        mask = self.in_level(level)
        block = self.block(mask, level.start, level.end)
        verdict = None
        if self.objectives:
            sub = self.df[mask]
            ok = sub[sub["ok"]]
            itl = pooled_itl(self.chunk_times.filter(pa.array(mask & self.ok)))
            verdict = judge(self.objectives, level_values(self.objectives, ok, itl), len(ok), block.requests.failed)
        block.slo = None  # the level's verdict is `verdict` (with its evidence), not a point estimate
        return Step(step=level.first, users=level.users, window=Span(start=level.start, end=level.end),
                    steps=level.steps, cut=level.cut, verdict=verdict, **dict(block))  # fmt: skip


def _frame(table: pa.Table) -> pd.DataFrame:
    df = table.select(list(SCALAR_COLUMNS)).to_pandas()
    # a retry's request id is the first attempt's plus -rN (plugin/users.py)
    df["retry"] = pc.match_substring_regex(table.column("request_id"), r"-r[0-9]+$").to_numpy(zero_copy_only=False)
    return df


def judge_level(rows: pa.Table, level, objectives) -> Step:
    """A level judged from records holding (at least) its requests: what a capacity search
    decides on while the run goes, computed as summary.json's by_step computes it."""
    rows = with_all_columns(rows)
    return Measure(_frame(rows), rows.column("chunk_times"), objectives).level(level)


SCHEDULE_LAG_LIMIT_MS = 10.0  # open loop: sending 1 % of requests later than this is "behind schedule"
INTENDED_SLACK_S = 0.01
SENT_SHARE = 0.95  # open loop: sending fewer of the arrivals due in the window than this share is "behind schedule"


def summarize(table: pa.Table, window_start: float, window_end: float, run_start: float | None = None,
              plan=None, objectives=(), target_rate: float | None = None, scheduled: int | None = None) -> Summary:
    """The whole summary (wall-clock window): definitions, window, overall, by_class, and by_step,
    slo and capacity when the run had steps and objectives; open_loop with `target_rate` and
    `scheduled`, the arrivals the schedule had due inside the window."""
    table = with_all_columns(table)  # a results file of an older version lacks the newer columns
    df = _frame(table)
    m = Measure(df, table.column("chunk_times"), objectives)

    wall = df["wall_send"].to_numpy()
    in_window = (wall >= window_start) & (wall <= window_end)
    classes = df["request_class"].to_numpy()
    failed = df[~df["ok"] & (df["error"] != "")]
    summary = Summary(
        definitions=DEFINITIONS,
        window=Window(start=window_start, end=window_end, seconds=max(0.0, window_end - window_start)),
        records=Records(total=int(len(df)), outside_window=int((~in_window).sum()),
                        by_error={str(k): int(v) for k, v in failed["error"].value_counts().sort_index().items()}),
        overall=m.block(in_window, window_start, window_end),
        by_class={
            str(name): m.block(in_window & (classes == name), window_start, window_end, classes == name)
            for name in sorted(set(classes[in_window]))
        },
        concurrency=Concurrency(mean_in_flight=mean_in_flight(df, window_start, window_end)),
    )
    if "turn" in table.column_names:  # conversations: one block per turn number (turn 1 = first message)
        turns = table.column("turn").to_numpy(zero_copy_only=False)
        present = sorted(set(turns[in_window & (turns >= 1)].tolist()))
        if present:
            summary.by_turn = {str(t): m.block(in_window & (turns == t), window_start, window_end) for t in present}
    if plan is not None and run_start is not None:
        summary.by_step = by_step(plan, run_start, window_end, m)
        if objectives:
            summary.capacity = capacity(summary.by_step, objectives)
    if objectives and plan is None:
        # a run with load levels (a step ramp or a capacity search) is judged per level, and
        # answers with the highest level met: one verdict pooled over levels of different loads
        # would judge none of them (summary.overall.slo keeps the pooled figures)
        summary.slo = summary.overall.slo
    if target_rate:
        summary.open_loop = open_loop(summary.overall, target_rate, scheduled, sent_on_schedule(df, table, window_start, window_end))
    return summary


def sent_on_schedule(df: pd.DataFrame, table: pa.Table, start: float, end: float) -> int:
    """Arrivals of the schedule due in [start, end] (wall clock) that were sent, late or not: records
    whose intended send time falls there. A retry or a conversation's later turn is not an arrival
    of the schedule (a later turn is timed from the reply before it). The intended time is the
    schedule's number carried through a process's clocks: wall_send is stamped before a new
    connection is opened (connect_s) and t_send after, so it is matched within INTENDED_SLACK_S."""
    connect = np.nan_to_num(table.column("connect_s").to_numpy(zero_copy_only=False).astype(float), nan=0.0)
    intended = df["wall_send"].to_numpy(dtype=float) + connect - (df["t_send"] - df["t_intended"]).to_numpy(dtype=float)
    turns = table.column("turn").to_numpy(zero_copy_only=False)
    arrival = ~df["retry"].to_numpy(dtype=bool) & (turns <= 1)
    inside = (intended >= start - INTENDED_SLACK_S) & (intended <= end + INTENDED_SLACK_S)
    return int(np.count_nonzero(arrival & inside))


def open_loop(overall: Block, target_rate: float, scheduled: int | None = None, sent: int | None = None) -> OpenLoop:
    """Did the client keep to the arrival schedule? Lateness is measured per request
    (t_send - t_intended); a late request still counts from its intended time in *_from_intended_ms.
    The arrivals sent are compared with those the schedule had due in the window (`scheduled`), not
    the rate with the target: over a short window a low rate may have no arrival due at all."""
    lag_p99 = overall.schedule_lag_ms.p99 if overall.schedule_lag_ms is not None else None
    reasons = []
    if lag_p99 is not None and lag_p99 > SCHEDULE_LAG_LIMIT_MS:
        reasons.append(f"1 % of requests were sent more than {lag_p99:,.0f} ms after their scheduled time "
                       f"(limit {SCHEDULE_LAG_LIMIT_MS:g} ms): all users busy (--max-concurrency) or the client saturated")
    if scheduled is not None and sent is not None:
        sent = min(sent, scheduled)  # one just past the window's edge, matched within the slack
    if scheduled is not None and sent is not None and sent < SENT_SHARE * scheduled:
        reasons.append(f"sent {sent:,} of the {scheduled:,} arrivals the schedule had due in the window "
                       f"({target_rate:g} requests/s): all users busy (--max-concurrency) or the client saturated")
    return OpenLoop(target_rate=target_rate, sent_per_s=overall.throughput.sent_per_s, scheduled=scheduled, sent=sent,
                    schedule_lag_p99_ms=lag_p99, behind_schedule=bool(reasons), reasons=reasons)  # fmt: skip


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
            step = step.model_copy(update={"partial": True, "throughput": Throughput(),
                                           "goodput": Goodput(good_fraction=step.goodput.good_fraction)})  # fmt: skip
        out.append(step)
    return out


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
        what = f"no level met it; missed at {upper} users ({failing.verdict.requests} requests)" if failing else \
            "no level was decided (met or missed)"
        return Capacity(slo=slo_text, next_failing_users=upper, undecided=undecided, confidence=confidence,
                        next_failing_samples=failing.verdict.requests if failing else None,
                        sentence=f"{slo_text}: {what}{tail}")  # fmt: skip
    users = passing.users
    plus_minus = (upper - users) / 2 if upper else None
    th = passing.throughput
    if upper:
        bound = f" (±{plus_minus:g}; met at {users} users on {passing.verdict.requests} requests, missed at {upper} on {failing.verdict.requests})"
    elif any(u > users for u in undecided):  # a higher level was tried and left undecided: not the highest tested
        bound = f" (the highest level met, none missed; met on {passing.verdict.requests} requests)"
    else:
        bound = f" (the highest level tested; met on {passing.verdict.requests} requests)"
    measured = datetime.fromtimestamp(passing.window.end, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sentence = (
        f"{slo_text} holds up to {users} users{bound}: {_fmt(th.total_tokens_per_s)} total tokens/s, "
        f"{_fmt(th.requests_per_s, 2)} requests/s, measured {measured}{tail}"
    )
    return Capacity(
        slo=slo_text, users=users, next_failing_users=upper, plus_minus=plus_minus,
        samples=passing.verdict.requests, next_failing_samples=failing.verdict.requests if failing else None,
        undecided=undecided, confidence=confidence,
        total_tokens_per_s=th.total_tokens_per_s, output_tokens_per_s=th.output_tokens_per_s,
        requests_per_s=th.requests_per_s, sentence=sentence,
    )  # fmt: skip


def mean_in_flight(df: pd.DataFrame, start: float, end: float) -> float | None:
    """Time-weighted mean number of requests in flight inside the window."""
    if end <= start:
        return None
    begin = df["wall_send"].to_numpy()
    finish = begin + np.nan_to_num(df["e2e_s"].to_numpy(), nan=0.0)
    overlap = np.clip(np.minimum(finish, end) - np.maximum(begin, start), 0.0, None)
    return float(overlap.sum() / (end - start))


def _fmt(x, digits=0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def format_slo(slo: Slo) -> list[str]:
    """One line per objective: its verdict and the measured value, rounded to 0.1 ms."""
    return [f"SLO {v.objective}: {'met' if v.passed else 'MISSED'} (measured {_fmt(v.value_ms, 1)} ms, "
            f"threshold {v.threshold_ms:,.1f} ms)" for v in slo.objectives]  # fmt: skip


def format_table(summary: Summary | dict) -> str:
    """The short console table printed at the end of a run."""
    summary = as_summary(summary)
    head = (
        f"{'class':<10}{'ok':>7}{'fail':>6}{'TTFT mean':>11}{'p50':>8}{'p95':>8}{'p99':>8}"
        f"{'TPOT p50':>10}{'ITL p50':>9}{'E2E p50':>9}{'p95':>9}{'req/s':>8}{'out tok/s':>11}{'tot tok/s':>11}"
    )
    lines = ["LLM results (ms unless stated; exact, from per-request records)", head, "-" * len(head)]
    for name, s in summary.blocks():
        t, r, th = s.ttft_ms, s.requests, s.throughput
        lines.append(
            f"{name:<10}{r.ok:>7}{r.failed:>6}{_fmt(t.mean):>11}{_fmt(t.p50):>8}{_fmt(t.p95):>8}"
            f"{_fmt(t.p99):>8}{_fmt(s.tpot_ms.p50, 1):>10}{_fmt(s.itl_ms.p50, 1):>9}"
            f"{_fmt(s.e2e_ms.p50):>9}{_fmt(s.e2e_ms.p95):>9}{_fmt(th.requests_per_s, 2):>8}"
            f"{_fmt(th.output_tokens_per_s):>11}{_fmt(th.total_tokens_per_s):>11}"
        )
    emb = summary.overall.embeddings
    if emb is not None:  # no TTFT, TPOT or ITL: the latency is E2E
        lines.append(f"embeddings: {emb.inputs:,} inputs, {_fmt(emb.batch_size_mean, 1)} per request, "
                     f"{_fmt(emb.inputs_per_s, 1)} inputs/s, {_fmt(emb.input_tokens_per_s)} input tokens/s")
    errors = summary.overall.requests.by_error
    if errors:
        lines.append("failures: " + ", ".join(f"{k} {v}" for k, v in errors.items()))
    if summary.by_step:
        lines += ["", format_steps(summary.by_step)]
    if summary.slo is not None:
        lines += ["", *format_slo(summary.slo)]
    if summary.capacity is not None:
        lines.append(f"Capacity: {summary.capacity.sentence}")
    if summary.diagnosis is not None:
        lines.append(f"Why the knee is there: {summary.diagnosis.sentence}")
    return "\n".join(lines)


def format_steps(steps: list[Step]) -> str:
    head = (
        f"{'step':>4}{'users':>7}{'ok':>7}{'fail':>6}{'req/s':>8}{'out tok/s':>11}{'tot tok/s':>11}"
        f"{'TTFT mean':>11}{'p50':>8}{'p95':>8}{'p99':>8}{'TPOT p50':>10}{'E2E p50':>9}{'goodput':>9}{'SLO':>11}"
    )
    lines = ["Per step (warm-up of each step excluded; ms unless stated)", head, "-" * len(head)]
    for s in steps:
        t, th, r = s.ttft_ms, s.throughput, s.requests
        slo = VERDICT_WORD[s.verdict.state] if s.verdict is not None else "-"
        slo = "cut" if s.partial else slo  # its verdict, if any, is in the lines below
        good = s.goodput.good_fraction
        lines.append(
            f"{s.step:>4}{s.users:>7}{r.ok:>7}{r.failed:>6}{_fmt(th.requests_per_s, 2):>8}"
            f"{_fmt(th.output_tokens_per_s):>11}{_fmt(th.total_tokens_per_s):>11}{_fmt(t.mean):>11}"
            f"{_fmt(t.p50):>8}{_fmt(t.p95):>8}{_fmt(t.p99):>8}{_fmt(s.tpot_ms.p50, 1):>10}"
            f"{_fmt(s.e2e_ms.p50):>9}{_fmt(None if good is None else good * 100, 0) + '%':>9}{slo:>11}"
        )
    judged = [s for s in steps if s.verdict is not None]
    if judged:
        lines.append(f"SLO: each level's verdict on its own requests, with {judged[0].verdict.confidence:.0%} confidence bounds:")
        lines += [f"  {s.users} users{f' ({s.steps} steps)' if s.steps > 1 else ''}: {describe(s.verdict)}" for s in judged]
    return "\n".join(lines)


VERDICT_WORD = {"met": "met", "missed": "MISSED", "undecided": "undecided"}
