"""summary.json's sections on the client's own health: the open loop's schedule, a client-bound
load generator, each worker's record accounting, the work lost with a worker and the users that ran
where they differed from the plan."""

from __future__ import annotations

import time
from typing import Any

from metrics.schema.base import Model, Num, Section


class OpenLoop(Model):
    target_rate: float
    sent_per_s: Num = None
    scheduled: int | None = None  # arrivals the schedule had due inside the window (all processes)
    sent: int | None = None  # of those, the ones sent (late or not)
    schedule_lag_p99_ms: Num = None
    behind_schedule: bool
    reasons: list[str]
    capped_at: int | None = None  # behind because the in-flight cap held arrivals (its users all busy): the cap

    def headline(self) -> str:
        """What kept the run off its schedule, in a few words (the console's line)."""
        if self.capped_at is not None:
            return f"the in-flight cap of {self.capped_at:,} held arrivals back (the load asked for, not the client)"
        return "the client could not keep to the schedule"


class ClientBound(Section):
    """plugin/health_board.py: was the load generator itself the bottleneck?"""

    bound: bool = False
    contended: bool = False
    advice: str = ""
    workers: list[dict[str, Any]] = []
    stamp_suspect: int = 0  # records whose first-token stamp a loop stall may have moved (plugin/health_stalls.py)
    stamp_judged: int = 0
    stamp_skew_max_ms: Num = None

    def warning(self) -> str:
        """One sentence when the load generator itself may have distorted the timings (the advice
        names the records a loop stall may have skewed, when there were any)."""
        advice = self.advice.strip()
        if self.bound:
            return "The load generator was client bound (out of CPU): its timings include client delay. " + advice
        # the advice (plugin/health_board.py) says what happened and what to do: not said twice
        if self.contended:
            return "The load generator's machine was contended: " + advice
        if (self.model_extra or {}).get("inaccurate"):
            return "The load generator was inaccurate: " + advice
        if self.stamp_suspect:
            return "The load generator's event loop stalled: " + advice
        return ""

    def inaccurate_warning(self) -> str:
        """The warning when the client's own timings are off (bound or inaccurate), else "": what the
        knee's diagnosis states (a contended machine alone does not move the knee)."""
        return self.warning() if self.bound or (self.model_extra or {}).get("inaccurate") else ""


class WorkerAccount(Section):
    """plugin/shipping.py: one worker's records, as the master received them."""

    index: int
    records: int
    batches: int
    final_received: bool
    records_reported_by_worker: int | None = None
    missing_batches: list[int] = []
    lost_at: float | None = None
    in_flight_when_lost: int = 0
    lost_requests_min: int = 0
    failed_to_start: bool = False


class LostWork(Model):
    """A master's workers lost mid-run: at least this many requests lost with them."""

    requests_min: int
    workers: dict[str, int]  # worker id -> requests lost with it, at least


class UsersPeriod(Model):
    """A time the users running differed from the plan, the same counts throughout."""

    start: float  # wall-clock seconds
    end: float
    planned: int  # the users the master had dispatched
    running: int  # the users its live workers reported running (not stopping)


class UsersOffPlan(Section):
    """plugin/user_plan.py: where the users a distributed run ran differed from its plan (a worker
    that came back from a freeze and kept its users, users that died). Present only when they did."""

    seconds: float  # the periods' time, summed
    periods: list[UsersPeriod]

    def line(self) -> str:
        """One line: how many ran against the plan, for how long, from when (UTC)."""
        shown = [
            f"{p.running} instead of {p.planned} for {p.end - p.start:.0f} s from "
            f"{time.strftime('%H:%M:%S', time.gmtime(p.start))} UTC"
            for p in self.periods[:3]
        ]
        more = f" and {len(self.periods) - 3} more" if len(self.periods) > 3 else ""
        return f"the users running differed from the plan for {self.seconds:.0f} s: {'; '.join(shown)}{more}"
