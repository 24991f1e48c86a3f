"""summary.json's `setup`: the load and the target a run was given (plugin/setup.py)."""

from __future__ import annotations

from typing import Any

from metrics.schema.base import Model, Num


class LoadSetup(Model):
    kind: str  # closed | steps | capacity | open | replay
    text: str  # the plan's one line: "step ramp 5,10 users, 60s each (10s warm-up)"
    users: int | None = None  # closed loop: -u (the web form's user count)
    parameters: dict[str, Any] = {}  # the load model's own fields (run.json plan.load)


class Setup(Model):
    """What load ran against what target (plugin/setup.py): the first thing every report states."""

    load: LoadSetup
    run_time_s: Num = None  # -t, the time asked for (None: until stopped)
    measured_s: Num = None  # the measurement window
    slo: list[str] = []
    workload: str  # its name
    workload_hash: str
    server: str  # the URL, credentials left out
    model: str
    server_version: str | None = None  # where the server tells it (plugin/setup.py server_version)
    server_version_source: str | None = None  # where: "GET /version", "GET /metrics NAME{version}", "response header server"
    client_hosts: list[str]
    workers: int  # processes that ran users (1 for a local run)
    suite_version: str
