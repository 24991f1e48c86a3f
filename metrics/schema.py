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
    `server_metrics`, `lost_work`, or a new one) are models here (their known keys typed, a key a
    newer writer adds kept); a section no model names is kept as it is (an extra key of `Summary`).
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from core.errors import InputError
from core.validation import describe
from metrics.record import NOT_SERVER_FAILURES

SCHEMA_VERSION = 2


def _none_for_nan(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


# A number that may be missing: None, never NaN or an infinity (JSON has neither).
Num = Annotated[float | None, BeforeValidator(_none_for_nan)]


class _Model(BaseModel):
    """Fields by name in code, the published key names (aliases such as "p99.9") in the file; an
    unknown key is an error (a typo in the code that fills a model must not pass silently)."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)


class _Section(BaseModel):
    """A section written by a plugin: its known keys typed, any other key kept as it is."""

    model_config = ConfigDict(extra="allow")


PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("p99_9", 99.9))


class Distribution(_Model):
    """P = {count, mean, min, p50, p90, p95, p99, p99.9, max} in milliseconds; None when count is 0."""

    count: int = 0
    mean: Num = None
    min: Num = None
    p50: Num = None
    p90: Num = None
    p95: Num = None
    p99: Num = None
    p99_9: Num = Field(default=None, alias="p99.9")
    max: Num = None

    def stat(self, name: str) -> float | None:
        """A statistic by its published name: 'mean', 'p95', 'p99.9', ..."""
        return getattr(self, name.replace(".", "_"))


class Requests(_Model):
    sent: int  # the requests sent inside the window (their outcome below)
    ok: int
    failed: int  # server failures: neither stopped nor cancelled
    stopped: int  # in flight when the run ended: not a server failure
    cancelled: int  # aborted on purpose by the client (--cancel-rate): not a server failure
    retries: int  # attempts after the first (--retry)
    resent: int  # sent again after a stale kept-alive connection
    by_error: dict[str, int]  # server failures by class
    # successful replies by the server's finish_reason (stop, length, tool_calls, ...), and the tool
    # calls they made (parallel calls each count)
    by_finish_reason: dict[str, int] = {}
    tool_calls: int = 0

    def count(self, error: str) -> int:
        """The requests of one failure class: server failures from by_error, or stopped, or cancelled."""
        if error in NOT_SERVER_FAILURES:  # each counted in a field of its own
            return getattr(self, error)
        return self.by_error.get(error, 0)

    @property
    def ended(self) -> int:
        """Requests that ended with a server outcome: the good fraction's and error rate's denominator."""
        return self.ok + self.failed


class StreamSpeed(_Model):
    mean: Num = None  # tokens per second of one stream (1 / TPOT)
    p50: Num = None


class Throughput(_Model):
    sent_per_s: Num = None
    requests_per_s: Num = None
    output_tokens_per_s: Num = None
    total_tokens_per_s: Num = None
    # conversations (workload classes with `session`) begun per second: their successful first turns
    # completed inside the window, counted as requests_per_s counts requests; None without conversations
    sessions_per_s: Num = None


class Goodput(_Model):
    requests_per_s: Num = None
    good_fraction: Num = None  # succeeded and met every SLO, of the requests that ended


class Tokens(_Model):
    prompt: int
    output: int
    prompt_known: int
    source: dict[str, int]
    # of `output`: reasoning tokens and the answer (content and tool calls), of the successful
    # replies whose split is known (`split_known` of them)
    reasoning: int = 0
    answer: int = 0
    split_known: int = 0


class Embeddings(_Model):
    """/v1/embeddings and /v1/rerank: what applies instead of TTFT and tokens out (the latency is e2e_ms)."""

    inputs: int  # vectors (embeddings) or ranked documents (rerank) returned by the successful requests
    batch_size_mean: Num = None  # inputs per request
    inputs_per_s: Num = None  # of the requests completed inside the window
    input_tokens_per_s: Num = None  # prompt tokens per second (by arrival, as throughput counts them)


class Verdict(_Model):
    """One SLO objective judged on a run or a step."""

    objective: str  # as given: "ttft.p95<5s"
    metric: str  # "ttft.p95"
    threshold_ms: float
    value_ms: Num = None
    passed: bool


class Slo(_Model):
    passed: bool
    objectives: list[Verdict]


class ObjectiveEvidence(_Model):
    """One objective judged on a load level's declared set (metrics/verdict.py)."""

    objective: str  # as given: "ttft.p95<5s"
    metric: str  # "ttft.p95"
    threshold_ms: float
    value_ms: Num = None  # the statistic of the set
    lower_ms: Num = None  # confidence bounds of the statistic (None: too few values for one)
    upper_ms: Num = None
    samples: int  # values it rests on (ITL: pooled gaps)
    state: Literal["met", "missed", "undecided"]


class LevelVerdict(_Model):
    """A load level's one verdict: what the live search decided, the table and the report show."""

    state: Literal["met", "missed", "undecided"]
    requests: int  # successful requests of the set
    failed: int
    confidence: float  # of each one-sided bound
    objectives: list[ObjectiveEvidence]
    reason: str = ""


class Block(_Model):
    """The statistics of one scope: the run, a request class, a conversation turn or a load step."""

    requests: Requests
    ttft_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    e2e_ms: Distribution
    # time to first answer token (content or tool call) of the successful replies that had one
    ttfa_ms: Distribution = Distribution()
    stream_tokens_per_s: StreamSpeed
    throughput: Throughput
    goodput: Goodput
    tokens: Tokens
    # open loop only: lateness of the sends, and latency counted from the intended send time
    schedule_lag_ms: Distribution | None = None
    ttft_from_intended_ms: Distribution | None = None
    e2e_from_intended_ms: Distribution | None = None
    slo: Slo | None = None  # with --slo
    embeddings: Embeddings | None = None  # --endpoint embeddings or rerank

    def latency(self, metric: str) -> Distribution:
        """ttft | tpot | itl | e2e | ttfa -> its distribution."""
        return getattr(self, f"{metric}_ms")


class Span(_Model):
    start: float
    end: float


class Step(Block):
    """A load level's block, over its declared set: the requests sent in its window (its warm-up
    excluded) and, for a capacity search, ended by its cut (metrics/verdict.py)."""

    step: int  # index of the level's first step (an extended level holds several)
    users: int
    window: Span
    steps: int = 1  # steps the level was held for (a capacity search extends an undecided level)
    cut: float | None = None  # requests that ended after this (wall clock) are not in the set
    verdict: LevelVerdict | None = None  # with --slo
    # a step of a ramp that the run's end (-t, a stop) cut before half its window had passed
    # (metrics/summary.py by_step): requests and latencies of the part that ran, no per-second rate
    partial: bool = False


class Window(_Model):
    start: float
    end: float
    seconds: float


class Records(_Model):
    total: int
    outside_window: int
    # every record's failure class, inside the window or not, stopped and cancelled included
    by_error: dict[str, int] = {}


class Concurrency(_Model):
    mean_in_flight: Num = None


class Capacity(_Model):
    slo: str
    users: int | None = None  # the highest level met below the lowest missed; None: none met
    next_failing_users: int | None = None  # the lowest level missed
    samples: int | None = None  # successful requests the `users` verdict rests on
    next_failing_samples: int | None = None
    undecided: list[int] = []  # levels neither met nor missed (too few requests, or too close)
    confidence: Num = None
    plus_minus: Num = None
    total_tokens_per_s: Num = None
    output_tokens_per_s: Num = None
    requests_per_s: Num = None
    sentence: str


class LoadSetup(_Model):
    kind: str  # closed | steps | capacity | open | replay
    text: str  # the plan's one line: "step ramp 5,10 users, 60s each (10s warm-up)"
    users: int | None = None  # closed loop: -u (the web form's user count)
    parameters: dict[str, Any] = {}  # the load model's own fields (run.json plan.load)


class Setup(_Model):
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


class LevelEvidence(_Model):
    """The server's figures over one load level's window (metrics/diagnosis.py); None: not sent."""

    step: int
    users: int
    scrapes: int  # scrapes inside the level's window
    running: Num = None  # requests running, mean
    waiting: Num = None  # requests waiting in the server's queue, mean
    kv_cache_peak: Num = None  # KV-cache use, peak, 0..1
    preemptions: Num = None  # the preemption counter's increase
    prefix_cache_hit_rate: Num = None  # 0..1: prefix-cache hits over queries inside the window (or the server's gauge)
    gpu_utilisation: Num = None  # 0..1, mean


class KneeDiagnosis(_Model):
    """Why the knee is where it is (metrics/diagnosis.py): the limit, and what it rests on."""

    kind: Literal["memory-bound", "scheduler-bound", "compute-bound", "client inaccurate", "unknown"]
    users: int | None = None  # the level looked at (the knee)
    knee: str = ""  # why that level: "the lowest level that missed ttft.p95<5s", "the highest level (no --slo)"
    sentence: str
    evidence: list[str] = []  # each figure the diagnosis rests on: level, value and the server's metric name
    metrics: dict[str, str] = {}  # figure -> the server's metric it was read from (running, waiting, kv, ...)
    levels: list[LevelEvidence] = []
    client: str | None = None  # the client's self-health warning, when it flagged the run


class OpenLoop(_Model):
    target_rate: float
    sent_per_s: Num = None
    scheduled: int | None = None  # arrivals the schedule had due inside the window (all processes)
    sent: int | None = None  # of those, the ones sent (late or not)
    schedule_lag_p99_ms: Num = None
    behind_schedule: bool
    reasons: list[str]


class ClientBound(_Section):
    """plugin/health_board.py: was the load generator itself the bottleneck?"""

    bound: bool = False
    contended: bool = False
    advice: str = ""
    workers: list[dict[str, Any]] = []

    def warning(self) -> str:
        """One sentence when the load generator itself may have distorted the timings."""
        advice = self.advice.strip()
        if self.bound:
            return "The load generator was client bound (out of CPU): its timings include client delay. " + advice
        if self.contended:
            return "The load generator's machine was contended (other processes took the CPU): timings may include client delay. " + advice
        if (self.model_extra or {}).get("inaccurate"):
            return "The load generator was late often enough over the run for its TTFT/ITL tails to be off. " + advice
        return ""

    def inaccurate_warning(self) -> str:
        """The warning when the client's own timings are off (bound or inaccurate), else "": what the
        knee's diagnosis states (a contended machine alone does not move the knee)."""
        return self.warning() if self.bound or (self.model_extra or {}).get("inaccurate") else ""


class WorkerAccount(_Section):
    """plugin/shipping.py: one worker's records, as the master received them."""

    index: int
    records: int
    batches: int
    final_received: bool
    records_reported_by_worker: int | None = None
    missing_batches: list[int] = []
    lost_at: float | None = None
    in_flight_when_lost: int = 0
    lost_requests_min: int = 0
    failed_to_start: bool = False


class LostWork(_Model):
    """A master's workers lost mid-run: at least this many requests lost with them."""

    requests_min: int
    workers: dict[str, int]  # worker id -> requests lost with it, at least


class ServerScrapes(_Section):
    """plugin/server_metrics.py: the server-side scrapes of the run (--server-metrics)."""

    sources: list[str]
    interval_s: float
    file: str
    scrapes: int
    failed_scrapes: int
    counter_deltas: dict[str, int | float | None]
    client_counts: dict[str, Any] = {}
    by_source: dict[str, dict[str, Any]] = {}


class GpuFigures(_Model):
    """The GPUs over one window (a load level, or the run's measurement window): the telemetry
    readings inside it (metrics/gpu.py) and the load it carried, in the deployment's terms. A figure
    that needs what the run was not given (telemetry, --gpus, --gpu-hour-price) is None."""

    users: int | None = None  # the level's users; None for the run's window
    window: Span
    readings: int = 0  # telemetry readings inside the window, every GPU's
    utilization_pct_mean: Num = None  # over the GPUs and their readings
    utilization_pct_p95: Num = None  # of every GPU's readings together
    memory_used_mib_mean: Num = None  # per GPU
    memory_used_mib_peak: Num = None  # the fullest GPU's highest reading
    power_w_mean: Num = None  # the GPUs together
    sm_clock_mhz_mean: Num = None
    energy_j: Num = None  # the GPUs together over the window
    energy_source: Literal["counter", "power"] | None = None  # the exporter's energy counter, or power integrated
    requests_per_min: Num = None
    sessions_per_min: Num = None  # conversations begun (Throughput.sessions_per_s)
    output_tokens_per_s: Num = None
    total_tokens_per_s: Num = None
    requests_per_min_per_gpu: Num = None
    output_tokens_per_s_per_gpu: Num = None
    total_tokens_per_s_per_gpu: Num = None
    joules_per_output_token: Num = None
    joules_per_token: Num = None  # per total (prompt + output) token
    cost_per_million_output_tokens: Num = None  # in the currency of --gpu-hour-price
    cost_per_million_tokens: Num = None


class GpuDevice(_Model):
    id: str  # nvidia-smi's index, or the exporter's `gpu` label
    name: str = ""
    memory_total_mib: Num = None
    readings: int = 0
    utilization_pct_mean: Num = None  # over the run's measurement window
    power_w_mean: Num = None


class GpuSection(_Model):
    """plugin/gpu.py and metrics/gpu.py: the GPUs behind the deployment (--gpu-telemetry, --gpus,
    --gpu-hour-price): telemetry aligned to each load level, energy and cost per token, and the
    capacity per GPU. `at(users)` gives a level's figures (the diagnosis reads GPU utilisation
    there)."""

    source: str | None = None  # "nvidia-smi" or the exporter's URL (credentials left out); None: no telemetry
    interval_s: Num = None
    file: str | None = None  # the readings, in the results folder
    readings: int = 0
    failed_readings: int = 0
    last_error: str | None = None
    devices: list[GpuDevice] = []
    gpus: int | None = None  # the deployment's GPU count: --gpus, else the GPUs the telemetry saw
    gpus_from: Literal["--gpus", "telemetry"] | None = None
    gpu_hour_price: Num = None  # --gpu-hour-price: currency per GPU-hour
    overall: GpuFigures
    by_step: list[GpuFigures] = []  # one per load level, in summary.json by_step's order
    capacity: GpuFigures | None = None  # the level of capacity.users
    sentence: str = ""  # the capacity in the deployment's terms

    def at(self, users: int) -> GpuFigures | None:
        """The figures of the level with this many users (the last one, when a ramp repeats it)."""
        return next((g for g in reversed(self.by_step) if g.users == users), None)


class Summary(_Model):
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
    by_step: list[Step] | None = None  # step or capacity-search runs
    concurrency: Concurrency
    slo: Slo | None = None  # the overall verdict, with --slo
    capacity: Capacity | None = None  # steps and --slo
    open_loop: OpenLoop | None = None  # --request-rate
    # sections added by plugins at the end of a run
    client_bound: ClientBound | None = None  # plugin/health_board.py
    workers: dict[str, WorkerAccount] | None = None  # plugin/shipping.py: per-worker record accounting
    server_metrics: ServerScrapes | None = None  # plugin/server_metrics.py
    diagnosis: KneeDiagnosis | None = None  # runs with load levels: why the knee is there (metrics/diagnosis.py)
    lost_work: LostWork | None = None  # a master's workers lost mid-run: the requests lost, at least
    gpu: GpuSection | None = None  # plugin/gpu.py: --gpu-telemetry, --gpus, --gpu-hour-price

    def blocks(self, by: str = "by_class") -> list[tuple[str, Block]]:
        """(name, block) of every class (or turn) and then ("overall", the overall block)."""
        return [*(getattr(self, by) or {}).items(), ("overall", self.overall)]

    def plugin_sections(self) -> dict[str, Any]:
        """Sections a plugin added that the model does not name."""
        return dict(self.model_extra or {})

    def with_sections(self, **sections) -> "Summary":
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


__all__ = [
    "SCHEMA_VERSION", "Summary", "Block", "Step", "Distribution", "Requests", "Throughput", "Goodput", "Tokens",
    "Verdict", "Slo", "LevelVerdict", "ObjectiveEvidence", "Embeddings", "Window", "Records", "Capacity", "Setup",
    "LoadSetup", "OpenLoop", "LevelEvidence", "KneeDiagnosis", "ClientBound", "WorkerAccount", "LostWork", "ServerScrapes", "GpuFigures", "GpuDevice",
    "GpuSection", "as_summary",
    "load_summary",
    "parse_summary",
]  # fmt: skip
