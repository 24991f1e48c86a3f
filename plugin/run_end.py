"""The one end of a run: every way a run ends on a process comes here, once.

The time limit (-t), the all-failed stop (plugin/failfast.py), a signal (plugin/interrupts.py), the
web UI's STOP, a worker that could not start, the last worker lost, a replayed trace's end and a
stepped run's last level all stop Locust's runner, whose `test_stop` calls `end_run`; Locust's quitting calls it too, for a
run still on. It closes the users' side (every exchange a user handed over becomes a record; a
worker sends its last batches) and, on the process that writes results, the results side
(`Run.finish`: requests.parquet, summary.json, the console table and the exit code), or says in
one line what it could not write.

Two stops can overlap: the all-failed stop is draining the streams in flight when -t fires, a
Ctrl-C comes while the results are being written. Locust runs a second stop's `test_stop` (and its
quitting, which exits the process) without waiting for the first. So the first call does the work
and every later call for the same run waits until it is done: the process never exits in the
middle of writing, and nothing is written twice.
"""

from __future__ import annotations

import logging

import gevent
from gevent.event import Event

from plugin import exit_codes, worker
from plugin.state import state_of

log = logging.getLogger("llm")


class Ending:
    """One run's end under way on this process: who does it, and when it is done."""

    def __init__(self):
        self.greenlet = gevent.getcurrent()
        self.done = Event()


def end_run(environment) -> None:
    """End the current run on this process, once; a call while the end is under way waits for it."""
    state = state_of(environment)
    if state is None:
        return
    run = state.run
    if run is None:  # a worker's users' side (or no run on: nothing to close)
        if state.context is not None:
            worker.close_users(environment)
            state.call("load_stopped", environment)
        return
    ending = run.ending
    if ending is not None:
        if ending.greenlet is not gevent.getcurrent():  # a second stop during the first waits for it
            ending.done.wait()
        return
    ending = run.ending = Ending()
    search = getattr(run, "search", None)
    if search is not None:  # a capacity search its policy or -t has not ended by now was stopped
        search.stop()
    try:
        try:
            worker.close_users(environment)  # the users' exchanges become records before the results close
            state.call("load_stopped", environment)
        except Exception as e:
            log.error(
                "ending the run: closing the users' side failed (%s: %s); the records handed over are written",
                type(e).__name__,
                e,
            )
        try:
            run.finish()
        except Exception as e:
            not_written(environment, run, e)
    finally:
        if state.run is run:
            state.run = None
        ending.done.set()


def not_written(environment, run, e: Exception) -> None:
    """The end of the run failed before its results were all written: one line saying what is
    where, and the results-not-written exit code."""
    writer = run.writer
    what = "summary.json" if writer.closed else "requests.parquet and summary.json"
    log.error(
        "results not written (exit %d): %s could not be written (%s: %s); the records written so far are in %s "
        "(python -m reports build %s makes them readable)",
        exit_codes.RESULTS_NOT_WRITTEN,
        what,
        type(e).__name__,
        e,
        writer.path,
        writer.path,
    )
    exit_codes.raise_to(environment, exit_codes.RESULTS_NOT_WRITTEN)
