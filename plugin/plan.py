"""The run plan: one validated, immutable description of a run, built before any user spawns.

A run's plan is built once, from Locust's parsed options (command line, environment,
`locust.conf`) parsed once by `plugin.options.Options`: at init for a headless run, by the web
form's check for a start from the form (the plan it checked is the plan that runs). The master
sends it, with the workload, to its workers (plugin/hooks.py); they validate it and run it.
Everything a run does reads the plan; `run.json` records it.

A field of the plan that holds an option's value says which (`held`): `from_parsed` reads each from
the parsed options, and its default is what the options' defaults make, so each default is written
once, in plugin/options.py.

The load model is one class per kind (`load.kind`: closed, steps, capacity, open, rate_steps, replay), chosen
from the options by the registry in plugin/load_models/.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from operator import attrgetter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from core.durations import Timeouts
from core.errors import InputError
from core.tls import TlsPolicy, read_ca
from plugin.load_models import AnyLoadModel, ClosedLoop, load_model
from plugin.options import JsonObject, Objectives, Options
from workloads.endpoints import EndpointName


@cache
def option_defaults() -> Options:
    """Every option at its default, parsed and checked as a given value is (plugin/options.py
    declares each default once)."""
    return Options()


@dataclass(frozen=True, slots=True)
class Held:
    """What a plan field holds: `read` makes its value from the parsed options."""

    read: Callable[[Options], Any]


def held(read: str | Callable[[Options], Any], **field: Any) -> Any:
    """A plan field that holds an option's value: `read`, the option's name, or how the value is
    made from the options. Its default is the same made from the options' defaults, so the plan
    writes no default of its own. `field`: pydantic's Field arguments (repr, exclude)."""
    reader = attrgetter(read) if isinstance(read, str) else read
    info = Field(default_factory=lambda: reader(option_defaults()), **field)
    info.metadata.append(Held(reader))
    return info


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    @classmethod
    def of(cls, options: Options, **more: Any):
        """This part of the plan from the parsed options: each field `held` reads its value from
        them; `more` gives the fields no option holds."""
        made = {
            name: h.read(options) for name, f in cls.model_fields.items() for h in f.metadata if isinstance(h, Held)
        }
        return cls(**made, **more)


class HealthLimits(_Frozen):
    """The client self-health limits (--health-*)."""

    cpu_pct: float = held("health_cpu_limit")
    loop_lag_s: float = held("health_loop_lag_limit")
    token_lag_s: float = held("health_token_lag_limit")
    sustain_s: float = held("health_sustain")
    target_cpu_pct: float = held("health_target_cpu")


class PrometheusEndpoint(_Frozen):
    """--prometheus-*: where the process that writes results serves /metrics (port 0 = off)."""

    port: int = held("prometheus_port")
    host: str = held("prometheus_host")
    linger_s: float = held("prometheus_linger")  # kept up this long before the process exits


def _input_tokens(o: Options) -> tuple[int, int] | None:
    """--input-tokens as (MIN, MAX) tokens, --input-tokens-range applied (vllm bench serve's
    --random-range-ratio: [N x (1 - R), N x (1 + R)], at least 1)."""
    if o.input_tokens is None:
        return None
    low, high = o.input_tokens
    r = o.input_tokens_range
    return (max(1, int(low * (1 - r))), max(1, int(high * (1 + r)))) if r else (low, high)


def _timeouts(o: Options) -> Timeouts:
    return Timeouts(o.timeout_connect, o.timeout_first_token, o.timeout_idle, o.timeout_total)


def _tls(o: Options) -> TlsPolicy:
    """--tls-ca (its text read here, carried to the workers with the plan) and --tls-insecure."""
    return TlsPolicy(o.tls_ca, read_ca(os.path.expanduser(o.tls_ca)) if o.tls_ca else "", o.tls_insecure)


# -- the plan -----------------------------------------------------------------------------------


class RunPlan(_Frozen):
    """The run's plan. A field `held` holds an option's value, its default the option's; the
    others (`run_time_s`, Locust's -t, and `load`) are given by `from_parsed`."""

    endpoint: EndpointName = held("endpoint")
    model: str = held("model")
    api_key: str = held("api_key", repr=False, exclude=True)  # never written anywhere
    workload: str | None = held(lambda o: o.workload or None)
    seed: int | None = held("seed")
    tokenizer: str | None = held(lambda o: o.tokenizer or None)
    max_tokens_override: int | None = held("max_tokens_override")
    input_tokens: tuple[int, int] | None = held(
        _input_tokens
    )  # each prompt's tokens, MIN..MAX (workloads/token_prompts.py)
    ignore_eos: bool = held("ignore_eos")
    min_tokens: int | None = held("min_tokens")
    extra_body: JsonObject = held("extra_body")  # a JSON object's text: immutable; `extra` reads it
    stream: bool = held(lambda o: not o.no_stream)
    warmup_s: float = held("warmup")
    results_dir: str = held("results_dir")
    run_id: str = held("run_id")
    overwrite: bool = held("overwrite")  # replace an existing results folder of the same run id
    sim_profile: str = held("sim_profile")
    sim_timestamps: bool = held("sim_timestamps")
    balance: str = held("balance")  # how several --host URLs share the load (targets/)
    backend_header: str = held("backend_header")  # a load balancer's header naming the backend of each request
    backend_count: int | None = held("backend_count")  # the replicas behind that balancer (their fair share: 1/N)
    timeouts: Timeouts = held(_timeouts)
    connection: Literal["keep-alive", "per-request"] = held("connection")
    tls: TlsPolicy = held(_tls)  # --tls-ca (its text carried to the workers), --tls-insecure
    max_response_bytes: int = held("max_response_size")  # a longer body is cut: response_too_large
    run_time_s: float | None = None  # Locust's -t
    num_requests: int | None = held("num_requests")  # the run ends once this many are sent (plugin/request_budget.py)
    label: str = held("label")  # what this run is: run.json, the report's title, compare
    load: AnyLoadModel = Field(default_factory=ClosedLoop)
    slo: Objectives = held("slo")
    retry: int = held("retry")
    retry_on: tuple[str, ...] = held("retry_on")
    retry_max_wait_s: float = held("retry_max_wait")
    cancel_rate: float = held("cancel_rate")
    cancel_after_s: float = held("cancel_after")
    server_metrics: tuple[str, ...] = held("server_metrics")
    server_metrics_interval_s: float = held("server_metrics_interval")
    gpu_telemetry: str = held("gpu_telemetry")  # nvidia-smi, or a DCGM exporter's URL (plugin/gpu.py)
    gpu_telemetry_interval_s: float = held("gpu_telemetry_interval")
    gpus: int | None = held("gpus")  # the deployment's GPU count (None: as the telemetry sees)
    gpu_hour_price: float | None = held("gpu_hour_price")  # currency per GPU-hour
    health: HealthLimits = held(HealthLimits.of)
    prometheus: PrometheusEndpoint = held(PrometheusEndpoint.of)
    locust_tables: bool = held("locust_tables")  # headless: Locust's own tables too
    junit: str = held("junit")  # also write the run's checks as JUnit XML to this file
    save_vllm_json: str = held("save_vllm_json")  # also write vLLM's result JSON here (reports/vllm_json.py)

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
    def from_options(cls, o) -> RunPlan:
        """The plan for Locust's parsed options `o` (an argparse namespace; an option it lacks takes
        its default), or one-line `InputError`."""
        run_time = getattr(o, "run_time", None)
        plan = cls.from_parsed(
            Options.parse(o), float(run_time) if run_time else None, bool(getattr(o, "master", False))
        )
        if not getattr(o, "worker", False):  # a worker's user count is its master's share
            check_users(plan, getattr(o, "num_users", None), getattr(o, "spawn_rate", None))
        return plan

    @classmethod
    def from_parsed(cls, p: Options, run_time_s: float | None = None, distributed: bool = False) -> RunPlan:
        """The plan of parsed options `p`: each field `held` from its option, Locust's -t, and the
        load model the options choose (plugin/load_models/)."""
        return cls.of(p, run_time_s=run_time_s, load=load_model(p, distributed))

    def with_model(self, model: str) -> RunPlan:
        return self.model_copy(update={"model": model})

    def with_server_metrics(self, urls: tuple[str, ...]) -> RunPlan:
        return self.model_copy(update={"server_metrics": urls})

    def with_seed(self, seed: int) -> RunPlan:
        return self.model_copy(update={"seed": seed})

    def with_api_key(self, api_key: str) -> RunPlan:
        return self.model_copy(update={"api_key": api_key})

    def record(self) -> dict:
        """The plan as `run.json` writes it (the API key left out)."""
        out = self.model_dump(mode="json")
        out["api_key_set"] = bool(self.api_key)
        out["tls"].pop("ca_pem", None)  # the file's name is enough
        return out


def check_users(plan: RunPlan, users, spawn_rate) -> None:
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
            raise InputError(
                f"Ramp up (-r): '{spawn_rate}' is not a number of users per second; give e.g. 10"
            ) from None
        if not rate > 0:
            raise InputError(f"Ramp up (-r): {rate:g} users per second starts nobody; give more than 0, e.g. 10")
