"""The capacity-search policies (shapes/search/) pick the next level from a history of levels and
their signed margins; the sequential rule (shapes/sequential.py) says when a level is looked at,
at what confidence, and what a plan that cannot decide is told. Pure arithmetic: no process."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from metrics.record import RequestRecord
from metrics.slo import parse_slo
from metrics.verdict import judge, judge_objective
from plugin.run_end import end_run
from plugin.state import SuiteState
from shapes.capacity import FAR_BELOW, CapacitySearch
from shapes.search import POLICIES, Tried
from shapes.search.adaptive import interpolate
from shapes.sequential import decidability, look_confidence, look_times, next_look, values_needed

pytestmark = pytest.mark.unit

P95 = parse_slo("ttft.p95<1s")[0]


def adaptive(**kw):
    return POLICIES["adaptive"](**kw)


def test_the_registry_holds_the_three_policies_and_only_the_adaptive_one_ends_levels_once_decided():
    assert {"adaptive", "walk", "doubling"} <= set(POLICIES)
    assert [POLICIES[n].sequential for n in ("adaptive", "walk", "doubling")] == [True, False, False]


def test_the_adaptive_policy_probes_up_geometrically_to_the_ceiling():
    p = adaptive()
    assert p.next_level([]) == 1
    met = [Tried(u, "met", 0.6) for u in (1, 2, 4)]
    assert p.next_level(met) == 8
    capped = adaptive(max_users=6)
    assert capped.next_level(met) == 6  # the ceiling, not 8
    assert capped.next_level([*met, Tried(6, "met", 0.3)]) is None  # met at the ceiling: the search is over


def test_the_adaptive_policy_interpolates_on_the_margins_inside_the_middle_half():
    history = [Tried(32, "met", 0.7), Tried(64, "met", 0.5), Tried(128, "missed", -0.5)]
    assert adaptive().next_level(history) == 96  # the zero crossing of +0.5 at 64 and -0.5 at 128
    # a crossing near one end is kept in the middle half: every level narrows the bracket to 3/4 or less
    assert interpolate(64, 128, 0.05, -0.9) == 80 and interpolate(64, 128, 0.9, -0.05) == 112
    assert interpolate(64, 128, 0.6, -0.2) == 112  # 64 + 64 * 0.75
    assert interpolate(64, 128, None, -0.2) == 96  # no margin: halve
    assert interpolate(4, 6, 0.9, -0.01) == 5  # strictly inside


def test_the_adaptive_policy_stops_at_the_precision():
    """80 met, 84 missed: 4 users is 5 % of 80, the default precision; 85 is one user wider."""
    assert adaptive().next_level([Tried(80, "met", 0.1), Tried(84, "missed", -0.1)]) is None
    assert adaptive().next_level([Tried(80, "met", 0.1), Tried(85, "missed", -0.1)]) in (81, 82, 83, 84)
    assert adaptive(precision=0.10).next_level([Tried(80, "met", 0.1), Tried(88, "missed", -0.1)]) is None
    assert adaptive().next_level([Tried(6, "met", 0.5), Tried(7, "missed", -1.0)]) is None  # one user apart


def test_a_level_left_undecided_below_the_first_miss_is_where_the_narrowing_starts():
    history = [Tried(1, "undecided", 0.0, "short"), Tried(2, "undecided", 0.0, "short"), Tried(4, "missed", -0.4)]
    assert adaptive().next_level(history) == 3
    assert adaptive().next_level([Tried(1, "missed", -2.0)]) is None  # missed from the first level on
    # the interpolated guess was tried and left undecided: the knee is too close to call there
    assert (
        adaptive().next_level([Tried(64, "met", 0.5), Tried(128, "missed", -0.5), Tried(96, "undecided", 0.0, "held")])
        == 80
    )


def test_with_none_met_the_narrowing_starts_from_the_highest_level_passed_while_probing():
    """64 users passed on too few values (far under the threshold), 128 and 96 missed, 80 held to its
    longest and undecided: the knee is near 80, and 64 presumably met, so the next level is 72 (it
    was 88, from 80, and the search ended with no level met)."""
    history = [
        Tried(32, "undecided", 0.0, "passed"),
        Tried(64, "undecided", 0.0, "passed"),
        Tried(128, "missed", -0.1),
        Tried(96, "missed", -0.2),
        Tried(80, "undecided", 0.0, "held"),
    ]
    assert adaptive().next_level(history) == 72
    assert POLICIES["doubling"]().next_level(history) == 88  # the fixed holds narrow as they did


def test_given_levels_are_walked_then_narrowed():
    walk = POLICIES["walk"](levels=(5, 10, 20, 40))
    assert walk.next_level([Tried(5, "met", 0.9)]) == 10
    history = [Tried(5, "met", 0.9), Tried(10, "met", 0.5), Tried(20, "missed", -0.3)]
    assert walk.next_level(history) == 15  # bisects
    assert walk.next_level([*history, Tried(15, "met", 0.1)]) == 17
    assert walk.next_level([*history, Tried(15, "met", 0.1), Tried(17, "missed", -0.1), Tried(16, "met", 0.01)]) is None
    a = adaptive(levels=(5, 10, 20, 40))
    assert a.next_level(history) == 16  # interpolates: 10 + 10 * 0.5 / 0.8, rounded
    assert a.next_level([Tried(u, "met", 0.5) for u in (5, 10, 20, 40)]) is None  # all met: the highest is the answer


def test_the_doubling_policy_is_todays():
    d = POLICIES["doubling"]()
    assert [d.next_level([Tried(u, "met", 0.5) for u in [1, 2, 4][:k]]) for k in range(4)] == [1, 2, 4, 8]
    assert (
        d.next_level([Tried(1, "met", 0.5), Tried(2, "met", 0.4), Tried(4, "met", 0.2), Tried(8, "missed", -0.2)]) == 6
    )
    assert d.next_level([Tried(1, "met", 0.5), Tried(2, "missed", -0.1)]) is None


def test_each_look_is_at_a_confidence_that_keeps_90_percent_over_all_looks():
    assert look_confidence() == pytest.approx(0.98)
    assert values_needed(P95, 0.90) == 45 and values_needed(P95, look_confidence()) == 77
    assert values_needed(parse_slo("ttft.p50<1s")[0], look_confidence()) == 6
    assert look_times(80.0, 4.0) == [5.0, 10.0, 20.0, 40.0, 80.0]
    assert look_times(20.0, 4.0) == [4.0, 5.0, 10.0, 20.0]  # none before the shortest judged part


def test_the_next_look_comes_when_the_values_a_met_needs_are_due():
    schedule = [10.0, 20.0, 40.0, 80.0]
    # 30 values by 10 s: 72 are due at 24 s; the look comes a little after, not at 20 or 40
    assert next_look(10.0, 1, schedule, 30, 72, 2.0) == pytest.approx(25.2)
    assert next_look(10.0, 1, schedule, 100, 72, 2.0) == 20.0  # enough values: the next doubling
    assert next_look(10.0, 1, schedule, 5, 72, 2.0) == 80.0  # due after the longest hold
    assert next_look(40.0, 3, schedule, 100, 72, 2.0) == 80.0  # the last look is the longest hold's
    assert next_look(80.0, 4, schedule, 100, 72, 2.0) is None


def test_the_looks_keep_the_stated_error_rate_where_the_truth_is_at_the_threshold():
    """The worst case for a wrong verdict: values whose true P95 is the threshold itself. A level
    looked at up to 5 times (each at 98 %) and ended at the first decision is declared met in at
    most 10 % of 1,000 levels, and missed in at most 10 % (the union bound; in practice far fewer)."""
    rng = np.random.default_rng(11)
    threshold = -np.log(0.05)  # the exponential's P95: the objective's threshold is the true P95
    objective = parse_slo(f"ttft.p95<{threshold * 1000:.6f}ms")[0]
    schedule, rate = look_times(80.0, 4.0), 3.0  # 3 values a second
    wrong = {"met": 0, "missed": 0}
    for _ in range(1000):
        values = rng.exponential(1.0, int(rate * 80))
        judged, looked = schedule[0], 0
        while judged is not None:
            looked += 1
            e = judge_objective(objective, values[: int(rate * judged)], look_confidence())
            if e.state != "undecided":
                wrong[e.state] += 1
                break
            judged = next_look(
                judged, looked, schedule, int(rate * judged), values_needed(objective, look_confidence()), 2.0
            )
    assert wrong["met"] <= 100 and wrong["missed"] <= 100, wrong


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
        e2e_s=ttft + 0.05,
        tpot_s=0.01,
        chunk_times=[ttft, ttft + 0.05],
    ).as_row()


def test_an_adaptive_level_ends_at_the_first_look_that_decides_it():
    """Levels of at most 3 x 10 s, slices of 2 s, warm-up until nothing sent before is open. 1 user
    sends 10 replies a second (TTFT 0.6 s, over half the threshold: not passed as far under it): the warm-up ends at 2 s; the first look (4 s judged: the 31 first
    tokens sent up to the cut less the 1 s threshold, too few to meet a P95 at 98 %) leaves it
    undecided and asks again when 77 are due (projected from the 3 s after the threshold's 1 s, which
    give no values); it is met there (10 s judged, 91 values), 12 s after
    it began, not at the end of a 30 s level. 2 users: slow replies prove the miss at once."""
    search = CapacitySearch([P95], 10.0, 2.0, None, policy=POLICIES["adaptive"]())
    search.run_start, search.open_streams = 0.0, lambda: []
    assert search.step_s == 2.0 and search.level_for(0) == 1

    def replies(step: int) -> None:
        search.on_rows([_row(step, 2.0 * step + i * 0.1, 0.6) for i in range(20)])  # not far under 1 s: not passed

    ended = None
    for index in range(1, 16):
        replies(index - 1)
        users = search.level_for(index)
        if users != 1:
            ended = index
            break
    assert ended == 6, search.ended
    first = search.ended[0]
    assert (first.users, first.state, first.ended, first.looks, first.warmup_s) == (1, "met", "decided", 2, 2.0)
    assert first.margin > 0 and search.levels[-1] == 2
    search.on_rows([_row(ended, 2.0 * ended + 2.5, 3.0), _row(ended + 1, 2.0 * ended + 2.6, 3.0)])
    for index in range(ended + 1, ended + 5):
        if search.level_for(index) != 2:
            break
    assert search.ended[-1].users == 2 and search.ended[-1].state == "missed"
    assert search.bounds() == (1, 2) and search.done  # one user apart: the answer is 1


def test_a_level_far_under_the_threshold_is_passed_while_probing_up():
    """The same level with TTFTs of 50 ms: too few values for a P95 at the first look, enough to read
    one, all far under 1 s: passed after one look, and 4 users tried next (the probe jumps x4 past a level far under);
    once a level has missed, none is passed so."""
    search = CapacitySearch([P95], 10.0, 2.0, None, policy=POLICIES["adaptive"]())
    search.run_start, search.open_streams = 0.0, lambda: []
    search.level_for(0)
    for index in range(1, 4):
        search.on_rows([_row(index - 1, 2.0 * (index - 1) + i * 0.1, 0.05) for i in range(20)])
        users = search.level_for(index)
    assert users == 4 and [(e.users, e.ended, e.looks) for e in search.ended] == [(1, "passed", 1)]
    few_fast = judge([P95], {P95.key: np.full(14, 0.05)}, ok=14, failed=0)
    assert few_fast.state == "undecided" and search._far_below(few_fast)
    # on fewer values than read a P95 (their largest more likely than not above it: 14), a level is
    # not passed, however fast: its first few first tokens may come before its queue builds up
    too_few_to_read = judge([P95], {P95.key: np.full(13, 0.05)}, ok=13, failed=0)
    assert too_few_to_read.state == "undecided" and not search._far_below(too_few_to_read)
    search.states[4] = "missed"
    assert not search._far_below(few_fast)


def test_a_plan_whose_first_level_cannot_decide_says_so_with_the_fixes():
    line, ok = decidability([P95], 1, 28.0, 0.975, looks=4)
    assert ok and "ttft.p95 needs 72 values" in line and "(97.5% bounds at each of up to 4 looks)" in line
    assert "replies of 0.39s or less" in line
    line, ok = decidability([P95], 1, 28.0, 0.975, reply_s=0.57, looks=4)
    assert not ok
    assert line.startswith("capacity search: at 1 user a level gets about 49 values in 28s")
    assert "--step-time" in line and "a lower percentile" in line and "start at 2 users" in line


def test_the_live_view_says_why_each_level_ended_and_the_bracket_it_left():
    from webui.live_steps import search_text

    search = {
        "levels": [
            {"users": 1, "state": "undecided", "margin": 0.0, "ended": "passed", "seconds": 6.0, "looks": 1},
            {"users": 8, "state": "missed", "margin": -0.4, "ended": "decided", "seconds": 6.0, "looks": 1},
            {"users": 6, "state": "met", "margin": 0.3, "ended": "decided", "seconds": 12.0, "looks": 2},
        ]
    }
    assert search_text(search, 0) == "passed over: far under the threshold, judged by the levels above"
    assert search_text(search, 1) == "decided in 6s (1 look)"
    assert search_text(search, 2) == "decided in 12s (2 looks); bracket 6..8 users (33%)"
    assert search_text(search, 3) == ""  # still running


def _level(users: int, values: dict, objectives, n: int = 200):
    th = SimpleNamespace(total_tokens_per_s=1000.0, output_tokens_per_s=500.0, requests_per_s=2.0)
    verdict = judge(objectives, {k: np.full(n, v) for k, v in values.items()}, ok=n, failed=0, confidence=0.98)
    return SimpleNamespace(
        partial=False, users=users, throughput=th, window=SimpleNamespace(end=0.0), verdict=verdict, steps=1
    )


def test_the_answer_names_the_binding_objective_a_cliff_and_a_search_that_time_ended():
    """Two objectives: 88 users meet both, 92 miss tpot only (by far): the answer is 88, tpot binds,
    and the jump from room to three times the threshold within 5 % of load is a cliff. The search's
    account gives the interval's confidence (each end 90 % over its looks: 80 %), the policy, its
    levels in order, and that -t ended it before its precision."""
    from metrics.capacity import capacity

    two = parse_slo("ttft.p95<5s,tpot.p95<100ms")
    levels = [_level(88, {"ttft.p95": 2.0, "tpot.p95": 0.06}, two), _level(92, {"ttft.p95": 2.2, "tpot.p95": 0.3}, two)]
    search = {
        "policy": "adaptive",
        "precision": 0.02,
        "family": 0.9,
        "timed_out": True,
        "levels": [
            {
                "users": 88,
                "state": "met",
                "margin": 0.4,
                "ended": "decided",
                "seconds": 20.0,
                "looks": 2,
                "requests": 200,
            },
            {
                "users": 92,
                "state": "missed",
                "margin": -2.0,
                "ended": "decided",
                "seconds": 6.0,
                "looks": 1,
                "requests": 200,
            },
        ],
    }
    answer = capacity(levels, two, search)
    assert (answer.users, answer.next_failing_users, answer.binding, answer.cliff) == (88, 92, "tpot.p95<100ms", True)
    assert answer.interval_confidence == pytest.approx(0.8) and answer.width == pytest.approx(4 / 88)
    assert answer.precision_reached is False and answer.timed_out and [lv.users for lv in answer.levels] == [88, 92]
    s = answer.sentence
    assert "(from 88 to under 92 users at 80% confidence, 5% wide;" in s, s
    assert "tpot.p95<100ms binds" in s and "a cliff: met at 88 users" in s, s
    assert "-t ended the search before its 2% precision (5% wide)" in s, s
    assert "levels tried (adaptive): 88 met +40.0 % in 20s, 92 missed -200.0 % in 6s" in s, s
    # a gentle knee is no cliff; without a search's account the interval is still stated
    gentle = [
        _level(88, {"ttft.p95": 4.0, "tpot.p95": 0.06}, two),
        _level(92, {"ttft.p95": 5.5, "tpot.p95": 0.07}, two),
    ]
    plain = capacity(gentle, two)
    assert (
        not plain.cliff and plain.binding == "ttft.p95<5s" and plain.interval_confidence == pytest.approx(0.96)
    )  # one step each, 98 % bounds


def test_every_way_a_level_can_end_is_worded_on_each_surface_from_one_table(caplog):
    """Each ending summary.json's levels may carry, and a level -t cut in its warm-up, is worded by the
    console's line as the level ends, the answer's list of levels tried and the live view's status,
    each from metrics/schema/level_endings.py (a new ending without its wording was a KeyError in the
    live view)."""
    import logging
    from typing import get_args

    from metrics.capacity import capacity
    from metrics.schema.level_endings import CUT_IN_WARMUP, ENDINGS
    from metrics.schema.verdicts import SearchLevel, SloVerdict
    from webui.live_steps import search_text

    caplog.set_level(logging.INFO, logger="llm.capacity")
    endings = get_args(SearchLevel.model_fields["ended"].annotation)
    assert set(endings) == set(ENDINGS)
    cases = [(ended, 8.0, ENDINGS[ended]) for ended in endings] + [("time", 2.0, CUT_IN_WARMUP)]
    for ended, seconds, words in cases:
        state = "met" if ended == "decided" else "undecided"
        level = {"users": 4, "state": state, "margin": 0.25 if state == "met" else 0.0, "ended": ended}
        level |= {"seconds": seconds, "warmup_s": 2.0, "looks": 2, "requests": 50}
        live = search_text({"levels": [level]}, 0).split("; highest met")[0]  # a met level adds the bracket
        assert live == words.live.format(seconds=seconds, looks="2 looks") != "", (ended, live)
        listed = capacity([], [P95], {"policy": "walk", "levels": [level]}).sentence
        said = f"4 {words.verdict or state} " + (f"({words.sentence})" if words.sentence else "+25.0 %")
        assert f"levels tried (walk): {said} in {seconds:g}s" in listed, (ended, listed)
        search = CapacitySearch([P95], 10.0, 2.0, None, candidates=[4])
        held = SimpleNamespace(users=4, rate=None, begin=0.0, start=2.0, end=seconds, steps=2)
        verdict = SloVerdict(state=state, requests=50, objectives=[], margin=level["margin"])
        search._end(held, SimpleNamespace(verdict=verdict), ended)
        line = caplog.records[-1].getMessage()
        how = words.log.format(seconds=seconds, far_below=FAR_BELOW)
        head = f"capacity search: 4 users {words.verdict or state}"
        assert line.startswith(head) and (f"; {how} (" in line) == bool(how), (ended, line)


def _searched(levels: list[dict], **account) -> dict:
    return {"policy": "adaptive", "precision": 0.05, "family": 0.9, "timed_out": False, "levels": levels, **account}


def test_the_answer_says_a_search_was_stopped_and_not_while_it_runs_or_ended_itself():
    """A search the run's end found still running (the web UI's STOP, Ctrl-C) says so, distinct from
    -t ending it; one whose policy ended it, or a snapshot of it still running, does not."""
    from metrics.capacity import capacity

    passed = {"users": 1, "state": "undecided", "margin": 0.0, "ended": "passed", "seconds": 6.0, "looks": 1}
    few = [_level(1, {"ttft.p95": 0.05}, [P95], n=5)]
    assert few[0].verdict.state == "undecided"
    stopped = capacity(few, [P95], _searched([passed], stopped=True))
    assert stopped.stopped and not stopped.timed_out
    assert stopped.sentence.startswith(
        "ttft.p95<1s: no level was decided (met or missed); the run was stopped before the search finished; "
        "undecided: 1 users"
    ), stopped.sentence
    timed = capacity(few, [P95], _searched([passed], timed_out=True))
    assert not timed.stopped and "stopped" not in timed.sentence
    assert "no level was decided (met or missed); -t ended the search before a level was decided" in timed.sentence
    running = capacity(few, [P95], _searched([passed]))
    assert not running.stopped and "stopped" not in running.sentence and "-t ended" not in running.sentence
    # with an answer: the clause among the notes, before the levels
    met = [_level(1, {"ttft.p95": 0.2}, [P95]), _level(2, {"ttft.p95": 3.0}, [P95])]
    both = [
        {"users": 1, "state": "met", "margin": 0.6, "ended": "decided", "seconds": 8.0, "looks": 1},
        {"users": 2, "state": "missed", "margin": -1.5, "ended": "decided", "seconds": 6.0, "looks": 1},
    ]
    answer = capacity(met, [P95], _searched(both, stopped=True))
    assert answer.users == 1 and answer.stopped
    assert "; the run was stopped before the search finished; levels tried (adaptive): 1 met" in answer.sentence
    assert "stopped" not in capacity(met, [P95], _searched(both)).sentence


def test_a_level_cut_by_t_in_its_warm_up_is_named_once_as_not_judged(caplog):
    """The adaptive search's 4-user level follows a level passed far under; a request sent before it
    is still open, so its warm-up (at most 4 s) is still on when -t (8 s) ends the search: nothing of
    it was judged. summary.json's by_step has no row for it, `undecided` leaves it out, and the
    sentence names it once, as cut by -t, not as undecided, as the console's line and the live view's
    status do; -t ended the search, it was not stopped."""
    import logging

    from metrics.summary import summarize
    from webui.live_steps import search_text

    caplog.set_level(logging.INFO, logger="llm.capacity")

    search = CapacitySearch([P95], 10.0, 4.0, 8.0, policy=POLICIES["adaptive"]())
    search.run_start = 0.0
    slow = {"t": 100.0, "step": [0.0], "sent": [0.0], "ttft": [float("nan")], "ttfa": [float("nan")]}
    search.open_streams = lambda: []
    rows = []
    assert search.level_for(0) == 1
    for index in range(1, 5):
        batch = [_row(index - 1, 2.0 * (index - 1) + i * 0.1, 0.05) for i in range(20)]
        rows += batch
        search.on_rows(batch)
        if search.levels[-1] == 4:
            search.open_streams = lambda: [slow]  # a request from before the 4-user level is open
        users = search.level_for(index)
        if users is None:
            break
    assert users is None and search.done and search.timed_out
    assert [(e.users, e.ended) for e in search.ended] == [(1, "passed"), (4, "time")]
    cut = search.ended[-1]
    assert (cut.seconds, cut.warmup_s, cut.looks, cut.requests) == (2.0, 4.0, 0, 0)
    live = search.plan().search
    assert live["stopped"] is False
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("capacity search: 4 users")]
    assert said == ["capacity search: 4 users not judged; -t ended it in its warm-up (highest met -, lowest missed -)"]
    assert search_text(live, 0) == "passed over: far under the threshold, judged by the levels above"
    assert search_text(live, 1) == "not judged: cut by -t in its warm-up", search_text(live, 1)
    search.stop()  # the run's end: the search had ended itself (by -t), so it was not stopped
    assert search.record()["stopped"] is False and search.record()["timed_out"] is True

    from metrics.record import rows_to_table

    summary = summarize(rows_to_table(rows), 0.0, 8.0, run_start=0.0, plan=search.plan(), objectives=[P95])
    assert [s.users for s in summary.by_step] == [1]
    cap = summary.capacity
    assert cap.undecided == [1] and cap.timed_out and not cap.stopped
    s = cap.sentence
    assert "4 not judged (cut by -t in its warm-up) in 2s" in s and "4 undecided" not in s, s
    assert "undecided: 1 users;" in s and "-t ended the search before a level was decided" in s, s


def test_a_search_the_run_ended_while_it_ran_was_stopped():
    """The run ends (plugin/run_end.py: the web UI's STOP, Ctrl-C) while a level is still held: what
    its end writes says the search was stopped, and it decides no more levels; before that end (the
    live view's snapshot) its account says nothing of it."""
    search = CapacitySearch([P95], 10.0, 2.0, None, policy=POLICIES["adaptive"]())
    search.run_start, search.open_streams = 0.0, lambda: []
    search.level_for(0)
    search.on_rows([_row(0, i * 0.1, 0.6) for i in range(20)])
    assert search.level_for(1) == 1 and not search.done
    assert search.record()["stopped"] is False  # the live view's snapshot: still running
    written = []  # what the run's end writes (Run.finish: summary.json's capacity from this account)
    state = SuiteState("master", ())  # the results side only: no users to close
    state.run = SimpleNamespace(ending=None, search=search, finish=lambda: written.append(search.record()))
    end_run(SimpleNamespace(llm=state, process_exit_code=None))
    assert [(r["stopped"], r["timed_out"]) for r in written] == [(True, False)]
    assert search.level_for(2) is None and search.ended == []
