"""The self-health check flags a run whose lag tails are off even when no sustain window filled up.

Eight workers at 43-60 % CPU each were late by whole ITLs now and then (bench/RESULTS.md "Client
speed"): never 80 % of the seconds of a sustain window, so never client bound, yet the run's p99
token lag was far above the limit. The run-wide p99 must say so.
"""

from __future__ import annotations

import time
from bisect import bisect_left

from plugin.health_board import HealthBoard
from plugin.health_monitor import LAG_BOUNDS, HealthMonitor, Limits


def _monitor(
    token_lags_s: list[float], loop_lags_s: list[float], seconds: int = 20, measured: bool = True
) -> HealthMonitor:
    m = HealthMonitor(Limits(), measured, "w", 0)
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


def test_late_loop_probes_make_the_run_inaccurate_against_a_real_server():
    # without the simulator's timestamps the loop's lateness is the evidence there is
    m = _monitor([], [0.001] * 980 + [0.030] * 20, measured=False)
    assert m.state()["inaccurate_reasons"] == ["loop_lag_p99"]
    # one or two late probes of a short run are not evidence enough (p99 over 150 probes is the 2nd worst)
    m = _monitor([], [0.001] * 148 + [0.040] * 2, measured=False)
    assert m.state()["inaccurate_reasons"] == []
    # with them, the tokens themselves say whether the loop's lateness reached the reads
    m = _monitor([0.0001] * 1000, [0.001] * 980 + [0.030] * 20)
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


def _second(cpu: float, loop_lag_ms: float, late_share: float, t: float, tokens: int = 5000) -> dict:
    return {
        "t": t,
        "cpu": cpu,
        "loop_lag_p99_ms": loop_lag_ms,
        "loop_lag_max_ms": loop_lag_ms,
        "runq_pct": 0.0,
        "demand": cpu,
        "host_pressure": None,
        "tokens": tokens,
        "token_lag_p99_ms": 0.05 if not late_share else 20.0,
        "token_lag_over_share": late_share,
    }


def test_high_cpu_and_loop_lag_with_tokens_on_time_is_not_bound_when_tokens_are_measured():
    # four workers at 3,600 streams: 79-85 % CPU and loop-lag p99 33-106 ms for the whole window,
    # while the simulator's timestamps showed every token read within 0.04 ms (TTFT error p99 0.9 ms)
    def busy(measured: bool) -> HealthMonitor:
        m = HealthMonitor(Limits(), measured, "w", 0)
        for i in range(10):
            m._add_sample(_second(82.0, 60.0, 0.0, 1000.0 + i))
            m.loop_hist[bisect_left(LAG_BOUNDS, 0.060)] += 10
            m.token_hist[bisect_left(LAG_BOUNDS, 0.00004)] += 5000
            m.first_token_hist[bisect_left(LAG_BOUNDS, 0.0002)] += 20
        return m

    state = busy(True).state()
    assert not state["bound"] and not state["inaccurate"], state
    assert state["peak_while_late"]["cpu"] == 82.0  # the near-limit CPU is kept for the board
    # a real server (no timestamps): CPU and loop lag are all there is to go by
    state = busy(False).state()
    assert state["bound"] and state["reasons"] == ["cpu", "loop_lag"], state
    assert state["inaccurate"] and state["inaccurate_reasons"] == ["bound", "loop_lag_p99"]
    # seconds in which no stream finished measured no token: a starved loop (1 s late) whose streams
    # are parsed only after the run is judged by its proxies, as without timestamps
    m = HealthMonitor(Limits(), True, "w", 0)
    for i in range(10):
        m._add_sample(_second(22.0 if i else 95.0, 1150.0, 0.0, 1000.0 + i, tokens=0) | {"demand": 96.0})
        m.loop_hist[bisect_left(LAG_BOUNDS, 1.15)] += 10
    state = m.state()
    assert state["bound"] and state["reasons"] == ["loop_lag"], state
    assert state["inaccurate_reasons"] == ["bound", "loop_lag_p99"]


def test_late_tokens_while_busy_still_make_a_measured_process_bound():
    m = HealthMonitor(Limits(), True, "w", 0)
    for i in range(10):
        m._add_sample(_second(82.0, 60.0, 0.05, 1000.0 + i))
    state = m.state()
    assert state["bound"] and state["reasons"] == ["cpu", "loop_lag", "token_lag"], state
    assert state["inaccurate"]


def test_late_first_tokens_make_the_run_inaccurate_when_the_chunks_p99_hides_them():
    # eight workers at 6,400 streams: all-chunk token lag p99 0.03 ms, yet the first token of a few
    # percent of the streams was read 40 ms late: TTFT error p99 41 ms. One chunk in 256 is a first
    # token, so only its own percentile shows it.
    m = _monitor([0.00003] * 25_600, [0.001] * 200)
    m.first_token_hist[bisect_left(LAG_BOUNDS, 0.0002)] += 97
    m.first_token_hist[bisect_left(LAG_BOUNDS, 0.040)] += 3
    state = m.state()
    assert state["token_lag_p99_ms"] < 0.1
    assert state["inaccurate_reasons"] == ["first_token_lag_p99"] and 40 <= state["first_token_lag_p99_ms"] < 45
    board = HealthBoard()
    board.reset(Limits())
    board.update("w", state, [])
    assert board.summary()["inaccurate"]


def test_seconds_of_the_warm_up_are_not_judged():
    # a ramp starting thousands of users delays reads for some seconds; the window after it is clean
    m = HealthMonitor(Limits(), True, "w", 0, warmup_s=3600.0)
    m.count_from = time.perf_counter() + 3600.0  # what start() sets: the whole test is warm-up
    for i in range(10):
        m._add_sample(_second(92.0, 100.0, 0.05, 1000.0 + i))
    assert not m.state()["bound"]
    m.count_from = 0.0  # the counted window begins: the same seconds now count
    for i in range(10):
        m._add_sample(_second(92.0, 100.0, 0.05, 1010.0 + i))
    assert m.state()["bound"]


def test_the_advice_says_a_bound_worker_went_past_its_limits():
    """'1 of 1 worker processes passed the accuracy limits' read as if it had met them: it went past
    them (the summary's advice, the report's warning and the knee's diagnosis quote it)."""
    board = HealthBoard()
    board.reset(Limits())
    board.update("w", {"bound": True, "cpu_p95": 90.0, "demand_p95": 90.0}, [])
    assert board.advice().startswith(
        "1 of 1 worker processes went past the accuracy limits: this load needs about 2 "
    ), board.advice()


def test_a_worker_bound_while_starved_of_cpu_is_told_to_find_a_quieter_machine():
    """Bound at 20 % CPU on a crowded host (it waited for a CPU three times as long as it used one):
    more worker processes on that machine would wait as well, so the advice is not 'add workers'."""
    board = HealthBoard()
    board.reset(Limits())
    starved = {"bound": True, "cpu_p95": 20.0, "demand_p95": 80.0, "peak_while_late": {"host_pressure": 64.0}}
    board.update("w", starved, [])
    advice = board.advice()
    assert advice.startswith("1 of 1 worker processes went past the accuracy limits while getting little CPU"), advice
    assert "p95 20 % of a core, 80 %" in advice and "pressure reached 64 %" in advice and "quieter machine" in advice
    assert "--processes" not in advice
    # one worker that used its CPU: more processes would help it, so the advice says how many
    board.update("w2", {"bound": True, "cpu_p95": 90.0, "demand_p95": 95.0}, [])
    assert "this load needs at least" in board.advice() and "--processes" in board.advice(), board.advice()
