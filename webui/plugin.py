"""The LLM view in Locust's web UI, installed by locustfile.py: its routes (webui/routes.py), its
state and sampler (webui/view.py), the start form's check (webui/start_check.py) and order
(webui/form.py), and the tracker of open streams on every load process of a web-UI run
(webui/progress.py).

Active only on the process that serves the web UI (the master, or a local run started without
--headless); workers and headless runs do nothing here.
"""

from __future__ import annotations

from plugin.state import Plugin, role_of, state_of
from webui.form import install_form_order
from webui.progress import REPORT_KEY as PROGRESS_KEY
from webui.progress import StreamTracker
from webui.routes import install
from webui.start_check import install_start_check
from webui.view import LiveView

LIVE_VIEW = "live_view"  # the master's web UI is on: its workers report their open streams


def _live(state) -> bool:
    """A worker: its master shows the run live (it said so with the run)."""
    return state.start is not None and bool(state.start.shared.get(LIVE_VIEW))


# -- wiring ---------------------------------------------------------------------------------------------


class WebUI(Plugin):
    """The LLM view and the start form's check, on the process that serves the web UI; on every
    load process of a web-UI run, the tracker of its open streams (webui/progress.py)."""

    def __init__(self):
        self.view: LiveView | None = None
        self.tracker: StreamTracker | None = None

    def init(self, environment) -> None:
        web_ui = environment.web_ui
        if web_ui is None or role_of(environment) == "worker":
            return
        self.view = install(environment, web_ui)
        install_start_check(environment, web_ui)
        install_form_order(web_ui)

    def test_start(self, environment) -> None:
        state = state_of(environment)
        if state.role == "master":
            if self.view is not None:  # travels to the workers with the run (plugin/run_start.py)
                state.shared[LIVE_VIEW] = True
            return
        live = self.view is not None if state.role == "local" else _live(state)
        self._stop_tracker()
        if live:
            self._tracker_for(state)

    def _tracker_for(self, state) -> StreamTracker | None:
        """This process's tracker over the run's context (a late-joining worker gets its context
        a moment after test_start)."""
        ctx = state.context
        if ctx is None:
            return None
        if self.tracker is None or self.tracker.ctx is not ctx:
            self._stop_tracker()
            self.tracker = StreamTracker(ctx)
            self.tracker.start()
            if self.view is not None:
                self.view.tracker = self.tracker
        return self.tracker

    def _stop_tracker(self) -> None:
        if self.tracker is not None:
            self.tracker.stop()
            self.tracker = None
            if self.view is not None:
                self.view.tracker = None

    def report_to_master(self, environment, data) -> None:
        if not _live(state_of(environment)):
            return
        tracker = self._tracker_for(state_of(environment))
        if tracker is not None:  # the same call that cut the record batch: nothing is counted twice
            data[PROGRESS_KEY] = tracker.collect()

    def test_stop(self, environment) -> None:
        self._stop_tracker()

    def worker_report(self, environment, client_id, data) -> None:
        if self.view is not None:
            self.view.on_worker_report(client_id, data)

    def run_started(self, run) -> None:
        if self.view is not None:
            self.view.on_run_started(run)

    def rows_recorded(self, run, rows) -> None:
        if self.view is not None:
            self.view.on_rows(run, rows)

    def run_finished(self, run, summary) -> None:
        if self.view is not None:
            self.view.on_run_finished(run, summary)
