"""The one error type of the workloads package."""

from __future__ import annotations


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class WorkloadError(ValueError):
    """A workload spec or template library that cannot be used.

    The message is always one line: ``FILE: FIELD: PROBLEM (FIX)``.
    The parts are kept as attributes for callers that want them.
    """

    def __init__(self, file: str, field: str, problem: str, fix: str = ""):
        self.file = str(file)
        self.field = _one_line(field)
        self.problem = _one_line(problem)
        self.fix = _one_line(fix)
        parts = [self.file]
        if self.field:
            parts.append(self.field)
        msg = ": ".join(parts) + ": " + self.problem
        if self.fix:
            msg += f" ({self.fix})"
        super().__init__(msg)
