"""The exit codes of a run, one table (docs list it). A run that did not do what was asked never exits 0.

When several apply, the most severe wins: a run whose results could not be written says so before
it says that an SLO was missed.
"""

from __future__ import annotations

DONE = 0  # the run did what was asked, every SLO met
REQUEST_FAILURES = 1  # some requests failed (Locust's --exit-code-on-error, default 1)
BAD_INPUT = 2  # a misconfiguration, refused before any load
SLO_MISSED = 3  # an SLO was missed (a step ramp or a capacity search: no level met it)
INCOMPLETE = 4  # the run did not run as asked: a worker failed or was lost, no record, or no successful request
RESULTS_NOT_WRITTEN = 5  # records or summary.json could not be written (disk full, permissions)
INTERRUPTED = 130  # stopped by SIGINT or SIGTERM before its end; partial results marked complete: false

TABLE = [
    (DONE, "done", "the run did what was asked, every SLO met"),
    (REQUEST_FAILURES, "request failures", "some requests failed (Locust's --exit-code-on-error)"),
    (BAD_INPUT, "bad input", "a misconfiguration, refused before any load starts"),
    (SLO_MISSED, "SLO missed", "an objective of --slo was missed (a step ramp or a capacity search: no level met it)"),
    (INCOMPLETE, "run incomplete", "a worker could not start the run or was lost mid-run (or lost its master), no request was recorded, or none succeeded"),
    (RESULTS_NOT_WRITTEN, "results not written", "records or summary.json could not be written (disk full, permissions)"),
    (INTERRUPTED, "interrupted", "SIGINT or SIGTERM before the run's end; partial results, complete: false"),
]
_SEVERITY = [DONE, REQUEST_FAILURES, SLO_MISSED, INCOMPLETE, INTERRUPTED, RESULTS_NOT_WRITTEN, BAD_INPUT]


def raise_to(environment, code: int) -> None:
    """Set the process's exit code to `code` unless a more severe one is already set."""
    current = environment.process_exit_code
    if current is None or _SEVERITY.index(code) > _SEVERITY.index(current if current in _SEVERITY else REQUEST_FAILURES):
        environment.process_exit_code = code


def markdown_table() -> str:
    lines = ["| code | meaning | when |", "| --- | --- | --- |"]
    lines += [f"| {code} | {name} | {when} |" for code, name, when in TABLE]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())  # docs/failures.md holds this table (tests/test_edges_results.py checks it)
