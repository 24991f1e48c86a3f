"""Self-health of the load generator: is each client process still measuring accurately?

Every process that runs users (each worker, or a local run) watches itself with a monitor
(plugin/health_monitor.py: CPU, loop lag, token lag, the sustained limits, the run-wide p99s),
and the process that writes results judges them together on a board (plugin/health_board.py:
warnings, summary.json -> `client_bound`, the live snapshot).

Workers ship their samples and state to the master in every worker report (Locust's
`report_to_master` / `worker_report`, every 3 s) and once more when they stop; a local run feeds
its own board. `Health.snapshot()` returns the board's state (or, on a worker, the monitor's)
for a live view (web UI).
"""

from __future__ import annotations

import os
import time

from plugin import events as llm_events
from plugin.health_board import REPORT_KEY, HealthBoard
from plugin.health_monitor import HealthMonitor, Limits
from plugin.state import Plugin
from users.connection import KERNEL_STAMPS

FINAL_MESSAGE = "llm_health_final"


class Health(Plugin):
    """Self-health on every load process: a monitor per run where users run, a board where results
    are written (the master gathers its workers' reports; a local run's board watches its own monitor)."""

    def __init__(self):
        self.monitor: HealthMonitor | None = None  # the load process's own, while a run is on
        self.board: HealthBoard | None = None  # the results process's

    def snapshot(self) -> dict | None:
        """The live state the web UI shows: the board's (master, local) or the monitor's."""
        source = self.board if self.board is not None else self.monitor
        return source.snapshot() if source is not None else None

    # -- the results process: the board ----------------------------------------------------------
    def results_init(self, environment) -> None:
        board = self.board = HealthBoard()
        runner = environment.runner
        runner.register_message(FINAL_MESSAGE, lambda msg, **kw: board._ingest(msg.node_id, msg.data, runner))

    def run_starting(self, run) -> None:
        self.board.reset(Limits.from_plan(run.plan.health))

    def worker_report(self, environment, client_id, data) -> None:
        self.board.on_worker_report(client_id, data, environment.runner)

    def run_stopping(self, run) -> None:
        board = self.board
        if board.local is not None:
            board.on_local_sample(board.local)
        run.summary_extra["client_bound"] = board.summary()

    def run_finished(self, run, summary) -> None:
        board = self.board
        if board.local is not None:
            board.on_local_sample(board.local)
            board.local = None
        board.running = False

    # -- the load process: the monitor -----------------------------------------------------------
    def load_started(self, environment) -> None:
        plan = environment.llm.plan
        self._stop_monitor()
        # a worker's index (a late joiner's runner is not set yet: its master knows it anyway)
        index = getattr(environment.runner, "worker_index", 0)
        # the streams' reads carry the kernel's receive stamps (users/connection.py): not over TLS
        kernel = KERNEL_STAMPS and "https:" not in (environment.host or "")
        monitor = HealthMonitor(
            Limits.from_plan(plan.health),
            plan.sim_timestamps,
            f"{os.uname().nodename}-{os.getpid()}",
            index,
            warmup_s=plan.warmup_s,
            kernel_stamps=kernel,
        )
        if plan.sim_timestamps:
            llm_events.stream_parsed.add_listener(monitor.on_parsed)
        llm_events.stream_parsed.add_listener(monitor.on_record)
        if self.board is not None:  # a local run: its own board watches the monitor, every sample
            self.board.watch_local(monitor)
        monitor.start()
        self.monitor = monitor

    def report_to_master(self, environment, data) -> None:
        m = self.monitor
        if m is not None:
            data[REPORT_KEY] = {"state": m.state(), "samples": m.take_unsent()}

    def load_stopping(self, environment) -> None:
        """The monitor stops counting; a monitor whose board is its master's sends its last word,
        before its final records, so it reaches the summary."""
        m = self.monitor
        if m is None:
            return
        m.count_until = time.perf_counter()
        if self.board is None:
            environment.runner.send_message(FINAL_MESSAGE, {"state": m.state(), "samples": m.take_unsent()})

    def load_stopped(self, environment) -> None:
        self._stop_monitor()

    def _stop_monitor(self) -> None:
        m = self.monitor
        if m is not None:
            m.stop()
            for listener in (m.on_parsed, m.on_record):
                try:
                    llm_events.stream_parsed.remove_listener(listener)
                except ValueError:
                    pass
            self.monitor = None
