"""--num-requests N: the run ends once N requests are sent, then the drain as usual.

N is split across the load processes before any is sent (`share`: worker i of W sends N // W, one
more for the first N % W), so the total is exact whatever each process's pace: a process's users
take their requests from its share (`BudgetPacer`, around the load model's pacer) and send nothing
once it is spent. A process whose share is spent says so (a worker in a message to its master, a
local process to itself); once every load process has, the run stops as -t would stop it, and the
requests in flight drain within --stop-timeout. A request is counted when its user takes it from the
pacer, just before it is written: a retry (--retry) and a conversation's later turns belong to the
request that began them and are not counted again.

A worker that dies never says so: the run then ends at -t, or by a STOP.
"""

from __future__ import annotations

import logging

import gevent

from plugin.replay import end_run
from plugin.state import Plugin

log = logging.getLogger("llm")

DONE_MESSAGE = "llm_budget_done"
IDLE_WAIT_S = 1.0  # a user whose process's share is spent waits this long between asks


def share(total: int, processes: int, index: int) -> int:
    """Process `index`'s part of `total` requests split across `processes` (0 for a worker that
    joined after the split)."""
    if index >= processes:
        return 0
    return total // processes + (1 if index < total % processes else 0)


class BudgetPacer:
    """The load model's pacer, until this process's share of --num-requests is taken."""

    def __init__(self, pacer, count: int, stopping, on_spent):
        self.pacer, self.share, self.stopping, self.on_spent = pacer, count, stopping, on_spent
        self.left = count  # not yet taken (a user waiting on the schedule holds one taken)
        self.sent = 0  # handed to a user to send
        self.reported = False

    def next(self):
        if self.left <= 0:
            self._spent()
            self.stopping.wait(IDLE_WAIT_S)
            return None
        self.left -= 1  # taken before the wait: users waiting on an open loop's schedule cannot overdraw it
        item = self.pacer.next()
        if item is None:
            self.left += 1
            return None
        self.sent += 1
        self._spent()
        return item

    def _spent(self) -> None:
        """Said once, when every request of the share was handed out (not merely taken: the run
        must not stop while a user still waits to send one)."""
        if not self.reported and self.sent >= self.share:
            self.reported = True
            self.on_spent(self.sent)


def budget_pacer(pacer, plan, worker_index: int, processes: int, stopping, environment):
    """The pacer of this process: the load model's, or with --num-requests its share of them."""
    if not plan.num_requests:
        return pacer
    mine = share(plan.num_requests, processes, worker_index)
    return BudgetPacer(pacer, mine, stopping, lambda sent: _share_spent(environment, sent, plan.num_requests))


def _share_spent(environment, sent: int, total: int) -> None:
    if environment is None:
        return
    if getattr(environment.parsed_options, "worker", False):
        environment.runner.send_message(DONE_MESSAGE, {"sent": sent})
    else:
        log.info(
            "--num-requests: all %d requests were sent; the run ends once those in flight are done (--stop-timeout)",
            total,
        )
        gevent.spawn(end_run, environment)


class RequestBudgetEnd(Plugin):
    """On a master: end the run once every worker has sent its share of --num-requests."""

    def __init__(self):
        self.done: dict[str, int] = {}

    def results_init(self, environment) -> None:
        if getattr(environment.parsed_options, "master", False):
            environment.runner.register_message(DONE_MESSAGE, lambda msg, **kw: self._worker_done(environment, msg))

    def run_starting(self, run) -> None:
        self.done = {}

    def _worker_done(self, environment, msg) -> None:
        run = environment.llm.run
        if run is None or not run.plan.num_requests:
            return
        self.done[msg.node_id] = int(msg.data.get("sent", 0))
        if len(self.done) >= run.processes:
            log.info(
                "--num-requests: every worker sent its share, %d requests in all; the run ends once those in flight "
                "are done (--stop-timeout)",
                sum(self.done.values()),
            )
            gevent.spawn(end_run, environment)
