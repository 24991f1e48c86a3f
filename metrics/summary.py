"""Records -> summary.json: exact percentiles, throughput over the window, per class and overall.

`summary.json` is a public contract (metrics/schema.py, docs/results.md); pipelines parse it.
Every figure comes from the per-request records with numpy; no rounded histogram is involved.
A scope's statistics (a `Block`) are computed by one function, `Measure.block`, for the summary
and for the web UI's live window (webui/live.py) alike.
"""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metrics.percentiles import percentiles
from metrics.record import NOT_SERVER_FAILURES, SCALAR_COLUMNS, with_all_columns
from metrics.schema import (
    PERCENTILES, Block, Capacity, Concurrency, Distribution, Goodput, OpenLoop, Records, Requests, Slo, Span, Step,
    StreamSpeed, Summary, Throughput, Tokens, Window, as_summary,
)  # fmt: skip
from metrics.slo import good_mask, objective_stats
from metrics.slo import verdicts as slo_verdicts
from metrics.timing import DEFINITIONS, arrival_inputs, arrived_tokens, pooled_itl


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


SCHEDULE_LAG_LIMIT_MS = 10.0  # open loop: sending 1 % of requests later than this is "behind schedule"


def summarize(table: pa.Table, window_start: float, window_end: float, run_start: float | None = None,
              plan=None, objectives=(), target_rate: float | None = None) -> Summary:
    """The whole summary (wall-clock window): definitions, window, overall, by_class, and by_step,
    slo and capacity when the run had steps and objectives."""
    table = with_all_columns(table)  # a results file of an older version lacks the newer columns
    df = table.select(list(SCALAR_COLUMNS)).to_pandas()
    # a retry's request id is the first attempt's plus -rN (users/llm.py)
    df["retry"] = pc.match_substring_regex(table.column("request_id"), r"-r[0-9]+$").to_numpy(zero_copy_only=False)
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
        summary.by_step = by_step(df, plan, run_start, window_end, m)
        if objectives:
            summary.capacity = capacity(summary.by_step, objectives)
    if objectives:
        summary.slo = summary.overall.slo
    if target_rate:
        summary.open_loop = open_loop(summary.overall, target_rate)
    return summary


def open_loop(overall: Block, target_rate: float) -> OpenLoop:
    """Did the client keep to the arrival schedule? Lateness is measured per request
    (t_send - t_intended); a late request still counts from its intended time in *_from_intended_ms."""
    lag_p99 = overall.schedule_lag_ms.p99 if overall.schedule_lag_ms is not None else None
    achieved = overall.throughput.sent_per_s
    reasons = []
    if lag_p99 is not None and lag_p99 > SCHEDULE_LAG_LIMIT_MS:
        reasons.append(f"1 % of requests were sent more than {lag_p99:,.0f} ms after their scheduled time "
                       f"(limit {SCHEDULE_LAG_LIMIT_MS:g} ms): all users busy (--max-concurrency) or the client saturated")
    if achieved is not None and achieved < 0.95 * target_rate:
        reasons.append(f"sent {achieved:,.2f} requests/s of the {target_rate:g} scheduled")
    return OpenLoop(target_rate=target_rate, sent_per_s=achieved, schedule_lag_p99_ms=lag_p99,
                    behind_schedule=bool(reasons), reasons=reasons)  # fmt: skip


def by_step(df: pd.DataFrame, plan, run_start: float, run_end: float, m: Measure) -> list[Step]:
    """One block per load step, over the step's window (its warm-up excluded)."""
    steps = df["step"].to_numpy()
    wall = df["wall_send"].to_numpy()
    out = []
    for index, users in enumerate(plan.levels):
        start, end = plan.window(index, run_start)
        end = min(end, run_end)
        if end <= start:
            break  # the run stopped before this step was measured
        mask = (steps == index) & (wall >= start) & (wall <= end)
        block = m.block(mask, start, end)
        out.append(Step(step=index, users=users, window=Span(start=start, end=end), **dict(block)))
    return out


def capacity(steps: list[Step], objectives) -> Capacity:
    """The highest user level meeting every objective below the lowest level that misses one
    (levels may come in any order: a capacity search bisects)."""
    met = lambda step: step.slo.passed and step.requests.ok > 0  # noqa: E731
    lowest_miss = min((st.users for st in steps if not met(st)), default=None)
    below = [st for st in steps if met(st) and (lowest_miss is None or st.users < lowest_miss)]
    passing = max(below, key=lambda st: st.users, default=None)
    failing = next((st for st in steps if st.users == lowest_miss), None)
    slo_text = " and ".join(o.text for o in objectives)
    if passing is None:
        return Capacity(slo=slo_text, sentence=f"{slo_text} is missed already at the first step")
    users = passing.users
    upper = failing.users if failing else None
    plus_minus = (upper - users) / 2 if upper else None
    th = passing.throughput
    bound = f" (±{plus_minus:g})" if plus_minus else " (the highest step tested)"
    measured = datetime.fromtimestamp(passing.window.end, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sentence = (
        f"{slo_text} holds up to {users} users{bound}: {_fmt(th.total_tokens_per_s)} total tokens/s, "
        f"{_fmt(th.requests_per_s, 2)} requests/s, measured {measured}"
    )
    return Capacity(
        slo=slo_text, users=users, next_failing_users=upper, plus_minus=plus_minus,
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
    errors = summary.overall.requests.by_error
    if errors:
        lines.append("failures: " + ", ".join(f"{k} {v}" for k, v in errors.items()))
    if summary.by_step:
        lines += ["", format_steps(summary.by_step)]
    if summary.slo is not None:
        lines += ["", *format_slo(summary.slo)]
    if summary.capacity is not None:
        lines.append(summary.capacity.sentence)
    return "\n".join(lines)


def format_steps(steps: list[Step]) -> str:
    head = (
        f"{'step':>4}{'users':>7}{'ok':>7}{'fail':>6}{'req/s':>8}{'out tok/s':>11}{'tot tok/s':>11}"
        f"{'TTFT mean':>11}{'p50':>8}{'p95':>8}{'p99':>8}{'TPOT p50':>10}{'E2E p50':>9}{'goodput':>9}{'SLO':>6}"
    )
    lines = ["Per step (warm-up of each step excluded; ms unless stated)", head, "-" * len(head)]
    for s in steps:
        t, th, r = s.ttft_ms, s.throughput, s.requests
        slo = ("ok" if s.slo.passed else "MISS") if s.slo is not None else "-"
        good = s.goodput.good_fraction
        lines.append(
            f"{s.step:>4}{s.users:>7}{r.ok:>7}{r.failed:>6}{_fmt(th.requests_per_s, 2):>8}"
            f"{_fmt(th.output_tokens_per_s):>11}{_fmt(th.total_tokens_per_s):>11}{_fmt(t.mean):>11}"
            f"{_fmt(t.p50):>8}{_fmt(t.p95):>8}{_fmt(t.p99):>8}{_fmt(s.tpot_ms.p50, 1):>10}"
            f"{_fmt(s.e2e_ms.p50):>9}{_fmt(None if good is None else good * 100, 0) + '%':>9}{slo:>6}"
        )
    return "\n".join(lines)
