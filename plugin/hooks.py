"""The one place that listens to Locust's events: what each process does at init, test start,
stop and quit, and when each installed plugin is called.

Roles:
  local   runs users and writes results (in-process sink)
  master  runs no users; collects worker batches, drains at stop, writes results
  worker  runs users; ships batches to the master; receives the run's plan and workload with the
          spawn message (plugin/run_start.py), so its run starts at test start

Every run's plan (plugin/plan.py) is built once, before a user spawns: at init (headless) or by the
web form's check (webui/start_check.py); test start runs it, and a master sends it to its workers
with the workload. locustfile.py calls `install(...)` once with the plugins in the order their
hooks run; each event calls the hooks of its sides (results, load: plugin/state.py), and a process
runs those of its role's sides. The results side of a run is plugin/run.py.

When a run goes wrong (docs/failures.md "When a run goes wrong"):
  SIGINT / SIGTERM   (plugin/interrupts.py) the run stops at once: streams in flight are cut and recorded as `stopped`,
                     a master first collects its workers' last records; summary.json says
                     `complete: false` and why; exit code 130 (exit_codes.INTERRUPTED)
  a lost master      a worker whose master stays silent for MASTER_SILENT_S (plugin/worker.py) stops its users, keeps
                     the records the master never acknowledged in its own --results-dir and exits 4
  a run that did not run as asked (a worker failed or was lost, no record, no successful request)
                     `complete: false`, one line saying why, exit code 4 (exit_codes.INCOMPLETE)
"""

from __future__ import annotations

import logging
import random

import gevent
from locust import events

from core.errors import InputError
from plugin import exit_codes, interrupts, quick_exit, run_end, run_start, suite_match, worker, worker_options
from plugin.context import RunContext
from plugin.embedded import EmbeddedSimulator, scrape_when_target
from plugin.finisher import Finisher
from plugin.locust_fixes import (
    end_dispatch_after_rebalance,
    memoize_default_args,
    one_stop_at_a_time,
    stop_names_its_caller_cheaply,
    stop_users_in_batches,
)
from plugin.options import add_arguments, check_host
from plugin.plan import RunPlan
from plugin.progress import OpenStreams
from plugin.run import Run, check_target, choose_shape, prepare_run, probe_target
from plugin.run_start import RunStart
from plugin.server import check_reachable, resolve_model
from plugin.shipping import LocalSink, MasterCollector
from plugin.state import Plugin, SuiteState, role_of, state_of
from plugin.user_plan import UserPlan

log = logging.getLogger("llm")
memoize_default_args()  # at import: a late-joining worker gets its first spawn message before init fires
end_dispatch_after_rebalance()  # a worker back from a freeze gets its share of the users again
stop_users_in_batches()  # the stop of 1,000 users holds the loop under a millisecond at a time
stop_names_its_caller_cheaply()  # ... and its debug line reads no source
one_stop_at_a_time()  # a second stop or quit while a master drains its workers waits for that drain
quick_exit.install()  # once Locust's last event has fired, the process leaves without tearing down its heap

DEFAULT_STOP_TIMEOUT_S = 30  # in-flight streams get this long to finish when a run ends
DRAIN_MARGIN_S = 30  # beyond --stop-timeout, for the last batches to arrive

_plugins: tuple[Plugin, ...] = ()


def install(*plugins: Plugin) -> None:
    """The plugins of every run, in the order their hooks are called. Called once by the locustfile.
    The open streams' tracker (plugin/progress.py) comes first, with every run: a capacity search
    judges on it, whatever the locustfile installs; so does the users' check against the plan
    (plugin/user_plan.py): a run is complete only where it ran the users it states."""
    global _plugins
    _plugins = (OpenStreams(), UserPlan(), *plugins)


# -- Locust's events ------------------------------------------------------------------------------


@events.init_command_line_parser.add_listener
def _add_options(parser, **_kw) -> None:
    add_arguments(parser)
    # in-flight streams may finish at the end; a worker that joins late or dies mid-run has its
    # share of users moved (Locust's rebalancing)
    parser.set_defaults(stop_timeout=DEFAULT_STOP_TIMEOUT_S, enable_rebalancing=True)


@events.init.add_listener
def _on_init(environment, runner, **_kw) -> None:
    role = role_of(environment)
    state = state_of(environment)
    if state is None:  # a late-joining worker's test_start may have made it already
        state = environment.llm = SuiteState(role, _plugins)
    state.shape = environment.shape_class
    if role == "worker":
        worker.init_worker(environment, runner, state)
    else:
        _init_results_side(environment, runner, state)
    interrupts.watch_signals(state)
    # Locust fires `quitting` in reverse order of the listeners: this one, added after the runner's
    # own, runs before it (a master's runner would otherwise end the run as if it had finished)
    environment.events.quitting.add_listener(lambda environment, **kw: interrupts.interrupt(environment))
    environment.events.quit.add_listener(lambda exit_code, **kw: quick_exit.arm(environment, exit_code))
    state.call("results_init", environment)


def _init_results_side(environment, runner, state: SuiteState) -> None:
    # The results' modules (pandas and pyarrow among them, a third of a second of CPU) load here,
    # before any run: a process that only drives load (a worker) never loads them; this one neither
    # loads them mid-run (the results' writer, the capacity search's judge, the live view), which
    # would hold its event loop while its streams wait, nor as a run starts, after a load shape's
    # clock has (its steps would then be stated later than they ran).
    import pyarrow.compute
    import pyarrow.parquet  # noqa: F401

    import metrics.summary  # noqa: F401

    opts = environment.parsed_options
    try:
        # the plan of a headless run (or of a web UI's --autostart); a start from the form replaces it (webui/start_check.py)
        plan = RunPlan.from_options(opts)
        state.inputs = prepare_run(plan)
        if environment.host:
            environment.host = check_host(environment.host)
            if opts.headless:
                plan = check_target(environment, plan, environment.host)
            else:  # the web form may still change the host: its start checks it (webui/start_check.py)
                try:
                    check_reachable(environment.host, plan.timeouts.connect)
                except InputError as e:
                    log.warning("%s (the web UI starts anyway; a start from the form checks the host again)", e)
        else:
            sim = EmbeddedSimulator(plan.sim_profile)
            state.simulator = sim
            environment.host = opts.host = sim.url
            log.info("no --host given: started the built-in simulator at %s (profile %s)", sim.url, plan.sim_profile)
            plan = scrape_when_target(plan, sim, sim.url)  # its gauges are what the knee's diagnosis reads
            if opts.headless and not plan.model:
                plan = plan.with_model(resolve_model(environment.host, plan))
            if opts.headless:
                probe_target(environment, plan, environment.host)
        state.plan = plan
        choose_shape(environment, plan)
        cap = plan.load.headless_users()
        if cap is not None and opts.headless:  # Locust's own -u and -r: the count its headless start spawns
            opts.num_users, opts.spawn_rate = cap, float(cap)
        if opts.headless:
            log.info("plan: %s", plan.summary_line())
    except InputError as e:
        interrupts.fail(str(e))
    except RuntimeError as e:
        interrupts.fail(f"--sim-profile: the built-in simulator did not start: {e}")
    if role_of(environment) == "master":
        suite_match.announce(environment)
        runner.register_message("llm_final", lambda msg, **kw: state.run and state.run.collector.on_final(msg))
        runner.register_message(worker.WORKER_ERROR, lambda msg, **kw: _worker_failed(environment, msg))
        events.worker_report.add_listener(lambda client_id, data: _on_worker_report(environment, client_id, data))


def _on_worker_report(environment, client_id, data) -> None:
    state = state_of(environment)
    differs = suite_match.workers_differs(client_id, data)
    if (
        differs and state.run is not None
    ):  # a worker that does not check: it runs users, its last records are waited for
        _refuse(environment, client_id, differs, started=True)
    if state.run is not None and state.run.collector is not None:
        state.run.collector.on_worker_report(client_id, data)
    state.call("worker_report", environment, client_id, data)


def _worker_failed(environment, msg) -> None:
    """A worker could not build the run's plan: the run cannot be what was asked. Say so and end it."""
    _refuse(environment, msg.node_id, f"worker {msg.node_id} could not start the run: {msg.data.get('message')}")


def _refuse(environment, client_id: str, message: str, started: bool = False) -> None:
    """A worker that cannot run the run as asked (its own word, or another suite version): said
    once, and the run is stopped."""
    state = state_of(environment)
    collector = state.run.collector if state.run is not None else None
    if collector is not None:
        if not started:
            collector.failed.add(client_id)  # it has no records to wait for
        if client_id in collector.refused:
            return
        collector.refused.add(client_id)
    log.error("%s; the run is stopped", message)
    state.worker_errors.append(message)
    exit_codes.raise_to(environment, exit_codes.INCOMPLETE)
    runner = environment.runner
    if runner is not None and runner.state not in ("stopping", "stopped", "quitting"):
        gevent.spawn(runner.quit if environment.parsed_options.headless else runner.stop)


@events.test_start.add_listener
def _on_test_start(environment, **_kw) -> None:
    state = state_of(environment)
    if state is None:  # a worker joining a running test: test_start fires before init
        state = environment.llm = SuiteState(role_of(environment), _plugins)
    opts = environment.parsed_options
    if state.role == "worker":
        worker.start_worker_run(environment, state)
        return
    # the plan built and checked before this start (init, or the web form's check): it is the run's
    plan = state.plan
    try:
        if not plan.model:
            plan = plan.with_model(resolve_model(environment.host, plan))
    except InputError as e:
        log.error("%s", e)
        raise
    if plan.seed is None:  # one seed for the run, recorded, shared with workers (arrival split)
        plan = plan.with_seed(random.randrange(2**31))
    state.plan = plan
    try:
        run = Run(environment, plan, state.inputs.workload, state.form_argv)
    except InputError as e:  # the run's folder was taken since the check (another writer, same --run-id)
        log.error("%s", e)
        exit_codes.raise_to(environment, exit_codes.BAD_INPUT)
        gevent.spawn(environment.runner.quit if opts.headless else environment.runner.stop)
        return
    state.run = run
    state.interrupted = None
    state.worker_errors = []
    state.shared = {}
    shape = state.shape
    if plan.stepped and shape is not None:
        run.steps, run.search = shape.steps, shape.search
        if run.search is not None:
            run.search.run_start = run.started
    if state.role == "master":
        run.collector = MasterCollector(environment.runner, run.writer, run.run_id)
    else:
        ctx = state.context = RunContext(
            plan, state.inputs, run.run_id, 0, LocalSink(run.writer), run.started, environment=environment
        )
        ctx.finisher = Finisher(ctx, environment)
    state.call("run_starting", run)
    if state.role == "master":  # the plan and its inputs travel to the workers with Locust's spawn messages
        worker_options.announce(environment)  # and what it decides of Locust's options, for their lines
        run_start.send(
            environment,
            RunStart.of(
                plan, state.inputs, run_id=run.run_id, started=run.started, processes=run.processes, shared=state.shared
            ),
        )
    state.call("load_started", environment)  # a local process runs the users too
    state.call("run_started", run)
    log.info("run %s: %s; results in %s", run.run_id, plan.summary_line(), run.writer.path)


@events.test_stopping.add_listener
def _on_test_stopping(environment, **_kw) -> None:
    state = state_of(environment)
    if state is None:
        return
    if state.context is not None:  # first: a hook below may yield, and no user may start a request then
        state.context.stopping.set()
    state.call("load_stopping", environment)
    run = state.run
    if run is None:
        return
    if (
        run.window_end is not None
    ):  # a second stop while the first drains: its end waits for the first's (plugin/run_end.py)
        log.info("stopping: the run is already stopping; this stop waits for it")
        return
    run.stopping()
    wait = float(environment.stop_timeout or 0)
    in_flight = state.in_flight()
    if wait and in_flight and not state.interrupted:  # a run that seems to hang at its end says why
        log.info("stopping: waiting up to %g s for %d streams in flight (--stop-timeout)", wait, in_flight)
    if run.collector is not None:
        run.collector.drain(timeout=wait + DRAIN_MARGIN_S, now=bool(state.interrupted))


@events.test_stop.add_listener
def _on_test_stop(environment, **_kw) -> None:
    state = state_of(environment)
    if state is None:
        return
    run_end.end_run(environment)
    if state.role == "worker":
        # Locust's worker sleeps --stop-timeout after every stop before it tells the master it is
        # ready, a margin for users still stopping. Here they have stopped and their records are
        # sent, so there is nothing to wait for: without this, a web-UI Start pressed after a Stop
        # waited up to 30 s (the default) for its workers. The next start sets it back.
        environment.stop_timeout = 0


@events.quitting.add_listener
def _on_quitting(environment, **_kw) -> None:
    state = state_of(environment)
    if state is None:
        return
    interrupts.interrupt(environment)  # when the listener added at init did not run (a test's environment)
    run_end.end_run(environment)  # a run still on ends here; one ending under way is waited for
    state.call("results_quitting", environment)
    if state.simulator is not None:
        gevent.spawn(state.simulator.stop).join(10)
