"""Interrupts and exit codes: a misconfiguration ends the process with one line and exit code 2
before any load (`fail`); SIGINT and SIGTERM end a run at once, its streams in flight recorded as
`stopped`, a master first collecting its workers' last records, the summary saying `complete:
false` and why, exit code 130 (`interrupt`; docs/failures.md "When a run goes wrong").
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time

import gevent
from locust.runners import STATE_CLEANUP, STATE_STOPPED, STATE_STOPPING

from plugin import exit_codes, run_end
from plugin.state import SuiteState, state_of

log = logging.getLogger("llm")

INTERRUPT_WAIT_S = 15  # an interrupted master waits this long for a stop under way to end the run


def fail(message: str) -> None:
    """A misconfiguration: one line, the bad-input exit code, before any load."""
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    _stop_children()
    sys.exit(exit_codes.BAD_INPUT)


def _stop_children() -> None:
    """With --processes, Locust forks the workers before the options reach the suite. Its own
    clean-up at exit takes a child that is still running for one that has ended (a non-blocking
    waitpid returns 0), so without this the workers of a refused run would outlive it by a minute,
    waiting for a master's heartbeat, and print to the terminal after the prompt came back. Nothing
    has started yet: the children (those workers, a built-in simulator) are stopped, then killed."""
    import psutil

    children = psutil.Process().children()
    for child in children:
        try:
            child.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(children, timeout=5)
    for child in alive:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def watch_signals(state: SuiteState) -> None:
    """Note which signal ends the process, for the interrupted run's reason. SIGINT keeps Python's
    KeyboardInterrupt (Locust's Ctrl-C handling); SIGTERM gets a watcher beside Locust's own."""

    def on_sigint(signum, frame):
        state.signal = "SIGINT"
        run = state.run
        if run is not None and run.ending is not None:
            # the run's results are being written: an exception raised into whatever runs now
            # would cut that short. A headless run quits once they are written; the web UI, which
            # stays up after a STOP, gets the Ctrl-C again then
            log.warning("SIGINT while the run's results are written: waiting for them")
            if not run.environment.parsed_options.headless:
                ending = run.ending
                gevent.spawn(lambda: (ending.done.wait(), os.kill(os.getpid(), signal.SIGINT)))
            return
        raise KeyboardInterrupt

    def on_sigterm():
        state.signal = state.signal or "SIGTERM"
        # one SIGTERM ends the run; a second one (an orchestrator repeating itself) would run Locust's
        # shutdown again in the middle of ours and lose the streams in flight: ignore it (SIGKILL stays)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, on_sigint)
            # the KeyboardInterrupt reaches Locust's main through gevent's hub, which would print
            # its traceback on the way: an interrupt is not an error (gevent's Hub.NOT_ERROR)
            hub = gevent.get_hub()
            hub.NOT_ERROR = (*hub.NOT_ERROR, KeyboardInterrupt)
        state.sigterm_watcher = gevent.signal_handler(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread (a test's environment): nothing to watch
        pass


def interrupt(environment) -> None:
    """The process quits while a run is on (SIGINT, SIGTERM): the run ends here, before Locust's
    own quitting (which would end it as if finished, and drop the streams in flight). Users stop at
    once, their streams in flight recorded as `stopped`; a master first collects its workers'
    last records. The summary says `complete: false` and why; the exit code is 130."""
    state = state_of(environment)
    if state is None or state.interrupted:
        return
    run, runner = state.run, environment.runner
    if run is not None and run.ending is not None:  # its results are being written: the process waits for them
        log.warning("%s while the run's results are written: waiting for them", state.signal or "a request to quit")
        run_end.end_run(environment)
        return
    if not (run is not None or (state.role == "worker" and state.context is not None)):
        return  # no run on: nothing to mark
    if state.signal is None:
        gevent.sleep(0)  # the SIGTERM watcher's greenlet may not have run yet
    started = run.started if run is not None else state.context.run_start
    planned = state.plan.run_time_s if state.plan is not None else None
    state.interrupted = (
        f"interrupted by {state.signal or 'a request to quit'} {time.time() - started:.0f} s into the run"
        + (f" of {planned:g} s" if planned else "")
    )
    exit_codes.raise_to(environment, exit_codes.INTERRUPTED)
    log.warning(
        "%s: stopping users now; streams in flight are recorded as stopped (complete: false)", state.interrupted
    )
    environment.stop_timeout = 0
    # a master's drain runs inside Locust's test_stopping, before its state leaves "running": the
    # run's own stop time says whether one is under way
    draining = state.role == "master" and run is not None and run.window_end is not None
    if not draining and runner.state not in (STATE_CLEANUP, STATE_STOPPING, STATE_STOPPED):
        runner.stop()  # test_stopping (a master's hurried drain), test_stop: the run is finished there
    elif state.role == "master":  # a drain under way: hurry it, then let it end the run
        run.collector.ask_to_stop(now=True)
        deadline = time.monotonic() + INTERRUPT_WAIT_S
        while run.ending is None and time.monotonic() < deadline:
            gevent.sleep(0.1)
    else:  # a stop under way waits --stop-timeout for the users: cut them now
        runner.user_greenlets.kill(block=True, timeout=5)
    run_end.end_run(environment)
