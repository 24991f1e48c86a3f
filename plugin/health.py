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
from plugin.state import Plugin, role_of

FINAL_MESSAGE = "llm_health_final"


class Health(Plugin):
    """Self-health on every load process: a monitor per run where users run, a board where results
    are written (the master gathers its workers' reports; a local run watches itself)."""

    def __init__(self):
        self.monitor: HealthMonitor | None = None  # this process's, while a run is on
        self.board: HealthBoard | None = None  # master, local

    def init(self, environment) -> None:
        if role_of(environment) != "worker":
            self.board = HealthBoard()
        if role_of(environment) == "master":
            runner = environment.runner
            runner.register_message(FINAL_MESSAGE, lambda msg, **kw: self.board._ingest(msg.node_id, msg.data, runner))

    def report_to_master(self, environment, data) -> None:
        m = self.monitor
        if m is not None:
            data[REPORT_KEY] = {"state": m.state(), "samples": m.take_unsent()}

    def worker_report(self, environment, client_id, data) -> None:
        self.board.on_worker_report(client_id, data, environment.runner)

    def test_start(self, environment) -> None:
        role = role_of(environment)
        limits = Limits.from_plan(environment.llm.plan.health)
        if self.board is not None:
            self.board.reset(limits)
        if role == "master":
            return
        self._stop_monitor()
        token_lag = environment.llm.plan.sim_timestamps
        name = "local" if role == "local" else f"{os.uname().nodename}-{os.getpid()}"
        runner = environment.runner
        index = runner.worker_index if role == "worker" and runner is not None else 0
        monitor = HealthMonitor(limits, token_lag, name, index, warmup_s=environment.llm.plan.warmup_s)
        if token_lag:
            llm_events.stream_parsed.add_listener(monitor.on_parsed)
        if role == "local":
            self.board.local = monitor
            monitor.on_sample = self.board.on_local_sample
        monitor.start()
        self.monitor = monitor

    def snapshot(self) -> dict | None:
        """The live state the web UI shows: the board's (master, local) or the monitor's."""
        source = self.board if self.board is not None else self.monitor
        return source.snapshot() if source is not None else None

    def test_stopping(self, environment) -> None:
        """A worker's last word, sent before its final records so it reaches the summary."""
        m = self.monitor
        if m is not None:
            m.count_until = time.perf_counter()
        if m is not None and role_of(environment) == "worker":
            environment.runner.send_message(FINAL_MESSAGE, {"state": m.state(), "samples": m.take_unsent()})

    def run_stopping(self, run) -> None:
        board = self.board
        if board is not None:
            if board.local is not None:
                board.on_local_sample(board.local)
            run.summary_extra["client_bound"] = board.summary()

    def test_stop(self, environment) -> None:
        board = self.board
        if board is not None:
            if board.local is not None:
                board.on_local_sample(board.local)
                board.local = None
            board.running = False
        self._stop_monitor()

    def _stop_monitor(self) -> None:
        m = self.monitor
        if m is not None:
            m.stop()
            try:
                llm_events.stream_parsed.remove_listener(m.on_parsed)
            except ValueError:
                pass
            self.monitor = None
