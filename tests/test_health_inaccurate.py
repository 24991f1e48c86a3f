"""The self-health check flags a run whose lag tails are off even when no sustain window filled up.

Eight workers at 43-60 % CPU each were late by whole ITLs now and then (bench/RESULTS.md "Client
speed"): never 80 % of the seconds of a sustain window, so never client bound, yet the run's p99
token lag was far above the limit. The run-wide p99 must say so.
"""

from __future__ import annotations

from bisect import bisect_left

from plugin.health_board import HealthBoard
from plugin.health_monitor import LAG_BOUNDS, HealthMonitor, Limits


def _monitor(token_lags_s: list[float], loop_lags_s: list[float], seconds: int = 20) -> HealthMonitor:
    m = HealthMonitor(Limits(), True, "w", 0)
    for lag in token_lags_s:
        m.token_hist[bisect_left(LAG_BOUNDS, lag)] += 1
    for lag in loop_lags_s:
        m.loop_hist[bisect_left(LAG_BOUNDS, lag)] += 1
    m.cpu_all = [50.0] * seconds
    m.demand_all = [50.0] * seconds
    return m


def test_sparse_late_tokens_make_the_run_inaccurate_without_a_sustained_breach():
    # 2 % of the chunks one ITL (20 ms) late, spread thinly: no second has 1 % of its chunks late
    # for long, but the run's p99 is 20 ms against a 5 ms limit
    m = _monitor([0.0001] * 980 + [0.020] * 20, [0.001] * 200)
    state = m.state()
    assert not state["bound"]
    assert state["inaccurate"] and state["inaccurate_reasons"] == ["token_lag_p99"]
    board = HealthBoard()
    board.reset(Limits())
    board.update("w", state, [])
    summary = board.summary()
    assert summary["inaccurate"] and not summary["bound"]
    assert "late often enough" in summary["advice"]


def test_late_loop_probes_make_the_run_inaccurate():
    m = _monitor([0.0001] * 1000, [0.001] * 980 + [0.030] * 20)
    assert m.state()["inaccurate_reasons"] == ["loop_lag_p99"]
    # one or two late probes of a short run are not evidence enough (p99 over 150 probes is the 2nd worst)
    m = _monitor([0.0001] * 1000, [0.001] * 148 + [0.040] * 2)
    assert m.state()["inaccurate_reasons"] == []


def test_an_accurate_run_is_not_flagged():
    m = _monitor([0.0001] * 995 + [0.020] * 5, [0.001] * 199 + [0.030])
    state = m.state()
    assert not state["inaccurate"] and state["inaccurate_reasons"] == []
    board = HealthBoard()
    board.reset(Limits())
    board.update("w", state, [])
    assert not board.summary()["inaccurate"]
    assert board.advice() == "Every worker stayed within the accuracy limits."
