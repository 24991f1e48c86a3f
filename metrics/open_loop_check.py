"""Did an open loop's client keep to its arrival schedule? summary.json's `open_loop` section: the
lateness of sends and the arrivals sent against those the schedule had due in the window."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from metrics.schema.client_health import OpenLoop
from metrics.schema.figures import Block

SCHEDULE_LAG_LIMIT_MS = 10.0  # open loop: sending 1 % of requests later than this is "behind schedule"
INTENDED_SLACK_S = 0.01
SENT_SHARE = 0.95  # open loop: sending fewer of the arrivals due in the window than this share is "behind schedule"
SAME_INSTANT_S = 0.001  # an end and a due time this close are one instant
ALL_BUSY_SHARE = 0.9  # late arrivals due while every user was busy, at least this share: the in-flight cap held them


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


def busy_when_due(df: pd.DataFrame, table: pa.Table) -> tuple[int, float | None]:
    """(the most requests the run had in flight, the share of its late arrivals that came due while
    that many were in flight). An open loop's arrival waits only for a free user: under the in-flight
    cap (--max-concurrency, or the web form's user count) the user that sends a late arrival was busy
    until just before, so at the arrival's due time every user was busy and the count in flight was
    the cap, the run's highest. A client that fell behind (its CPU, its event loop) sends late with
    users free. A request is in flight from its send (before its connect) to its end; the share is
    None without a late arrival."""
    if not len(df):
        return 0, None
    connect = np.nan_to_num(table.column("connect_s").to_numpy(zero_copy_only=False).astype(float), nan=0.0)
    start = df["wall_send"].to_numpy(dtype=float)
    lag = (df["t_send"] - df["t_intended"]).to_numpy(dtype=float)
    end = start + connect + np.nan_to_num(df["e2e_s"].to_numpy(dtype=float), nan=0.0)
    starts, ends = np.sort(start), np.sort(end)
    # the most in flight: at each send, the requests sent by then and not ended
    peak = int((np.searchsorted(starts, start, side="right") - np.searchsorted(ends, start, side="right")).max())
    late = lag * 1000.0 > SCHEDULE_LAG_LIMIT_MS
    if not late.any():
        return peak, None
    due = start[late] + connect[late] - lag[late]  # the arrival's time, before its own send
    # busy at a due time: sent before it, ended no earlier than it (within the clocks' rounding): a user
    # freed at that instant is the one that sends another late arrival then
    busy = np.searchsorted(starts, due, side="left") - np.searchsorted(ends, due - SAME_INSTANT_S, side="left")
    return peak, float(np.mean(busy >= peak))


def open_loop(
    overall: Block,
    target_rate: float,
    scheduled: int | None = None,
    sent: int | None = None,
    busy: tuple[int, float | None] | None = None,
) -> OpenLoop:
    """Did the client keep to the arrival schedule? Lateness is measured per request
    (t_send - t_intended); a late request still counts from its intended time in *_from_intended_ms.
    The arrivals sent are compared with those the schedule had due in the window (`scheduled`), not
    the rate with the target: over a short window a low rate may have no arrival due at all. Why
    it was behind (`busy`, from `busy_when_due`): the in-flight cap the run was given, its users all
    busy (`capped_at`, the load asked for), or the client itself that fell behind."""
    lag_p99 = overall.schedule_lag_ms.p99 if overall.schedule_lag_ms is not None else None
    peak, share = busy if busy is not None else (None, None)
    capped = share is not None and share >= ALL_BUSY_SHARE
    cause = (
        f"all {peak:,} users were busy when {share:.0%} of the late arrivals came due: the in-flight cap "
        f"(--max-concurrency; in the web UI the user count) held them back"
        if capped
        else "the client fell behind with users free (its CPU or event loop: see client_bound)"
        if share is not None
        else "all users busy (--max-concurrency) or the client saturated"
    )
    reasons = []
    if lag_p99 is not None and lag_p99 > SCHEDULE_LAG_LIMIT_MS:
        reasons.append(
            f"1 % of requests were sent more than {lag_p99:,.0f} ms after their scheduled time "
            f"(limit {SCHEDULE_LAG_LIMIT_MS:g} ms): {cause}"
        )
    if scheduled is not None and sent is not None:
        sent = min(sent, scheduled)  # one just past the window's edge, matched within the slack
    if scheduled is not None and sent is not None and sent < SENT_SHARE * scheduled:
        reasons.append(
            f"sent {sent:,} of the {scheduled:,} arrivals the schedule had due in the window "
            f"({target_rate:g} requests/s): {cause}"
        )
    return OpenLoop(
        target_rate=target_rate,
        sent_per_s=overall.throughput.sent_per_s,
        scheduled=scheduled,
        sent=sent,
        schedule_lag_p99_ms=lag_p99,
        behind_schedule=bool(reasons),
        reasons=reasons,
        capped_at=peak if capped and reasons else None,
    )
