"""run.json as a typed contract: what ran. One model is both what the results process writes
(plugin/run.py builds it as the run starts, plugin/results.py adds the command line and versions
of runfolder/provenance.py and completes it at the end, runfolder/recovery.py marks a recovered folder)
and what every reader reads (runfolder/reading.py), so a reader names fields (`info.plan.load.kind`),
never string keys with fallbacks.

The suite's own sections are typed: the plan as the run ran it (the fields the readers use; the
rest of `RunPlan.record()` kept as written), the workload's identity, the check of each results
file, the records the writer could not write. Locust's own options are kept as Locust gave them,
secrets removed. A key a newer writer adds is kept; every key has a default, since a folder
recovered from its parts may lack the end's.

Written with only the keys that were set (`RunInfo.dump`): the file at the start has no end.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from metrics.schema.run_setup import Target


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow")  # a key a newer writer adds is kept


class LoadRecord(_Record):
    """The plan's load model: its kind and its own fields (steps, rate, trace, ...)."""

    kind: str = "closed"

    def parameters(self) -> dict[str, Any]:
        """The load model's own fields (everything but `kind`), as written."""
        return dict(self.model_extra or {})


class PlanRecord(_Record):
    """`plugin.plan.RunPlan.record()`: the validated plan, the API key left out."""

    model: str = ""  # the model requested (a model the server named is filled in here)
    warmup_s: float = 0.0
    load: LoadRecord = Field(default_factory=LoadRecord)
    label: str = ""  # --label: what this run is (what an A/B changed)


class WorkloadRecord(_Record):
    """The run's workload: its name, file and content hash (`workloads.WorkloadSpec.to_dict()`)."""

    name: str = ""
    path: str = ""
    hash: str = ""


class FileCheck(BaseModel):
    """What run.json records of a results file when it was written: every reader checks it before
    it reads a value (runfolder/reading.py `check_records`)."""

    rows: int
    bytes: int
    sha256: str


class RunInfo(_Record):
    run_id: str = ""
    started_at: float | None = None
    ended_at: float | None = None
    argv: list[str] = []  # what ran: the command line (secret values blanked), or the web form's settings as options
    started_from: Literal["command line", "web form"] | None = None  # where `argv` comes from (None: an older run.json)
    versions: dict[str, str | None] = {}  # Python and the packages that measured
    host: str | None = None  # the target, credentials removed
    role: Literal["local", "master", "worker"] | None = None  # the process that wrote the results
    plan: PlanRecord = Field(default_factory=PlanRecord)
    options: dict[str, Any] = {}  # Locust's options as given, secrets removed
    workload: WorkloadRecord | None = None
    target: Target | None = (
        None  # what the run ran against: simulator profile, server version and configuration (plugin/setup.py)
    )
    # at the end
    complete: bool | None = None
    reason: str | None = None  # why the run is incomplete, when it is
    records: int | None = None  # records written
    records_not_written: int | None = None  # held in memory at the end, or dropped: not on disk
    records_dropped: int | None = None  # dropped past the limit on unwritten records
    files: dict[str, FileCheck] = {}  # what each results file held when written
    merged_unshipped: list[str] = []  # workers' unshipped files a recovery merged into the records

    @property
    def model(self) -> str | None:
        """The model requested: the plan's (a model the server named is filled in there)."""
        return self.plan.model or None

    @property
    def closed_loop_users(self) -> int | None:
        """Locust's -u of a run whose load is that user count (no load model of its own)."""
        users = self.options.get("num_users")
        return int(users) if isinstance(users, (int, float)) and self.plan.load.kind == "closed" else None

    def load_level(self) -> dict[str, Any]:
        """The load that ran: its kind and fields, and a closed loop's user count (-u, the web form's)."""
        level = {"kind": self.plan.load.kind, **self.plan.load.parameters()}
        if self.plan.load.kind == "closed":
            level["users"] = self.closed_loop_users
        return level

    def dump(self) -> dict[str, Any]:
        """run.json's content: the keys that were set, as JSON values."""
        return self.model_dump(mode="json", exclude_unset=True)
