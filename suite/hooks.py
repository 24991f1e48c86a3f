"""Event wiring: what each Locust process does at init, test start, stop and quit.

Roles (FIELD_NOTES 6, 7, 11):
  local   runs users and writes results (in-process sink)
  master  runs no users; collects worker batches, drains at stop, writes results
  worker  runs users; ships batches to the master; receives option values at test start
"""

from __future__ import annotations

import logging
import sys
import time

import gevent
from locust import events
from locust.runners import MasterRunner, WorkerRunner

from metrics.results import ResultsWriter, new_run_id
from metrics.shipping import LocalSink, MasterCollector, WorkerShipper
from metrics.summary import format_table
from suite import events as llm_events
from suite.context import RunContext, load_workload, token_counter
from suite.embedded import EmbeddedSimulator
from suite.options import OptionError, Settings, add_arguments, check_host, public_options
from suite.server import resolve_model

log = logging.getLogger("llm")

DEFAULT_STOP_TIMEOUT_S = 30  # in-flight streams get this long to finish when a run ends
DRAIN_MARGIN_S = 30  # beyond --stop-timeout, for the last batches to arrive


class Run:
    """The results side of one test run, on the process that writes results."""

    def __init__(self, environment, settings: Settings):
        self.environment = environment
        self.settings = settings
        self.run_id = settings.run_id or new_run_id()
        self.started = time.time()
        self.window_start = self.started + settings.warmup_s
        self.window_end: float | None = None
        spec = load_workload(settings)
        self.writer = ResultsWriter(
            settings.results_dir,
            self.run_id,
            {
                "host": environment.host,
                "options": public_options(environment.parsed_options),
                "workload": {"hash": spec.spec_hash, **spec.to_dict()},
                "role": _role(environment.runner),
            },
        )
        self.writer.on_rows = lambda rows: llm_events.rows_recorded.fire(run=self, rows=rows)
        self.collector = None
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
        summary = self.writer.finish(self.window_start, self.window_end, self.summary_extra, complete=complete)
        print("\n" + format_table(summary), flush=True)
        print(f"results: {self.writer.path}", flush=True)
        llm_events.run_finished.fire(run=self, summary=summary)
        return summary


def _role(runner) -> str:
    if isinstance(runner, MasterRunner):
        return "master"
    if isinstance(runner, WorkerRunner):
        return "worker"
    return "local"


def fail(message: str) -> None:
    """A misconfiguration: one line, exit code 2, before any load."""
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    sys.exit(2)


@events.init_command_line_parser.add_listener
def _add_options(parser, **_kw) -> None:
    add_arguments(parser)
    parser.set_defaults(stop_timeout=DEFAULT_STOP_TIMEOUT_S)


@events.init.add_listener
def _on_init(environment, runner, **_kw) -> None:
    environment.llm_context = None
    environment.llm_run = None
    role = _role(runner)
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
        else:
            sim = EmbeddedSimulator(settings.sim_profile)
            environment.llm_simulator = sim
            environment.host = environment.parsed_options.host = sim.url
            log.info("no --host given: started the built-in simulator at %s (profile %s)", sim.url, settings.sim_profile)
        if not settings.model and environment.parsed_options.headless:
            environment.parsed_options.model = resolve_model(environment.host, settings)
    except OptionError as e:
        fail(str(e))
    except RuntimeError as e:
        fail(f"--sim-profile: the built-in simulator did not start: {e}")
    if role == "master":
        runner.register_message("llm_final", lambda msg, **kw: environment.llm_run and environment.llm_run.collector.on_final(msg))
        events.worker_report.add_listener(
            lambda client_id, data: environment.llm_run and environment.llm_run.collector.on_worker_report(client_id, data)
        )


def _init_worker(environment, runner) -> None:
    def on_drain(msg, **_kw):
        log.info("drain requested by the master: stopping users")
        runner.stop()

    runner.register_message("llm_drain", on_drain)
    runner.register_message("llm_ack", lambda msg, **kw: environment.llm_context and environment.llm_context.sink.on_ack(msg.data))
    events.report_to_master.add_listener(
        lambda client_id, data: environment.llm_context and environment.llm_context.sink.on_report(data)
    )


@events.test_start.add_listener
def _on_test_start(environment, **_kw) -> None:
    runner = environment.runner
    role = _role(runner)
    opts = environment.parsed_options
    try:
        settings = Settings.from_options(opts)
        if role != "worker" and not settings.model:
            opts.model = resolve_model(environment.host, settings)
            settings.model = opts.model
    except OptionError as e:
        log.error("%s", e)
        raise
    if role == "worker":
        run_id = getattr(opts, "llm_run_id", "") or new_run_id()
        sink = WorkerShipper(runner, run_id)
        environment.llm_context = RunContext(settings, run_id, runner.worker_index, sink)
        return
    run = Run(environment, settings)
    environment.llm_run = run
    opts.llm_run_id = run.run_id  # travels to workers in the spawn message
    if role == "master":
        run.collector = MasterCollector(runner, run.writer, run.run_id)
    else:
        environment.llm_context = RunContext(settings, run.run_id, 0, LocalSink(run.writer))
    llm_events.run_started.fire(run=run)
    log.info("run %s: results in %s", run.run_id, run.writer.path)


@events.test_stopping.add_listener
def _on_test_stopping(environment, **_kw) -> None:
    run = environment.llm_run
    if run is None:
        return
    run.stopping()
    if run.collector is not None:
        run.collector.drain(timeout=float(environment.stop_timeout or 0) + DRAIN_MARGIN_S)


@events.test_stop.add_listener
def _on_test_stop(environment, **_kw) -> None:
    if _role(environment.runner) == "worker":
        if environment.llm_context is not None:
            environment.llm_context.sink.send_final()
            environment.llm_context = None
        return
    run = environment.llm_run
    if run is not None:
        run.finish(complete=True)


@events.quitting.add_listener
def _on_quitting(environment, **_kw) -> None:
    run = getattr(environment, "llm_run", None)
    if run is not None and not run.finished:
        run.finish(complete=False)  # interrupted (Ctrl-C): partial results, marked incomplete
    sim = getattr(environment, "llm_simulator", None)
    if sim is not None:
        gevent.spawn(sim.stop).join(10)
