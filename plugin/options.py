"""The suite's command-line options: Locust options with an environment variable each.

Every option is also a `locust.conf` key (Locust reads the same names) and, where it makes sense,
a field of the web UI's start form. `plugin.plan.RunPlan.from_options` turns the parsed values into
the run's validated plan; a mistake is one line naming the option and the fix (`InputError`),
raised before any load starts.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from core.errors import InputError
from plugin.plan import RETRYABLE


SECRET_OPTIONS = ("api_key",)  # never written to run.json, logs or reports


# (flag, argparse keywords); the env var is derived by env_var(). Kept as data so docs/options.md and tests can list them.
OPTIONS: list[tuple[str, dict]] = [
    ("--endpoint", dict(default="chat", choices=["chat", "completions"], help="chat = /v1/chat/completions, completions = /v1/completions")),
    ("--model", dict(default="", help="Model id to request; empty = the first id from /v1/models")),
    # not in the web UI: Locust renders a form field's value into the page (docs/security.md)
    ("--api-key", dict(default="", is_secret=True, include_in_web_ui=False, help="Bearer token sent as Authorization; never written anywhere; not a web UI field (docs/security.md)")),
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
    ("--junit", dict(default="", include_in_web_ui=False, help="Also write JUnit XML to this file at the end of the run: one test case per run check and per --slo objective, a failure carrying the measured value (docs/ci.md)")),
    ("--overwrite", dict(action="store_true", default=False, help="Replace an existing results folder of the same --run-id; without it such a run is refused before any load")),
    ("--sim-profile", dict(default="v100-7b-tp8", help="Profile of the built-in simulator used when no --host is given")),
    ("--sim-timestamps", dict(action="store_true", default=False, include_in_web_ui=False, help="Ask the simulator to stamp its send time into every chunk (client-accuracy benchmarks)")),
    ("--timeout-connect", dict(default="10s", help="Longest wait for a new connection (TCP connect, TLS handshake); not part of TTFT")),
    ("--timeout-first-token", dict(default="300s", help="Longest wait from the request's write to the response head and the first body bytes (the connect has --timeout-connect)")),
    ("--timeout-idle", dict(default="120s", help="Longest gap between two reads of a flowing stream")),
    ("--timeout-total", dict(default="900s", help="Longest whole request")),
    ("--max-response-size", dict(default="64MB", help="Longest response body the client reads (MB = 2^20 bytes); a longer one is cut there and recorded as response_too_large, so one huge reply cannot stall every other stream")),
    ("--connection", dict(default="keep-alive", choices=["keep-alive", "per-request"], help="keep-alive = each user reuses one connection (OpenAI SDKs, browsers, gateways); per-request = a new connection for every request, closed after it (some benchmark clients)")),
    # Load models (docs/load-models.md)
    ("--steps", dict(default="", help="Step ramp: user counts '5,10,20,50' or FROM:TO:ADD '1:160:10'")),
    ("--step-time", dict(default="60s", help="How long each step (or capacity-search level) is held")),
    ("--step-warmup", dict(default="10s", help="Start of each step excluded from its statistics")),
    ("--slo", dict(default="", help="Objectives, e.g. 'ttft.p95<5s,tpot.p95<80ms' (ttft|ttfa|tpot|itl|e2e . mean|pNN); a miss fails a headless run")),
    ("--find-capacity", dict(action="store_true", default=False, help="Search the highest user count (or rate) meeting --slo, within --run-time")),
    ("--request-rate", dict(default="", help="Open loop: total requests per second across all workers; empty = closed loop")),
    ("--arrival", dict(default="poisson", choices=["poisson", "gamma", "constant"], help="Open-loop arrival process")),
    ("--burstiness", dict(default="1.0", help="Gamma shape for --arrival gamma (1 = Poisson, < 1 burstier)")),
    ("--max-concurrency", dict(default="", include_in_web_ui=False, help="Open loop, headless: most requests in flight (sets the user count); default 512. In the web UI the Users field is the cap")),
    # Observability (plugin/prometheus.py, plugin/server_metrics.py)
    ("--prometheus-port", dict(default="0", include_in_web_ui=False, help="Serve client LLM metrics for Prometheus at http://HOST:PORT/metrics from the master (or local process); 0 = off")),
    ("--prometheus-host", dict(default="127.0.0.1", include_in_web_ui=False, help="Interface for --prometheus-port; 0.0.0.0 to expose it beyond this machine")),
    ("--prometheus-linger", dict(default="0s", include_in_web_ui=False, help="Keep serving /metrics this long before the process exits, so Prometheus scrapes the final counts")),
    ("--server-metrics", dict(default="", help="Prometheus endpoints of the server side to scrape during the run, comma-separated (vLLM /metrics, DCGM, node exporter); kept in server_metrics.parquet")),
    ("--server-metrics-interval", dict(default="5s", help="Scrape interval for --server-metrics")),
    # Failures, retries and cancellation (docs/failures.md)
    ("--retry", dict(default="0", help="Retry a failed request up to N times; every attempt is its own record (request id suffix -r1, -r2, ...); 0 = off")),
    ("--retry-on", dict(default="http_429,http_5xx,connect_error", help="Failure classes that are retried, comma-separated (" + ", ".join(RETRYABLE) + ")")),
    ("--retry-max-wait", dict(default="30s", help="Longest wait before a retry: caps a 429's Retry-After and the backoff (0.5 s, doubling)")),
    ("--cancel-rate", dict(default="0", help="Share of requests (0-1) the client aborts on purpose after --cancel-after, to test the server's abort handling; recorded as cancelled")),
    ("--cancel-after", dict(default="1s", help="How long a request picked by --cancel-rate runs before the client aborts it")),
    # Client self-health (plugin/health.py): is each load-generating process still accurate?
    ("--locust-tables", dict(action="store_true", default=False, include_in_web_ui=False, help="Headless: also print Locust's own tables (its rounded live statistics): the periodic one every 2 s and those at the end")),
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


def check_host(host: str) -> str:
    parts = urlsplit(host)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"--host: '{host}' needs a scheme and a host name, e.g. http://127.0.0.1:8000")
    try:
        parts.port
    except ValueError:
        raise InputError(f"--host: '{host}' has an invalid port; give 1-65535, e.g. http://127.0.0.1:8000") from None
    return host.rstrip("/")


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


def markdown_table() -> str:
    """The options table of docs/options.md (tests/test_readme.py keeps the page equal to it)."""
    lines = ["| option | environment variable | default | meaning |", "| --- | --- | --- | --- |"]
    for flag, kw in OPTIONS:
        default = kw.get("default")
        shown = "off" if kw.get("action") == "store_true" else (f"`{default}`" if default not in ("", None) else "")
        text = kw["help"].replace("|", "\\|")
        lines.append(f"| `{flag}` | `{env_var(flag)}` | {shown} | {text} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
