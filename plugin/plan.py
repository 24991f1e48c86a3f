"""The run plan: one validated, immutable description of a run, built before any user spawns.

A run's plan is built once, from Locust's parsed options (command line, environment,
`locust.conf`) parsed once by `plugin.options.Options`: at init for a headless run, by the web
form's check for a start from the form (the plan it checked is the plan that runs). The master
sends it, with the workload, to its workers (plugin/hooks.py); they validate it and run it.
Everything a run does reads the plan; `run.json` records it.

The load model is one of five kinds, a tagged union (`load.kind`): closed, steps, capacity, open,
replay.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from core.durations import Timeouts
from core.errors import InputError
from metrics.slo import Objective
from plugin.options import RETRYABLE, JsonObject, Options
from shapes.capacity import MIN_JUDGED_S, WORKER_REPORT_LAG_S, judged_s
from shapes.replay import load_trace

DEFAULT_MAX_CONCURRENCY = 512
DEFAULT_MAX_RESPONSE_BYTES = 64 << 20  # --max-response-size 64MB


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


# -- load models --------------------------------------------------------------------------------


class ClosedLoop(_Frozen):
    """-u users, each sending its next request as soon as its last one ended."""

    kind: Literal["closed"] = "closed"


class StepRamp(_Frozen):
    """--steps: closed loop at each user count for --step-time, the first --step-warmup excluded."""

    kind: Literal["steps"] = "steps"
    levels: tuple[int, ...]
    step_s: float
    warmup_s: float

    @property
    def duration_s(self) -> float:
        return self.step_s * len(self.levels)


class CapacitySearchModel(_Frozen):
    """--find-capacity: the highest user count meeting --slo, levels held --step-time each."""

    kind: Literal["capacity"] = "capacity"
    candidates: tuple[int, ...] | None  # --steps given: walk these in order
    step_s: float
    warmup_s: float


class OpenLoop(_Frozen):
    """--request-rate: arrivals on a schedule whatever the server does, at most max_concurrency in flight."""

    kind: Literal["open"] = "open"
    rate: float
    arrival: Literal["poisson", "gamma", "constant"]
    burstiness: float
    max_concurrency: int | None  # None: the user count is the cap (web UI), or DEFAULT_MAX_CONCURRENCY headless


class TraceReplay(_Frozen):
    """--replay: a trace's requests at their logged times (open loop at the trace's mean rate)."""

    kind: Literal["replay"] = "replay"
    trace: str
    time_scale: float
    rate: float  # the trace's mean rate after time_scale
    max_concurrency: int | None


LoadModel = Annotated[Union[ClosedLoop, StepRamp, CapacitySearchModel, OpenLoop, TraceReplay], Field(discriminator="kind")]


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
    endpoint: Literal["chat", "completions", "responses", "embeddings", "rerank"] = "chat"
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
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES  # a longer body is cut: response_too_large
    run_time_s: float | None = None  # Locust's -t
    load: LoadModel = Field(default_factory=ClosedLoop)
    slo: tuple[Objective, ...] = ()
    retry: int = 0
    retry_on: tuple[str, ...] = ("http_429", "http_5xx", "connect_error")
    retry_max_wait_s: float = 30.0
    cancel_rate: float = 0.0
    cancel_after_s: float = 1.0
    server_metrics: tuple[str, ...] = ()
    server_metrics_interval_s: float = 5.0
    health: HealthLimits = Field(default_factory=HealthLimits)
    prometheus: PrometheusEndpoint = Field(default_factory=lambda: PrometheusEndpoint())
    locust_tables: bool = False  # headless: Locust's own tables too
    junit: str = ""  # also write the run's checks as JUnit XML to this file

    # -- views the rest of the suite reads ------------------------------------------------------
    @property
    def steps(self) -> tuple[int, ...]:
        """The user counts of a step ramp (or a capacity search's candidates); () otherwise."""
        load = self.load
        if isinstance(load, StepRamp):
            return load.levels
        if isinstance(load, CapacitySearchModel):
            return load.candidates or ()
        return ()

    @property
    def stepped(self) -> bool:
        return isinstance(self.load, (StepRamp, CapacitySearchModel))

    @property
    def step_s(self) -> float | None:
        return self.load.step_s if self.stepped else None

    @property
    def find_capacity(self) -> bool:
        return isinstance(self.load, CapacitySearchModel)

    @property
    def request_rate(self) -> float | None:
        """Open loop (and replay): the total requests per second across all processes."""
        return self.load.rate if isinstance(self.load, (OpenLoop, TraceReplay)) else None

    @property
    def replay(self) -> str | None:
        return self.load.trace if isinstance(self.load, TraceReplay) else None

    def summary_line(self) -> str:
        """What will run, in one line (the log says it before load starts)."""
        load = self.load
        if isinstance(load, StepRamp):
            text = f"step ramp {','.join(map(str, load.levels))} users, {load.step_s:g}s each ({load.warmup_s:g}s warm-up)"
            if self.run_time_s is not None and self.run_time_s < load.duration_s:
                held = max(1, math.ceil(self.run_time_s / load.step_s))
                text += f"; -t {self.run_time_s:g}s ends it in step {held} of {len(load.levels)}"
            return text
        if isinstance(load, CapacitySearchModel):
            return f"capacity search for {', '.join(o.text for o in self.slo)}, levels of {load.step_s:g}s within -t"
        if isinstance(load, OpenLoop):
            return f"open loop at {load.rate:g} requests/s ({load.arrival})"
        if isinstance(load, TraceReplay):
            return f"replay of {load.trace} at x{load.time_scale:g} time scale ({load.rate:.3g} requests/s)"
        return "closed loop"

    @property
    def extra(self) -> dict[str, Any]:
        """--extra-body as a new dict (the plan keeps its text, which nothing can change)."""
        return json.loads(self.extra_body)

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
            _check_users(plan, getattr(o, "num_users", None), getattr(o, "spawn_rate", None))
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
            connection=p.connection, max_response_bytes=p.max_response_size, run_time_s=run_time_s,
            load=_load_model(p, distributed), slo=p.slo, retry=p.retry or 0, retry_on=p.retry_on,
            retry_max_wait_s=p.retry_max_wait, cancel_rate=p.cancel_rate, cancel_after_s=p.cancel_after,
            server_metrics=p.server_metrics, server_metrics_interval_s=p.server_metrics_interval,
            health=HealthLimits(cpu_pct=p.health_cpu_limit, loop_lag_s=p.health_loop_lag_limit, token_lag_s=p.health_token_lag_limit,
                                sustain_s=p.health_sustain, target_cpu_pct=p.health_target_cpu),
            prometheus=PrometheusEndpoint(port=p.prometheus_port, host=p.prometheus_host or "127.0.0.1", linger_s=p.prometheus_linger),
            locust_tables=p.locust_tables, junit=p.junit,
        )  # fmt: skip
        if plan.find_capacity and not plan.slo:
            raise InputError("--find-capacity: needs --slo, e.g. --slo 'ttft.p95<5s'")
        return plan

    def with_model(self, model: str) -> "RunPlan":
        return self.model_copy(update={"model": model})

    def with_seed(self, seed: int) -> "RunPlan":
        return self.model_copy(update={"seed": seed})

    def with_api_key(self, api_key: str) -> "RunPlan":
        return self.model_copy(update={"api_key": api_key})

    def record(self) -> dict:
        """The plan as `run.json` writes it (the API key left out)."""
        out = self.model_dump(mode="json", exclude={"slo", "timeouts"})
        out["slo"] = [o.text for o in self.slo]
        out["timeouts"] = {k: getattr(self.timeouts, k) for k in ("connect", "first_token", "idle", "total")}
        out["api_key_set"] = bool(self.api_key)
        return out


def _check_users(plan: "RunPlan", users, spawn_rate) -> None:
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


def _load_model(p: Options, distributed: bool):
    """Step, capacity, open-loop and replay options, checked together (they constrain each other)."""
    steps, find_capacity = p.steps, p.find_capacity
    if (steps or find_capacity) and p.step_warmup >= p.step_time:
        raise InputError(f"--step-warmup: {p.step_warmup:g}s must be shorter than --step-time {p.step_time:g}s")
    if find_capacity:
        _check_judged_window(p.step_time, p.step_warmup, distributed)
    rate, max_conc = p.request_rate, p.max_concurrency
    if p.time_scale is not None and not p.replay:
        raise InputError("--time-scale: only applies with --replay")
    if p.replay:
        if rate is not None:
            raise InputError("--replay: the trace sets the send times; drop --request-rate")
        if steps or find_capacity:
            raise InputError("--replay: cannot be combined with --steps or --find-capacity; the trace is the load")
        scale = p.time_scale or 1.0
        try:
            loaded = load_trace(p.replay)
        except InputError as e:
            raise InputError(f"--replay: {e}") from None
        return TraceReplay(trace=p.replay, time_scale=scale, rate=loaded.rate(scale), max_concurrency=max_conc)
    if rate is not None:
        if steps:
            raise InputError("--request-rate: cannot be combined with --steps (closed-loop user steps); pick one")
        if find_capacity:
            raise InputError("--find-capacity: searches a user count; drop --request-rate")
        return OpenLoop(rate=rate, arrival=p.arrival, burstiness=p.burstiness or 1.0, max_concurrency=max_conc)
    if max_conc is not None:
        raise InputError("--max-concurrency: only applies with --request-rate or --replay (open loop); in a closed loop use -u")
    if find_capacity:
        return CapacitySearchModel(candidates=steps or None, step_s=p.step_time, warmup_s=p.step_warmup)
    if steps:
        return StepRamp(levels=steps, step_s=p.step_time, warmup_s=p.step_warmup)
    return ClosedLoop()


def _check_judged_window(step_time: float, step_warmup: float, distributed: bool) -> None:
    """A capacity search judges each level while the run goes, on --step-time less --step-warmup
    and, with workers (a master, also --processes), less the last 4 s whose records may still be on
    their way (shapes/capacity.py): that part must hold MIN_JUDGED_S. Step ramps have no such
    margin: their steps are measured after the run from every record, over --step-time less
    --step-warmup, which the check above keeps above 0."""
    judged = judged_s(step_time, step_warmup, distributed)
    if judged >= MIN_JUDGED_S:
        return
    lag = f" - {WORKER_REPORT_LAG_S:g}s while the workers' last records arrive" if distributed else ""
    need = step_time - judged + MIN_JUDGED_S
    shorter = ", or a shorter --step-warmup" if step_warmup > 0 else ""
    raise InputError(
        f"--step-time: {step_time:g}s leaves {max(judged, 0.0):g}s to judge each capacity-search level "
        f"({step_time:g}s - --step-warmup {step_warmup:g}s{lag}), at least {MIN_JUDGED_S:g}s is needed; "
        f"give --step-time {need:g}s or more{shorter}"
    )
