"""Trace replay (--replay): a trace's requests at their logged times, open loop at the trace's mean
rate, split across processes (shapes/replay.py); the run ends with the trace (plugin/replay.py).

The trace is read where the run is planned; the plan names it by its content hash, and a master
sends its files to the workers with the run (plugin/run_start.py): every process replays the one
trace, on one clock, and no worker opens a trace file of its own."""

from __future__ import annotations

import time
from typing import Literal

from gevent.event import Event

from core.errors import InputError
from plugin import replay as replay_run
from plugin.load_models.open_loop import Scheduled
from shapes.replay import ReplaySchedule, Trace, load_trace


class TraceReplay(Scheduled):
    kind: Literal["replay"] = "replay"
    trace: str  # the file, as --replay names it on the planning machine
    digest: str  # the trace's content hash (shapes.replay.Trace.digest)
    duration_s: float  # its last request's time, before time_scale
    time_scale: float
    rate: float  # the trace's mean rate after time_scale

    @classmethod
    def chosen(cls, p) -> bool:
        return bool(p.replay)

    @classmethod
    def from_options(cls, p, distributed: bool) -> TraceReplay:
        if p.request_rate is not None:
            raise InputError("--replay: the trace sets the send times; drop --request-rate")
        if p.steps or p.find_capacity:
            raise InputError("--replay: cannot be combined with --steps or --find-capacity; the trace is the load")
        scale = p.time_scale or 1.0
        try:
            loaded = load_trace(p.replay)
        except InputError as e:
            raise InputError(f"--replay: {e}") from None
        return cls(
            trace=p.replay,
            digest=loaded.digest,
            duration_s=loaded.duration_s,
            time_scale=scale,
            rate=loaded.rate(scale),
            max_concurrency=p.max_concurrency,
        )

    def read(self) -> Trace:
        """The planned trace, read once more where the run starts (the same file, unchanged)."""
        try:
            trace = load_trace(self.trace)
        except InputError as e:
            raise InputError(f"--replay: {e}") from None
        if trace.digest != self.digest:
            raise InputError(f"--replay: {self.trace} changed since the run was planned; start the run again")
        return trace

    def describe(self, plan) -> str:
        return f"replay of {self.trace} at x{self.time_scale:g} time scale ({self.rate:.3g} requests/s)"

    def target_rate(self) -> float:
        return self.rate

    def scheduled_between(self, run_start, start, end, seed):
        # the planned trace (cached while its file is unchanged; InputError when it changed since)
        return sum(1 for t in ReplaySchedule(self.read(), self.time_scale, 1, 0, run_start).times if start <= t <= end)

    def scheduled_pacer(self, ctx, worker_index, processes, environment, t0):
        # the run's trace: read with the plan, or (a worker) the one its master sent
        schedule = ReplaySchedule(ctx.trace, self.time_scale, processes, worker_index, t0)
        return ReplayPacer(schedule, ctx.stopping, environment)


class ReplayPacer:
    """This process's share of the trace at its logged times."""

    def __init__(self, schedule: ReplaySchedule, stopping: Event, environment):
        self.schedule, self.stopping, self.environment = schedule, stopping, environment

    def next(self):
        item = self.schedule.take()
        if item is None:  # the share is all taken: the run ends once every process sent its last
            if self.schedule.sent >= len(self.schedule):
                replay_run.share_done(self.environment, self.schedule)
            self.stopping.wait(1.0)
            return None
        t_intended, request = item
        if self.stopping.wait(max(t_intended - time.perf_counter(), 0.0)):
            return None
        replay_run.sending(self.environment, self.schedule)
        return t_intended, request
