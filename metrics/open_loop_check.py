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
