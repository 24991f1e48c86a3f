"""One block of the live view: summary.json's block (`metrics.measure.Measure.block`) of the
records in a span, with what the streams still open delivered in it (webui/live.py's module doc
says what is counted where), for a window of the page or a load step not yet final.

The open streams of every load process (plugin/progress.py reports, merged) are a `Flight`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from metrics.record import SCALAR_COLUMNS, arrow_schema
from webui.live_table import rows_to_live_table

if TYPE_CHECKING:  # pyarrow: loaded with the results' modules where records are kept (plugin/hooks.py)
    import pyarrow as pa

FLIGHT_FIELDS = ("cls", "sent", "chars", "first", "ttft", "last", "events")  # of a report's fields (plugin/progress.py)
PROMPT_TOKENS_PER_CHAR = 0.25  # before any record says better (core/text.py's estimate)


class Flight:
    """The open streams of every load process (plugin/progress.py entries, merged) as arrays."""

    def __init__(self, reports=()):
        cols = {k: [] for k in FLIGHT_FIELDS}
        for r in reports:
            for k in FLIGHT_FIELDS:
                cols[k].extend(r[k])
        self.cls = np.asarray(cols["cls"], dtype=object)
        self.sent, self.chars, self.first, self.ttft, self.last, self.events = (
            np.asarray(cols[k], dtype=float) for k in ("sent", "chars", "first", "ttft", "last", "events")
        )
        # the step each was sent in and its first answer token: what a capacity search's level judges
        # its first-token objectives on (metrics.measure.OPEN_COLUMNS); NaN where a report has none
        self.step, self.ttfa = (
            np.asarray([x for r in reports for x in r.get(k, [math.nan] * len(r["sent"]))], dtype=float)
            for k in ("step", "ttfa")
        )

    def __len__(self) -> int:
        return len(self.cls)

    def events_in(self, start: float, end: float) -> np.ndarray:
        """Each stream's token events that arrived in [start, end] (spread evenly between its first
        token and its last counted read)."""
        first, last, n = self.first, self.last, self.events
        has = np.isfinite(first) & (n > 0)
        span = np.where(has, last - first, 0.0)
        lo, hi = np.maximum(first, start), np.minimum(last, end)
        share = np.where(
            span > 0,
            np.clip(hi - lo, 0.0, None) / np.where(span > 0, span, 1.0),
            ((first >= start) & (first <= end)).astype(float),
        )
        return np.where(has, n * share, 0.0)

    def first_in(self, start: float, end: float) -> np.ndarray:
        return np.isfinite(self.first) & (self.first >= start) & (self.first <= end)

    def open_columns(self):
        """The streams as metrics.measure.OPEN_COLUMNS (a frame), as a capacity search takes them."""
        import pandas as pd

        return pd.DataFrame({"step": self.step, "wall_send": self.sent, "ttft_s": self.ttft, "ttfa_s": self.ttfa})


def measure(table: pa.Table, objectives):
    """A metrics.measure.Measure over the records of `table`, and their end times; (None, empty)
    when there are none."""
    if table.num_rows == 0:
        return None, np.empty(0)
    import pyarrow.compute as pc

    from metrics.measure import Measure  # pandas: loaded by the web UI's process at its first snapshot

    df = table.select(list(SCALAR_COLUMNS)).to_pandas()
    m = Measure(df, table.column("chunk_times").combine_chunks(), objectives)
    m.input_chars = table.column("input_chars").to_numpy(zero_copy_only=False).astype(float)
    m.chunks = (
        pc.list_value_length(table.column("chunk_times")).fill_null(0).to_numpy(zero_copy_only=False).astype(float)
    )
    return m, table.column("ended").to_numpy()


def ratios_of(m) -> dict:
    """Tokens per token event (chunk) and prompt tokens per prompt character, from the recent
    successful records: what an open stream's counts stand for."""
    if m is None:
        return {"tokens_per_event": 1.0, "prompt_tokens_per_char": PROMPT_TOKENS_PER_CHAR}
    ok = m.ok
    out = m.df["output_tokens"].to_numpy(dtype=float)
    prompt = m.df["prompt_tokens"].to_numpy(dtype=float)
    sel = ok & (m.chunks > 0) & (out > 0)
    per_event = float(out[sel].sum() / m.chunks[sel].sum()) if sel.any() else 1.0
    sel = ok & (prompt >= 0) & (m.input_chars > 0)
    per_char = float(prompt[sel].sum() / m.input_chars[sel].sum()) if sel.any() else PROMPT_TOKENS_PER_CHAR
    return {"tokens_per_event": per_event, "prompt_tokens_per_char": per_char}


def live_block(
    m, ended: np.ndarray, start: float, end: float, group, flight: Flight, flight_group, ratios: dict, objectives=()
) -> dict:
    """One class's (or the overall) statistics over [start, end]: summary.json's block (`m`, a
    metrics.measure.Measure) of the records that ended in the window, with tokens counted where
    they arrived and TTFT where the first token came, the open streams included (module doc).
    `requests.ended` stands for summary.json's `requests.sent`; no `sent_per_s`, no token sources."""
    fsel = np.ones(len(flight), dtype=bool) if flight_group is None else flight_group
    seconds = max(0.0, end - start)
    # TTFT where the first token came: the records' and the open streams' (their TTFT objectives
    # are judged on these, by the one verdict rule: metrics/verdict.py)
    first_in = flight.first_in(start, end) & fsel
    if m is not None:
        g = np.ones(len(m.df), dtype=bool) if group is None else group
        in_window = g & (ended >= start) & (ended <= end)
        first = m.df["wall_send"].to_numpy() + m.df["ttft_s"].to_numpy()
        rec_ttft = m.df["ttft_s"].to_numpy()[g & m.ok & (first >= start) & (first <= end)]
        ttft = np.concatenate([rec_ttft, flight.ttft[first_in]])
        out = m.block(in_window, start, end, group=g, first_tokens=ttft).model_dump()
    else:
        ttft = flight.ttft[first_in]
        out = empty_block(seconds, objectives, first_tokens=ttft)
    # the open streams: tokens that arrived, prompts whose first token came
    add_open_streams(out, flight, start, end, ratios, ttft, fsel)
    requests = out["requests"]
    out["requests"] = {"ended": requests.pop("sent"), **requests}
    out["throughput"].pop("sent_per_s", None)
    out["tokens"].pop("source", None)
    return out


def add_open_streams(
    block: dict,
    flight: Flight,
    start: float,
    end: float,
    ratios: dict,
    ttft_s: np.ndarray,
    select=None,
    method: str = "linear",
) -> None:
    """Add to a block what the open streams (`select` of `flight`) delivered in [start, end]:
    output tokens that arrived, prompt tokens of first tokens that came; TTFT becomes the
    distribution of `ttft_s` (percentiles by `method`: a load level's are order statistics)."""
    from metrics.measure import distribution  # pandas

    sel = np.ones(len(flight), dtype=bool) if select is None else select
    first_in = flight.first_in(start, end) & sel
    out_tokens = float(flight.events_in(start, end)[sel].sum()) * ratios["tokens_per_event"]
    prompt_tokens = float(flight.chars[first_in].sum()) * ratios["prompt_tokens_per_char"]
    block["ttft_ms"] = distribution(ttft_s, method).model_dump()
    th, seconds = block["throughput"], max(0.0, end - start)
    if seconds > 0:
        th["output_tokens_per_s"] = (th["output_tokens_per_s"] or 0.0) + out_tokens / seconds
        th["total_tokens_per_s"] = (th["total_tokens_per_s"] or 0.0) + (out_tokens + prompt_tokens) / seconds
    block["open_streams"] = {
        "counted": int(np.sum(sel)),
        "first_token_in_window": int(np.sum(first_in)),
        "output_tokens": out_tokens,
        "prompt_tokens": prompt_tokens,
    }


def empty_block(seconds: float, objectives=(), first_tokens: np.ndarray | None = None) -> dict:
    """A block of no records (what summary.json's block says for an empty window); its TTFT
    objectives judged on `first_tokens` when given (Measure.block)."""
    import pyarrow as pa

    from metrics.measure import Measure

    df = rows_to_live_table([]).select(list(SCALAR_COLUMNS)).to_pandas()
    m = Measure(df, pa.array([], arrow_schema().field("chunk_times").type), objectives)
    return m.block(np.zeros(0, dtype=bool), 0.0, seconds, first_tokens=first_tokens).model_dump()
