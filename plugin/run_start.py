"""What a master sends its workers with a run: the plan it validated and the workload itself.

One workload and one set of options per run: a worker does not rebuild the plan from option
strings, nor read a workload file of its own. At test start the master puts a `RunStart` (the
plan, the workload's files as it read them, the run id, the run's start, the number of load
processes, and what plugins share) under one key of its options, `llm_run`: Locust sends the
master's options with every spawn message, to each worker, also to one that joins late and before
its first users start (a custom message could reach a late joiner before it can receive one).
The worker validates it (`received`) and runs exactly that: a worker whose own workload file
differs runs the master's. The API key is not in it (RunPlan leaves it out): a worker uses its
own LOCUST_API_KEY, else the key Locust's spawn message copies with the options (docs/security.md).
"""

from __future__ import annotations

import base64
import zlib
from typing import Any

from pydantic import BaseModel, ConfigDict

from core.errors import InputError
from core.validation import build
from plugin.plan import RunPlan
from workloads import load_spec

CARRIER = "llm_run"  # the key of Locust's options that carries it


class CarriedWorkload(BaseModel):
    """A workload's files as the master read them (compressed), and the hash of what they make."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str  # as the master names it (messages only)
    sources: dict[str, str]  # WorkloadSpec.sources, each zlib-compressed, base64
    spec_hash: str

    @classmethod
    def of(cls, spec) -> "CarriedWorkload":
        packed = {k: base64.b64encode(zlib.compress(v, 6)).decode() for k, v in spec.sources.items()}
        return cls(path=spec.path, sources=packed, spec_hash=spec.spec_hash)

    def load(self):
        """The master's workload (workloads.WorkloadSpec), built from its files, or InputError."""
        try:
            sources = {k: zlib.decompress(base64.b64decode(v)) for k, v in self.sources.items()}
            spec = load_spec(self.path, sources=sources)
        except (KeyError, ValueError, zlib.error) as e:
            raise InputError(f"--workload: the master's workload {self.path} arrived damaged ({e})") from None
        if spec.spec_hash != self.spec_hash:
            raise InputError(f"--workload: the master's workload {self.path} arrived damaged (hash {spec.spec_hash[:12]}, "
                             f"sent {self.spec_hash[:12]})")  # fmt: skip
        return spec


class RunStart(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    plan: RunPlan
    workload: CarriedWorkload
    run_id: str
    started: float  # the master's test start, wall clock: steps and open-loop schedules count from it
    processes: int  # load processes the run's schedule is split across
    shared: dict[str, Any] = {}  # what the results process's plugins tell the workers (SuiteState.shared)


def send(environment, start: RunStart) -> None:
    """Master: the run travels with the options of every spawn message from now on."""
    setattr(environment.parsed_options, CARRIER, start.model_dump(mode="json"))


def received(environment) -> RunStart:
    """Worker: the run its master sent, validated (InputError when it is missing or damaged)."""
    data = getattr(environment.parsed_options, CARRIER, None)
    if not isinstance(data, dict):
        raise InputError("the master sent no run plan with its spawn message; start the master and the workers "
                         "from the same version of this suite")  # fmt: skip
    return build(RunStart, data)
