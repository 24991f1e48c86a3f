"""The LLM view in Locust's web UI, installed by locustfile.py: its routes (webui/routes.py), its
state and sampler (webui/view.py), the start form's check (webui/start_check.py) and order
(webui/form.py), and the tracker of open streams on every load process of a web-UI run
(webui/progress.py).

The view is on the results process that serves the web UI (the master, or a local run started
without --headless); the load processes of such a run (its workers, or the local process) track
their open streams for it; headless runs do nothing here.
"""

from __future__ import annotations

from plugin.state import Plugin, state_of
from webui.form import install_form_order
from webui.progress import REPORT_KEY as PROGRESS_KEY
from webui.progress import StreamTracker
from webui.routes import install
from webui.start_check import install_start_check
from webui.view import LiveView

LIVE_VIEW = "live_view"  # the master's web UI is on: its workers report their open streams


def _live(state) -> bool:
    """The results side shows this run live (it said so with the run): the load side tracks its open streams."""
    return bool(state.shared.get(LIVE_VIEW))


class WebUI(Plugin):
    """The LLM view and the start form's check, on the process that serves the web UI; on every
    load process of a web-UI run, the tracker of its open streams (webui/progress.py)."""

    def __init__(self):
        self.view: LiveView | None = None
        self.tracker: StreamTracker | None = None

    # -- the results process: the view ---------------------------------------------------------
    def results_init(self, environment) -> None:
        web_ui = environment.web_ui
        if web_ui is None:
            return
        self.view = install(environment, web_ui)
        install_start_check(environment, web_ui)
        install_form_order(web_ui)

    def run_starting(self, run) -> None:
        if self.view is not None:  # the load processes track their open streams (a worker's travel with the run)
            state_of(run.environment).shared[LIVE_VIEW] = True

    def run_started(self, run) -> None:
        if self.view is not None:
            self.view.on_run_started(run)

    def rows_recorded(self, run, rows) -> None:
        if self.view is not None:
            self.view.on_rows(run, rows)

    def worker_report(self, environment, client_id, data) -> None:
        if self.view is not None:
            self.view.on_worker_report(client_id, data)

    def run_finished(self, run, summary) -> None:
        if self.view is not None:
            self.view.on_run_finished(run, summary)

    # -- the load process: the tracker of its open streams ---------------------------------------
    def load_started(self, environment) -> None:
        state = state_of(environment)
        self._stop_tracker()
        if _live(state):
            self._tracker_for(state)

    def report_to_master(self, environment, data) -> None:
        if not _live(state_of(environment)):
            return
        tracker = self._tracker_for(state_of(environment))
        if tracker is not None:  # the same call that cut the record batch: nothing is counted twice
            data[PROGRESS_KEY] = tracker.collect()

    def load_stopped(self, environment) -> None:
        self._stop_tracker()

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
