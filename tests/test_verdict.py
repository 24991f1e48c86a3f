"""A load level's one verdict (metrics/verdict.py) and the capacity search that acts on it
(shapes/capacity.py), without processes: met, missed or undecided with the evidence."""

from __future__ import annotations

import math

import numpy as np

from metrics.record import RequestRecord
from metrics.slo import parse_slo
from metrics.verdict import judge, judge_objective, order_bounds
from shapes.capacity import MAX_STEPS_PER_LEVEL, CapacitySearch

P95 = parse_slo("ttft.p95<1s")[0]


def test_order_statistic_bounds_cover_the_true_percentile_at_their_confidence():
    """Exponential values, true P95 = ln 20: each one-sided 90 % bound holds in >= 90 % of 2,000
    samples of 200 (the bounds are conservative: the binomial is discrete)."""
    rng = np.random.default_rng(7)
    truth = np.log(20.0)
    lower_ok = upper_ok = 0
    for _ in range(2000):
        lo, hi = order_bounds(np.sort(rng.exponential(1.0, 200)), 0.95, 0.90)
        lower_ok += lo <= truth
        upper_ok += hi >= truth
    assert 0.90 <= lower_ok / 2000 <= 0.97 and 0.90 <= upper_ok / 2000 <= 0.97, (lower_ok, upper_ok)


def test_a_p95_needs_45_values_to_be_met_and_one_to_be_missed():
    fast = np.full(44, 0.1)
    assert judge_objective(P95, fast).state == "undecided"  # the largest of 44 is no 90 % bound of a P95
    assert judge_objective(P95, fast).upper_ms is None
    assert judge_objective(P95, np.full(45, 0.1)).state == "met"
    assert judge_objective(P95, [2.0]).state == "missed"  # one value above: P(X(1) <= P95) = 0.95
    # close to the threshold: 1,000 values with 5 % at or above it cannot be told apart from 1 s
    close = np.r_[np.full(950, 0.5), np.full(50, 1.5)]
    e = judge_objective(P95, close)
    assert e.state == "undecided" and e.lower_ms < 1000 <= e.upper_ms and e.samples == 1000


def test_a_levels_percentile_lies_within_its_own_bounds():
    """The percentile a level's verdict states is the order statistic its bounds are made of: with
    2 values the P95 is the larger one, the lower bound (the run's 'linear' P95, 1.95 s here, fell
    below it); for every n and spread it lies within the bounds that exist."""
    e = judge_objective(P95, [1.0, 2.0])
    assert e.state == "missed" and e.lower_ms == 2000 and e.value_ms == 2000, e
    rng = np.random.default_rng(3)
    for n in [*range(1, 60), 100, 333, 1000]:
        for objective in (P95, parse_slo("ttft.p50<1s")[0], parse_slo("ttft.p99.9<1s")[0]):
            e = judge_objective(objective, rng.lognormal(0.0, 1.0, n))
            assert e.lower_ms is None or e.lower_ms <= e.value_ms, (n, objective.text, e)
            assert e.upper_ms is None or e.value_ms <= e.upper_ms, (n, objective.text, e)


def test_a_level_of_failures_misses_and_an_empty_one_is_undecided():
    assert judge([P95], {}, ok=0, failed=3).state == "missed"
    v = judge([P95], {}, ok=0, failed=0)
    assert v.state == "undecided" and "no request" in v.reason
    two = parse_slo("ttft.p95<1s,e2e.p95<2s")
    v = judge(two, {"ttft.p95": np.full(100, 0.1), "e2e.p95": np.full(100, 3.0)}, ok=100, failed=0)
    assert v.state == "missed" and [e.state for e in v.objectives] == ["met", "missed"]


def _row(step: int, sent: float, ttft: float) -> tuple:
    return RequestRecord(
        "r",
        "w",
        "chat",
        "short",
        10,
        4,
        step=step,
        wall_send=sent,
        status=200,
        ok=True,
        ttft_s=ttft,
        e2e_s=ttft + 0.1,
        tpot_s=0.01,
        chunk_times=[ttft, ttft + 0.1],
    ).as_row()


def test_the_search_holds_an_undecided_level_and_judges_its_steps_together():
    """Bisection at 6 users between 4 (met) and 8 (missed): 30 fast replies per step cannot bound a
    P95, so the level is held for another step; 60 fast replies over both steps meet it."""
    search = CapacitySearch([P95], 10.0, 2.0, None)
    search.run_start = 0.0
    search.levels = [4, 8]
    search.states = {4: "met"}
    search.on_rows([_row(1, 13.0, 2.0)])  # one reply above the threshold proves a P95 miss
    assert search.level_for(2) == 6 and search.states[8] == "missed"
    search.on_rows([_row(2, 20.0 + 2 + i * 0.25, 0.1) for i in range(30)])
    assert search.level_for(3) == 6  # undecided on 30 values: held for another step
    search.on_rows([_row(3, 30.0 + i * 0.25, 0.1) for i in range(30)])
    assert search.level_for(4) == 7  # 60 values over both steps: met, so the bisection goes to 7
    assert search.states[6] == "met"
    level = search.plan().levels_at(0.0)[2]
    assert (level.first, level.last, level.users, level.start, level.end) == (2, 3, 6, 22.0, 40.0)
    assert MAX_STEPS_PER_LEVEL >= 2


def test_a_levels_p95_is_one_value_in_every_table_and_within_its_bounds():
    """A level of 2 replies (TTFT 1 s and 2 s) and one of 60: summary.json's by_step P95, which the
    per-step tables show, is its verdict's value, within its bounds (the by_step P95 was the
    interpolated 1,950 ms beside a lower bound of 2,000 ms); the run's percentiles keep the metric
    contract (numpy 'linear')."""
    from metrics.console_table import format_steps
    from metrics.record import rows_to_table
    from metrics.summary import summarize
    from reports.rows import steps_table
    from shapes.steps import StepPlan

    t0 = 1_000.0
    rows = [_row(0, t0 + 6, 1.0), _row(0, t0 + 8, 2.0)] + [
        _row(1, t0 + 25 + i * 0.2, 0.1 + i * 0.01) for i in range(60)
    ]
    s = summarize(rows_to_table(rows), t0, t0 + 40, run_start=t0, plan=StepPlan([2, 4], 20.0, 5.0), objectives=[P95])
    for step in s.by_step:
        (e,) = step.verdict.objectives
        assert step.ttft_ms.p95 == e.value_ms, (step.step, step.ttft_ms.p95, e)
        assert (e.lower_ms is None or e.lower_ms <= e.value_ms) and (e.upper_ms is None or e.value_ms <= e.upper_ms), e
    assert s.by_step[0].ttft_ms.p95 == 2000.0 and s.by_step[0].verdict.objectives[0].lower_ms == 2000.0
    assert s.overall.ttft_ms.p95 == np.percentile(np.r_[1.0, 2.0, 0.1 + np.arange(60) * 0.01], 95) * 1000
    console = format_steps(s.by_step)
    assert "ttft.p95 2,000 ms (90% bounds 2,000..- ms" in console and "1,950" not in console, console
    table = steps_table(s.by_step)
    p95 = table.headers.index("TTFT p95")
    assert table.rows[0][p95].text == "2,000" and table.rows[0][-1].text.startswith("ttft.p95 2,000 in 2,000..-"), (
        table.rows[0]
    )


def test_the_plan_turns_the_capacity_into_replicas_with_its_spread():
    """Two levels of 20 s: 10 users met (200 replies of 0.1 s TTFT), 20 users missed (TTFT 2 s);
    one replica holds the met level's rate; a target between the two rates needs one more replica
    by the met rate than by the missed one, and the plan says both."""
    from metrics.record import rows_to_table
    from metrics.summary import summarize
    from reports.plan import describe, plan
    from shapes.steps import StepPlan

    t0 = 1_000.0
    rows = [_row(0, t0 + 5 + i * 0.075, 0.1) for i in range(200)]  # sent in [5, 20): 800 requests/min
    rows += [_row(1, t0 + 25 + i * 0.05, 2.0) for i in range(250)]  # sent in [25, 37.5), ended by 40
    s = summarize(rows_to_table(rows), t0, t0 + 40, run_start=t0, plan=StepPlan([10, 20], 20.0, 5.0), objectives=[P95])
    assert (s.capacity.users, s.capacity.next_failing_users) == (10, 20)
    held = s.by_step[0].throughput.requests_per_s * 60
    failed = s.by_step[1].throughput.requests_per_s * 60
    assert failed > held
    p = plan(s, rpm=held * 2.5, gpus=4)
    assert p["replicas"] == 3 and p["replicas_at_least"] == math.ceil(held * 2.5 / failed) and p["gpus"] == 12
    assert p["requests_per_min_per_gpu"] == held / 4
    assert "3 replicas = 12 GPUs" in describe(p)


def test_a_ramp_whose_every_level_is_undecided_says_so():
    """Two short levels that end too few requests to bound a P95: the answer says no level was
    decided (it said "no level met it; decided at no level", as if they had been judged and failed),
    and a level that missed is still named."""
    from types import SimpleNamespace

    from metrics.capacity import capacity

    def level(users, ttft_s, n):
        return SimpleNamespace(
            partial=False, users=users, verdict=judge([P95], {"ttft.p95": np.full(n, ttft_s)}, ok=n, failed=0)
        )

    answer = capacity([level(4, 0.3, 9), level(12, 0.7, 34)], [P95])
    assert answer.users is None and answer.undecided == [4, 12]
    assert answer.sentence == "ttft.p95<1s: no level was decided (met or missed); undecided: 4, 12 users", (
        answer.sentence
    )
    answer = capacity([level(4, 0.3, 9), level(12, 2.0, 34)], [P95])
    assert answer.sentence == "ttft.p95<1s: no level met it; missed at 12 users (34 requests); undecided: 4 users", (
        answer.sentence
    )


def test_a_level_met_below_an_undecided_one_is_not_called_the_highest_tested():
    """20 users met, 80 undecided when -t ended the search: the answer is 20 users, "the highest level
    met, none missed" (it said "the highest level tested", with 80 users tested)."""
    from types import SimpleNamespace

    from metrics.capacity import capacity

    def level(users, ttft_s, n, above=0):
        values = np.r_[np.full(n - above, ttft_s), np.full(above, 1.5)]
        th = SimpleNamespace(total_tokens_per_s=1000.0, output_tokens_per_s=500.0, requests_per_s=2.0)
        return SimpleNamespace(
            partial=False,
            users=users,
            throughput=th,
            window=SimpleNamespace(end=0.0),
            verdict=judge([P95], {"ttft.p95": values}, ok=n, failed=0),
        )

    close = level(80, 0.5, 1000, above=50)  # 5 % at the threshold's other side: too close to call
    assert close.verdict.state == "undecided"
    answer = capacity([level(20, 0.3, 66), close], [P95])
    assert answer.users == 20 and answer.undecided == [80]
    assert "holds up to 20 users (the highest level met, none missed; met on 66 requests)" in answer.sentence, (
        answer.sentence
    )
    answer = capacity([level(20, 0.3, 66)], [P95])  # every level met: it was the highest tested
    assert "holds up to 20 users (the highest level tested; met on 66 requests)" in answer.sentence, answer.sentence
