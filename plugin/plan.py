"""The run plan: one validated, immutable description of a run, built before any user spawns.

Every run builds its plan from Locust's parsed options (command line, environment, `locust.conf`,
and for a web UI start the form's values): a headless run at init and again at test start, each
start from the web form before the run begins (a bad value refuses the start with the same line
a headless run prints), each worker from the option values the master sends with a run. Everything
a run does reads the plan; `run.json` records it.

Values arrive as Locust's strings; each field's validator parses its own option and names it in
the message (`--step-time: ...`), and `core.validation` words whatever pydantic finds itself. The
load model is one of five kinds, a tagged union (`load.kind`): closed, steps, capacity, open,
replay.
"""

from __future__ import annotations

import json
import math
import os
import re
from urllib.parse import urlsplit
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from core.durations import Timeouts, parse_duration
from core.sizes import parse_size
from core.errors import InputError
from core.validation import build
from metrics.slo import Objective, parse_slo
from plugin.server_metrics import public_url
from shapes.capacity import MIN_JUDGED_S, WORKER_REPORT_LAG_S, judged_s
from shapes.replay import load_trace
from shapes.steps import parse_steps

# Failure classes a retry may follow: those known from the HTTP exchange alone, before the body is
# parsed (users/llm.py decides right after the stream ends, without parsing it).
RETRYABLE = ("http_429", "http_4xx", "http_5xx", "connect_error", "timeout", "stream_truncated")
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


# -- the plan -----------------------------------------------------------------------------------

# plan field -> the option that sets it (for messages: a field's problem names its option)
_FLAG = {
    "warmup_s": "warmup", "stream": "no-stream", "retry_max_wait_s": "retry-max-wait",
    "cancel_after_s": "cancel-after", "server_metrics_interval_s": "server-metrics-interval",
    "run_time_s": "run-time", "max_response_bytes": "max-response-size",
}  # fmt: skip


def flag_of(loc) -> str:
    name = str(loc[0]) if loc else ""
    return "--" + _FLAG.get(name, name).replace("_", "-")


class RunPlan(_Frozen):
    endpoint: Literal["chat", "completions"] = "chat"
    model: str = ""
    api_key: str = Field("", repr=False, exclude=True)  # never written anywhere
    workload: str | None = None
    seed: int | None = None
    tokenizer: str | None = None
    max_tokens_override: int | None = None
    ignore_eos: bool = False
    min_tokens: int | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)
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

    # -- parsing of Locust's option values ------------------------------------------------------
    @field_validator("seed", "max_tokens_override", "min_tokens", "retry", mode="before")
    @classmethod
    def _whole(cls, value, info):
        minimum = 1 if info.field_name == "max_tokens_override" else 0
        return _int(flag_of([info.field_name]), value, minimum)

    @field_validator("workload", "tokenizer", mode="before")
    @classmethod
    def _optional_text(cls, value):
        return value or None

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer_exists(cls, value):
        if value and _looks_like_path(value) and not os.path.exists(os.path.expanduser(value)):
            raise InputError(f"--tokenizer: '{value}' does not exist; give a local tokenizer folder (or a hub name like org/name)")
        return value

    @field_validator("extra_body", mode="before")
    @classmethod
    def _json_object(cls, value):
        if isinstance(value, dict):
            return value
        if not value:
            return {}
        try:
            extra = json.loads(value)
        except json.JSONDecodeError as e:
            raise InputError(f"--extra-body: not valid JSON ({e.msg} at column {e.colno}); give a JSON object like '{{\"top_k\": 1}}'") from None
        if not isinstance(extra, dict):
            raise InputError("--extra-body: must be a JSON object like '{\"top_k\": 1}'")
        return extra

    @field_validator("warmup_s", "retry_max_wait_s", "cancel_after_s", "server_metrics_interval_s", mode="before")
    @classmethod
    def _duration(cls, value, info):
        return parse_duration(flag_of([info.field_name])[2:], value)

    @field_validator("server_metrics_interval_s")
    @classmethod
    def _interval(cls, value):
        if value < 0.1:
            raise InputError("--server-metrics-interval: must be at least 100ms, e.g. 5s")
        return value

    @field_validator("max_response_bytes", mode="before")
    @classmethod
    def _size(cls, value):
        return parse_size("max-response-size", value)

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, value):
        if value and not re.fullmatch(r"[A-Za-z0-9._-]+", value):
            raise InputError(f"--run-id: '{value}' may only hold letters, digits, '.', '_' and '-'")
        if value in (".", ".."):
            raise InputError(f"--run-id: '{value}' names a folder above the run's; give a name such as nightly-01")
        return value

    @field_validator("retry_on", mode="before")
    @classmethod
    def _retry_on(cls, value):
        names = tuple(c.strip() for c in str(value or "").split(",") if c.strip()) if isinstance(value, str) else tuple(value)
        for name in names:
            if name not in RETRYABLE:
                raise InputError(f"--retry-on: '{name}' is not a retryable failure class; choose from {', '.join(RETRYABLE)}")
        return names

    @field_validator("cancel_rate", mode="before")
    @classmethod
    def _share(cls, value):
        rate = 0.0 if value in ("", None) else _float("--cancel-rate", value, 0.0, exclusive=False)
        if rate > 1:
            raise InputError(f"--cancel-rate: {value} is a share of requests; give a number from 0 to 1, e.g. 0.1")
        return rate

    @field_validator("server_metrics", mode="before")
    @classmethod
    def _urls(cls, value):
        urls = [u.strip() for u in str(value or "").split(",") if u.strip()] if isinstance(value, str) else list(value)
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise InputError(f"--server-metrics: '{public_url(url)}' needs a scheme and a host, e.g. http://127.0.0.1:8000/metrics")
        return tuple(dict.fromkeys(urls))

    @model_validator(mode="after")
    def _together(self):
        if self.retry and not self.retry_on:
            raise InputError("--retry-on: empty while --retry is on; name the failure classes to retry, e.g. http_429,http_5xx")
        if self.cancel_rate and self.cancel_after_s <= 0:
            raise InputError("--cancel-after: must be above 0 when --cancel-rate is set, e.g. 2s")
        return self

    # -- from Locust's options ------------------------------------------------------------------
    @classmethod
    def from_options(cls, o) -> "RunPlan":
        """The plan for the options `o` (an argparse namespace), or one-line `InputError`."""

        def opt(name, default=""):
            value = getattr(o, name, default)
            return default if value is None else value

        timeouts = Timeouts(
            connect=parse_duration("timeout-connect", opt("timeout_connect", "10s")),
            first_token=parse_duration("timeout-first-token", opt("timeout_first_token", "300s")),
            idle=parse_duration("timeout-idle", opt("timeout_idle", "120s")),
            total=parse_duration("timeout-total", opt("timeout_total", "900s")),
        )
        for name in ("connect", "first_token", "idle", "total"):
            if getattr(timeouts, name) <= 0:
                raise InputError(f"--timeout-{name.replace('_', '-')}: must be above 0")
        run_time = opt("run_time", None)
        data = dict(
            endpoint=opt("endpoint", "chat") or "chat", model=opt("model"), api_key=opt("api_key"),
            workload=opt("workload"), seed=opt("seed"), tokenizer=opt("tokenizer"),
            max_tokens_override=opt("max_tokens_override"), ignore_eos=bool(opt("ignore_eos", False)),
            min_tokens=opt("min_tokens"), extra_body=opt("extra_body"), stream=not opt("no_stream", False),
            warmup_s=opt("warmup", "0s") or "0s", results_dir=opt("results_dir") or "results", run_id=opt("run_id"),
            overwrite=bool(opt("overwrite", False)),
            sim_profile=opt("sim_profile") or "v100-7b-tp8", sim_timestamps=bool(opt("sim_timestamps", False)),
            timeouts=timeouts, connection=opt("connection", "keep-alive") or "keep-alive",
            max_response_bytes=opt("max_response_size", "64MB") or "64MB",
            run_time_s=float(run_time) if run_time else None,
            load=_load_model(o), slo=tuple(parse_slo(opt("slo"))),
            retry=opt("retry", "0") or "0", retry_on=opt("retry_on", "http_429,http_5xx,connect_error"),
            retry_max_wait_s=opt("retry_max_wait", "30s") or "30s", cancel_rate=opt("cancel_rate", "0"),
            cancel_after_s=opt("cancel_after", "1s") or "1s", server_metrics=opt("server_metrics"),
            server_metrics_interval_s=opt("server_metrics_interval", "5s") or "5s", health=_health(o),
        )  # fmt: skip
        plan = build(cls, data, field_name=flag_of)
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
        out = self.model_dump(mode="json", exclude={"slo", "timeouts", "health"})
        out["slo"] = [o.text for o in self.slo]
        out["timeouts"] = {k: getattr(self.timeouts, k) for k in ("connect", "first_token", "idle", "total")}
        out["health"] = self.health.model_dump()
        out["api_key_set"] = bool(self.api_key)
        return out


def _load_model(o):
    """Step, capacity, open-loop and replay options, checked together (they constrain each other)."""
    get = lambda name, default="": getattr(o, name, default) or default  # noqa: E731
    steps = parse_steps(get("steps"))
    step_time = parse_duration("step-time", get("step_time", "60s"))
    step_warmup = parse_duration("step-warmup", get("step_warmup", "10s"))
    find_capacity = bool(getattr(o, "find_capacity", False))
    if step_time <= 0:
        raise InputError("--step-time: must be above 0, e.g. 60s")
    if (steps or find_capacity) and step_warmup >= step_time:
        raise InputError(f"--step-warmup: {step_warmup:g}s must be shorter than --step-time {step_time:g}s")
    if find_capacity:
        _check_judged_window(step_time, step_warmup, distributed=bool(getattr(o, "master", False)))
    rate = _float("--request-rate", get("request_rate"))
    max_conc = _int("--max-concurrency", get("max_concurrency"), 1)
    scale_text = get("time_scale")
    trace = get("replay")
    if scale_text and not trace:
        raise InputError("--time-scale: only applies with --replay")
    if trace:
        if rate is not None:
            raise InputError("--replay: the trace sets the send times; drop --request-rate")
        if steps or find_capacity:
            raise InputError("--replay: cannot be combined with --steps or --find-capacity; the trace is the load")
        scale = _float("--time-scale", scale_text) if scale_text else 1.0
        try:
            loaded = load_trace(trace)
        except InputError as e:
            raise InputError(f"--replay: {e}") from None
        return TraceReplay(trace=trace, time_scale=scale, rate=loaded.rate(scale), max_concurrency=max_conc)
    if rate is not None:
        if steps:
            raise InputError("--request-rate: cannot be combined with --steps (closed-loop user steps); pick one")
        if find_capacity:
            raise InputError("--find-capacity: searches a user count; drop --request-rate")
        burstiness = _float("--burstiness", get("burstiness", "1.0")) or 1.0
        return OpenLoop(rate=rate, arrival=get("arrival", "poisson"), burstiness=burstiness, max_concurrency=max_conc)
    if max_conc is not None:
        raise InputError("--max-concurrency: only applies with --request-rate or --replay (open loop); in a closed loop use -u")
    if find_capacity:
        return CapacitySearchModel(candidates=tuple(steps) or None, step_s=step_time, warmup_s=step_warmup)
    if steps:
        return StepRamp(levels=tuple(steps), step_s=step_time, warmup_s=step_warmup)
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


def _health(o) -> HealthLimits:
    def pct(name: str, text) -> float:
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise InputError(f"--{name}: '{text}' is not a number (percent of one core)") from None
        if not 0 < value <= 1000:
            raise InputError(f"--{name}: {text} must be above 0 (percent of one core, e.g. 70)")
        return value

    limits = HealthLimits(
        cpu_pct=pct("health-cpu-limit", getattr(o, "health_cpu_limit", 70)),
        loop_lag_s=parse_duration("health-loop-lag-limit", getattr(o, "health_loop_lag_limit", "10ms")),
        token_lag_s=parse_duration("health-token-lag-limit", getattr(o, "health_token_lag_limit", "5ms")),
        sustain_s=parse_duration("health-sustain", getattr(o, "health_sustain", "5s")),
        target_cpu_pct=pct("health-target-cpu", getattr(o, "health_target_cpu", 60)),
    )
    if limits.sustain_s < 1:
        raise InputError("--health-sustain: must be at least 1s")
    return limits


def _int(flag: str, text, minimum: int = 0) -> int | None:
    if text in ("", None):
        return None
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise InputError(f"{flag}: '{text}' is not an integer; give a whole number") from None
    if value < minimum:
        raise InputError(f"{flag}: {value} is below the minimum {minimum}")
    return value


def _float(flag: str, text, minimum: float = 0.0, exclusive: bool = True) -> float | None:
    if text in ("", None):
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise InputError(f"{flag}: '{text}' is not a number") from None
    if value < minimum or (exclusive and value == minimum) or math.isnan(value) or math.isinf(value):
        raise InputError(f"{flag}: {text} must be above {minimum:g}")
    return value


def _looks_like_path(text: str) -> bool:
    return os.path.isabs(os.path.expanduser(text)) or text.startswith((".", "~"))
