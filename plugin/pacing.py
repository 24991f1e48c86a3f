"""Load models behind one interface: a pacer says when a user sends its next request and which.

`pacer.next()` waits until the next request is due and returns `(t_intended, request)`, or None
when there is nothing to send now (the run is ending, or this process's share is used up; the
user asks again). `t_intended` is the scheduled send time on this process's perf_counter clock,
NaN in a closed loop (a request is due when the last one ended). Each run's context builds the
pacer its plan's load model asks for (plugin/context.py).
"""

from __future__ import annotations

import logging
import time

from gevent.event import Event

from plugin import replay as replay_run
from shapes.arrivals import ArrivalSchedule
from shapes.replay import ReplaySchedule

log = logging.getLogger("llm")

NAN = float("nan")


class ClosedPacer:
    """Closed loop (also step ramps and capacity search): the next request at once."""

    def __init__(self, sampler):
        self.sampler = sampler

    def next(self):
        return NAN, self.sampler.next()


class OpenPacer:
    """Open loop: this process's share of the run's arrival schedule (shapes/arrivals.py)."""

    def __init__(self, sampler, arrivals: ArrivalSchedule, stopping: Event):
        self.sampler, self.arrivals, self.stopping = sampler, arrivals, stopping

    def next(self):
        t_intended = self.arrivals.take()
        if self.stopping.wait(max(t_intended - time.perf_counter(), 0.0)):
            return None  # the run is ending: arrivals after it are not sent
        return t_intended, self.sampler.next()


class ReplayPacer:
    """Trace replay: this process's share of the trace at its logged times (shapes/replay.py)."""

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


class IdlePacer:
    """A worker that joined an open-loop run after its schedule was split: it sends nothing."""

    def __init__(self, stopping: Event):
        self.stopping = stopping

    def next(self):
        self.stopping.wait(1.0)
        return None
