"""The statistics of a scope of records (a `Block`: latency distributions, outcomes, throughput,
goodput, tokens) and of a load level (a `Step` with its one verdict).

Every figure comes from the per-request records with numpy; no rounded histogram is involved.
A scope's statistics are computed by one function, `Measure.block`, for the summary
(metrics/summary.py) and for the web UI's live window (webui/live.py) alike; a level's by
`Measure.level`, for summary.json's by_step and for a capacity search while it runs (`judge_level`,
with the streams still open at the level's cut).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metrics.breakdown import groups
from metrics.keep_up import shortfall, with_keep_up
from metrics.percentiles import LINEAR, ORDER, percentiles
from metrics.record import NOT_SERVER_FAILURES, SCALAR_COLUMNS, with_all_columns
from metrics.schema.base import PERCENTILES
from metrics.schema.figures import (
    Block,
    Distribution,
    Embeddings,
    Goodput,
    Requests,
    Span,
    Step,
    StreamSpeed,
    Throughput,
    Tokens,
)
from metrics.slo import good_mask
from metrics.timing import arrival_inputs, arrived_tokens, pooled_itl
from metrics.ttft_split import ttft_split
from metrics.verdict import CONFIDENCE, FIRST_TOKEN, judge, level_values

# the columns of the streams still open that a level judged live takes (plugin/progress.py reports)
OPEN_COLUMNS = ("step", "wall_send", "ttft_s", "ttfa_s")


def distribution(values_s, method: str = LINEAR) -> Distribution:
    """{count, mean, min, p50, p90, p95, p99, p99.9, max} in milliseconds; None when empty.
    `method`: the percentiles' definition (metrics/percentiles.py; ORDER for a load level)."""
    v = np.asarray(values_s, dtype=float)
    v = v[~np.isnan(v)] * 1000.0
    if v.size == 0:
        return Distribution()
    qs = percentiles(v, [q for _, q in PERCENTILES], method)
    return Distribution(
        count=int(v.size),
        mean=float(v.mean()),
        min=float(v.min()),
        max=float(v.max()),
        **{name: x for (name, _), x in zip(PERCENTILES, qs)},
    )


def section(
    df: pd.DataFrame,
    finished_in_window: pd.DataFrame,
    itl_s: np.ndarray,
    window_s: float,
    tokens_in_window: tuple[float, float],
    method: str = LINEAR,
) -> Block:
    """One block's figures. Latency and outcomes come from `df`, the requests sent inside the
    window; request throughput from `finished_in_window`, the successful requests that completed
    inside it, whenever they were sent; token throughput from `tokens_in_window`, (output, prompt)
    tokens that arrived inside it (metrics.timing.arrived_tokens). Both frames carry a boolean
    column `good` (succeeded and met every SLO; equal to `ok` without SLOs). `method`: the
    percentiles' definition (ORDER for a load level: metrics/percentiles.py)."""
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
        ttft_ms=distribution(ok["ttft_s"], method),
        tpot_ms=distribution(ok["tpot_s"], method),
        itl_ms=distribution(itl_s, method),
        e2e_ms=distribution(ok["e2e_s"], method),
        ttfa_ms=distribution(ok["ttfa_s"], method),
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
            inputs=int(ok["inputs"].sum()),
            batch_size_mean=float(ok["inputs"].mean()),
            inputs_per_s=per_s(int(finished_in_window["inputs"].sum())),
            input_tokens_per_s=per_s(prompt),
        )
    out.ttft_split = ttft_split(ok, method)  # where the server reported each request's own timing
    lag = (ok["t_send"] - ok["t_intended"]).to_numpy()
    if np.isfinite(lag).any():  # open loop: latency from the intended send time as well
        out.schedule_lag_ms = distribution(df["t_send"] - df["t_intended"], method)
        out.ttft_from_intended_ms = distribution(ok["ttft_s"] + lag, method)
        out.e2e_from_intended_ms = distribution(ok["e2e_s"] + lag, method)
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

    def block(
        self,
        select: np.ndarray,
        start: float,
        end: float,
        group: np.ndarray | bool = True,
        tokens: tuple[float, float] | None = None,
        method: str = LINEAR,
        judged: bool = True,
        first_tokens: np.ndarray | None = None,
    ) -> Block:
        """The statistics of the records in `select` (latency, outcomes: the requests sent in
        [start, end]); request throughput from the successful records of `group` that completed
        in [start, end]; token throughput from the tokens of `group` that arrived in it, unless
        `tokens` gives (output, prompt) counted otherwise (the live view counts at completion);
        `method`: the percentiles' definition (metrics/percentiles.py). With objectives and
        `judged`, the block's `slo` is the one verdict (metrics/verdict.py) of those records, its
        TTFT objectives on `first_tokens` when given (the live view: the first tokens that came in
        its window, the open streams' included)."""
        itl = pooled_itl(self.chunk_times.filter(pa.array(select & self.ok)))
        sub = self.df[select]
        finished = self.df[group & self.ok & (self.done >= start) & (self.done <= end)]
        if tokens is None:
            output, prompt = arrived_tokens([start, end], *self.arrival, self.chunk_times, group & self.counted)
            tokens = (float(output[0]), float(prompt[0]))
        out = section(sub, finished, itl, max(0.0, end - start), tokens, method)
        if self.objectives and judged:
            ok = sub[sub["ok"]]
            values = level_values(self.objectives, ok, itl)
            if first_tokens is not None:
                values.update({o.key: first_tokens for o in self.objectives if o.metric == "ttft"})
            out.slo = judge(self.objectives, values, len(ok), out.requests.failed)
        return out

    def by(self, column: str, select: np.ndarray, start: float, end: float) -> dict[str, Block]:
        """One block per value of a record column (`request_class`: summary.json's by_class;
        `backend`: by_backend) among the records in `select`: the one grouping of every breakdown."""
        return {
            name: self.block(select & mask, start, end, mask)
            for name, mask in groups(self.df[column].to_numpy(), select)
        }

    def _ended_by(self, cut: float) -> np.ndarray:
        """Each record had ended by `cut` (a failure ends where it failed; no end time: at its send)."""
        wall = self.df["wall_send"].to_numpy()
        return wall + np.nan_to_num(self.df["e2e_s"].to_numpy(dtype=float), nan=0.0) <= cut

    def in_level(self, level) -> np.ndarray:
        """The level's declared set (metrics/verdict.py): the requests of its steps sent in its
        window and, when it has a cut, ended by the cut."""
        wall = self.df["wall_send"].to_numpy()
        steps = self.df["step"].to_numpy()
        mask = (steps >= level.first) & (steps <= level.last) & (wall >= level.start) & (wall <= level.end)
        if level.cut is not None:
            mask &= self._ended_by(level.cut)
        return mask

    def first_tokens(self, level, open_streams: pd.DataFrame | None = None) -> tuple[dict, dict]:
        """A level with a cut: ({objective key: exact values}, {key: censored minimums}) of each
        first-token objective over the requests of its steps sent from its window's start to its
        cut less the objective's threshold (metrics/verdict.py), from the records and the streams
        still open (OPEN_COLUMNS; none after the run). A request that had ended in failure by the
        cut is left to the failures; one with its token by the cut gives its value; any other is
        censored at (cut - send), at least the threshold."""
        cut, df = level.cut, self.df
        n_open = 0 if open_streams is None else len(open_streams)

        def column(name: str) -> np.ndarray:
            own = df[name].to_numpy(dtype=float)
            return own if not n_open else np.concatenate([own, open_streams[name].to_numpy(dtype=float)])

        wall, steps = column("wall_send"), column("step")
        ended = np.concatenate([self._ended_by(cut), np.zeros(n_open, dtype=bool)])
        ok = np.concatenate([self.ok, np.zeros(n_open, dtype=bool)])
        done = ended & ok
        sent = (steps >= level.first) & (steps <= level.last) & (wall >= level.start) & ~(ended & ~ok)
        values, censored = {}, {}
        for o in self.objectives:
            if o.metric not in FIRST_TOKEN:
                continue
            t = column(f"{o.metric}_s")
            if o.metric == "ttfa":  # a successful reply without an answer token: an infinite TTFA (metrics/slo.py)
                t = np.where(done, np.nan_to_num(t, nan=np.inf), t)
            sel = sent & (wall <= cut - o.threshold_s)
            exact = sel & (done | (wall + t <= cut))
            values[o.key] = t[exact]
            censored[o.key] = (cut - wall)[sel & ~exact]
        return values, censored

    def level(self, level, open_streams: pd.DataFrame | None = None) -> Step:
        """A load level's statistics and its one verdict, both over its declared set; its
        percentiles are order statistics, as its verdict's (metrics/percentiles.py ORDER). A
        level with a cut judges its first-token objectives on first tokens (`first_tokens`)."""
        mask = self.in_level(level)
        block = self.block(mask, level.start, level.end, method=ORDER, judged=False)
        verdict = None
        if self.objectives:
            sub = self.df[mask]
            ok = sub[sub["ok"]]
            itl = pooled_itl(self.chunk_times.filter(pa.array(mask & self.ok)))
            values, censored = level_values(self.objectives, ok, itl), {}
            if level.cut is not None:
                exact, censored = self.first_tokens(level, open_streams)
                values.update(exact)
                # the level's TTFT (TTFA) figures are those of the set its verdict judged, the waiting
                # values at their minimum, so the per-step table states the verdict's percentile; with two
                # objectives on one metric, the first one's set
                judged = {}
                for o in self.objectives:
                    if o.metric in FIRST_TOKEN:
                        judged.setdefault(o.metric, o.key)
                for metric, key in judged.items():
                    both = np.concatenate([exact[key], censored[key]])
                    setattr(block, f"{metric}_ms", distribution(both[np.isfinite(both)], ORDER))
            # an adaptive capacity search's level: the confidence of each of its looks (shapes/sequential.py)
            confidence = level.confidence or CONFIDENCE
            verdict = judge(self.objectives, values, len(ok), block.requests.failed, confidence, censored=censored)
            if level.rate is not None and level.cut is not None:  # a search in requests/s: did it keep up?
                verdict = with_keep_up(verdict, shortfall(self.df, mask, level, open_streams))
        return Step(
            step=level.first,
            users=level.users,
            rate=level.rate,
            window=Span(start=level.start, end=level.end),
            steps=level.steps,
            cut=level.cut,
            verdict=verdict,
            **dict(block),
        )


def records_frame(table: pa.Table) -> pd.DataFrame:
    df = table.select(list(SCALAR_COLUMNS)).to_pandas()
    # a retry's request id is the first attempt's plus -rN (plugin/users.py)
    df["retry"] = pc.match_substring_regex(table.column("request_id"), r"-r[0-9]+$").to_numpy(zero_copy_only=False)
    return df


def judge_level(rows: pa.Table, level, objectives, open_streams: pd.DataFrame | None = None) -> Step:
    """A level judged from records holding (at least) its requests and the streams still open
    (OPEN_COLUMNS): what a capacity search decides on while the run goes, computed as summary.json's
    by_step computes it from the records after the run."""
    rows = with_all_columns(rows)
    return Measure(records_frame(rows), rows.column("chunk_times"), objectives).level(level, open_streams)
