"""summary.json as a typed contract: the models metrics/summary.py fills and every reader reads.

The file is public (docs/results.md); pipelines, the report, `python -m reports compare` and the
web UI read it. It is written from `Summary` and read back into `Summary`, so a reader names
fields (`summary.overall.ttft_ms.p95`), never string paths with fallbacks.

Rules of the contract:
  - `schema_version` says which shape the file has; a reader refuses a version it does not know
    with one line naming the file and what to do. Version 1 was the untyped file (no
    `schema_version` key); 2 is the first typed one, with the same key names.
  - A value that does not exist (a percentile of no request, a rate over an empty window) is
    `None` (JSON null), never NaN: a NaN given to a model becomes None.
  - Times are wall-clock seconds (`window.start`), latencies milliseconds (`*_ms`), rates per
    second (`*_per_s`).
  - Sections that plugins add at the end of a run (`run.summary_extra`: `workers`, `client_bound`,
    `server_metrics`, `lost_work`, `users_off_plan`, or a new one) are models here (their known keys typed, a key a
    newer writer adds kept); a section no model names is kept as it is (an extra key of `Summary`).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import ConfigDict, ValidationError

from core.errors import InputError
from core.validation import describe
from metrics.schema.backends import BackendBlock, BackendCheck
from metrics.schema.base import Model
from metrics.schema.client_health import ClientBound, LostWork, OpenLoop, UsersOffPlan, WorkerAccount
from metrics.schema.figures import Block, Concurrency, Records, Step, Window
from metrics.schema.run_setup import Setup
from metrics.schema.server_side import GpuSection, KneeDiagnosis, ServerScrapes
from metrics.schema.verdicts import Capacity, SloVerdict

SCHEMA_VERSION = 2


class Summary(Model):
    model_config = ConfigDict(extra="allow", validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    schema_version: Literal[2] = SCHEMA_VERSION
    run_id: str = ""
    complete: bool = True  # False: the run was interrupted, the results are partial
    reason: str | None = None  # why the run is incomplete, when it is
    note: str | None = None  # e.g. computed by the report because summary.json was missing
    setup: Setup | None = None  # the load and the target (plugin/setup.py)
    definitions: dict[str, str]
    window: Window
    records: Records
    overall: Block
    by_class: dict[str, Block]
    by_turn: dict[str, Block] | None = None  # conversations: one block per turn number ("1" = first message)
    by_backend: dict[str, BackendBlock] | None = None  # several replicas or a balancer's header: one block per backend
    backends: BackendCheck | None = None  # the spread over the backends and which stands out (metrics/backends.py)
    by_step: list[Step] | None = None  # step or capacity-search runs
    concurrency: Concurrency
    slo: SloVerdict | None = None  # the whole run's verdict, with --slo (not with load levels: judged per level)
    capacity: Capacity | None = None  # steps and --slo
    open_loop: OpenLoop | None = None  # --request-rate
    # sections added by plugins at the end of a run
    client_bound: ClientBound | None = None  # plugin/health_board.py
    workers: dict[str, WorkerAccount] | None = None  # plugin/shipping.py: per-worker record accounting
    server_metrics: ServerScrapes | None = None  # plugin/server_metrics.py
    diagnosis: KneeDiagnosis | None = None  # runs with load levels: why the knee is there (metrics/diagnosis.py)
    lost_work: LostWork | None = None  # a master's workers lost mid-run: the requests lost, at least
    users_off_plan: UsersOffPlan | None = None  # plugin/user_plan.py: where the users ran differed from the plan
    gpu: GpuSection | None = None  # plugin/gpu.py: --gpu-telemetry, --gpus, --gpu-hour-price

    def blocks(self, by: str = "by_class") -> list[tuple[str, Block]]:
        """(name, block) of every class (or turn) and then ("overall", the overall block)."""
        return [*(getattr(self, by) or {}).items(), ("overall", self.overall)]

    def plugin_sections(self) -> dict[str, Any]:
        """Sections a plugin added that the model does not name."""
        return dict(self.model_extra or {})

    def with_sections(self, **sections) -> Summary:
        """A copy with more top-level sections (run_id, complete, the plugins' sections), validated."""
        return Summary.model_validate({**self.model_dump(), **sections})


def as_summary(data: Summary | dict) -> Summary:
    """A Summary from itself or from its JSON form (a dict, as json.load gives it)."""
    return data if isinstance(data, Summary) else Summary.model_validate(data)


def parse_summary(data: dict, path: str) -> Summary:
    """summary.json's content -> Summary; InputError with one line naming the file otherwise."""
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a summary.json (a JSON object was expected)")
    version = data.get("schema_version")
    if version is None:
        raise InputError(
            f"{path}: written by an older version of the suite (no schema_version; this version reads "
            f"schema {SCHEMA_VERSION}): report it with that version, or move summary.json aside and this version "
            "recomputes it from requests.parquet (all records: no warm-up cut, no steps or SLO)"
        )
    if version != SCHEMA_VERSION:
        raise InputError(
            f"{path}: schema_version {version!r}, this version of the suite reads {SCHEMA_VERSION}: "
            "use the version that wrote it"
        )
    try:
        return Summary.model_validate(data)
    except ValidationError as e:
        raise InputError(f"{path}: {describe(e)}") from None


def load_summary(path: str) -> Summary:
    """Read summary.json; InputError with one line naming the file and the problem."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except OSError as e:
        raise InputError(f"{path}: cannot be read ({e.strerror})") from None
    return parse_summary(data, path)


__all__ = ["SCHEMA_VERSION", "Summary", "as_summary", "load_summary", "parse_summary"]
