"""summary.json's sections on the client's own health: the open loop's schedule, a client-bound
load generator, each worker's record accounting and the work lost with a worker."""

from __future__ import annotations

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


class ClientBound(Section):
    """plugin/health_board.py: was the load generator itself the bottleneck?"""

    bound: bool = False
    contended: bool = False
    advice: str = ""
    workers: list[dict[str, Any]] = []

    def warning(self) -> str:
        """One sentence when the load generator itself may have distorted the timings."""
        advice = self.advice.strip()
        if self.bound:
            return "The load generator was client bound (out of CPU): its timings include client delay. " + advice
        # the advice (plugin/health_board.py) says what happened and what to do: not said twice
        if self.contended:
            return "The load generator's machine was contended: " + advice
        if (self.model_extra or {}).get("inaccurate"):
            return "The load generator was inaccurate: " + advice
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
