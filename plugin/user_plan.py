"""The users a distributed run ran against the users its plan asked for, watched by time.

Locust's master dispatches users to its workers and moves them when a worker goes missing or comes
back; what its workers really run is only what they report. Each worker adds to every report
(every 3 s) how many of its users are running: not those a ramp-down has asked to stop, which only
finish the request they are in. The master compares, every second, the sum over its live workers
with the count it dispatched, once the dispatch has ended (Locust's `spawning_complete`) and every
live worker has reported since: a report sent before a worker took its new share is no evidence.
A frozen worker is missing to the master and counts no users; once it is back its reports count.

Counts that differ for longer than GRACE_S are a period of `summary.json` `users_off_plan`
(metrics/schema/client_health.py); the run is then not complete (plugin/run.py), the report
says so in its header. Shorter ones are a report that crossed a dispatch on the wire.
"""

from __future__ import annotations

import time

import gevent
from locust.runners import STATE_MISSING, STATE_RUNNING, WORKER_REPORT_INTERVAL
from locust.user.task import LOCUST_STATE_STOPPING

from metrics.schema.client_health import UsersOffPlan, UsersPeriod
from plugin.state import Plugin

REPORT_KEY = "llm_users"  # a worker's report: its users running
TICK_S = 1.0
GRACE_S = WORKER_REPORT_INTERVAL + TICK_S  # a difference until every worker's next report: not a period


def running_users(runner) -> int:
    """This process's users that are running, not stopping (a ramp-down or rebalance asked them to)."""
    count = 0
    for greenlet in list(runner.user_greenlets):
        user = greenlet.args[0] if greenlet.args else None  # a dead greenlet's args are cleared
        if user is not None and user._state != LOCUST_STATE_STOPPING:
            count += 1
    return count


class UsersWatch:
    """A master's comparison of the users its workers report with the users it dispatched."""

    def __init__(self, runner, clock=time.time, stopping=lambda: False):
        self.runner = runner
        self.clock = clock
        self.stopping = stopping  # the run began to stop: its users stop by design (Locust's state says so only later)
        self.reports: dict[str, tuple[float, int]] = {}  # worker -> (received at, users running)
        self.dispatched: float | None = None  # when the last dispatch ended
        self.periods: list[UsersPeriod] = []
        self._open: UsersPeriod | None = None
        runner.environment.events.spawning_complete.add_listener(self._on_dispatched)
        self._loop = gevent.spawn(self._watch)

    def _on_dispatched(self, **_kw) -> None:
        self.dispatched = self.clock()

    def on_report(self, client_id: str, running) -> None:
        if isinstance(running, int):  # a worker of a version without the count is never judged
            self.reports[client_id] = (self.clock(), running)

    def _watch(self) -> None:
        while True:
            gevent.sleep(TICK_S)
            self.judge()

    def judge(self) -> None:
        """One look: extend the open period, open one, or close it."""
        now, counts = self.clock(), self._counts()
        if counts is None or counts[0] == counts[1]:
            self._close()
            return
        planned, running = counts
        p = self._open
        if p is not None and (p.planned, p.running) == (planned, running):
            p.end = now
        else:
            self._close()
            self._open = UsersPeriod(start=now, end=now, planned=planned, running=running)

    def _counts(self) -> tuple[int, int] | None:
        """(planned, running), or None while they cannot be compared (a dispatch under way, a live
        worker with no report since the last one ended, the run not running or stopping)."""
        runner = self.runner
        if runner.state != STATE_RUNNING or self.dispatched is None or self.stopping():
            return None
        live = [c.id for c in runner.clients.all if c.state != STATE_MISSING]
        seen = [self.reports.get(cid) for cid in live]
        if not live or any(r is None or r[0] <= self.dispatched for r in seen):
            return None
        return runner.target_user_count, sum(r[1] for r in seen)

    def _close(self) -> None:
        p, self._open = self._open, None
        if p is not None and p.end - p.start >= GRACE_S:
            self.periods.append(p)

    def stop(self) -> UsersOffPlan | None:
        """The periods the users differed from the plan (None when they never did)."""
        self._loop.kill(block=False)
        self.runner.environment.events.spawning_complete.remove_listener(self._on_dispatched)
        self._close()
        if not self.periods:
            return None
        return UsersOffPlan(seconds=round(sum(p.end - p.start for p in self.periods), 1), periods=self.periods)


class UserPlan(Plugin):
    """Workers report their running users; a master judges them against its plan (see the module)."""

    def __init__(self):
        self.watch: UsersWatch | None = None

    def report_to_master(self, environment, data: dict) -> None:
        data[REPORT_KEY] = running_users(environment.runner)

    def run_started(self, run) -> None:
        if run.collector is not None:  # a master: a local run runs what it plans
            # the drain runs in Locust's test_stopping, before its state says stopping: the run's own mark
            self.watch = UsersWatch(run.environment.runner, stopping=lambda: run.window_end is not None)

    def worker_report(self, environment, client_id: str, data: dict) -> None:
        if self.watch is not None:
            self.watch.on_report(client_id, data.pop(REPORT_KEY, None))

    def run_stopping(self, run) -> None:
        watch, self.watch = self.watch, None
        if watch is not None:
            off = watch.stop()
            if off is not None:
                run.summary_extra["users_off_plan"] = off.model_dump()
