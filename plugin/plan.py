"""The run plan: one validated, immutable description of a run, built before any user spawns.

A run's plan is built once, from Locust's parsed options (command line, environment,
`locust.conf`) parsed once by `plugin.options.Options`: at init for a headless run, by the web
form's check for a start from the form (the plan it checked is the plan that runs). The master
sends it, with the workload, to its workers (plugin/hooks.py); they validate it and run it.
Everything a run does reads the plan; `run.json` records it.

The load model is one class per kind (`load.kind`: closed, steps, capacity, open, replay), chosen
from the options by the registry in plugin/load_models/.
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from core.durations import Timeouts
from core.errors import InputError
from core.tls import TlsPolicy, read_ca
from plugin.load_models import AnyLoadModel, ClosedLoop, load_model
from plugin.options import JsonObject, Objectives, Options
from workloads.endpoints import EndpointName

DEFAULT_MAX_RESPONSE_BYTES = 64 << 20  # --max-response-size 64MB


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


class HealthLimits(_Frozen):
    """The client self-health limits (--health-*)."""

    cpu_pct: float = 70.0
    loop_lag_s: float = 0.010
    token_lag_s: float = 0.005
    sustain_s: float = 5.0
    target_cpu_pct: float = 60.0


class PrometheusEndpoint(_Frozen):
    """--prometheus-*: where the process that writes results serves /metrics (port 0 = off)."""

    port: int = 0
    host: str = "127.0.0.1"
    linger_s: float = 0.0  # kept up this long before the process exits


# -- the plan -----------------------------------------------------------------------------------

class RunPlan(_Frozen):
    endpoint: EndpointName = "chat"
    model: str = ""
    api_key: str = Field("", repr=False, exclude=True)  # never written anywhere
    workload: str | None = None
    seed: int | None = None
    tokenizer: str | None = None
    max_tokens_override: int | None = None
    ignore_eos: bool = False
    min_tokens: int | None = None
    extra_body: JsonObject = "{}"  # a JSON object's text: immutable; `extra` reads it
    stream: bool = True
    warmup_s: float = 0.0
    results_dir: str = "results"
    run_id: str = ""
    overwrite: bool = False  # replace an existing results folder of the same run id
    sim_profile: str = "v100-7b-tp8"
    sim_timestamps: bool = False
    timeouts: Timeouts = Field(default_factory=Timeouts)
    connection: Literal["keep-alive", "per-request"] = "keep-alive"
    tls: TlsPolicy = Field(default_factory=TlsPolicy)  # --tls-ca (its text carried to the workers), --tls-insecure
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES  # a longer body is cut: response_too_large
    run_time_s: float | None = None  # Locust's -t
    load: AnyLoadModel = Field(default_factory=ClosedLoop)
    slo: Objectives = ()
    retry: int = 0
    retry_on: tuple[str, ...] = ("http_429", "http_5xx", "connect_error")
    retry_max_wait_s: float = 30.0
    cancel_rate: float = 0.0
    cancel_after_s: float = 1.0
    server_metrics: tuple[str, ...] = ()
    server_metrics_interval_s: float = 5.0
    gpu_telemetry: str = ""  # nvidia-smi, or a DCGM exporter's URL (plugin/gpu.py)
    gpu_telemetry_interval_s: float = 1.0
    gpus: int | None = None  # the deployment's GPU count (None: as the telemetry sees)
    gpu_hour_price: float | None = None  # currency per GPU-hour
    health: HealthLimits = Field(default_factory=HealthLimits)
    prometheus: PrometheusEndpoint = Field(default_factory=lambda: PrometheusEndpoint())
    locust_tables: bool = False  # headless: Locust's own tables too
    junit: str = ""  # also write the run's checks as JUnit XML to this file

    # -- views the rest of the suite reads (each answered by the load model) --------------------
    @property
    def steps(self) -> tuple[int, ...]:
        """The user counts of a step ramp (or a capacity search's candidates); () otherwise."""
        return self.load.fixed_levels()

    @property
    def stepped(self) -> bool:
        return self.load.stepped

    @property
    def step_s(self) -> float | None:
        return self.load.step_seconds()

    @property
    def find_capacity(self) -> bool:
        return self.load.kind == "capacity"

    @property
    def request_rate(self) -> float | None:
        """Open loop (and replay): the total requests per second across all processes."""
        return self.load.target_rate()

    @property
    def replay(self) -> str | None:
        return getattr(self.load, "trace", None)

    def summary_line(self) -> str:
        """What will run, in one line (the log says it before load starts)."""
        return self.load.describe(self)

    @property
    def extra(self) -> dict[str, Any]:
        """--extra-body as a new dict (the plan keeps its text, which nothing can change)."""
        return json.loads(self.extra_body)

    @field_serializer("slo")
    def _slo_as_text(self, value) -> list[str]:
        return [o.text for o in value]

    @field_serializer("extra_body")
    def _extra_as_object(self, value: str) -> dict[str, Any]:
        return json.loads(value)

    # -- from Locust's options ------------------------------------------------------------------
    @classmethod
    def from_options(cls, o) -> "RunPlan":
        """The plan for Locust's parsed options `o` (an argparse namespace; an option it lacks takes
        its default), or one-line `InputError`."""
        run_time = getattr(o, "run_time", None)
        plan = cls.from_parsed(Options.parse(o), float(run_time) if run_time else None, bool(getattr(o, "master", False)))
        if not getattr(o, "worker", False):  # a worker's user count is its master's share
            check_users(plan, getattr(o, "num_users", None), getattr(o, "spawn_rate", None))
        return plan

    @classmethod
    def from_parsed(cls, p: Options, run_time_s: float | None = None, distributed: bool = False) -> "RunPlan":
        plan = cls(
            endpoint=p.endpoint, model=p.model, api_key=p.api_key, workload=p.workload or None, seed=p.seed,
            tokenizer=p.tokenizer or None, max_tokens_override=p.max_tokens_override, ignore_eos=p.ignore_eos,
            min_tokens=p.min_tokens, extra_body=p.extra_body, stream=not p.no_stream, warmup_s=p.warmup,
            results_dir=p.results_dir, run_id=p.run_id, overwrite=p.overwrite, sim_profile=p.sim_profile,
            sim_timestamps=p.sim_timestamps,
            timeouts=Timeouts(p.timeout_connect, p.timeout_first_token, p.timeout_idle, p.timeout_total),
            connection=p.connection,
            tls=TlsPolicy(p.tls_ca, read_ca(os.path.expanduser(p.tls_ca)) if p.tls_ca else "", p.tls_insecure),
            max_response_bytes=p.max_response_size, run_time_s=run_time_s,
            load=load_model(p, distributed), slo=p.slo, retry=p.retry or 0, retry_on=p.retry_on,
            retry_max_wait_s=p.retry_max_wait, cancel_rate=p.cancel_rate, cancel_after_s=p.cancel_after,
            server_metrics=p.server_metrics, server_metrics_interval_s=p.server_metrics_interval,
            gpu_telemetry=p.gpu_telemetry, gpu_telemetry_interval_s=p.gpu_telemetry_interval, gpus=p.gpus,
            gpu_hour_price=p.gpu_hour_price,
            health=HealthLimits(cpu_pct=p.health_cpu_limit, loop_lag_s=p.health_loop_lag_limit, token_lag_s=p.health_token_lag_limit,
                                sustain_s=p.health_sustain, target_cpu_pct=p.health_target_cpu),
            prometheus=PrometheusEndpoint(port=p.prometheus_port, host=p.prometheus_host or "127.0.0.1", linger_s=p.prometheus_linger),
            locust_tables=p.locust_tables, junit=p.junit,
        )  # fmt: skip
        return plan

    def with_model(self, model: str) -> "RunPlan":
        return self.model_copy(update={"model": model})

    def with_server_metrics(self, urls: tuple[str, ...]) -> "RunPlan":
        return self.model_copy(update={"server_metrics": urls})

    def with_seed(self, seed: int) -> "RunPlan":
        return self.model_copy(update={"seed": seed})

    def with_api_key(self, api_key: str) -> "RunPlan":
        return self.model_copy(update={"api_key": api_key})

    def record(self) -> dict:
        """The plan as `run.json` writes it (the API key left out)."""
        out = self.model_dump(mode="json")
        out["api_key_set"] = bool(self.api_key)
        out["tls"].pop("ca_pem", None)  # the file's name is enough
        return out


def check_users(plan: "RunPlan", users, spawn_rate) -> None:
    """Locust's -u and -r (the web form's "Number of users" and "Ramp up"), before any load: Locust
    itself takes -u -5 for a traceback seconds into the run, and 0 users for an empty run. A step
    ramp and a capacity search set the users themselves (-u is not used), an open loop's -u is its
    most requests in flight."""
    if users is not None:
        try:
            users = int(str(users).strip())
        except ValueError:
            raise InputError(f"Number of users (-u): '{users}' is not a whole number; give e.g. 10") from None
        if users < 0:
            raise InputError(f"Number of users (-u): {users} is below 0; give 1 or more, e.g. 10")
        if users == 0 and not plan.stepped:
            raise InputError("Number of users (-u): 0 would send nothing; give 1 or more, e.g. 10")
    if spawn_rate is not None:
        try:
            rate = float(str(spawn_rate).strip())
        except ValueError:
            raise InputError(f"Ramp up (-r): '{spawn_rate}' is not a number of users per second; give e.g. 10") from None
        if not rate > 0:
            raise InputError(f"Ramp up (-r): {rate:g} users per second starts nobody; give more than 0, e.g. 10")
