"""A headless run whose requests all fail from the start stops itself, with one line saying why.

A wrong --host path, a server that refuses every request, a key it does not accept: such a run can
measure nothing, and running it to -t only fills the records with one failure. When FAIL_FAST_S
(10 s) of the run have passed, at least FAIL_FAST_MIN requests have ended, and every one of them
failed (the client's own endings, `stopped` and `cancelled`, do not count either way), the results
process logs one line with the failure class, an example of what came back and the likely fix,
and stops the run: exit code 4 (exit_codes.INCOMPLETE), the records and summary written as usual.
The first success turns the check off for the rest of the run. In the web UI the line is a
warning and the run goes on (stop it from the page).
"""

from __future__ import annotations

import logging
import time
from collections import Counter

import gevent

from metrics.record import FIELD_NAMES, NOT_SERVER_FAILURES
from plugin import exit_codes
from plugin.state import Plugin

log = logging.getLogger("llm")

FAIL_FAST_S = 10.0
FAIL_FAST_MIN = 5
_OK, _ERROR, _DETAIL = (FIELD_NAMES.index(n) for n in ("ok", "error", "error_detail"))

FIXES = {
    "connect_error": "the server refuses or drops the connections: check --host and that the server is up",
    "http_429": "the server rate-limits every request: lower the load, raise the server's limit, or --retry",
    "http_5xx": "the server fails every request: its log says why",
    "timeout": "no request ended within the --timeout-* limits: raise them or lower the load",
    "stream_truncated": "every stream was cut short: the server's log (or a proxy in between) says why",
    "mid_stream_error": "the server reports an error inside every stream: its log says why",
    "malformed_chunk": "the server's events are not JSON: is --host an OpenAI-compatible server?",
    "not_streamed": "the server answers streaming requests with one JSON body: a gateway in between may buffer the "
    "stream (turn its buffering off), or the server does not stream (--no-stream measures it as it is)",
    "no_tokens": "the server ends every stream without generated text: check --model and the workload's max tokens",
    "missing_results": "the server returns fewer results than inputs or documents sent: check --model (an embedding "
    "or reranking model) and the server's limits on inputs per request",
    "response_too_large": "every response is larger than --max-response-size: raise it",
}


def fix_for(error: str, detail: str) -> str:
    """The likely fix for a run whose every request failed with `error` (`detail`: one example)."""
    if error == "http_4xx":
        if detail.startswith(("HTTP 401", "HTTP 403")):
            return "the server refuses the credentials: give its key (--api-key or LOCUST_API_KEY)"
        if detail.startswith("HTTP 404"):
            return "the path is not served: check --host (the suite adds /v1/...) and --endpoint"
        return "the server refuses the requests: check --model, --extra-body, --ignore-eos and --min-tokens against its answer"
    return FIXES.get(error, "see the records' error_detail")


class FailFast(Plugin):
    """The check above, on the process that writes results (local or master)."""

    def __init__(self):
        self.environment = None
        self.active = False
        self.timer = None

    def run_started(self, run) -> None:
        self.environment = run.environment
        self.started = run.started
        self.failed: Counter = Counter()
        self.example: dict[str, str] = {}
        self.active = True
        self.timer = gevent.spawn_later(FAIL_FAST_S + 0.5, self._check)  # rows may stop coming

    def rows_recorded(self, run, rows) -> None:
        if not self.active:
            return
        for row in rows:
            if row[_OK]:
                self._off()  # a success: the server can answer
                return
            error = row[_ERROR]
            if error in NOT_SERVER_FAILURES:
                continue
            self.failed[error] += 1
            if error not in self.example:
                self.example[error] = row[_DETAIL]
        if time.time() - self.started >= FAIL_FAST_S:
            self._check()

    def _check(self) -> None:
        n = sum(self.failed.values())
        if not self.active or n < FAIL_FAST_MIN or time.time() - self.started < FAIL_FAST_S:
            return
        self._off()
        error, count = self.failed.most_common(1)[0]
        detail = self.example.get(error) or ""
        classes = ", ".join(f"{c} {k}" for c, k in self.failed.most_common())
        line = (
            f"every request failed in the first {time.time() - self.started:.0f} s of the run ({n}: {classes}; "
            f"e.g. {error}{': ' + detail if detail else ''}): {fix_for(error, detail)}"
        )
        env = self.environment
        runner = env.runner
        if not env.parsed_options.headless:
            log.warning("%s (the web UI keeps the run going: stop it from the page)", line)
            return
        log.error("%s; the run is stopped", line)
        exit_codes.raise_to(env, exit_codes.INCOMPLETE)
        if runner is not None and runner.state not in (
            "cleanup",
            "stopping",
            "stopped",
            "quitting",
        ):  # not one under way
            gevent.spawn(runner.quit)

    def _off(self) -> None:
        self.active = False
        timer, self.timer = self.timer, None
        if timer is not None and timer is not gevent.getcurrent():
            timer.kill(block=False)

    def run_stopping(self, run) -> None:
        self._off()
