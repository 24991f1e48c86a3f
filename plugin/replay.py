"""Trace replay in a Locust run: each process sends its share of the trace (shapes/replay.py), says
when it sent its last request, and the run ends once every process has.

The master counts the workers that finished; a worker that died never reports, so after the
trace's last scheduled time the master ends the run once every worker still connected has.
"""

from __future__ import annotations

import logging
import time

import gevent

from plugin.state import Plugin
from shapes.arrivals import START_DELAY_S
from shapes.replay import ReplaySchedule

log = logging.getLogger("llm")

DONE_MESSAGE = "llm_replay_done"
DONE_POLL_S = 1.0


def sending(environment, schedule: ReplaySchedule) -> None:
    """A request of this process's share is being sent; after the last one, report the end."""
    if schedule.sending():
        share_done(environment, schedule)


def share_done(environment, schedule: ReplaySchedule) -> None:
    """Every request of this process's share was sent (or it had none)."""
    if not schedule.mark_reported():
        return
    if getattr(environment.parsed_options, "worker", False):
        environment.runner.send_message(DONE_MESSAGE, {"sent": schedule.sent})
    else:
        log.info("replay: all %d requests of the trace were sent; the run ends", schedule.sent)
        gevent.spawn(end_run, environment)


def end_run(environment) -> None:
    """Stop the run as -t would (headless: quit; web UI: stop and wait for the next start)."""
    runner = environment.runner
    if runner is None or runner.state in ("stopping", "stopped", "quitting"):
        return
    if getattr(environment.parsed_options, "headless", False):
        runner.quit()
    else:
        runner.stop()


# ------------------------------------------------------------------ master: count finished workers


class ReplayEnd(Plugin):
    """On the master of a replayed trace: end the run once every worker sent its share."""

    def results_init(self, environment) -> None:
        environment.runner.register_message(DONE_MESSAGE, lambda msg, **kw: _worker_done(environment, msg))

    def run_starting(self, run) -> None:
        if run.plan.replay is None or run.collector is None:  # a local run's one process ends it itself (share_done)
            return
        run.environment.llm.replay_done = set()
        gevent.spawn(_watch_lost_workers, run.environment, run.plan.load)


def _worker_done(environment, msg) -> None:
    done = environment.llm.replay_done
    done.add(msg.node_id)
    expected = environment.llm.run.processes if environment.llm.run is not None else 1
    log.info("replay: worker %s sent its last request (%d of %d)", msg.node_id, len(done), expected)
    if len(done) >= expected:
        log.info("replay: every worker sent its share of the trace; the run ends")
        gevent.spawn(end_run, environment)


def _watch_lost_workers(environment, load) -> None:
    """A worker that died never reports: after the trace's last scheduled time, end the run once
    every worker still connected has reported."""
    run = environment.llm.run
    end_wall = run.started + START_DELAY_S + load.duration_s * load.time_scale
    gevent.sleep(max(0.0, end_wall - time.time()) + DONE_POLL_S)
    runner = environment.runner
    expected = run.processes
    # the run's own stop time: a master's drain keeps Locust's state "running" until it is done
    while runner.state not in ("stopping", "stopped", "quitting") and run.window_end is None:
        done = len(environment.llm.replay_done)
        if done and done >= min(expected, runner.worker_count):
            log.warning("replay: %d of %d workers reported the end of their share; the others are gone", done, expected)
            end_run(environment)
            return
        gevent.sleep(DONE_POLL_S)
