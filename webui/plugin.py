"""The LLM view in Locust's web UI, installed by locustfile.py: its routes (webui/routes.py), its
state and sampler (webui/view.py), the start form's check (webui/start_check.py) and order
(webui/form.py).

The view is on the results process that serves the web UI (the master, or a local run started
without --headless); the load processes of such a run (its workers, or the local process) track
their open streams for it (plugin/progress.py, told by `LIVE_VIEW` in the run's shared state);
headless runs do nothing here.
"""

from __future__ import annotations

from plugin.progress import LIVE_VIEW
from plugin.state import Plugin, state_of
from webui.form import install_form_order
from webui.page_state import install_polling_fix
from webui.routes import install
from webui.start_check import install_start_check
from webui.view import LiveView


class WebUI(Plugin):
    """The LLM view and the start form's check, on the process that serves the web UI."""

    def __init__(self):
        self.view: LiveView | None = None

    # -- the results process: the view ---------------------------------------------------------
    def results_init(self, environment) -> None:
        web_ui = environment.web_ui
        if web_ui is None:
            return
        self.view = install(environment, web_ui)
        install_start_check(environment, web_ui)
        install_form_order(web_ui)
        install_polling_fix(web_ui)

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
