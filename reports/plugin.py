"""Builds report.html and report.md at the end of every run (headless, web UI, distributed master).

Imported by locustfile.py. It listens on plugin.events.run_finished, which fires on the process
that writes results once summary.json is on disk; a failure to build is logged and never touches
the results (records and summary.json are already written).
"""

from __future__ import annotations

import logging
import time

from plugin import events as llm_events

log = logging.getLogger("llm.reports")


@llm_events.run_finished.add_listener
def build_report(run, summary, **_kw) -> None:
    t = time.perf_counter()
    try:
        from reports.build import build

        paths = build(run.writer.path, summary=summary)
    except Exception:  # noqa: BLE001 - a report must never cost the run its results
        log.exception("report: could not build the report for %s; the results are intact, retry with "
                      "python -m reports build %s", run.writer.path, run.writer.path)
        return
    log.info("report: %s (%.1f s)", paths["html"], time.perf_counter() - t)
