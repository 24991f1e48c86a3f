"""The parts of a capacity search in requests/s that are arithmetic: the pacer's schedule (each step
at the rate decided when it began, a level after a miss starting once the backlog ended), the
keep-up rule (a level whose server queued or whose client sent late is missed, with the reason),
and the answer in requests/s. No process."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from gevent.event import Event

from metrics.capacity import capacity
from metrics.keep_up import LAG_LIMIT_S, in_flight, shortfall, waiting, with_keep_up
from metrics.slo import parse_slo
from metrics.verdict import judge
from plugin.load_models.rate_search import SearchSchedule
from shapes.steps import Level

pytestmark = pytest.mark.unit


def schedule(rates: dict, step_s: float = 2.0, drains=lambda k: None, in_flight=lambda: 0, ago: float = 100.0):
    """A schedule whose run began `ago` seconds before now (no step to wait for), constant arrivals."""
    t0 = time.perf_counter() - ago
    asked = []

    def rate_for(k):
        asked.append(k)
        return rates.get(k)

    return SearchSchedule(rate_for, step_s, "constant", 1.0, 7, t0, Event(), drains, in_flight), t0, asked


def take_all(s: SearchSchedule, t0: float, limit: int = 10_000) -> list[float]:
    out = []
    for _ in range(limit):
        t = s.take()
        if t > time.perf_counter() + 1000:  # the search is over: a time no user reaches
            break
        out.append(t - t0)
    return out


def test_each_step_sends_its_rate_from_its_start_and_the_schedule_ends_with_the_search():
    s, t0, asked = schedule({0: 5.0, 1: 10.0, 2: 10.0, 3: 2.5})
    times = np.array(take_all(s, t0))
    steps = (times // 2.0).astype(int)
    # the first step starts after the users' spawn second (shapes/arrivals.py START_DELAY_S), the others at their start
    assert [int((steps == k).sum()) for k in range(4)] == [4, 20, 20, 5]
    assert times[steps == 1][0] == pytest.approx(2.0) and times[steps == 3][0] == pytest.approx(6.0)
    assert np.allclose(np.diff(times[steps == 1]), 0.1)
    assert asked == [0, 1, 2, 3, 4] and s.over  # step 4's rate is None: the search ended


def test_a_level_after_a_miss_waits_for_the_backlog_and_starts_when_it_ended():
    """Step 1 begins a level after a miss (drains: 1): while requests are in flight nothing is sent;
    once none is, the level's schedule starts then, not at the step's (long past) start."""
    flight = [3]

    def in_flight():
        flight[0] = max(0, flight[0] - 1)  # the backlog ends as the pacer looks
        return flight[0]

    s, t0, _ = schedule(
        {0: 5.0, 1: 4.0, 2: 4.0}, step_s=2.0, drains=lambda k: 1 if k >= 1 else None, in_flight=in_flight, ago=3.0
    )
    times = take_all(s, t0, limit=6)
    assert times[:4] == pytest.approx([1.2, 1.4, 1.6, 1.8])  # step 0: from START_DELAY_S, a gap of 0.2 s
    after = times[4:]
    assert after[0] > 3.0  # not from the step's start at 2 s: from when the backlog had ended, after now
    assert np.allclose(np.diff(after), 0.25)
    assert s.drained == 1  # once per level: the next steps of the same level do not wait again


def frame(sends, ttft, lag=None, reply_s: float = 0.45) -> pd.DataFrame:
    """Records sent at `sends`, their first tokens `ttft` later and their ends `reply_s` after that."""
    sends, ttft = np.asarray(sends, dtype=float), np.asarray(ttft, dtype=float)
    lag = np.zeros_like(sends) if lag is None else np.asarray(lag, dtype=float)
    return pd.DataFrame(
        {"wall_send": sends, "ttft_s": ttft, "e2e_s": ttft + reply_s, "t_send": sends, "t_intended": sends - lag}
    )


LEVEL = Level(first=0, last=0, users=64, begin=0.0, start=2.0, end=12.0, cut=12.0, rate=10.0)


def test_a_steady_level_keeps_up_and_a_queue_that_grows_is_a_miss_with_its_reason():
    sends = np.arange(0.0, 12.0, 0.1)  # 10 requests/s
    steady = frame(sends, np.full(sends.size, 0.05))  # first token 50 ms, end 0.5 s after the send
    assert (in_flight(steady, 6.0), waiting(steady, 6.0)) == (5, 1)
    assert shortfall(steady, np.ones(sends.size, bool), LEVEL) is None
    # replies of 8 s: the requests in flight grow through the whole level (each ends long after the
    # cut), with no queue: the first tokens keep coming 50 ms after each send
    long = frame(sends, np.full(sends.size, 0.05), reply_s=8.0)
    assert (
        in_flight(long, 12.0) > 3 * in_flight(long, 2.0) and shortfall(long, np.ones(sends.size, bool), LEVEL) is None
    )
    # served at 8 requests/s: the k-th waits k x (1/8 - 1/10) more; the queue grows by 2 a second
    queued = frame(sends, 0.05 + np.arange(sends.size) * (1 / 8 - 1 / 10))
    found = shortfall(queued, np.ones(sends.size, bool), LEVEL)
    assert found is not None and found[1] < 0
    assert "the server did not keep up with 10 requests/s" in found[0] and "(they queued)" in found[0]
    # the streams still open at the cut without a first token wait there (a live judgement has no record of them)
    opened = pd.DataFrame({"wall_send": np.arange(2.0, 12.0, 0.5), "ttft_s": np.nan})
    assert waiting(steady, 12.0, opened) == waiting(steady, 12.0) + 20


def test_a_client_that_sends_late_is_a_miss_naming_the_cap_or_the_client():
    sends = np.arange(0.0, 12.0, 0.1)
    lag = np.where(np.arange(sends.size) % 4 == 0, 2 * LAG_LIMIT_S, 0.0)  # a quarter sent late
    late = frame(sends, np.full(sends.size, 0.05), lag)
    found = shortfall(late, np.ones(sends.size, bool), LEVEL)
    assert found is not None and "sent late: 25% of its requests 50 ms or more after their scheduled time" in found[0]
    assert "the client fell behind" in found[0]
    capped = shortfall(late, np.ones(sends.size, bool), Level(0, 0, 5, 0.0, 2.0, 12.0, 12.0, rate=10.0))
    assert "all 5 users were busy (the in-flight cap, --max-concurrency)" in capped[0]
    # a verdict met on its objectives is missed for it, its margin the shortfall's; a miss keeps its own margin
    slo = parse_slo("tpot.p50<1s")
    met = judge(slo, {slo[0].key: np.full(100, 0.01)}, 100, 0)
    assert met.state == "met"
    missed = with_keep_up(met, found)
    assert (missed.state, missed.passed, missed.margin, missed.reason) == ("missed", False, found[1], found[0])
    assert with_keep_up(met, None) is met


def level(rate: float, state: str, margin: float, reason: str = "") -> SimpleNamespace:
    verdict = SimpleNamespace(state=state, margin=margin, requests=100, confidence=0.9, objectives=[], reason=reason)
    return SimpleNamespace(
        users=512,
        rate=rate,
        partial=False,
        steps=1,
        verdict=verdict,
        throughput=SimpleNamespace(total_tokens_per_s=1000.0, output_tokens_per_s=100.0, requests_per_s=rate),
        window=SimpleNamespace(end=1.7e9),
    )


def test_the_answer_of_rate_levels_is_in_requests_per_second_with_its_interval():
    steps = [
        level(2, "met", 0.9),
        level(8, "met", 0.4),
        level(16, "missed", -2.0, "the server did not keep up"),
        level(12, "missed", -0.3),
        level(10, "met", 0.1),
    ]
    cap = capacity(steps, parse_slo("ttft.p95<1s"), {"policy": "walk", "precision": 0.1, "levels": []})
    assert (cap.unit, cap.users, cap.rate, cap.next_failing_rate, cap.plus_minus) == ("rate", None, 10, 12, 1)
    assert cap.width == pytest.approx(0.2)
    assert cap.sentence.startswith("ttft.p95<1s holds up to 10 requests/s (from 10 to under 12 requests/s")
    missed_first = capacity(steps[2:4], parse_slo("ttft.p95<1s"))
    assert missed_first.rate is None and missed_first.next_failing_rate == 12


def test_the_live_view_says_the_bracket_in_requests_per_second():
    from webui.live_steps import search_text

    levels = [
        {"users": 512, "rate": 8.0, "state": "met", "margin": 0.4, "ended": "decided", "seconds": 6.0, "looks": 1},
        {"users": 512, "rate": 16.0, "state": "missed", "margin": -2.0, "ended": "decided", "seconds": 4.0, "looks": 1},
    ]
    assert search_text({"levels": levels}, 1) == "decided in 4s (1 look); bracket 8..16 requests/s (100%)"


def test_the_curves_crossing_of_a_search_in_requests_per_second_is_stated_in_requests_per_second():
    from argparse import Namespace

    from plugin.plan import RunPlan

    p = RunPlan.from_options(
        Namespace(find_capacity=True, capacity_unit="rate", slo="ttft.p95<1s", step_time="10s", step_warmup="2s")
    )
    search = p.load.new_search(p, distributed=False)
    search.crossing = {  # the policy's, in its numbers: thousandths of a request per second
        "users": 7620.0,
        "lower": 7400.0,
        "upper": None,
        "confidence": 0.8,
        "between": [7250, 8000],
        "within_precision": False,
    }
    record = search.record()
    assert record["crossing"] == {**search.crossing, "users": 7.62, "lower": 7.4, "between": [7.25, 8.0]}
    steps = [level(5, "met", 0.4), level(8, "missed", -0.1)]
    cap = capacity(steps, parse_slo("ttft.p95<1s"), record)
    assert "; the curve through the levels crosses it at 7.62 requests/s (80% interval 7.4 to above the levels" in (
        cap.sentence
    )
    assert "between 7.25 and 8)" in cap.sentence and cap.crossing.between == [7.25, 8.0]
