"""The exit codes of a run, one table (docs list it). A run that did not do what was asked never exits 0.

When several apply, the most severe wins: a run whose results could not be written says so before
it says that an SLO was missed, and a missed SLO before an undecided one.
"""

from __future__ import annotations

DONE = 0  # the run did what was asked, every SLO met
REQUEST_FAILURES = 1  # some requests failed (Locust's --exit-code-on-error, default 1)
BAD_INPUT = 2  # a misconfiguration, refused before any load
SLO_MISSED = 3  # an SLO was missed (a step ramp or a capacity search: no level met it below one that missed it)
INCOMPLETE = 4  # the run did not run as asked: a worker failed or was lost, no record, or no successful request
RESULTS_NOT_WRITTEN = 5  # records or summary.json could not be written (disk full, permissions)
SLO_UNDECIDED = 6  # the SLO was neither met nor missed: too few requests to bound a statistic, or too close to call
INTERRUPTED = 130  # stopped by SIGINT or SIGTERM before its end; partial results marked complete: false

TABLE = [
    (DONE, "done", "the run did what was asked, every SLO met"),
    (REQUEST_FAILURES, "request failures", "some requests failed (Locust's --exit-code-on-error)"),
    (BAD_INPUT, "bad input", "a misconfiguration, refused before any load starts"),
    (
        SLO_MISSED,
        "SLO missed",
        "an objective of --slo was missed (a step ramp or a capacity search: a level missed it and none below it met it)",
    ),
    (
        INCOMPLETE,
        "run incomplete",
        "a worker could not start the run or was lost mid-run (or lost its master), no request was recorded, or none succeeded",
    ),
    (
        RESULTS_NOT_WRITTEN,
        "results not written",
        "records or summary.json could not be written (disk full, permissions)",
    ),
    (
        SLO_UNDECIDED,
        "SLO undecided",
        "--slo was neither met nor missed: a statistic's confidence bounds hold its threshold, or too few requests to bound it (a step ramp or a capacity search: no level met it and none missed it)",
    ),
    (INTERRUPTED, "interrupted", "SIGINT or SIGTERM before the run's end; partial results, complete: false"),
]
_SEVERITY = [DONE, REQUEST_FAILURES, SLO_UNDECIDED, SLO_MISSED, INCOMPLETE, INTERRUPTED, RESULTS_NOT_WRITTEN, BAD_INPUT]


def raise_to(environment, code: int) -> None:
    """Set the process's exit code to `code` unless a more severe one is already set."""
    current = environment.process_exit_code
    if current is None or _SEVERITY.index(code) > _SEVERITY.index(
        current if current in _SEVERITY else REQUEST_FAILURES
    ):
        environment.process_exit_code = code


def of_slo(summary) -> int:
    """The exit code of a run's SLO, from its one verdict (metrics/verdict.py): DONE when met (or
    without --slo), SLO_MISSED when missed, SLO_UNDECIDED when neither. A run with load levels (a
    step ramp or a capacity search) is judged by its capacity: met when a level met the SLO below the
    lowest level that missed it, missed when a level missed it and none below met it, undecided
    when no level was decided."""
    cap = summary.capacity
    if cap is not None:
        rate, next_rate = getattr(cap, "rate", None), getattr(cap, "next_failing_rate", None)
        if cap.users is not None or rate is not None:  # a search in requests/s answers in `rate`
            return DONE
        missed = cap.next_failing_users is not None or next_rate is not None
        return SLO_MISSED if missed else SLO_UNDECIDED
    if summary.slo is None:
        return DONE
    return {"met": DONE, "missed": SLO_MISSED}.get(summary.slo.state, SLO_UNDECIDED)


def markdown_table() -> str:
    lines = ["| code | meaning | when |", "| --- | --- | --- |"]
    lines += [f"| {code} | {name} | {when} |" for code, name, when in TABLE]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())  # docs/failures.md holds this table (tests/test_edges_results.py checks it)
