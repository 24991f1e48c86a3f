"""summary.json's sections on the server: its scraped metrics, the knee's diagnosis with each
level's evidence (metrics/diagnosis.py) and the GPU telemetry's figures (metrics/gpu.py)."""

from __future__ import annotations

from typing import Any, Literal

from metrics.schema.base import Model, Num, Section
from metrics.schema.figures import Span


class ServerScrapes(Section):
    """plugin/server_metrics.py: the server-side scrapes of the run (--server-metrics)."""

    sources: list[str]
    interval_s: float
    file: str
    scrapes: int
    failed_scrapes: int
    counter_deltas: dict[str, int | float | None]
    client_counts: dict[str, Any] = {}
    by_source: dict[str, dict[str, Any]] = {}


def level_load(level) -> float:
    """What tells a load level apart (a LevelEvidence, or a by_step level: metrics.schema.figures.Step):
    the rate of an open loop's, else its users."""
    return level.rate if level.rate is not None else float(level.users)


class LevelEvidence(Model):
    """The server's figures over one load level's window (metrics/diagnosis.py); None: not sent.
    The window starts after the level's warm-up, and not before the server has drained what the
    level before it left (running + waiting back to this level's users): `window_start`."""

    step: int
    users: int
    scrapes: int  # scrapes inside the level's window
    rate: Num = None  # a level of an open loop (a search in requests/s): its rate; `users` is its in-flight cap
    running: Num = None  # requests running, mean
    waiting: Num = None  # requests waiting in the server's queue, mean
    kv_cache_peak: Num = None  # KV-cache use, peak, 0..1
    preemptions: Num = None  # the preemption counter's increase
    prefix_cache_hit_rate: Num = None  # 0..1: prefix-cache hits over queries inside the window (or the server's gauge)
    gpu_utilisation: Num = None  # 0..1, mean
    # the client's figures over the same window, which tell a queue for slots from the wait for the
    # step in progress (metrics/diagnosis.py): requests completed per second and ITL p50 (one engine step)
    request_rate: Num = None
    step_ms: Num = None
    running_peak: Num = None  # requests running, the highest scrape
    waiting_peak: Num = None  # requests waiting, the highest scrape
    # the server's own histograms over the window (increase of their sum over that of their count):
    # mean time a request waited to be scheduled, mean time from scheduled to first token, mean
    # tokens one engine step carried (prompt chunks and decodes: its use of the per-step budget)
    queue_ms: Num = None
    prefill_ms: Num = None
    step_tokens: Num = None
    # the client's figures of the level: TTFT p50 and mean prompt tokens of its successful requests
    ttft_ms: Num = None
    prompt_tokens: Num = None
    window_start: Num = None  # wall clock: where the server's window began (after the drain)

    @property
    def load(self) -> float:
        return level_load(self)

    @property
    def at(self) -> str:
        """The level in words: "24 users", or "8.5 requests/s"."""
        return f"{self.rate:g} requests/s" if self.rate is not None else f"{self.users} user{'s' * (self.users != 1)}"


class KneeDiagnosis(Model):
    """Why the knee is where it is (metrics/diagnosis.py): the limit, and what it rests on."""

    # a limit (metrics/limits.py); "undecided": the evidence does not separate the `candidates`; "no
    # limit reached": nothing is near one (`nearest` with its `headroom`); "client-bound": the server
    # is near no limit and the client flagged its own timings; "client inaccurate": no server metrics,
    # and the client flagged itself
    kind: Literal[
        "memory-bound",
        "scheduler-bound",
        "prefill-bound",
        "compute-bound",
        "front-end-bound",
        "client-bound",
        "undecided",
        "no limit reached",
        "client inaccurate",
        "unknown",
    ]
    users: int | None = None  # the level looked at (the knee)
    rate: Num = None  # ... a search in requests/s: its rate
    knee: str = ""  # why that level: "the lowest level that missed ttft.p95<5s", "the highest level (no --slo)"
    # what every output heads the sentence with: a knee only where a level missed the SLO
    heading: str = "Why the knee is there"
    sentence: str
    evidence: list[str] = []  # each figure the diagnosis rests on: level, value and the server's metric name
    metrics: dict[str, str] = {}  # figure -> the server's metric it was read from (running, waiting, kv, ...)
    levels: list[LevelEvidence] = []
    client: str | None = None  # the client's self-health warning, when it flagged the run
    candidates: list[str] = []  # undecided: the limits the evidence does not separate
    nearest: str | None = None  # no limit reached: the limit nearest, where a headroom can be told
    headroom: Num = None  # ... its headroom, 0..1 (KV cache free at the peak, slots free, step budget unused)
    # the server's own configuration, where it states it (vLLM's vllm:cache_config_info labels, the
    # simulator's scheduler limits): max_num_seqs, max_num_batched_tokens, num_gpu_blocks, block_size, ...
    config: dict[str, float] = {}


class GpuFigures(Model):
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


class GpuDevice(Model):
    id: str  # nvidia-smi's index, or the exporter's `gpu` label
    name: str = ""
    memory_total_mib: Num = None
    readings: int = 0
    utilization_pct_mean: Num = None  # over the run's measurement window
    power_w_mean: Num = None


class GpuSection(Model):
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
