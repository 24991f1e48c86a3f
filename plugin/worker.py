"""Worker life: what a worker process does for a run it did not plan. It starts the run its master
sent (plugin/run_start.py) or tells the master why it cannot; it watches its master and, when the
master stays silent for MASTER_SILENT_S, stops its users and keeps the records the master never
acknowledged on its own disk.
"""

from __future__ import annotations

import logging
import os
import secrets
import time

import gevent
from locust import events
from locust.runners import HEARTBEAT_INTERVAL, HEARTBEAT_LIVENESS, STATE_CLEANUP, STATE_STOPPED, STATE_STOPPING

from core.errors import InputError
from plugin import exit_codes, run_start, suite_match, worker_options
from plugin.context import RunContext
from plugin.finisher import Finisher
from plugin.plan import RunPlan
from plugin.shipping import WorkerShipper
from plugin.state import SuiteState, state_of
from runfolder.records import write_unshipped

log = logging.getLogger("llm")

CONTEXT_WAIT_S = 30  # a late-joining worker's users wait this long for the run context
WORKER_ERROR = "llm_worker_error"  # a worker could not build the run's plan: it tells the master
# a worker whose master has been silent this long (Locust's master declares a worker missing after
# HEARTBEAT_LIVENESS missed heartbeats; Locust's own worker waits 60 s) stops its users
MASTER_SILENT_S = HEARTBEAT_LIVENESS * HEARTBEAT_INTERVAL + 2.0


def init_worker(environment, runner, state: SuiteState) -> None:
    def on_drain(msg, **_kw):
        if msg.data.get("now"):  # the master was interrupted: cut the streams in flight at once
            environment.stop_timeout = 0
            state.interrupted = state.interrupted or "the master was interrupted"
            exit_codes.raise_to(environment, exit_codes.INTERRUPTED)
            if runner.state in (STATE_CLEANUP, STATE_STOPPING):  # a stop under way waits --stop-timeout
                runner.user_greenlets.kill(block=True, timeout=5)
                return
        if runner.state in (STATE_CLEANUP, STATE_STOPPING, STATE_STOPPED):
            return
        log.info("drain requested by the master: stopping users")
        runner.stop()  # fires test_stopping here too: open-loop users stop taking arrivals

    # concurrent: a second, hurried drain must reach the worker while the first one still waits
    runner.register_message("llm_drain", on_drain, concurrent=True)
    runner.register_message("llm_ack", lambda msg, **kw: state.context and state.context.sink.on_ack(msg.data))

    def report(client_id, data):
        suite_match.report(data)
        if state.context is not None:
            state.context.sink.on_report(data, state.context.in_flight)
        state.call("report_to_master", environment, data)

    events.report_to_master.add_listener(report)
    state.own_results_dir = getattr(environment.parsed_options, "results_dir", None)  # before the master's arrives
    worker_options.read_own()  # now: a parse takes a fraction of a second, the users have not started
    state.worker_ready = True
    gevent.spawn(_watch_master, environment, runner, state)


def _watch_master(environment, runner, state: SuiteState) -> None:
    """A worker's users stop when its master stays silent (killed, network cut) for MASTER_SILENT_S
    during a run; Locust's own worker would keep loading the server for 60 s, then exit 0. Silence
    while this process itself was stopped (SIGSTOP, a paused VM) does not count: the master's
    heartbeats wait in the socket, and the master takes a worker back when its heartbeats resume."""
    awake = polled = time.monotonic()
    while True:
        gevent.sleep(0.5)
        now = time.monotonic()
        if now - polled > MASTER_SILENT_S:  # this process did not run for that long: it was stopped
            awake = now
        polled = now
        ctx, last = state.context, runner.last_heartbeat_timestamp
        if ctx is None or ctx.stopping.is_set() or last is None:
            continue
        silent = min(time.time() - last, now - awake)
        if silent >= MASTER_SILENT_S:
            _master_lost(environment, runner, state, silent)
            return


def _master_lost(environment, runner, state: SuiteState, silent: float) -> None:
    state.master_lost = True
    log.error(
        "master silent for %.0f s (its heartbeat comes every %g s): stopping users now; records it has not "
        "acknowledged are kept on this machine",
        silent,
        HEARTBEAT_INTERVAL,
    )
    exit_codes.raise_to(environment, exit_codes.INCOMPLETE)
    environment.stop_timeout = 0  # nobody collects what they would finish: cut them, record them
    runner.stop()  # test_stop: the records are kept (close_users)
    runner.quit()


def keep_unshipped(environment, ctx, state: SuiteState) -> None:
    """A worker without its master: every record not acknowledged, on this machine's disk."""
    rows = ctx.sink.unshipped()
    folder = os.path.join(state.own_results_dir or ctx.plan.results_dir, ctx.run_id)
    name = f"worker-{environment.runner.worker_index}-{secrets.token_hex(3)}"
    try:
        path = write_unshipped(folder, name, rows)
    except OSError as e:
        log.error(
            "could not keep %d unshipped records in %s (%s): they are lost",
            len(rows),
            folder,
            os.strerror(e.errno) if e.errno else e,
        )
        return
    log.error(
        "kept %d records the master never acknowledged in %s (copy it into the run's results folder on the "
        "master's machine and run python -m reports build there: each request is kept once)",
        len(rows),
        path,
    )


def cannot_run(environment, error: Exception) -> None:
    """Tell the master, which stops the run (its summary and exit code say why)."""
    log.error("cannot run: %s", error)
    exit_codes.raise_to(environment, exit_codes.INCOMPLETE)
    state_of(environment).cannot_run = str(error)  # its users, spawned anyway, stop instead of waiting for a context

    def send():
        deadline = time.monotonic() + CONTEXT_WAIT_S
        while environment.runner is None and time.monotonic() < deadline:  # a late joiner: not yet set
            gevent.sleep(0.05)
        environment.runner.send_message(WORKER_ERROR, {"message": str(error)})

    if environment.runner is not None:
        send()
    else:
        gevent.spawn(send)


def start_worker_run(environment, state: SuiteState) -> None:
    """A worker runs the plan and the inputs its master sent (plugin/run_start.py: workload, trace,
    tokenizer), validated here; it reads none of them from its own disk."""
    differs = suite_match.masters_differs(environment)
    state.cannot_run = None
    try:
        start = run_start.received(environment)  # taken out of the options, whatever follows
        if differs:
            raise InputError(differs)
        inputs = run_start.off_loop(start.inputs)
    except InputError as e:
        cannot_run(
            environment, InputError(differs) if differs else e
        )  # a master of another version sends another start
        return
    # the worker's own key wins: the master's travels in clear text with Locust's options (docs/security.md)
    plan = start.plan.with_api_key(
        os.environ.get("LOCUST_API_KEY", "") or getattr(environment.parsed_options, "api_key", "") or ""
    )
    worker_options.say_overridden(environment)
    state.plan, state.inputs, state.start = plan, inputs, start
    state.shared = start.shared  # what the master's plugins shared with the run (its load side reads it)
    if state.worker_ready:
        _open_run(environment, start, plan, inputs)
    else:  # joined a running test: finish once init has run (users wait for the context)
        gevent.spawn(_open_run_when_ready, environment, start, plan, inputs)
    state.call("load_started", environment)


def _open_run(environment, start, plan: RunPlan, inputs) -> None:
    runner = environment.runner
    state = state_of(environment)
    try:
        ctx = RunContext(
            plan,
            inputs,
            start.run_id,
            runner.worker_index,
            WorkerShipper(runner, start.run_id),
            start.started,
            start.processes,
            environment,
        )
    except InputError as e:
        cannot_run(environment, e)
        return
    ctx.finisher = Finisher(ctx, environment)
    state.context = ctx


def _open_run_when_ready(environment, start, plan: RunPlan, inputs) -> None:
    state = state_of(environment)
    deadline = time.monotonic() + CONTEXT_WAIT_S
    while not state.worker_ready and time.monotonic() < deadline:
        gevent.sleep(0.01)
    _open_run(environment, start, plan, inputs)


def close_users(environment) -> None:
    """Users have stopped: every exchange they handed over becomes a record, and a worker sends
    its last batches (or, its master lost, keeps them on its own disk)."""
    state = state_of(environment)
    ctx = state.context
    if ctx is not None:
        ctx.finisher.stop()
        state.context = None
        if state.role == "worker":
            if state.master_lost or not ctx.sink.send_final():
                keep_unshipped(environment, ctx, state)
