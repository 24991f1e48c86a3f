"""Builds report.html and report.md at the end of every run (headless, web UI, distributed master).

Installed by locustfile.py; its hook runs on the process that writes results once summary.json is
on disk. A failure to build is logged and never touches the results (records and summary.json are
already written).
"""

from __future__ import annotations

import logging
import time

from plugin.state import Plugin

log = logging.getLogger("llm.reports")


class Reports(Plugin):
    def run_finished(self, run, summary) -> None:
        if run.writer.not_written:  # the records or summary.json are not on disk: nothing to build from
            log.warning("report: not built, the results could not be written (%s)", ", ".join(run.writer.not_written))
            return
        t = time.perf_counter()
        try:
            from reports.build import build  # pandas and the templates: only at the end of a run

            paths = build(run.writer.path, summary=summary)
        except Exception:  # noqa: BLE001 - a report must never cost the run its results
            log.exception("report: could not build the report for %s; the results are intact, retry with "
                          "python -m reports build %s", run.writer.path, run.writer.path)  # fmt: skip
            return
        log.info("report: %s (%.1f s)", paths["html"], time.perf_counter() - t)
