"""The master's check of the users its workers ran against its plan (plugin/user_plan.py), on a
clock of its own: which reports count, how long a difference must last to be a period."""

from __future__ import annotations

import pytest
from locust.event import EventHook
from locust.runners import STATE_MISSING, STATE_RUNNING, STATE_SPAWNING

from plugin.user_plan import GRACE_S, UsersWatch

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Node:
    def __init__(self, cid):
        self.id, self.state = cid, STATE_RUNNING


class Runner:
    def __init__(self, *ids, target=10):
        self.environment = type("Env", (), {"events": type("Events", (), {"spawning_complete": EventHook()})()})()
        self.clients = type("Clients", (), {"all": [Node(c) for c in ids]})()
        self.state = STATE_SPAWNING
        self.target_user_count = target

    def dispatched(self):
        self.state = STATE_RUNNING
        self.environment.events.spawning_complete.fire(user_count=self.target_user_count)


def started(runner, clock) -> UsersWatch:
    """A watch on a run whose first dispatch has just ended."""
    watch = UsersWatch(runner, clock)
    runner.dispatched()
    clock.now += 0.5
    return watch


def watch_over(watch, clock, steps):
    """Each step: ({worker: users reported now}, seconds that pass); the watch judges once a second."""
    for reports, seconds in steps:
        for cid, users in reports.items():
            watch.on_report(cid, users)
        for _ in range(int(seconds)):
            clock.now += 1.0
            watch.judge()
    return watch.stop()


def test_reports_that_match_the_plan_leave_no_period_and_others_do():
    runner, clock = Runner("a", "b"), Clock()
    assert watch_over(started(runner, clock), clock, [({"a": 5, "b": 5}, 30)]) is None
    off = watch_over(started(runner, clock), clock, [({"a": 5, "b": 10}, 30)])
    assert off is not None and [(p.planned, p.running) for p in off.periods] == [(10, 15)]


def test_a_report_sent_before_the_dispatch_ended_is_no_evidence():
    runner, clock = Runner("a", "b"), Clock()
    watch = UsersWatch(runner, clock)
    watch.on_report("a", 10)  # from before the rebalance that moved users back
    watch.on_report("b", 5)
    clock.now += 0.5
    runner.dispatched()
    assert watch_over(watch, clock, [({"b": 5}, 20)]) is None  # a never reported again: never judged
    assert watch_over(started(runner, clock), clock, [({"a": 10, "b": 5}, 20)]) is not None  # once it does, it is


def test_a_difference_longer_than_a_report_interval_is_a_period_and_a_shorter_one_is_not():
    runner, clock = Runner("a", "b"), Clock()
    off = watch_over(
        started(runner, clock),
        clock,
        [({"a": 10, "b": 5}, int(GRACE_S) - 1), ({"a": 5}, 5), ({"a": 10}, 12), ({"a": 5}, 3)],
    )
    assert off is not None and [(p.planned, p.running) for p in off.periods] == [(10, 15)]
    assert off.seconds == pytest.approx(11.0)
    assert off.line().startswith("the users running differed from the plan for 11 s: 15 instead of 10 for 11 s from ")


def test_a_stopping_run_is_not_judged():
    """Its drain (Locust's test_stopping) stops the users before Locust's state says it is stopping."""
    runner, clock = Runner("a", "b"), Clock()
    stopping = []
    watch = UsersWatch(runner, clock, stopping=lambda: bool(stopping))
    runner.dispatched()
    clock.now += 0.5
    stopping.append(True)
    assert watch_over(watch, clock, [({"a": 0, "b": 0}, 20)]) is None


def test_a_missing_worker_counts_no_users_and_a_spawning_run_is_not_judged():
    runner, clock = Runner("a", "b"), Clock()
    watch = started(runner, clock)
    runner.clients.all[0].state = STATE_MISSING  # frozen: its last report (5) is not users running
    assert watch_over(watch, clock, [({"a": 5, "b": 10}, 10)]) is None
    runner.clients.all[0].state = STATE_RUNNING
    watch = started(runner, clock)
    runner.state = STATE_SPAWNING  # a ramp or a step under way: its counts move by design
    assert watch_over(watch, clock, [({"a": 5, "b": 10}, 10)]) is None
