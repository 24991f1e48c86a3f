"""Event wiring: what each Locust process does at init, test start, stop and quit.

Roles (FIELD_NOTES 6, 7, 11):
  local   runs users and writes results (in-process sink)
  master  runs no users; collects worker batches, drains at stop, writes results
  worker  runs users; ships batches to the master; receives option values at test start
"""

from __future__ import annotations

import logging
import os
import random
import sys
import time

import gevent
from locust import events
from locust.runners import MasterRunner

from plugin.results import ResultsWriter, new_run_id
from plugin.shipping import LocalSink, MasterCollector, WorkerShipper
from shapes.arrivals import START_DELAY_S
from shapes.capacity import CapacitySearch
from shapes.steps import StepPlan
from plugin import events as llm_events
from plugin.context import RunContext, load_workload, token_counter
from plugin.embedded import EmbeddedSimulator
from plugin.locust_fixes import memoize_default_args
from core.errors import InputError
from plugin.options import Settings, add_arguments, check_host, public_options
from plugin.server import check_reachable, resolve_model
from plugin.finisher import Finisher

log = logging.getLogger("llm")
memoize_default_args()  # before the first spawn message reaches a worker

DEFAULT_STOP_TIMEOUT_S = 30  # in-flight streams get this long to finish when a run ends
DRAIN_MARGIN_S = 30  # beyond --stop-timeout, for the last batches to arrive
CONTEXT_WAIT_S = 30  # a late-joining worker's users wait this long for the run context


class Run:
    """The results side of one test run, on the process that writes results."""

    def __init__(self, environment, settings: Settings):
        self.environment = environment
        self.settings = settings
        self.run_id = settings.run_id or new_run_id()
        self.started = time.time()
        # open loop: the first arrival comes START_DELAY_S after the start, so the window does too
        self.window_start = self.started + settings.warmup_s + (START_DELAY_S if settings.request_rate else 0.0)
        self.window_end: float | None = None
        spec = load_workload(settings)
        self.writer = ResultsWriter(
            settings.results_dir,
            self.run_id,
            {
                "host": environment.host,
                "options": public_options(environment.parsed_options),
                "workload": {"hash": spec.spec_hash, **spec.to_dict()},
                "role": _role(environment),
            },
        )
        self.writer.on_rows = lambda rows: llm_events.rows_recorded.fire(run=self, rows=rows)
        self.collector = None
        self.plan = None  # shapes.steps.StepPlan of a step ramp
        self.search = None  # shapes.capacity.CapacitySearch
        self.finished = False
        self.summary_extra: dict = {}  # features add sections of summary.json here (run_stopping)

    def stopping(self) -> None:
        if self.window_end is None:
            self.window_end = time.time()

    def finish(self, complete: bool = True) -> dict | None:
        if self.finished:
            return None
        self.finished = True
        self.stopping()
        if self.collector is not None:
            self.summary_extra["workers"] = self.collector.report()
        llm_events.run_stopping.fire(run=self)
        plan = self.plan
        if self.search is not None:
            plan = StepPlan(self.search.levels, self.settings.step_time_s, self.settings.step_warmup_s)
        summary = self.writer.finish(
            self.window_start, self.window_end, self.summary_extra, complete=complete,
            run_start=self.started, plan=plan, objectives=self.settings.slo, target_rate=self.settings.request_rate,
        )  # fmt: skip
        from metrics.summary import format_table  # pandas, loaded only by the writing process

        print("\n" + format_table(summary), flush=True)
        if summary.get("open_loop", {}).get("behind_schedule"):
            log.warning("open loop: the client could not keep to the schedule: %s", "; ".join(summary["open_loop"]["reasons"]))
        self._set_exit_code(summary)
        print(f"results: {self.writer.path}", flush=True)
        llm_events.run_finished.fire(run=self, summary=summary)
        return summary

    def _set_exit_code(self, summary: dict) -> None:
        """A missed SLO fails a headless run (exit code 3); a capacity search fails only when no
        level met the SLO."""
        if "capacity" in summary and self.settings.find_capacity:
            print(summary["capacity"]["sentence"], flush=True)
            missed = summary["capacity"]["users"] is None
        elif "slo" in summary:
            missed = not summary["slo"]["passed"]
            for v in summary["slo"]["objectives"]:
                print(f"SLO {v['objective']}: {'met' if v['passed'] else 'MISSED'} (measured {v['value_ms']} ms)", flush=True)
        else:
            return
        if missed:
            self.environment.process_exit_code = 3


def _role(environment) -> str:
    """From the options, not the runner: a worker that joins a running test receives its spawn
    message (and fires test_start) inside the WorkerRunner constructor, before
    environment.runner is set and before init fires."""
    opts = environment.parsed_options
    if getattr(opts, "worker", False):
        return "worker"
    if getattr(opts, "master", False):
        return "master"
    return "local"


def fail(message: str) -> None:
    """A misconfiguration: one line, exit code 2, before any load."""
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    sys.exit(2)


@events.init_command_line_parser.add_listener
def _add_options(parser, **_kw) -> None:
    add_arguments(parser)
    # in-flight streams may finish at the end; a worker that joins late or dies mid-run has its
    # share of users moved (Locust's rebalancing)
    parser.set_defaults(stop_timeout=DEFAULT_STOP_TIMEOUT_S, enable_rebalancing=True)


@events.init.add_listener
def _on_init(environment, runner, **_kw) -> None:
    for name in ("llm_context", "llm_run"):  # a late-joining worker may have set them already
        if not hasattr(environment, name):
            setattr(environment, name, None)
    role = _role(environment)
    if role == "worker":
        _init_worker(environment, runner)
        return
    try:
        settings = Settings.from_options(environment.parsed_options)
        load_workload(settings)
        if settings.tokenizer:
            token_counter(settings.tokenizer)
        if environment.host:
            environment.host = check_host(environment.host)
            _check_reachable(environment, settings)
        else:
            sim = EmbeddedSimulator(settings.sim_profile)
            environment.llm_simulator = sim
            environment.host = environment.parsed_options.host = sim.url
            log.info("no --host given: started the built-in simulator at %s (profile %s)", sim.url, settings.sim_profile)
        if not settings.model and environment.parsed_options.headless:
            environment.parsed_options.model = resolve_model(environment.host, settings)
        _choose_load_model(environment, settings)
    except InputError as e:
        fail(str(e))
    except RuntimeError as e:
        fail(f"--sim-profile: the built-in simulator did not start: {e}")
    if role == "master":
        runner.register_message("llm_final", lambda msg, **kw: environment.llm_run and environment.llm_run.collector.on_final(msg))
        events.worker_report.add_listener(
            lambda client_id, data: environment.llm_run and environment.llm_run.collector.on_worker_report(client_id, data)
        )


def _check_reachable(environment, settings: Settings) -> None:
    """Headless: an unreachable --host fails at once (exit 2). Web UI: only a warning, since the
    host can still be changed in the start form."""
    try:
        check_reachable(environment.host, settings.timeouts.connect)
    except InputError as e:
        if environment.parsed_options.headless:
            raise
        log.warning("%s (the web UI starts anyway)", e)


def _choose_load_model(environment, settings: Settings) -> None:
    """Keep the locustfile's shape only for step ramps and capacity searches; in open loop the
    user count is the concurrency cap."""
    opts = environment.parsed_options
    if not (settings.steps or settings.find_capacity):
        environment.shape_class = None
    else:  # the shape ticks before test_start fires, so it must be ready now
        _arm_shape(environment, settings)
    if settings.request_rate and opts.headless:
        opts.num_users = settings.max_concurrency
        opts.spawn_rate = float(settings.max_concurrency)


def _init_worker(environment, runner) -> None:
    def on_drain(msg, **_kw):
        log.info("drain requested by the master: stopping users")
        runner.stop()  # fires test_stopping here too: open-loop users stop taking arrivals

    runner.register_message("llm_drain", on_drain)
    runner.register_message("llm_ack", lambda msg, **kw: environment.llm_context and environment.llm_context.sink.on_ack(msg.data))
    events.report_to_master.add_listener(
        lambda client_id, data: environment.llm_context
        and environment.llm_context.sink.on_report(data, environment.llm_context.in_flight)
    )
    environment.llm_worker_ready = True


@events.test_start.add_listener
def _on_test_start(environment, **_kw) -> None:
    runner = environment.runner
    role = _role(environment)
    opts = environment.parsed_options
    try:
        settings = Settings.from_options(opts)
        if role != "worker" and not settings.model:
            opts.model = resolve_model(environment.host, settings)
            settings.model = opts.model
    except InputError as e:
        log.error("%s", e)
        raise
    if role == "worker":
        own_key = os.environ.get("LOCUST_API_KEY", "")
        if own_key:  # the worker's own key wins: the master's travels in clear text (README "Security")
            settings.api_key = own_key
        if getattr(environment, "llm_worker_ready", False):
            _open_worker_run(environment, settings)
        else:  # joined a running test: finish once init has run (users wait for the context)
            gevent.spawn(_open_worker_run_when_ready, environment, settings)
        return
    if settings.seed is None:  # one seed for the run, recorded, shared with workers (arrival split)
        settings.seed = random.randrange(2**31)
        opts.seed = str(settings.seed)
    run = Run(environment, settings)
    environment.llm_run = run
    # these travel to workers in the spawn message
    opts.llm_run_id = run.run_id
    opts.llm_run_start = run.started
    opts.llm_processes = runner.worker_count if role == "master" else 1
    _start_shape(environment, run)
    if role == "master":
        run.collector = collector = MasterCollector(runner, run.writer, run.run_id)
        environment.llm_in_flight = lambda: sum(collector.in_flight.values())
    else:
        ctx = environment.llm_context = RunContext(settings, run.run_id, 0, LocalSink(run.writer), run.started)
        ctx.finisher = Finisher(ctx, environment)
        environment.llm_in_flight = lambda: ctx.in_flight
    llm_events.run_started.fire(run=run)
    log.info("run %s: results in %s", run.run_id, run.writer.path)


def _open_worker_run(environment, settings: Settings) -> None:
    opts, runner = environment.parsed_options, environment.runner
    run_id = getattr(opts, "llm_run_id", "") or new_run_id()
    ctx = RunContext(
        settings, run_id, runner.worker_index, WorkerShipper(runner, run_id),
        getattr(opts, "llm_run_start", time.time()), getattr(opts, "llm_processes", 1),
    )  # fmt: skip
    ctx.finisher = Finisher(ctx, environment)
    environment.llm_context = ctx


def _open_worker_run_when_ready(environment, settings: Settings) -> None:
    deadline = time.monotonic() + CONTEXT_WAIT_S
    while not getattr(environment, "llm_worker_ready", False) and time.monotonic() < deadline:
        gevent.sleep(0.01)
    _open_worker_run(environment, settings)


def _arm_shape(environment, settings: Settings) -> None:
    """Give the shape a fresh plan or search for the next run."""
    shape = environment.shape_class
    shape.plan = shape.search = None
    if settings.find_capacity:
        shape.search = CapacitySearch(
            settings.slo, settings.step_time_s, settings.step_warmup_s, environment.parsed_options.run_time or None,
            candidates=settings.steps or None, distributed=isinstance(environment.runner, MasterRunner),
        )  # fmt: skip
    elif settings.steps:
        shape.plan = StepPlan(settings.steps, settings.step_time_s, settings.step_warmup_s)


def _start_shape(environment, run: Run) -> None:
    shape = environment.shape_class
    if shape is None:
        return
    run.plan, run.search = shape.plan, shape.search
    if run.search is not None:
        run.search.run_start = run.started
        search = run.search
        llm_events.rows_recorded.add_listener(lambda run, rows: run.search is search and search.on_rows(rows))


@events.test_stopping.add_listener
def _on_test_stopping(environment, **_kw) -> None:
    ctx = getattr(environment, "llm_context", None)
    if ctx is not None:
        ctx.stopping.set()
    run = environment.llm_run
    if run is None:
        return
    run.stopping()
    if run.collector is not None:
        run.collector.drain(timeout=float(environment.stop_timeout or 0) + DRAIN_MARGIN_S)


@events.test_stop.add_listener
def _on_test_stop(environment, **_kw) -> None:
    _close_context(environment)
    run = environment.llm_run
    if run is not None:
        run.finish(complete=True)
        if environment.shape_class is not None:
            _arm_shape(environment, run.settings)  # web UI: ready for another run


def _close_context(environment) -> None:
    """Users have stopped: every exchange they handed over becomes a record, and a worker sends
    its last batches."""
    ctx = getattr(environment, "llm_context", None)
    if ctx is not None:
        ctx.finisher.stop()
        environment.llm_context = None
        if _role(environment) == "worker":
            ctx.sink.send_final()


@events.quitting.add_listener
def _on_quitting(environment, **_kw) -> None:
    _close_context(environment)
    run = getattr(environment, "llm_run", None)
    if run is not None and not run.finished:
        run.finish(complete=False)  # interrupted (Ctrl-C): partial results, marked incomplete
    sim = getattr(environment, "llm_simulator", None)
    if sim is not None:
        gevent.spawn(sim.stop).join(10)
