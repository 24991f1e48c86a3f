"""The suite's options, each declared once: flag, environment variable, default, help, group, web form.

`Options` is the declaration: a field per option (its name is Locust's `dest`, the flag is
`--name-with-dashes`, the environment variable `LOCUST_NAME`), with the default as a person types
it, the help, the group it is shown in, whether the web form shows it, and its type (`core.fields`:
durations, sizes, shares, ports, counts), which parses and checks it. Generated from it:

  Locust's arguments    `add_arguments` (also `locust.conf` keys; the form's fields are these)
  the web form's order  `webui/form.py` groups and orders the form's fields by `GROUPS`
  the help              `locust -f locustfile.py --help` (plugin/locust_help.py: Locust prints help
                        before it imports any locustfile) and `python -m plugin.options` print it
                        grouped, with defaults and variables; `docs/options.md` is
                        `python -m plugin.options --markdown`

`Options.parse(namespace)` parses Locust's values once, before any load; `plugin.plan.RunPlan`
is built from the result. A mistake is one line naming the option and the fix (`InputError`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Annotated, Any, Literal, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from core.errors import InputError
from core.fields import Count, Duration, Names, Percent, Port, PositiveCount, PositiveDuration, Rate, Share, Size, Text
from core.tls import read_ca
from core.validation import FieldError, build
from metrics.slo import Objective, parse_slo
from shapes.search import NAMES as POLICY_NAMES
from shapes.steps import parse_steps
from targets import NAMES as BALANCE_NAMES
from workloads.endpoints import EndpointName

# Failure classes a retry may follow: those known from the HTTP exchange alone, before the body is
# parsed (the user decides right after the stream ends, without parsing it).
RETRYABLE = ("http_429", "http_4xx", "http_5xx", "connect_error", "timeout", "stream_truncated")

# The groups, in the order the web form and the help show them.
TARGET = "Target and model"
WORKLOAD = "Workload"
LOAD = "Load model: steps, capacity search, open loop, replay"
SLO = "SLO"
EXPERT = "Expert settings"
OBSERVE = "Outputs, observability and self-health (not in the web form)"
GROUP_ORDER = (TARGET, WORKLOAD, LOAD, SLO, EXPERT, OBSERVE)
_EMPTY_IS_EMPTY = {"retry_on"}  # an emptied field that means "none", not the default


def option(default: Any, help: str, group: str, *, web: bool = True, secret: bool = False) -> Any:
    """One option's declaration: `default` as a person types it (a flag: False), its help, its group,
    whether the web form shows it (Locust renders a field's value into the page: a secret never)."""
    return Field(
        default, description=help, json_schema_extra={"group": group, "web": web and not secret, "secret": secret}
    )


def _json_object(value) -> str:
    """--extra-body: a JSON object, kept as its text (immutable inside the frozen plan)."""
    if isinstance(value, dict):
        return json.dumps(value)
    if value is None or not str(value).strip():
        return "{}"
    try:
        extra = json.loads(value)
    except json.JSONDecodeError as e:
        raise FieldError(
            f"not valid JSON ({e.msg} at column {e.colno}); give a JSON object like '{{\"top_k\": 1}}'"
        ) from None
    if not isinstance(extra, dict):
        raise FieldError("must be a JSON object like '{\"top_k\": 1}'")
    return json.dumps(extra)


def _steps(value) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (list, tuple)) else tuple(parse_steps(value or ""))


def _slo(value) -> tuple[Objective, ...]:
    if isinstance(value, (list, tuple)):
        return tuple(o if isinstance(o, Objective) else parse_slo(o)[0] for o in value)
    return tuple(parse_slo(value or ""))


def _input_tokens(value) -> tuple[int, int] | None:
    """--input-tokens: N or MIN:MAX, whole numbers >= 1 -> (MIN, MAX); empty -> None."""
    if isinstance(value, (list, tuple)):
        return (int(value[0]), int(value[1])) if value else None
    text = str(value or "").strip()
    if not text:
        return None
    try:
        parts = [int(x) for x in text.split(":")]
    except ValueError:
        raise FieldError(f"'{text}' is not a token count", "give N or MIN:MAX, e.g. 512 or 256:1024") from None
    if len(parts) > 2 or any(x < 1 for x in parts) or parts[0] > parts[-1]:
        raise FieldError(
            f"'{text}' is not a token count or range", "give N or MIN:MAX with 1 <= MIN <= MAX, e.g. 512 or 256:1024"
        )
    return parts[0], parts[-1]


def _rate_steps(value) -> tuple[float, ...]:
    """--rate-steps: '1,2,4,8' requests/s, each above 0 and above the one before."""
    if isinstance(value, (list, tuple)):
        return tuple(float(x) for x in value)
    text = str(value or "").strip()
    if not text:
        return ()
    try:
        rates = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise FieldError(f"'{text}' is not a list of rates", "give requests/s, comma-separated, e.g. 1,2,4,8") from None
    if any(not r > 0 or r != r or r == float("inf") for r in rates):
        raise FieldError(f"'{text}': every rate must be a number above 0", "give e.g. 0.5,1,2,4")
    if any(b <= a for a, b in zip(rates, rates[1:])):
        raise FieldError(f"'{text}': the rates must rise", "give them in increasing order, e.g. 1,2,4,8")
    return rates


JsonObject = Annotated[str, BeforeValidator(_json_object)]
Steps = Annotated[tuple[int, ...], BeforeValidator(_steps)]
CapacityPolicy = Literal[POLICY_NAMES]  # type: ignore[valid-type]  (built from shapes/search's registry)
Objectives = Annotated[tuple[Objective, ...], BeforeValidator(_slo)]
InputTokens = Annotated[tuple[int, int] | None, BeforeValidator(_input_tokens)]
RateSteps = Annotated[tuple[float, ...], BeforeValidator(_rate_steps)]
Balance = Literal[BALANCE_NAMES]  # type: ignore[valid-type]  (built from targets/'s registry)


class Options(BaseModel):
    """Every suite option, in the order of its group's place in the form (docs/options.md)."""

    model_config = ConfigDict(frozen=True, extra="ignore", validate_default=True, arbitrary_types_allowed=True)

    # -- target and model
    model: Text = option("", "Model id to request; empty = the first id from /v1/models", TARGET)
    sim_profile: Text = option("v100-7b-tp8", "Profile of the built-in simulator used when no --host is given", TARGET)
    endpoint: EndpointName = option(
        "chat",
        "chat = /v1/chat/completions, completions = /v1/completions, responses = /v1/responses (streamed typed "
        "events), embeddings = /v1/embeddings, rerank = /v1/rerank (these two: latency, inputs or documents per "
        "request and input tokens/s, no TTFT)",
        TARGET,
    )
    api_key: Text = option(
        "",
        "Bearer token sent as Authorization; never written anywhere; not a web UI field (docs/security.md)",
        TARGET,
        secret=True,
    )
    # -- workload
    workload: Text = option("", "Workload spec YAML; empty = workloads/default.yaml (the reference mix)", WORKLOAD)
    max_tokens_override: PositiveCount = option(
        "", "Fixed max_tokens for every request instead of the workload's distribution", WORKLOAD
    )
    min_tokens: Count = option("", "Send min_tokens: N (vLLM extension)", WORKLOAD)
    ignore_eos: bool = option(False, "Send ignore_eos: true (vLLM, llama.cpp; some servers reject it)", WORKLOAD)
    seed: Count = option(
        "",
        "Seed for the request sequence (each worker uses seed + worker index); empty = random, recorded in run.json",
        WORKLOAD,
    )
    no_stream: bool = option(False, "Send stream: false (TTFT then equals E2E)", WORKLOAD)
    extra_body: JsonObject = option("", "JSON object merged into every request body, e.g. '{\"top_k\": 1}'", WORKLOAD)
    tokenizer: Text = option(
        "", "Tokenizer path or hub name for counting output tokens when the server sends no usage", WORKLOAD
    )
    input_tokens: InputTokens = option(
        "",
        "Prompt length in tokens instead of the workload's characters: N, or MIN:MAX drawn uniformly; "
        "each prompt is one user message of that many tokens by the client tokenizer (--tokenizer; "
        "without one, the estimate of 4 characters a token that the built-in simulator counts). "
        "vllm bench serve --random-input-len (docs/vllm-bench.md)",
        WORKLOAD,
    )
    input_tokens_range: Share = option(
        "0",
        "With --input-tokens N: each prompt's length drawn uniformly in [N x (1 - R), N x (1 + R)] "
        "(vllm bench serve --random-range-ratio)",
        WORKLOAD,
    )
    # -- load models (docs/load-models.md)
    steps: Steps = option(
        "",
        "Step ramp: user counts '5,10,20,50' or FROM:TO:ADD '1:160:10'; steps and a capacity search set "
        "the users themselves (Number of users, -u, is not used)",
        LOAD,
    )
    step_time: PositiveDuration = option("60s", "How long each step (or capacity-search level) is held", LOAD)
    step_warmup: Duration = option("10s", "Start of each step excluded from its statistics", LOAD)
    find_capacity: bool = option(
        False,
        "Search the highest user count meeting --slo, within --run-time (a closed loop: not with "
        "--request-rate; --capacity-unit rate searches requests/s); the search sets the users (Number of users, "
        "-u, is not used)",
        LOAD,
    )
    capacity_policy: CapacityPolicy = option(
        "adaptive",
        "How --find-capacity picks its levels: adaptive (probe up x2, x4 past a level far under the threshold, or walk "
        "--steps to the first miss, then place levels where the curve through them crosses the threshold until its "
        "interval is within ±--capacity-precision, each level ended once decided), walk (--steps, each level held "
        "--step-time, then bisect to 10 %), doubling (from 1 user, each held --step-time, then bisect to 10 %)",
        LOAD,
    )
    capacity_precision: float = option(
        "0.05",
        "--find-capacity adaptive: stop once the answer's interval is within ± this share of it, e.g. 0.05 or 5%",
        LOAD,
    )
    max_users: PositiveCount = option(
        "", "--find-capacity: the highest user count the search may try; empty = as high as -t allows", LOAD
    )
    capacity_unit: Literal["users", "rate"] = option(
        "users",
        "What --find-capacity searches: users (a closed loop: the most concurrent users meeting --slo) or rate "
        "(an open loop: the most requests/s meeting --slo, a level that cannot keep up missed; one load process)",
        LOAD,
    )
    start_rate: Rate = option(
        "",
        "--find-capacity --capacity-unit rate: the first level, requests/s; default 1 (--rate-steps: its first)",
        LOAD,
    )
    max_rate: Rate = option(
        "",
        "--find-capacity --capacity-unit rate: the highest request rate the search may try, requests/s; "
        "empty = as high as -t allows",
        LOAD,
    )
    request_rate: Rate = option(
        "", "Open loop: total requests per second across all workers; empty = closed loop", LOAD
    )
    arrival: Literal["poisson", "gamma", "constant"] = option("poisson", "Open-loop arrival process", LOAD)
    burstiness: Rate = option("1.0", "Gamma shape for --arrival gamma (1 = Poisson, < 1 burstier)", LOAD)
    replay: Text = option(
        "",
        "Replay a trace (JSONL from `python -m workloads import`): every request at its logged time, open loop, "
        "split across workers; the run ends with the trace",
        LOAD,
    )
    time_scale: Rate = option(
        "", "With --replay: multiply the trace's times by this (0.5 = twice as fast); default 1", LOAD
    )
    num_requests: PositiveCount = option(
        "",
        "End the run once N requests are sent, counted across all workers, then the drain as usual "
        "(vllm bench serve --num-prompts); empty = until -t or STOP",
        LOAD,
    )
    rate_steps: RateSteps = option(
        "",
        "Open loop in steps: request rates '1,2,4,8' (requests/s across all workers), each held --step-time, "
        "its first --step-warmup excluded from the step's statistics",
        LOAD,
    )
    max_concurrency: PositiveCount = option(
        "",
        "Open loop, headless: most requests in flight (sets the user count); default 512. "
        "In the web UI the Users field is the cap",
        LOAD,
        web=False,
    )
    # -- SLO
    slo: Objectives = option(
        "",
        "Objectives, e.g. 'ttft.p95<5s,tpot.p95<80ms' (ttft|ttfa|tpot|itl|e2e . mean|pNN); judged met, missed or undecided on confidence bounds: "
        "a miss (exit 3) or an undecided run (exit 6) fails a headless run",
        SLO,
    )
    warmup: Duration = option("0s", "Exclude requests sent in the first DURATION of the run from the statistics", SLO)
    # -- expert settings
    label: Text = option(
        "",
        "What this run is, e.g. 'prefix caching on': recorded in run.json, shown in the report's title and by "
        "`python -m reports compare` (vllm bench serve --label)",
        EXPERT,
    )
    results_dir: Text = option("results", "Folder that receives results/<run-id>/", EXPERT)
    run_id: Text = option("", "Name of the results folder; empty = <UTC time>-<random>", EXPERT)
    overwrite: bool = option(
        False,
        "Replace an existing results folder of the same --run-id; without it such a run is refused before any load",
        EXPERT,
    )
    connection: Literal["keep-alive", "per-request"] = option(
        "keep-alive",
        "keep-alive = each user reuses one connection (OpenAI SDKs, browsers, gateways); per-request = a new "
        "connection for every request, closed after it (some benchmark clients)",
        EXPERT,
    )
    balance: Balance = option(
        "round-robin",
        "With several --host URLs (comma-separated, the suite spreads the load itself): "
        "round-robin, least-outstanding (fewest requests of this load process in flight) or sticky (every "
        "turn of a conversation on one backend); each record's backend is its URL (docs/replicas.md)",
        EXPERT,
    )
    backend_header: Text = option(
        "",
        "With --host one load balancer: the response header that names the backend serving each "
        "request, e.g. X-Upstream (nginx's $upstream_addr); each record's backend is its value (docs/replicas.md)",
        EXPERT,
    )
    backend_count: PositiveCount = option(
        "",
        "With --backend-header: the replicas behind the balancer, so that each one's fair share "
        "is 1/N and replicas that served nothing are flagged; empty = as many as named a reply",
        EXPERT,
    )
    timeout_connect: PositiveDuration = option(
        "10s", "Longest wait for a new connection (TCP connect, TLS handshake); not part of TTFT", EXPERT
    )
    timeout_first_token: PositiveDuration = option(
        "300s",
        "Longest wait from the request's write to the response head and the first data "
        "of the body: a stream's first data line (keep-alive comments do not count); "
        "the connect has --timeout-connect",
        EXPERT,
    )
    timeout_idle: PositiveDuration = option("120s", "Longest gap between two reads of a flowing stream", EXPERT)
    timeout_total: PositiveDuration = option("900s", "Longest whole request", EXPERT)
    tls_ca: Text = option(
        "",
        "PEM file of a CA trusted besides the system's for an https --host (a private CA, a self-signed "
        "gateway); the chain and the host name are verified on every connection (docs/security.md)",
        EXPERT,
    )
    tls_insecure: bool = option(
        False,
        "Verify no server certificate (neither chain nor host name): whoever answers gets the API key; "
        "one warning line, recorded in run.json",
        EXPERT,
    )
    max_response_size: Size = option(
        "64MB",
        "Longest response body the client reads (MB = 2^20 bytes); a longer one is cut there and "
        "recorded as response_too_large, so one huge reply cannot stall every other stream",
        EXPERT,
    )
    retry: Count = option(
        "0",
        "Retry a failed request up to N times; every attempt is its own record (request id suffix -r1, -r2, ...); 0 = off",
        EXPERT,
    )
    retry_on: Names = option(
        "http_429,http_5xx,connect_error",
        "Failure classes that are retried, comma-separated (" + ", ".join(RETRYABLE) + ")",
        EXPERT,
    )
    retry_max_wait: Duration = option(
        "30s", "Longest wait before a retry: caps a 429's Retry-After and the backoff (0.5 s, doubling)", EXPERT
    )
    cancel_rate: Share = option(
        "0",
        "Share of requests (0-1) the client aborts on purpose after --cancel-after, to test the server's abort "
        "handling; recorded as cancelled",
        EXPERT,
    )
    cancel_after: Duration = option(
        "1s", "How long a request picked by --cancel-rate runs before the client aborts it", EXPERT
    )
    server_metrics: Names = option(
        "",
        "Prometheus endpoints of the server side to scrape during the run, comma-separated (vLLM's /metrics, "
        "SGLang's; the GPUs' exporter goes to --gpu-telemetry); kept in server_metrics.parquet",
        EXPERT,
    )
    server_metrics_interval: Duration = option("5s", "Scrape interval for --server-metrics", EXPERT)
    sim_timestamps: bool = option(
        False,
        "Ask the simulator to stamp its send time into every chunk (client-accuracy benchmarks)",
        EXPERT,
        web=False,
    )
    gpu_telemetry: Text = option(
        "",
        "GPU telemetry read during the run and aligned to its load levels: nvidia-smi (the suite runs on the GPU "
        "host) or a DCGM exporter's metrics URL, e.g. http://gpu-box:9400/metrics; gpu_telemetry.parquet and "
        "summary.json gpu (docs/results.md)",
        OBSERVE,
        web=False,
    )
    gpu_telemetry_interval: Duration = option("1s", "How often --gpu-telemetry reads the GPUs", OBSERVE, web=False)
    gpus: PositiveCount = option(
        "",
        "The deployment's GPU count, for figures per GPU and the cost; default: the GPUs --gpu-telemetry sees",
        OBSERVE,
        web=False,
    )
    gpu_hour_price: Rate = option(
        "",
        "Price of one GPU-hour (any currency): cost per million output and total tokens at each level and "
        "at the capacity (needs --gpus or --gpu-telemetry)",
        OBSERVE,
        web=False,
    )
    # -- outputs, observability and client self-health (reports/plugin.py, plugin/prometheus.py, plugin/console.py, plugin/health.py)
    save_vllm_json: Text = option(
        "",
        "Also write vLLM's benchmark result JSON (the fields of vllm bench serve --save-result "
        "--save-detailed) to this file at the end of the run, from the suite's own records, with the "
        "suite's definitions beside them (docs/vllm-bench.md)",
        OBSERVE,
        web=False,
    )
    junit: Text = option(
        "",
        "Also write JUnit XML to this file at the end of the run: one test case per run check and per --slo "
        "objective, a failure carrying the measured value (docs/ci.md)",
        OBSERVE,
        web=False,
    )
    prometheus_port: Port = option(
        "0",
        "Serve client LLM metrics for Prometheus at http://HOST:PORT/metrics from the master (or local "
        "process); 0 = off",
        OBSERVE,
        web=False,
    )
    prometheus_host: Text = option(
        "127.0.0.1", "Interface for --prometheus-port; 0.0.0.0 to expose it beyond this machine", OBSERVE, web=False
    )
    prometheus_linger: Duration = option(
        "0s",
        "Keep serving /metrics this long before the process exits, so Prometheus scrapes the final counts",
        OBSERVE,
        web=False,
    )
    locust_tables: bool = option(
        False,
        "Headless: also print Locust's own tables (its rounded live statistics): the periodic one every 2 s "
        "and those at the end",
        OBSERVE,
        web=False,
    )
    health_cpu_limit: Percent = option(
        "70",
        "Self-health: a worker (or local) process above this CPU, % of one core, in 80 % of the "
        "seconds of --health-sustain marks the run client_bound",
        OBSERVE,
        web=False,
    )
    health_loop_lag_limit: Duration = option(
        "10ms",
        "Self-health: event-loop lag p99 (a 0.1 s sleep waking late) above this, sustained "
        "while the process is busy, marks the run client_bound",
        OBSERVE,
        web=False,
    )
    health_token_lag_limit: Duration = option(
        "5ms",
        "Self-health, with --sim-timestamps: p99 of chunk arrival minus the simulator's send "
        "time above this, sustained while busy, marks the run client_bound",
        OBSERVE,
        web=False,
    )
    health_sustain: Duration = option(
        "5s",
        "Self-health: how long a limit must be passed (in 80 % of its one-second samples) to count",
        OBSERVE,
        web=False,
    )
    health_target_cpu: Percent = option(
        "60",
        "Self-health advice: CPU per worker process, % of one core, to plan for (workers needed "
        "= ceil(workers x peak CPU / this))",
        OBSERVE,
        web=False,
    )

    # -- what one option's type cannot say ------------------------------------------------------
    @model_validator(mode="before")
    @classmethod
    def _blank_is_default(cls, data):
        """An emptied field (the web form, an empty variable) means the option's default."""
        if isinstance(data, dict):
            for name, value in list(data.items()):
                field = cls.model_fields.get(name)
                if (
                    field is not None
                    and (value is None or value == "")
                    and field.default not in ("", False)
                    and name not in _EMPTY_IS_EMPTY
                ):
                    data[name] = field.default
        return data

    @field_validator("capacity_precision", mode="before")
    @classmethod
    def _precision(cls, value):
        text = str(value).strip() if value is not None else ""
        number = text[:-1].strip() if text.endswith("%") else None
        try:
            share = float(number) / 100 if number is not None else float(text or "0.05")
        except ValueError:
            raise FieldError(f"'{value}' is not a share", "give e.g. 0.05 or 5%") from None
        if not 0 < share < 1:
            raise FieldError(f"'{value}' must be above 0 and below 100 %", "give e.g. 0.05 or 5%")
        return share

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, value):
        if value and not re.fullmatch(r"[A-Za-z0-9._-]+", value):
            raise FieldError(f"'{value}' may only hold letters, digits, '.', '_' and '-'")
        if value in (".", ".."):
            raise FieldError(f"'{value}' names a folder above the run's; give a name such as nightly-01")
        return value

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer_exists(cls, value):
        looks_like_path = os.path.isabs(os.path.expanduser(value)) or value.startswith((".", "~"))
        if value and looks_like_path and not os.path.exists(os.path.expanduser(value)):
            raise FieldError(f"'{value}' does not exist; give a local tokenizer folder (or a hub name like org/name)")
        return value

    @field_validator("tls_ca")
    @classmethod
    def _tls_ca(cls, value):
        if value:
            try:
                read_ca(os.path.expanduser(value))  # the plan reads it again, to carry its text to the workers
            except ValueError as e:
                raise FieldError(str(e)) from None
        return value

    @field_validator("retry_on")
    @classmethod
    def _retry_on(cls, value):
        for name in value:
            if name not in RETRYABLE:
                raise FieldError(f"'{name}' is not a retryable failure class; choose from {', '.join(RETRYABLE)}")
        return value

    @field_validator("server_metrics")
    @classmethod
    def _urls(cls, value):
        from core.urls import public_url

        for url in value:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise FieldError(f"'{public_url(url)}' needs a scheme and a host, e.g. http://127.0.0.1:8000/metrics")
        return value

    @field_validator("gpu_telemetry")
    @classmethod
    def _gpu_source(cls, value):
        from core.urls import public_url

        value = value.strip()
        if value and value != "nvidia-smi":
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise FieldError(
                    f"'{public_url(value)}' is neither nvidia-smi nor a URL; give nvidia-smi or a DCGM exporter's "
                    "metrics URL, e.g. http://gpu-box:9400/metrics"
                )
        return value

    @field_validator("server_metrics_interval", "gpu_telemetry_interval")
    @classmethod
    def _interval(cls, value):
        if value < 0.1:
            raise FieldError("must be at least 100ms, e.g. 5s")
        return value

    @field_validator("health_sustain")
    @classmethod
    def _sustain(cls, value):
        if value < 1:
            raise FieldError("must be at least 1s")
        return value

    @model_validator(mode="after")
    def _together(self):
        if self.retry and not self.retry_on:
            raise InputError(
                "--retry-on: empty while --retry is on; name the failure classes to retry, e.g. http_429,http_5xx"
            )
        if self.gpu_hour_price and not (self.gpus or self.gpu_telemetry):
            raise InputError("--gpu-hour-price: the cost needs the GPU count; give --gpus N (or --gpu-telemetry)")
        if self.backend_count and not self.backend_header:
            raise InputError(
                "--backend-count: counts the replicas behind a balancer that names them; give --backend-header too"
            )
        if self.tls_ca and self.tls_insecure:
            raise InputError("--tls-insecure: verifies nothing, so --tls-ca would not be used; give one of the two")
        if self.input_tokens is not None and self.replay:
            raise InputError(
                "--input-tokens: a replayed trace sends its logged prompts; drop one of --input-tokens and --replay"
            )
        if self.input_tokens_range and self.input_tokens is None:
            raise InputError("--input-tokens-range: applies to --input-tokens N; give --input-tokens too")
        if self.input_tokens_range and self.input_tokens is not None and self.input_tokens[0] != self.input_tokens[1]:
            raise InputError(
                "--input-tokens-range: --input-tokens already gives a range (MIN:MAX); give one of the two"
            )
        if self.cancel_rate and self.cancel_after <= 0:
            raise InputError("--cancel-after: must be above 0 when --cancel-rate is set, e.g. 2s")
        self._capacity_unit()
        return self

    def _capacity_unit(self) -> None:
        """The unit of a capacity search and the options that only one unit takes."""
        rate = self.capacity_unit == "rate"
        if rate and not self.find_capacity:
            raise InputError("--capacity-unit: says what --find-capacity searches; give --find-capacity too")
        for name in ("max_rate", "start_rate"):
            if getattr(self, name) is not None and not rate:
                raise InputError(
                    f"--{name.replace('_', '-')}: applies to a capacity search in requests/s; "
                    "give --find-capacity --capacity-unit rate (a search in users takes --max-users)"
                )
        if rate and self.max_users is not None:
            raise InputError("--max-users: a search in requests/s is bounded by --max-rate; give --max-rate instead")
        if rate and self.max_rate is not None and self.start_rate is not None and self.start_rate > self.max_rate:
            raise InputError(
                f"--start-rate: {self.start_rate:g} requests/s is above --max-rate {self.max_rate:g}; lower it or "
                "raise --max-rate"
            )

    # -- from Locust ----------------------------------------------------------------------------
    @classmethod
    def parse(cls, namespace) -> Options:
        """The options of Locust's parsed `namespace` (an option it lacks takes its default), or
        one-line InputError."""
        values = {name: getattr(namespace, name) for name in cls.model_fields if hasattr(namespace, name)}
        return build(cls, values, field_name=flag_of)


def flag_of(loc) -> str:
    return "--" + str(loc[0] if loc else "").replace("_", "-")


def env_var(flag: str) -> str:
    return "LOCUST_" + flag.lstrip("-").upper().replace("-", "_")


class Declared:
    """One option as the generators read it."""

    def __init__(self, name: str, field):
        extra = field.json_schema_extra
        self.name, self.flag = name, "--" + name.replace("_", "-")
        self.env = env_var(self.flag)
        self.default, self.help = field.default, field.description
        self.group, self.web, self.secret = extra["group"], extra["web"], extra["secret"]
        self.flag_only = field.annotation is bool  # store_true
        bare = field.annotation
        self.choices = list(get_args(bare)) if get_origin(bare) is Literal else None

    def help_line(self) -> str:
        """Its help as --help prints it: with its default and variable (escaped for argparse)."""
        shown = "off" if self.flag_only else (repr(self.default) if self.default != "" else "empty")
        text = f"{self.help} [default: {shown}; env {self.env}]" + ("" if self.web else " (not in the web form)")
        return text.replace("%", "%%")

    def argparse_kwargs(self, for_help: bool = False) -> dict:
        kw: dict = dict(default=self.default, help=self.help_line() if for_help else self.help, env_var=self.env)
        if self.flag_only:
            kw["action"] = "store_true"
        if self.choices:
            kw["choices"] = self.choices
        if not self.web:
            kw["include_in_web_ui"] = False
        if self.secret:
            kw["is_secret"] = True
        return kw


DECLARED: tuple[Declared, ...] = tuple(Declared(n, f) for n, f in Options.model_fields.items())
SECRET_OPTIONS = tuple(d.name for d in DECLARED if d.secret)  # never written to run.json, logs or reports
# the web form's groups: (heading, option names in order), webui/form.py orders the form by them
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    (g, tuple(d.name for d in DECLARED if d.group == g and d.web))
    for g in GROUP_ORDER
    if any(d.group == g and d.web for d in DECLARED)
)


def add_arguments(parser, for_help: bool = False) -> None:
    """The suite's options on Locust's parser, each in its group (the help shows them grouped).
    Added through the parser itself (only it knows include_in_web_ui / is_secret), then listed
    under their group's heading. `for_help`: for `locust --help` (plugin/locust_help.py), each
    help with its default and variable; otherwise the plain help the web form shows."""
    groups = {g: parser.add_argument_group(g) for g in GROUP_ORDER}
    for d in DECLARED:
        action = parser.add_argument(d.flag, **d.argparse_kwargs(for_help))
        parser._optionals._group_actions.remove(action)
        groups[d.group]._group_actions.append(action)


def help_text() -> str:
    """The suite's options as `--help` would print them, grouped, with defaults and variables."""
    import configargparse

    parser = configargparse.ArgumentParser(
        usage="locust -f locustfile.py [Locust's options] [the suite's options]",
        add_help=False,
        description="The LLM suite's options, also environment variables and locust.conf keys "
        "(Locust's own: locust --help).",
    )
    for g in GROUP_ORDER:
        group = parser.add_argument_group(g)
        for d in (d for d in DECLARED if d.group == g):
            kw = {"action": "store_true"} if d.flag_only else {"metavar": "|".join(d.choices) if d.choices else "VALUE"}
            group.add_argument(d.flag, help=d.help_line(), **kw)
    return parser.format_help()


def check_host(host: str) -> str:
    """--host: one URL, or several comma-separated (replicas the suite spreads its load over,
    targets/), each checked; returned without trailing slashes."""
    urls = [u.strip() for u in host.split(",")]
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(
                f"--host: '{url}' needs a scheme and a host name, e.g. http://127.0.0.1:8000 (several: comma-separated)"
            )
        try:
            _ = parts.port  # urllib raises on a port out of range only when it is read
        except ValueError:
            raise InputError(f"--host: '{url}' has an invalid port; give 1-65535, e.g. http://127.0.0.1:8000") from None
    urls = [u.rstrip("/") for u in urls]
    if len(set(urls)) < len(urls):
        raise InputError(
            f"--host: {', '.join(sorted({u for u in urls if urls.count(u) > 1}))} given twice; name each replica once"
        )
    return ",".join(urls)


def public_options(parsed_options) -> dict:
    """Every option value that may be written down: secrets removed, not masked."""
    from core.urls import public_url

    out = {}
    for key, value in sorted(vars(parsed_options).items()):
        if key in SECRET_OPTIONS or key.startswith("_"):
            continue
        if key == "host" and value:
            value = public_url(value)  # a user:password@ in the URL is a secret too
        if isinstance(value, (str, int, float, bool, type(None))) or (
            isinstance(value, list) and all(isinstance(v, (str, int, float, bool)) for v in value)
        ):
            out[key] = value
    if getattr(parsed_options, "api_key", ""):
        out["api_key_set"] = True
    return out


def markdown_table() -> str:
    """The options table of docs/options.md (tests/test_readme.py keeps the page equal to it)."""
    lines = []
    for g in GROUP_ORDER:
        lines += [
            "",
            f"**{g}**",
            "",
            "| option | environment variable | default | meaning |",
            "| --- | --- | --- | --- |",
        ]
        for d in (d for d in DECLARED if d.group == g):
            shown = "off" if d.flag_only else (f"`{d.default}`" if d.default != "" else "")
            text = d.help.replace("|", "\\|")
            lines.append(f"| `{d.flag}` | `{d.env}` | {shown} | {text} |")
    return "\n".join(lines[1:])


if __name__ == "__main__":
    cli = argparse.ArgumentParser(
        description="Print the suite's options: grouped help, or the Markdown table of docs/options.md"
    )
    cli.add_argument("--markdown", action="store_true", help="the table of docs/options.md")
    print(markdown_table() if cli.parse_args(sys.argv[1:]).markdown else help_text())
