"""The results side of one run, on the process that writes results (a master, or a local run):
its folder and writer, its window, the summary at the end, its verdict and exit code; and the checks
a run's plan passes on this machine before it starts (its folder, its inputs: workload, trace,
tokenizer; its target).
"""

from __future__ import annotations

import logging
import time

import gevent

from core.errors import InputError
from core.urls import public_url
from metrics.schema import Summary
from metrics.schema.client_health import UsersOffPlan
from plugin import exit_codes, gpu
from plugin.context import load_workload
from plugin.options import check_host, public_options
from plugin.plan import RunPlan
from plugin.results import ResultsWriter
from plugin.run_start import RunInputs, off_loop
from plugin.server import check_server
from plugin.server_metrics import ServerMetrics
from plugin.setup import RunSetup
from plugin.state import role_of, state_of
from runfolder.ownership import check_folder, new_run_id, reserve_folder
from runfolder.provenance import suite_version
from runfolder.run_info import RunInfo
from workloads.tokenizer import read_tokenizer

log = logging.getLogger("llm")


class Run:
    """The results side of one test run, on the process that writes results."""

    def __init__(self, environment, plan: RunPlan, spec, form_argv: list[str] | None = None):
        self.environment = environment
        self.plan = plan
        self.spec = spec  # the run's workload (workloads.WorkloadSpec), loaded once with its plan
        self.run_id = plan.run_id or new_run_id()
        self.started = time.time()
        # the load processes its schedule is split across (open loop, replay)
        self.processes = environment.runner.worker_count if role_of(environment) == "master" else 1
        self.window_start = plan.load.window_start(self.started, plan.warmup_s)
        self.window_end: float | None = None
        info = RunInfo(
            host=public_url(environment.host) if environment.host else environment.host,
            role=role_of(environment),
            plan=plan.record(),
            options=public_options(environment.parsed_options),
            workload={"hash": spec.spec_hash, **spec.to_dict()},
            versions={"suite": suite_version()},  # as the run starts: summary.json's setup states it
            argv=form_argv or [],
            started_from="web form" if form_argv else "command line",
        )
        self.writer = ResultsWriter(plan.results_dir, self.run_id, info, overwrite=plan.overwrite)
        self.writer.on_rows = self._rows
        self.collector = None
        self.steps = None  # shapes.steps.StepPlan of a step ramp
        self.search = None  # shapes.capacity.CapacitySearch
        self.finished = False  # finish() has begun
        self.ending = None  # plugin.run_end.Ending: the run's one end, once it is under way
        self.summary_extra: dict = {}  # plugins add sections of summary.json here (run_stopping)
        self.server_gauges = (
            None  # the server's metrics the knee's diagnosis reads (plugin/server_metrics.py, run_stopping)
        )

    def _rows(self, rows) -> None:
        if self.search is not None:
            self.search.on_rows(rows)
        state_of(self.environment).call("rows_recorded", self, rows)

    def stopping(self) -> None:
        if self.window_end is None:
            self.window_end = time.time()

    def finish(self) -> Summary | None:
        """Write the results, print the console table and set the exit code; once per run."""
        if self.finished:
            return None
        self.finished = True
        self.stopping()
        if self.collector is not None:
            self.summary_extra["workers"] = self.collector.report()
            lost = self.collector.lost_workers()
            if lost:
                self.summary_extra["lost_work"] = {"requests_min": sum(lost.values()), "workers": lost}
        state_of(self.environment).call("run_stopping", self)
        steps = self.plan.load.step_plan(self.search)  # the summary's steps (a search's as it decided them)
        from metrics.console_table import format_table
        from metrics.summary import summarize

        writer = self.writer
        table = writer.close_records()  # from memory too, when the disk refused them
        typed = summarize(
            table,
            self.window_start,
            self.window_end,
            run_start=self.started,
            plan=steps,
            objectives=list(self.plan.slo),
            target_rate=self.plan.request_rate,
            scheduled=self.scheduled(),
            backends=spread_over(self.environment.host or ""),
            backend_count=self.plan.backend_count,
        )
        state_of(self.environment).call("summary_computed", self, typed)
        code, reasons = self.verdict(typed)
        complete = code not in (exit_codes.INCOMPLETE, exit_codes.INTERRUPTED)
        reason = "; ".join(reasons) or None
        typed = typed.with_sections(run_id=self.run_id, complete=complete, reason=reason, **self.summary_extra)
        if typed.by_step:  # why the knee is there: the levels, the server's metrics, the client's self-health
            from metrics.diagnosis import diagnose_levels

            typed.diagnosis = diagnose_levels(
                typed.by_step, typed.capacity, self.server_gauges, typed.client_bound, typed.gpu
            )
            if typed.by_backend:  # several replicas: each one's own diagnosis, from its own /metrics
                from targets.diagnosis import diagnose_backends

                diagnose_backends(typed, table, steps, self.started, self.server_gauges)
        writer.write_summary(typed, complete, reason)
        summary = typed

        print("\n" + format_table(summary), flush=True)
        if summary.open_loop is not None and summary.open_loop.behind_schedule:
            log.warning("open loop: %s: %s", summary.open_loop.headline(), "; ".join(summary.open_loop.reasons))
        over = summary.records.over_max_tokens
        if over:
            log.warning(
                "max_tokens ignored: %d of %d replies were longer than the max_tokens they asked for (summary.json "
                "records.over_max_tokens); the load the server ran is not the one the workload states",
                over,
                summary.records.total,
            )
        lost = summary.lost_work
        if lost is not None:
            log.warning(
                "lost work: at least %d requests lost with %d lost worker(s) (summary.json lost_work)",
                lost.requests_min,
                len(lost.workers),
            )
        self._set_exit_code(summary)
        if code == exit_codes.INTERRUPTED:
            log.error("run interrupted (exit %d): %s; the results are partial (complete: false)", code, reason)
        elif code == exit_codes.INCOMPLETE:
            log.error("run incomplete (exit %d): %s", code, reason)
        if code != exit_codes.DONE:
            exit_codes.raise_to(self.environment, code)
        if writer.not_written:
            log.error(
                "results not written (exit %d): %s could not be written in %s; the table above is from memory",
                exit_codes.RESULTS_NOT_WRITTEN,
                ", ".join(writer.not_written),
                writer.path,
            )
            exit_codes.raise_to(self.environment, exit_codes.RESULTS_NOT_WRITTEN)
        else:
            print(f"results: {writer.path}", flush=True)
        state_of(self.environment).call("run_finished", self, summary)
        return summary

    def scheduled(self) -> int | None:
        """Open loops: the arrivals the run's schedule had due in its window (None otherwise)."""
        try:
            return self.plan.load.scheduled_between(
                self.started, self.window_start, self.window_end, self.plan.seed or 0
            )
        except InputError as e:  # a replayed trace no longer readable: the count is left out
            log.warning("open loop: cannot count the arrivals due in the window (%s)", e)
            return None

    def verdict(self, summary) -> tuple[int, list[str]]:
        """Did the run do what was asked? (exit code, reasons): INTERRUPTED by a signal; INCOMPLETE
        when a worker failed to start or was lost, its users differed from the plan, nothing was
        recorded, or nothing succeeded."""
        state = state_of(self.environment)
        code, reasons = exit_codes.DONE, []
        if state is not None and state.interrupted:
            code = exit_codes.INTERRUPTED
            reasons.append(state.interrupted)
        incomplete = list(state.worker_errors) if state is not None else []
        if self.collector is not None:
            incomplete += [
                f"worker {cid} lost mid-run: at least {n} requests lost with it"
                if n
                else f"worker {cid} lost mid-run: the records it finished after its last report are lost"
                for cid, n in self.collector.lost_workers().items()
            ]
        if "users_off_plan" in self.summary_extra:  # plugin/user_plan.py: the load it ran is not the one it states
            incomplete.append(UsersOffPlan.model_validate(self.summary_extra["users_off_plan"]).line())
        r = summary.overall.requests
        if summary.records.total == 0:
            incomplete.append("no request was recorded")
        elif r.ok == 0:
            incomplete.append(
                f"no request succeeded in the measured window ({r.sent} sent: {r.failed} failed, "
                f"{r.stopped} cut at the end, {r.cancelled} cancelled)"
            )
        if incomplete and code == exit_codes.DONE:
            code = exit_codes.INCOMPLETE
        return code, reasons + incomplete

    def _set_exit_code(self, summary: Summary) -> None:
        """A missed or undecided SLO fails a headless run, each with its code (exit_codes.of_slo;
        format_table printed the verdict, or the capacity sentence of a run with load levels)."""
        code = exit_codes.of_slo(summary)
        if code != exit_codes.DONE:
            exit_codes.raise_to(self.environment, code)


def spread_over(host: str) -> tuple[str, ...]:
    """The backends' names (targets/) of a --host of several replicas; () for one."""
    from targets.backends import backend_name, split_hosts

    urls = split_hosts(host)
    return tuple(backend_name(u) for u in urls) if len(urls) > 1 else ()


def prepare_run(plan: RunPlan) -> RunInputs:
    """What the plan needs from this machine, checked once before the run: its results folder
    (locked now: a second run with this id is refused), its GPU telemetry source, and its inputs, read
    once and returned (the workload, a replayed trace, the tokenizer; a master sends them to its
    workers). Raises InputError."""
    reserve_folder(plan.results_dir, plan.run_id, plan.overwrite)
    gpu.check(plan.gpu_telemetry)
    return off_loop(_read_inputs, plan)


def _read_inputs(plan: RunPlan) -> RunInputs:
    spec = load_workload(plan)
    trace = plan.load.read() if plan.replay is not None else None
    return RunInputs(spec, trace, read_tokenizer(plan.tokenizer) if plan.tokenizer else None)


def check_target(environment, plan: RunPlan, host: str) -> RunPlan:
    """The target answers and serves the model (raises InputError; plugin/server.py): before any
    load, headless at init and at every start from the web form. Returns the plan with the model
    filled in. The server's version is asked here too (`probe_target`)."""
    check_folder(plan.results_dir, plan.run_id, plan.overwrite)
    plan = check_server(check_host(host), plan)
    probe_target(environment, plan, host)
    return plan


def probe_target(environment, plan: RunPlan, host: str) -> None:
    """What the run asks of its server besides the load (its version: plugin/setup.py; its
    --server-metrics endpoints: plugin/server_metrics.py), asked at once, before the run's clock
    starts: Locust counts -t from the start, and a server slow to answer would take that time from
    the load while the window still stated the whole of it."""
    state = state_of(environment)
    if state is None:
        return
    probes = [p for p in (state.plugin(RunSetup), state.plugin(ServerMetrics)) if p is not None]
    gevent.joinall([gevent.spawn(p.probe, host, plan) for p in probes], raise_error=True)


def choose_shape(environment, plan: RunPlan) -> None:
    """Stepped runs (steps, capacity search) run the locustfile's shape; every other run runs
    Locust's usual way (the shape would take -u, -r and live edits of the user count away)."""
    state = state_of(environment)
    environment.shape_class = state.shape if plan.stepped and state.shape is not None else None
