"""Builds report.html and report.md at the end of every run (headless, web UI, distributed master),
and the JUnit XML of --junit (JUnit).

Installed by locustfile.py; its hook runs on the process that writes results once summary.json is
on disk. A failure to build is logged and never touches the results (records and summary.json are
already written).
"""

from __future__ import annotations

import logging
import time

from plugin import exit_codes
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
        except Exception:
            log.exception(
                "report: could not build the report for %s; the results are intact, retry with "
                "python -m reports build %s",
                run.writer.path,
                run.writer.path,
            )
            return
        log.info("report: %s (%.1f s)", paths["html"], time.perf_counter() - t)


class JUnit(Plugin):
    """--junit FILE: the run's checks as JUnit XML (reports/junit.py), written even when the results
    could not be written, since that is one of its test cases."""

    def run_finished(self, run, summary) -> None:
        path = run.plan.junit
        if path:
            write_run_junit(run, summary, path)


def write_run_junit(run, summary, path: str) -> None:
    from reports.junit import run_cases, write_junit

    cases = run_cases(summary, run.writer.not_written)
    try:
        write_junit(path, f"run {run.run_id}", cases, time.time() - run.started)
    except OSError as e:  # the pipeline would read no verdict: the run fails as if its results were lost
        log.error("junit: could not write %s: %s (exit %d)", path, e, exit_codes.RESULTS_NOT_WRITTEN)
        exit_codes.raise_to(run.environment, exit_codes.RESULTS_NOT_WRITTEN)
        return
    log.info("junit: %s (%d checks, %d failed)", path, len(cases), sum(c.failure is not None for c in cases))


class VllmJson(Plugin):
    """--save-vllm-json FILE: the run in the fields of vLLM's result JSON (reports/vllm_json.py),
    made from the results folder once summary.json is on disk. A failure is one line; the results
    are intact and `python -m reports vllm-json RUN FILE` makes it again."""

    def run_finished(self, run, summary) -> None:
        path = run.plan.save_vllm_json
        if not path:
            return
        if run.writer.not_written:
            log.warning(
                "vllm json: not written, the results could not be written (%s)", ", ".join(run.writer.not_written)
            )
            return
        try:
            from reports.vllm_json import write_vllm_json

            result = write_vllm_json(run.writer.path, path)
        except Exception as e:
            log.error(
                "vllm json: could not write %s (%s: %s); the results are intact, retry with python -m reports "
                "vllm-json %s %s",
                path,
                type(e).__name__,
                e,
                run.writer.path,
                path,
            )
            return
        log.info(
            "vllm json: %s (%d requests, vLLM's result fields; definitions in its 'definitions' key)",
            path,
            result["num_prompts"],
        )
