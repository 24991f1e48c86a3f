"""A first-token objective judged at a level's cut (metrics/verdict.py): requests sent up to the cut
less the threshold and still waiting for their token are censored, known only to exceed (cut - send). A level meets the objective only if it
would with every censored value at +infinity, misses it when the censored values' minimums prove
it, and is undecided between; the live search (records so far and the streams still open) and the
records after the run give the same set and the same verdict."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd

from metrics.measure import OPEN_COLUMNS, judge_level
from metrics.record import RequestRecord, rows_to_table
from metrics.slo import parse_slo
from metrics.sse import parse_reads
from metrics.verdict import describe, judge, judge_objective, judged_on
from plugin.progress import PROBE_READS, StreamTracker
from shapes.capacity import CapacitySearch
from users.connection import CHUNKED
from users.stream import Exchange

P50 = parse_slo("ttft.p50<1s")[0]


def test_met_needs_the_censored_values_at_infinity():
    fast = np.full(10, 0.1)
    assert judge_objective(P50, fast).state == "met"
    # 10 more still waiting, only 0.2 s after their send: with them at +inf the upper bound is none
    e = judge_objective(P50, fast, censored_s=np.full(10, 0.2))
    assert (e.state, e.upper_ms, e.samples, e.censored) == ("undecided", None, 20, 10)
    assert e.lower_ms is not None and e.lower_ms <= e.value_ms  # the percentile stated, censored at their minimum
    # a few waiting in the tail do not prevent it: the bound's order statistic is an exact value
    e = judge_objective(P50, np.full(40, 0.1), censored_s=[0.05, 0.05])
    assert e.state == "met" and e.upper_ms == 100.0 and e.censored == 2


def test_a_miss_is_proven_by_the_censored_minimums():
    e = judge_objective(P50, np.full(10, 0.1), censored_s=np.full(30, 2.0))
    assert e.state == "missed" and e.lower_ms == 2000.0 and e.upper_ms is None
    assert e.lower_ms <= e.value_ms  # within its bounds (the upper one: none)
    # the same requests had they been waiting only 0.5 s: below the threshold, nothing proven
    assert judge_objective(P50, np.full(10, 0.1), censored_s=np.full(30, 0.5)).state == "undecided"


def test_a_mean_with_censored_values_is_never_met_and_can_be_missed():
    mean = parse_slo("ttft.mean<1s")[0]
    assert judge_objective(mean, np.full(20, 0.1)).state == "met"
    e = judge_objective(mean, np.full(20, 0.1), censored_s=[0.2])
    assert e.state == "undecided" and e.upper_ms is None and e.lower_ms < 1000
    assert judge_objective(mean, np.full(5, 0.1), censored_s=np.full(20, 3.0)).state == "missed"


def test_the_verdict_says_what_was_still_waiting():
    v = judge([P50], {"ttft.p50": np.full(10, 0.1)}, ok=0, failed=0, censored={"ttft.p50": np.full(10, 0.2)})
    assert v.state == "undecided" and "still waiting at the cut" in v.reason
    assert "20 values, 10 still waiting at the cut" in describe(v)
    assert judged_on(v, 1, 20.0) == "0 requests, ttft.p50 on 20 values, 10 still waiting at the cut"
    # one of each in the singular; a level held 42 steps of 2 s says the time it was measured, not
    # "held 42 steps"
    one = judge([P50], {"ttft.p50": np.full(1, 0.1)}, ok=1, failed=0, censored={"ttft.p50": np.empty(0)})
    assert judged_on(one, 1, 10.0) == "1 request"
    two = judge([P50], {"ttft.p50": np.full(1, 0.1)}, ok=2, failed=0)
    assert judged_on(two, 42, 74.0) == "2 requests, ttft.p50 on 1 value, 74 s measured"
    # only waiting ones, none ended: their minimums are judged, not "no request ended"
    v = judge([P50], {}, ok=0, failed=0, censored={"ttft.p50": np.full(8, 5.0)})
    assert v.state == "missed", v


def _record(sent: float, ttft: float, e2e: float, ok: bool = True, error: str = "") -> RequestRecord:
    chunks = [] if math.isnan(ttft) else [ttft, e2e]
    return RequestRecord(
        f"r{sent}",
        "w",
        "chat",
        "long",
        10,
        400,
        step=0,
        wall_send=sent,
        status=200 if ok else 500,
        ok=ok,
        error=error,
        ttft_s=ttft,
        e2e_s=e2e,
        n_chunks=len(chunks),
        chunk_times=chunks,
    )


def test_the_live_search_and_the_records_after_the_run_judge_the_same_set():
    """One level, [2, 10] s, cut at its end; replies of 5 s. Live at 10.5 s: the records of the
    requests that had ended, and the streams still open with their first token if it had come."""
    rng = np.random.default_rng(3)
    records = [_record(2.0 + 0.13 * i, float(rng.choice([0.2, 0.4, 3.0])), 5.0) for i in range(60)]
    records += [
        _record(3.0, float("nan"), 1.0, ok=False, error="http_500"),  # failed by the cut: a failure
        _record(8.0, 0.5, 4.0, ok=False, error="stopped"),  # stopped after the cut, its token before it
        _record(8.5, float("nan"), 2.0, ok=False, error="stopped"),  # no token by the cut: censored
        _record(9.5, 0.1, 5.0),  # sent less than the threshold before the cut: left out
        _record(10.2, 0.1, 5.0),  # sent after the cut: not in the first-token set
    ]
    now = 10.5
    done = [r for r in records if r.wall_send + r.e2e_s <= now]
    still = [r for r in records if r.wall_send + r.e2e_s > now]
    seen = lambda x: x if x == x and x <= now - r.wall_send else float("nan")  # noqa: E731 - the tracker's view at `now`
    report = {"t": now, "step": [], "sent": [], "ttft": [], "ttfa": []}
    for r in still:
        report["step"].append(r.step)
        report["sent"].append(r.wall_send)
        report["ttft"].append(seen(r.ttft_s))
        report["ttfa"].append(seen(r.ttft_s))
    search = CapacitySearch([P50], 10.0, 2.0, None)
    search.run_start, search.levels = 0.0, [4]
    search.open_streams = lambda: [report]
    search.on_rows([r.as_row() for r in done])
    level, live = search.judge(0)
    after = judge_level(rows_to_table([r.as_row() for r in records]), level, [P50])
    assert live.verdict == after.verdict, (live.verdict, after.verdict)
    e = after.verdict.objectives[0]
    # sent from the window's start to the cut less the threshold (1 s)
    sent_by_cut = [r for r in records if 2.0 <= r.wall_send <= 9.0 and not (r.wall_send + r.e2e_s <= 10.0 and not r.ok)]
    waiting = [r for r in sent_by_cut if not (r.wall_send + r.ttft_s <= 10.0)]  # NaN: no token
    assert (e.samples, e.censored) == (len(sent_by_cut), len(waiting)) and e.censored > 0
    assert after.verdict.failed == 1 and after.verdict.requests == sum(
        r.ok and r.wall_send + r.e2e_s <= 10 for r in records
    )
    # the level's TTFT figures (the per-step table's, by_step's) are those of the verdict's set, the
    # waiting ones at their minimum: the table states the verdict's percentile, live as after the run
    for step in (after, live):
        assert step.ttft_ms.count == e.samples and step.ttft_ms.p50 == e.value_ms, (step.ttft_ms, e)
    assert after.ttft_ms.count > after.requests.ok  # not the requests that ended by the cut alone
    # without the open streams, only the requests that had become records: far fewer values
    empty = pd.DataFrame({c: [] for c in OPEN_COLUMNS})
    records_only = judge_level(rows_to_table([r.as_row() for r in done]), level, [P50], empty)
    assert records_only.verdict.objectives[0].samples + 20 < e.samples


def _sse(obj) -> bytes:
    body = b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n" % len(body) + body + b"\r\n"


def test_stream_tracker_finds_the_answer_token_after_a_long_reasoning_preamble():
    """A capacity search judging TTFA reads the first answer token of the streams still open: found
    by an exact parse however long the reasoning before it (PROBE_READS reads are not enough), at
    the time the record will give it; with the step each stream was sent in."""

    def delta(**d):
        return {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}

    ex = Exchange()
    ex.framing, ex.t_send = CHUNKED, 100.0
    rec = RequestRecord("a", "0", "chat", "long", 10, 64, step=3, wall_send=1_800_000_000.0)
    ctx = SimpleNamespace(streams={ex: rec}, finisher=SimpleNamespace(queue=[]))
    reads = [delta(reasoning_content=f" r{i}") for i in range(3 * PROBE_READS)] + [
        delta(content="Yes"),
        delta(content="."),
    ]
    for i, event in enumerate(reads):
        ex.times.append(100.1 + 0.01 * i)
        ex.datas.append(_sse(event))
    parsed, _ = parse_reads(ex.times, ex.datas, True)
    answer = next(c.t for c in parsed.chunks if c.answer) - ex.t_send
    out = StreamTracker(ctx, answers=True).collect(now=1_800_000_001.0)
    assert out["step"] == [3] and math.isclose(out["ttft"][0], 0.1) and out["ttfa"] == [answer]
    assert out["events"] == [len(parsed.chunks)]
    assert math.isnan(
        StreamTracker(ctx).collect(now=1_800_000_001.0)["ttfa"][0]
    )  # not looked for without a TTFA objective
