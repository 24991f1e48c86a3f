"""The suite's command-line options: Locust options with an environment variable each.

Every option is also a `locust.conf` key (Locust reads the same names) and, where it makes sense,
a field of the web UI's start form. `Settings.from_options` turns the parsed values into checked,
typed settings; a mistake is one line naming the option and the fix (`InputError`), raised
before any load starts.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from core.durations import Timeouts, parse_duration
from core.errors import InputError
from metrics.slo import parse_slo
from shapes.replay import TraceError, load_trace
from shapes.steps import parse_steps


SECRET_OPTIONS = ("api_key",)  # never written to run.json, logs or reports


# Failure classes a retry may follow: those known from the HTTP exchange alone, before the body is
# parsed (users/llm.py decides right after the stream ends, without parsing it).
RETRYABLE = ("http_429", "http_4xx", "http_5xx", "connect_error", "timeout", "stream_truncated")


# (flag, argparse keywords); the env var is derived by env_var(). Kept as data so the README table and tests can list them.
OPTIONS: list[tuple[str, dict]] = [
    ("--endpoint", dict(default="chat", choices=["chat", "completions"], help="chat = /v1/chat/completions, completions = /v1/completions")),
    ("--model", dict(default="", help="Model id to request; empty = the first id from /v1/models")),
    # not in the web UI: Locust renders a form field's value into the page (README "Security")
    ("--api-key", dict(default="", is_secret=True, include_in_web_ui=False, help="Bearer token sent as Authorization; never written anywhere; not a web UI field (README: Security)")),
    ("--workload", dict(default="", help="Workload spec YAML; empty = workloads/default.yaml (the reference mix)")),
    ("--seed", dict(default="", help="Seed for the request sequence (each worker uses seed + worker index); empty = random, recorded in run.json")),
    ("--tokenizer", dict(default="", help="Tokenizer path or hub name for counting output tokens when the server sends no usage")),
    ("--max-tokens-override", dict(default="", help="Fixed max_tokens for every request instead of the workload's distribution")),
    ("--ignore-eos", dict(action="store_true", default=False, help="Send ignore_eos: true (vLLM, llama.cpp; some servers reject it)")),
    ("--min-tokens", dict(default="", help="Send min_tokens: N (vLLM extension)")),
    ("--extra-body", dict(default="", help="JSON object merged into every request body, e.g. '{\"top_k\": 1}'")),
    ("--no-stream", dict(action="store_true", default=False, help="Send stream: false (TTFT then equals E2E)")),
    ("--warmup", dict(default="0s", help="Exclude requests sent in the first DURATION of the run from the statistics")),
    ("--results-dir", dict(default="results", help="Folder that receives results/<run-id>/")),
    ("--run-id", dict(default="", help="Name of the results folder; empty = <UTC time>-<random>")),
    ("--sim-profile", dict(default="v100-7b-tp8", help="Profile of the built-in simulator used when no --host is given")),
    ("--sim-timestamps", dict(action="store_true", default=False, include_in_web_ui=False, help="Ask the simulator to stamp its send time into every chunk (client-accuracy benchmarks)")),
    ("--timeout-connect", dict(default="10s", help="Connect timeout")),
    ("--timeout-first-token", dict(default="300s", help="Longest wait for the response and its first bytes")),
    ("--timeout-idle", dict(default="120s", help="Longest gap between two reads of a flowing stream")),
    ("--timeout-total", dict(default="900s", help="Longest whole request")),
    # Load models (README "Load models")
    ("--steps", dict(default="", help="Step ramp: user counts '5,10,20,50' or FROM:TO:ADD '1:160:10'")),
    ("--step-time", dict(default="60s", help="How long each step (or capacity-search level) is held")),
    ("--step-warmup", dict(default="10s", help="Start of each step excluded from its statistics")),
    ("--slo", dict(default="", help="Objectives, e.g. 'ttft.p95<5s,tpot.p95<80ms' (ttft|tpot|itl|e2e . mean|pNN); a miss fails a headless run")),
    ("--find-capacity", dict(action="store_true", default=False, help="Search the highest user count (or rate) meeting --slo, within --run-time")),
    ("--request-rate", dict(default="", help="Open loop: total requests per second across all workers; empty = closed loop")),
    ("--arrival", dict(default="poisson", choices=["poisson", "gamma", "constant"], help="Open-loop arrival process")),
    ("--burstiness", dict(default="1.0", help="Gamma shape for --arrival gamma (1 = Poisson, < 1 burstier)")),
    ("--max-concurrency", dict(default="", help="Open loop: most requests in flight (the user count); default 512")),
    # Observability (plugin/prometheus.py, plugin/server_metrics.py)
    ("--prometheus-port", dict(default="0", include_in_web_ui=False, help="Serve client LLM metrics for Prometheus at http://HOST:PORT/metrics from the master (or local process); 0 = off")),
    ("--prometheus-host", dict(default="127.0.0.1", include_in_web_ui=False, help="Interface for --prometheus-port; 0.0.0.0 to expose it beyond this machine")),
    ("--prometheus-linger", dict(default="0s", include_in_web_ui=False, help="Keep serving /metrics this long before the process exits, so Prometheus scrapes the final counts")),
    ("--server-metrics", dict(default="", help="Prometheus endpoints of the server side to scrape during the run, comma-separated (vLLM /metrics, DCGM, node exporter); kept in server_metrics.parquet")),
    ("--server-metrics-interval", dict(default="5s", help="Scrape interval for --server-metrics")),
    # Failures, retries and cancellation (README "Failures, retries and cancellation")
    ("--retry", dict(default="0", help="Retry a failed request up to N times; every attempt is its own record (request id suffix -r1, -r2, ...); 0 = off")),
    ("--retry-on", dict(default="http_429,http_5xx,connect_error", help="Failure classes that are retried, comma-separated (" + ", ".join(RETRYABLE) + ")")),
    ("--retry-max-wait", dict(default="30s", help="Longest wait before a retry: caps a 429's Retry-After and the backoff (0.5 s, doubling)")),
    ("--cancel-rate", dict(default="0", help="Share of requests (0-1) the client aborts on purpose after --cancel-after, to test the server's abort handling; recorded as cancelled")),
    ("--cancel-after", dict(default="1s", help="How long a request picked by --cancel-rate runs before the client aborts it")),
    # Client self-health (plugin/health.py): is each load-generating process still accurate?
    ("--health-cpu-limit", dict(default="70", include_in_web_ui=False, help="Self-health: a worker (or local) process above this CPU, % of one core, in 80 % of the seconds of --health-sustain marks the run client_bound")),
    ("--health-loop-lag-limit", dict(default="10ms", include_in_web_ui=False, help="Self-health: event-loop lag p99 (a 0.1 s sleep waking late) above this, sustained while the process is busy, marks the run client_bound")),
    ("--health-token-lag-limit", dict(default="5ms", include_in_web_ui=False, help="Self-health, with --sim-timestamps: p99 of chunk arrival minus the simulator's send time above this, sustained while busy, marks the run client_bound")),
    ("--health-sustain", dict(default="5s", include_in_web_ui=False, help="Self-health: how long a limit must be passed (in 80 % of its one-second samples) to count")),
    ("--health-target-cpu", dict(default="60", include_in_web_ui=False, help="Self-health advice: CPU per worker process, % of one core, to plan for (workers needed = ceil(workers x peak CPU / this))")),
    # Replayed production traffic (shapes/replay.py; traces from `python -m workloads import`)
    ("--replay", dict(default="", help="Replay a trace (JSONL from `python -m workloads import`): every request at its logged time, open loop, split across workers; the run ends with the trace")),
    ("--time-scale", dict(default="", help="With --replay: multiply the trace's times by this (0.5 = twice as fast); default 1")),
]


def env_var(flag: str) -> str:
    return "LOCUST_" + flag.lstrip("-").upper().replace("-", "_")


def add_arguments(parser) -> None:
    # Locust's own parser (not an argument group): only it knows include_in_web_ui / is_secret.
    for flag, kwargs in OPTIONS:
        parser.add_argument(flag, env_var=env_var(flag), **kwargs)


def _int(option: str, text, minimum: int = 0) -> int | None:
    if text in ("", None):
        return None
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise InputError(f"--{option}: '{text}' is not an integer; give a whole number") from None
    if value < minimum:
        raise InputError(f"--{option}: {value} is below the minimum {minimum}")
    return value


def check_host(host: str) -> str:
    parts = urlsplit(host)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"--host: '{host}' needs a scheme and a host name, e.g. http://127.0.0.1:8000")
    try:
        parts.port
    except ValueError:
        raise InputError(f"--host: '{host}' has an invalid port; give 1-65535, e.g. http://127.0.0.1:8000") from None
    return host.rstrip("/")


@dataclass(slots=True)
class Settings:
    endpoint: str
    model: str
    api_key: str
    workload: str | None
    seed: int | None
    tokenizer: str | None
    max_tokens_override: int | None
    ignore_eos: bool
    min_tokens: int | None
    extra_body: dict
    stream: bool
    warmup_s: float
    results_dir: str
    run_id: str
    sim_profile: str
    sim_timestamps: bool
    timeouts: Timeouts = field(default_factory=Timeouts)
    steps: list[int] = field(default_factory=list)
    step_time_s: float = 60.0
    step_warmup_s: float = 10.0
    slo: list = field(default_factory=list)  # metrics.slo.Objective
    find_capacity: bool = False
    request_rate: float | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int = 512
    replay: str | None = None  # --replay trace file; request_rate is then the trace's mean rate
    time_scale: float = 1.0
    retry: int = 0  # retries per request (0 = off)
    retry_on: tuple[str, ...] = ("http_429", "http_5xx", "connect_error")
    retry_max_wait_s: float = 30.0
    cancel_rate: float = 0.0
    cancel_after_s: float = 1.0

    @classmethod
    def from_options(cls, o) -> "Settings":
        extra = {}
        if o.extra_body:
            try:
                extra = json.loads(o.extra_body)
            except json.JSONDecodeError as e:
                raise InputError(f"--extra-body: not valid JSON ({e.msg} at column {e.colno}); give a JSON object like '{{\"top_k\": 1}}'") from None
            if not isinstance(extra, dict):
                raise InputError("--extra-body: must be a JSON object like '{\"top_k\": 1}'")
        timeouts = Timeouts(
            connect=parse_duration("timeout-connect", o.timeout_connect),
            first_token=parse_duration("timeout-first-token", o.timeout_first_token),
            idle=parse_duration("timeout-idle", o.timeout_idle),
            total=parse_duration("timeout-total", o.timeout_total),
        )
        for name in ("connect", "first_token", "idle", "total"):
            if getattr(timeouts, name) <= 0:
                raise InputError(f"--timeout-{name.replace('_', '-')}: must be above 0")
        if o.tokenizer and _looks_like_path(o.tokenizer) and not os.path.exists(os.path.expanduser(o.tokenizer)):
            raise InputError(f"--tokenizer: '{o.tokenizer}' does not exist; give a local tokenizer folder (or a hub name like org/name)")
        run_id = o.run_id or ""
        if run_id and not re.fullmatch(r"[A-Za-z0-9._-]+", run_id):
            raise InputError(f"--run-id: '{run_id}' may only hold letters, digits, '.', '_' and '-'")
        return cls(
            endpoint=o.endpoint,
            model=o.model or "",
            api_key=o.api_key or "",
            workload=o.workload or None,
            seed=_int("seed", o.seed),
            tokenizer=o.tokenizer or None,
            max_tokens_override=_int("max-tokens-override", o.max_tokens_override, 1),
            ignore_eos=bool(o.ignore_eos),
            min_tokens=_int("min-tokens", o.min_tokens, 0),
            extra_body=extra,
            stream=not o.no_stream,
            warmup_s=parse_duration("warmup", o.warmup),
            results_dir=o.results_dir or "results",
            run_id=run_id,
            sim_profile=o.sim_profile or "v100-7b-tp8",
            sim_timestamps=bool(o.sim_timestamps),
            timeouts=timeouts,
            **_load_model(o),
            **_failures(o),
        )


def public_options(parsed_options) -> dict:
    """Every option value that may be written down: secrets removed, not masked."""
    out = {}
    for key, value in sorted(vars(parsed_options).items()):
        if key in SECRET_OPTIONS or key.startswith("_"):
            continue
        if isinstance(value, (str, int, float, bool, type(None))) or (
            isinstance(value, list) and all(isinstance(v, (str, int, float, bool)) for v in value)
        ):
            out[key] = value
    if getattr(parsed_options, "api_key", ""):
        out["api_key_set"] = True
    return out


def _float(option: str, text, minimum: float = 0.0, exclusive: bool = True) -> float | None:
    if text in ("", None):
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise InputError(f"--{option}: '{text}' is not a number") from None
    if value < minimum or (exclusive and value == minimum) or math.isnan(value) or math.isinf(value):
        raise InputError(f"--{option}: {text} must be above {minimum:g}")
    return value


def _load_model(o) -> dict:
    """Step, open-loop and SLO options, checked together (they constrain each other)."""
    steps = parse_steps(o.steps)
    step_time = parse_duration("step-time", o.step_time)
    step_warmup = parse_duration("step-warmup", o.step_warmup)
    if step_time <= 0:
        raise InputError("--step-time: must be above 0, e.g. 60s")
    if (steps or o.find_capacity) and step_warmup >= step_time:
        raise InputError(f"--step-warmup: {step_warmup:g}s must be shorter than --step-time {step_time:g}s")
    slo = parse_slo(o.slo)
    if o.find_capacity and not slo:
        raise InputError("--find-capacity: needs --slo, e.g. --slo 'ttft.p95<5s'")
    rate = _float("request-rate", o.request_rate)
    if rate is not None and steps:
        raise InputError("--request-rate: cannot be combined with --steps (closed-loop user steps); pick one")
    replay, time_scale = _replay(o, rate, steps)
    if replay:
        rate = replay[1]  # open loop at the trace's mean rate: window, user count and summary as for --request-rate
    max_conc = _int("max-concurrency", o.max_concurrency, 1)
    if max_conc is not None and rate is None:
        raise InputError("--max-concurrency: only applies with --request-rate or --replay (open loop); in a closed loop use -u")
    return dict(
        steps=steps, step_time_s=step_time, step_warmup_s=step_warmup, slo=slo,
        find_capacity=bool(o.find_capacity), request_rate=rate, arrival=o.arrival,
        burstiness=_float("burstiness", o.burstiness) or 1.0, max_concurrency=max_conc or 512,
        replay=replay[0] if replay else None, time_scale=time_scale,
    )  # fmt: skip


def _replay(o, rate, steps) -> tuple[tuple[str, float] | None, float]:
    """--replay and --time-scale: ((trace path, mean rate) or None, time scale)."""
    path = getattr(o, "replay", "") or ""
    scale_text = getattr(o, "time_scale", "") or ""
    scale = _float("time-scale", scale_text) if scale_text else 1.0
    if not path:
        if scale_text:
            raise InputError("--time-scale: only applies with --replay")
        return None, 1.0
    if rate is not None:
        raise InputError("--replay: the trace sets the send times; drop --request-rate")
    if steps or getattr(o, "find_capacity", False):
        raise InputError("--replay: cannot be combined with --steps or --find-capacity; the trace is the load")
    try:
        trace = load_trace(path)
    except TraceError as e:
        raise InputError(f"--replay: {e}") from None
    return (path, trace.rate(scale)), scale


def _looks_like_path(text: str) -> bool:
    return os.path.isabs(os.path.expanduser(text)) or text.startswith((".", "~"))


def _failures(o) -> dict:
    """Retry and cancellation options (README "Failures, retries and cancellation")."""
    retry = _int("retry", getattr(o, "retry", "0"), 0) or 0
    retry_on = tuple(c.strip() for c in str(getattr(o, "retry_on", "") or "").split(",") if c.strip())
    for name in retry_on:
        if name not in RETRYABLE:
            raise InputError(f"--retry-on: '{name}' is not a retryable failure class; choose from {', '.join(RETRYABLE)}")
    if retry and not retry_on:
        raise InputError("--retry-on: empty while --retry is on; name the failure classes to retry, e.g. http_429,http_5xx")
    max_wait = parse_duration("retry-max-wait", getattr(o, "retry_max_wait", "30s"))
    text = getattr(o, "cancel_rate", "0")
    rate = 0.0 if text in ("", None) else _float("cancel-rate", text, 0.0, exclusive=False)
    if rate > 1:
        raise InputError(f"--cancel-rate: {text} is a share of requests; give a number from 0 to 1, e.g. 0.1")
    cancel_after = parse_duration("cancel-after", getattr(o, "cancel_after", "1s"))
    if rate and cancel_after <= 0:
        raise InputError("--cancel-after: must be above 0 when --cancel-rate is set, e.g. 2s")
    return dict(retry=retry, retry_on=retry_on, retry_max_wait_s=max_wait, cancel_rate=rate, cancel_after_s=cancel_after)


def markdown_table() -> str:
    """The README's options table (tests/test_readme.py keeps the README equal to it)."""
    lines = ["| option | environment variable | default | meaning |", "| --- | --- | --- | --- |"]
    for flag, kw in OPTIONS:
        default = kw.get("default")
        shown = "off" if kw.get("action") == "store_true" else (f"`{default}`" if default not in ("", None) else "")
        text = kw["help"].replace("|", "\\|")
        lines.append(f"| `{flag}` | `{env_var(flag)}` | {shown} | {text} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
