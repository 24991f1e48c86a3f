"""Did a level of a capacity search in requests/s keep up with its rate?

An open loop sends on its schedule whatever the server does, so a level above the server's capacity
shows in its latencies only where an objective waits for the queue (TTFT, E2E): with only TPOT or
ITL objectives, the requests queue at the server and the level would be met. And a client that
cannot send at the rate offers less load than the level states. Either makes the level a miss,
whatever its verdict on the objectives, with the reason (the same rule live and in summary.json:
metrics.measure.Measure.level):

  the server queued   requests waiting for their first token (sent, no token yet: queued for a
                      slot or in prefill) grew over the level's judged time, from its window's
                      start to its cut, by more than QUEUE_Z x sqrt(waiting at both ends) + 1 (a
                      steady level's count varies about as a Poisson count: the difference of two,
                      sd about the square root of their sum); its margin the share of the level's
                      arrivals that piled up. Waiting, not in flight: a level's requests in flight
                      grow after its change until its longest replies end, queue or not (replies
                      of 10 s and more take longer than a warm-up), while those waiting for a first
                      token stay about rate x TTFT unless the server falls behind (they reach
                      it within about a reply time of the change: the warm-up's, which after a
                      drain lasts --step-warmup from when the level's own load began)
  the client was late more than LATE_SHARE of the level's requests were sent LAG_LIMIT_S or more
                      after their scheduled time (t_send - t_intended): the in-flight cap held them
                      (every user busy), or the client's CPU or event loop fell behind
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from metrics.schema.verdicts import SloVerdict

QUEUE_Z = 3.0
LAG_LIMIT_S = 0.05
LATE_SHARE = 0.10


def in_flight(df: pd.DataFrame, t: float, open_streams: pd.DataFrame | None = None) -> int:
    """Requests sent by `t` and not ended at `t`: the records (ended at send + E2E; a failure
    without one at its send) and the streams still open (sent, not ended)."""
    wall = df["wall_send"].to_numpy(dtype=float)
    end = wall + np.nan_to_num(df["e2e_s"].to_numpy(dtype=float), nan=0.0)
    n = int(np.count_nonzero((wall <= t) & (end > t)))
    if open_streams is not None and len(open_streams):
        n += int(np.count_nonzero(open_streams["wall_send"].to_numpy(dtype=float) <= t))
    return n


def waiting(df: pd.DataFrame, t: float, open_streams: pd.DataFrame | None = None) -> int:
    """Requests sent by `t` without a first token at `t`: the records whose first token came after
    it (one without: until it ended) and the streams still open whose first token had not come
    (OPEN_COLUMNS' ttft_s: none yet, or after `t`)."""
    wall = df["wall_send"].to_numpy(dtype=float)
    e2e = np.nan_to_num(df["e2e_s"].to_numpy(dtype=float), nan=0.0)
    first = wall + np.where(np.isnan(df["ttft_s"].to_numpy(dtype=float)), e2e, df["ttft_s"].to_numpy(dtype=float))
    n = int(np.count_nonzero((wall <= t) & (first > t)))
    if open_streams is not None and len(open_streams):
        sent = open_streams["wall_send"].to_numpy(dtype=float)
        ttft = open_streams["ttft_s"].to_numpy(dtype=float)
        n += int(np.count_nonzero((sent <= t) & (np.isnan(ttft) | (sent + ttft > t))))
    return n


def shortfall(df: pd.DataFrame, mask: np.ndarray, level, open_streams: pd.DataFrame | None = None):
    """(reason, margin) where the level did not keep up with its rate, else None. `df`: every
    record; `mask`: the level's declared set (metrics/verdict.py); `level`: shapes.steps.Level."""
    cut = level.cut if level.cut is not None else level.end
    judged = cut - level.start
    before, after = waiting(df, level.start, open_streams), waiting(df, cut, open_streams)
    grew = after - before
    if judged > 0 and grew > QUEUE_Z * math.sqrt(before + after) + 1:
        return (
            f"the server did not keep up with {level.rate:g} requests/s: {before} requests waiting for their first "
            f"token at the level's start, {after} at its cut {judged:.0f}s later (they queued)",
            -grew / max(1.0, level.rate * judged),
        )
    sub = df[mask]
    lag = (sub["t_send"] - sub["t_intended"]).to_numpy(dtype=float)
    lag = lag[np.isfinite(lag)]
    late = float(np.mean(lag >= LAG_LIMIT_S)) if lag.size else 0.0
    if late > LATE_SHARE:
        cap = level.users
        busy = max(in_flight(df, level.start, open_streams), in_flight(df, cut, open_streams))
        why = (
            f"all {cap} users were busy (the in-flight cap, --max-concurrency)"
            if busy >= cap
            else "the client fell behind (its CPU or event loop)"
        )
        return (
            f"sent late: {late:.0%} of its requests {LAG_LIMIT_S * 1000:g} ms or more after their scheduled time "
            f"at {level.rate:g} requests/s: {why}",
            -(late - LATE_SHARE),
        )
    return None


def with_keep_up(verdict: SloVerdict, found) -> SloVerdict:
    """The verdict, missed where the level did not keep up (`found`: `shortfall`'s answer)."""
    if found is None:
        return verdict
    reason, margin = found
    if verdict.state == "missed":
        return verdict.model_copy(update={"reason": "; ".join(r for r in (verdict.reason, reason) if r)})
    return verdict.model_copy(update={"state": "missed", "passed": False, "margin": margin, "reason": reason})
