"""What a headless run says on the console besides the final LLM table.

  progress   every PROGRESS_S (10 s), one line from the records the results process received:
             requests ended (and failed) so far, output tokens per second of the requests that
             ended in the last interval, and requests in flight now. Locust's own periodic table
             has no tokens.
  the end    Locust prints its own tables after the suite's exact LLM table: the same requests in
             its rounded live statistics (approximate percentiles that disagree with the table
             above). They are left out, and one line says so; --locust-tables prints them.
"""

from __future__ import annotations

import logging
import time

import gevent

from metrics.record import FIELD_NAMES, NOT_SERVER_FAILURES
from plugin.state import Plugin, role_of, state_of

log = logging.getLogger("llm")

PROGRESS_S = 10.0
_OK, _ERROR, _OUT = (FIELD_NAMES.index(n) for n in ("ok", "error", "output_tokens"))
TABLES_LEFT_OUT = ("Locust's own end-of-run tables are left out: they are its rounded live statistics of the same "
                   "requests; the exact figures are in the table above (--locust-tables prints Locust's too)")  # fmt: skip


class Console(Plugin):
    def __init__(self):
        self.greenlet = None
        self.ran = False

    def run_started(self, run) -> None:
        self._stop()
        self.ran = True
        self.done = self.failed = 0
        self.tokens = 0  # output tokens of the successful requests that ended this interval
        if run.environment.parsed_options.headless:
            self.greenlet = gevent.spawn(self._loop, run)

    def rows_recorded(self, run, rows) -> None:
        for row in rows:
            if row[_OK]:
                self.done += 1
                if row[_OUT] > 0:
                    self.tokens += row[_OUT]
            elif row[_ERROR] not in NOT_SERVER_FAILURES:
                self.done += 1
                self.failed += 1

    def _loop(self, run) -> None:
        state = state_of(run.environment)
        last = time.monotonic()
        while True:
            gevent.sleep(PROGRESS_S)
            now = time.monotonic()
            rate, self.tokens = self.tokens / (now - last), 0
            last = now
            flying = state.in_flight() if state is not None else None
            elapsed = int(time.time() - run.started)
            log.info(
                "progress %d:%02d: %d requests ended (%d failed), %s output tokens/s over the last %.0f s, %s in flight",
                elapsed // 60, elapsed % 60, self.done, self.failed, f"{rate:,.0f}", PROGRESS_S,
                "?" if flying is None else flying,
            )  # fmt: skip

    def _stop(self) -> None:
        g, self.greenlet = self.greenlet, None
        if g is not None:
            g.kill(block=False)

    def run_stopping(self, run) -> None:
        self._stop()

    def quitting(self, environment) -> None:
        self._stop()
        opts = environment.parsed_options
        if not self.ran or not opts.headless or role_of(environment) == "worker" or getattr(opts, "locust_tables", False):
            return
        if getattr(opts, "json", False) or getattr(opts, "json_file", None):
            return  # Locust prints JSON instead of the tables: nothing to leave out
        leave_out_locust_tables()
        print(TABLES_LEFT_OUT, flush=True)


def leave_out_locust_tables() -> None:
    """Locust's shutdown prints `print_stats`, `print_percentile_stats` and `print_error_report`
    of locust.stats after the quitting event; at quitting they become silent for the process."""
    from locust import stats

    def quiet(*_args, **_kw) -> None:
        return None

    stats.print_stats = stats.print_percentile_stats = stats.print_error_report = quiet
