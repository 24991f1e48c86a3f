"""The suite's state on a Locust environment, and the protocol of the features that plug into a run.

One object, `environment.llm` (a `SuiteState`), holds everything a process knows about the suite:
its role, the current run's plan, the results side of the run (master or local), the users' side
(worker or local), the built-in simulator, and the installed plugins.

A plugin is a feature of a run (self-health, Prometheus, server scraping, reports, the web UI's
LLM view). It says what it does on each side of a run by the hooks it overrides; plugin/hooks.py
calls every plugin's hook in the order locustfile.py installs them, never in import order, and
`SuiteState.call` runs a hook only on a process of its side (from the process's role, decided
once: a local process is both sides, a master the results side, a worker the load side):

the results process (master, local): the results side of each run
  results_init(environment)         at Locust's init: routes, servers, boards, messages from load processes
  run_starting(run)                 test start: the plan and the results folder are fixed; what a plugin
                                    puts in `state.shared` travels to the workers with the run
  run_started(run)                  the workers were told; the run is on
  rows_recorded(run, rows)          records arrived (each exactly once)
  run_stopping(run)                 load stopped; add sections to run.summary_extra
  summary_computed(run, summary)    the summary's figures are computed (its levels, capacity), not yet
                                    written; add sections derived from them
  run_finished(run, summary)        summary.json is written (`summary`: its metrics.schema.Summary)
  worker_report(environment, client_id, data)   master: a worker's report arrived
  results_quitting(environment)     before the process exits

the load process (worker, local): the users' side of each run
  load_started(environment)         test start: the run's plan is this process's (state.plan), and
                                    `state.shared` holds what the results side shared
  load_stopping(environment)        the run begins to stop
  load_stopped(environment)         its users have stopped
  report_to_master(environment, data)           worker: add to the report it sends every 3 s
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from metrics.schema import Summary

RESULTS = "results"  # the side that writes results: its run's folder, summary and verdict
LOAD = "load"  # the side that runs users
SIDES = {"local": (RESULTS, LOAD), "master": (RESULTS,), "worker": (LOAD,)}


class Plugin:
    """A feature of a run. Every hook is optional; see the module's docstring for when each runs."""

    # -- the results process ------------------------------------------------------------------
    def results_init(self, environment) -> None: ...

    def run_starting(self, run) -> None: ...

    def run_started(self, run) -> None: ...

    def rows_recorded(self, run, rows) -> None: ...

    def run_stopping(self, run) -> None: ...

    def summary_computed(self, run, summary: Summary) -> None: ...

    def run_finished(self, run, summary: Summary) -> None: ...

    def worker_report(self, environment, client_id: str, data: dict) -> None: ...

    def results_quitting(self, environment) -> None: ...

    # -- the load process ---------------------------------------------------------------------
    def load_started(self, environment) -> None: ...

    def load_stopping(self, environment) -> None: ...

    def load_stopped(self, environment) -> None: ...

    def report_to_master(self, environment, data: dict) -> None: ...


# the side each hook belongs to: `SuiteState.call` runs it only on a process of that side
HOOK_SIDES = {
    **dict.fromkeys(
        (
            "results_init",
            "run_starting",
            "run_started",
            "rows_recorded",
            "run_stopping",
            "summary_computed",
            "run_finished",
            "worker_report",
            "results_quitting",
        ),
        RESULTS,
    ),
    **dict.fromkeys(("load_started", "load_stopping", "load_stopped", "report_to_master"), LOAD),
}

P = TypeVar("P", bound=Plugin)


def role_of(environment) -> str:
    """From the options, not the runner: a worker that joins a running test receives its spawn
    message (and fires test_start) inside the WorkerRunner constructor, before environment.runner
    is set and before init fires."""
    opts = environment.parsed_options
    if getattr(opts, "worker", False):
        return "worker"
    if getattr(opts, "master", False):
        return "master"
    return "local"


class SuiteState:
    """What the suite keeps on one Locust environment (`environment.llm`)."""

    def __init__(self, role: str, plugins: tuple[Plugin, ...]):
        self.role = role  # local | master | worker
        self.sides = SIDES[role]  # the sides of a run this process is: which plugin hooks it runs
        self.plugins = plugins
        self.plan = None  # plugin.plan.RunPlan of the current (or next) run: built once per start, never rebuilt
        self.inputs = (
            None  # plugin.run_start.RunInputs of that run (workload, trace, tokenizer), read once with its plan
        )
        self.form_argv: list[str] | None = (
            None  # that run's settings as the web form set them (None: the command line's)
        )
        self.start = None  # worker: the plugin.run_start.RunStart its master sent with the run
        self.shared: dict = {}  # what the results side's plugins share with the load side for the run (a worker's: RunStart.shared)
        self.run = None  # plugin.run.Run: the results side (master, local)
        self.context = None  # plugin.context.RunContext: the users' side (worker, local)
        self.simulator = None  # plugin.embedded.EmbeddedSimulator when no --host was given
        self.shape = None  # the locustfile's LLMShape, used only by stepped runs
        self.worker_ready = False  # a worker's init has run (a late joiner's test_start may come first)
        self.worker_errors: list[str] = []  # master: workers that could not build the plan
        self.replay_done: set[str] = set()  # master: workers that sent their share of a replayed trace
        self.interrupted: str | None = None  # why the current run was interrupted (SIGINT, SIGTERM)
        self.signal: str | None = None  # the signal that ends this process, once one came
        self.sigterm_watcher = None  # kept alive: gevent stops watching when it is collected
        self.master_lost = False  # worker: its master went silent mid-run
        self.cannot_run: str | None = None  # worker: why it cannot run the current run (its users stop at once)
        self.own_results_dir: str | None = None  # worker: its own --results-dir (for records its master lost)

    def plugin(self, kind: type[P]) -> P | None:
        """The installed plugin of this type (the web UI reads the health board through it)."""
        for p in self.plugins:
            if isinstance(p, kind):
                return p
        return None

    def in_flight(self) -> int | None:
        """Requests on the wire now: this process's users, or every worker's last report."""
        if self.context is not None:
            return self.context.in_flight
        run = self.run
        if run is not None and run.collector is not None:
            return sum(run.collector.in_flight.values())
        return None

    def call(self, hook: str, *args) -> None:
        """Every plugin's `hook`, in their order, when this process is of the hook's side."""
        if HOOK_SIDES[hook] not in self.sides:
            return
        for p in self.plugins:
            getattr(p, hook)(*args)


def state_of(environment) -> SuiteState | None:
    return getattr(environment, "llm", None)
