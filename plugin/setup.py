"""What load ran against what target: summary.json's `setup` block, stated first by every report.

The load model and its parameters, the time asked for and measured, the SLO, the workload's name
and content hash, the server (its URL without credentials), the model, the server's version where
it tells it and where it did (GET /version, an info gauge's version label on /metrics, or a
response header: server_version), the client hosts and the number of processes that
ran users, and the suite's version (read as the run started: run.json `versions.suite`). Written by the process that writes the results (a master or a
local run); the reports and the live view read it from there.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import time

import gevent
import orjson
from prometheus_client.parser import text_string_to_metric_families

from core.errors import InputError
from core.urls import public_url
from metrics.schema.run_setup import LoadSetup, Setup, Target
from plugin.server import get_with_headers
from plugin.state import Plugin, state_of

log = logging.getLogger("llm")


SLOW_PROBE_S = 1.0  # a probe of the server slower than this gets a console line
LATE_PROBE_S = 2.0  # the bound of a probe made while the load runs (a start no check preceded)


def server_version(host: str, plan, bound_s: float | None = None) -> tuple[str | None, str | None]:
    """(the server's version, where it said so), or (None, None): `server_identity`'s first two."""
    return server_identity(host, plan, bound_s)[:2]


def server_identity(
    host: str, plan, bound_s: float | None = None
) -> tuple[str | None, str | None, dict[str, str], list[str]]:
    """(the server's version, where it said so, its stated configuration, the gauges it came from).
    The version, in order: GET /version
    ({"version": ...}, vLLM's and SGLang's answer); the `version` label of an info gauge on
    GET /metrics (a `*_info` sample of the server's own, not the Prometheus client's python_info);
    the response headers (`x-...-version`, else `server:`, such as uvicorn's or llama.cpp's). The
    configuration: the labels of the `*_config_info` gauges on the same GET /metrics (`config_from_metrics`).

    Both are asked at once and waited for at most `bound_s` (default: --timeout-connect) in all: a
    gateway that routes only /v1/* may hold both unanswered. A probe slower than SLOW_PROBE_S says
    so in one line."""
    bound = plan.timeouts.connect if bound_s is None else bound_s
    started = time.monotonic()
    asks = {path: gevent.spawn(_ask, host, path, plan, bound) for path in ("/version", "/metrics")}
    gevent.joinall(list(asks.values()), timeout=bound)
    answers = {path: g.value if g.ready() else None for path, g in asks.items()}
    for g in asks.values():
        g.kill(block=False)
    took = time.monotonic() - started
    if took > SLOW_PROBE_S:
        silent = [f"GET {path}" for path, a in answers.items() if a is None]
        log.warning(
            "server version: %s took %.1f s%s; asked outside the load's time, it takes none of it",
            " and ".join(f"GET {p}" for p in asks),
            took,
            f" ({' and '.join(silent)} had no answer)" if silent else "",
        )
    metrics_reply = answers["/metrics"]
    text = (
        metrics_reply[2].decode("utf-8", errors="replace")
        if metrics_reply is not None and metrics_reply[0] == 200
        else ""
    )
    config, sources = config_from_metrics(text) if text else ({}, [])
    headers = {}
    version_reply = answers["/version"]
    if version_reply is not None:
        status, headers, body = version_reply
        if status == 200:
            try:
                version = orjson.loads(body).get("version")
            except (orjson.JSONDecodeError, AttributeError):
                version = None
            if version:
                return str(version), "GET /version", config, sources
    if text:
        version, name = version_from_metrics(text)
        if version:
            return version, f"GET /metrics {name}{{version}}", config, sources
    return (*version_from_headers(headers), config, sources)


def config_from_metrics(text: str) -> tuple[dict[str, str], list[str]]:
    """(label -> value, the gauges read) of the server's stated configuration: every sample whose
    name ends in `_config_info` (vLLM's `vllm:cache_config_info`: block_size,
    gpu_memory_utilization, num_gpu_blocks, ...; the simulator's
    `llm_simulator_scheduler_config_info`), the engine's labels first where two name the same one;
    ({}, []) when there is none. A `model_name` label is the model's, not the configuration's."""
    try:
        samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    except Exception:
        return {}, []
    found = sorted(
        (s for s in samples if s.name.endswith("_config_info")), key=lambda s: (not s.name.startswith("vllm:"), s.name)
    )
    config: dict[str, str] = {}
    for s in found:
        for k, v in s.labels.items():
            if k not in ("model_name", "engine"):
                config.setdefault(k, str(v))
    return dict(sorted(config.items())), sorted({s.name for s in found})


def _ask(host: str, path: str, plan, bound: float):
    """GET HOST+path: (status, headers, body), or None when nothing answered within `bound`."""
    try:
        with gevent.Timeout(bound):
            return get_with_headers(host, path, plan)
    except (InputError, gevent.Timeout):
        return None


def version_from_metrics(text: str) -> tuple[str | None, str | None]:
    """(version, sample name) from Prometheus text: the `version` label of an info sample (a name
    ending in _info) of the server's own, the engine's first; (None, None) when there is none."""
    try:
        samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    except Exception:
        return None, None
    found = [
        (s.name, str(s.labels["version"]))
        for s in samples
        if s.labels.get("version") and s.name.endswith("_info") and s.name not in CLIENT_INFO
    ]
    found.sort(key=lambda x: not x[0].startswith(ENGINE_PREFIXES))
    return (found[0][1], found[0][0]) if found else (None, None)


def version_from_headers(headers: dict[str, str]) -> tuple[str | None, str | None]:
    """(version, the header's name) from response headers with lower-case names: a header naming a
    version (x-...-version), else `server` (it names the server, often without a version)."""
    for name in sorted(headers):
        if name.startswith("x-") and name.endswith("version") and headers[name].strip():
            return headers[name].strip(), f"response header {name}"
    server = headers.get("server", "").strip()
    return (server, "response header server") if server else (None, None)


CLIENT_INFO = ("python_info", "process_info")  # the Prometheus client library's, about its Python
ENGINE_PREFIXES = ("vllm:", "sglang:", "tgi_", "llamacpp:", "trtllm", "llm_simulator")


def client_processes(environment) -> tuple[list[str], int]:
    """(hosts, processes running users): a master's workers (Locust names each HOSTNAME_ID), or
    this host and this process."""
    clients = getattr(environment.runner, "clients", None)  # a master's runner only
    if clients is not None:
        ids = [str(getattr(node, "id", key)) for key, node in clients.items()]
        return sorted({i.rsplit("_", 1)[0] for i in ids}), len(ids)
    return [socket.gethostname()], 1


def setup_block(run, version: tuple[str | None, str | None], hosts: list[str], workers: int) -> Setup:
    plan, environment = run.plan, run.environment
    load = plan.record()["load"]
    users = getattr(environment.parsed_options, "num_users", None) if load["kind"] == "closed" else None
    spec = run.spec  # the run's workload, loaded once with its plan
    end = run.window_end if run.window_end is not None else run.window_start
    return Setup(
        load=LoadSetup(
            kind=load["kind"],
            text=plan.summary_line(),
            users=users,
            parameters={k: v for k, v in load.items() if k != "kind"},
        ),
        run_time_s=plan.run_time_s,
        measured_s=max(0.0, end - run.window_start),
        slo=[o.text for o in plan.slo],
        workload=spec.name,
        workload_hash=spec.spec_hash,
        server=public_url(environment.host or ""),
        model=plan.model,
        server_version=version[0],
        server_version_source=version[1],
        client_hosts=hosts,
        workers=workers,
        suite_version=run.writer.info.versions.get("suite") or "unknown",  # read as the run started (run.json)
        target=target_of(run, version),
        label=plan.label,
    )


def target_of(run, version: tuple) -> Target:
    """What the run ran against (summary.json setup.target, run.json target): the built-in
    simulator's profile when it is the run's target, the server's model, version and stated
    configuration (`server_identity`)."""
    name, digest = simulator_profile(run.environment)
    config, sources = (version[2], version[3]) if len(version) > 2 else ({}, [])
    return Target(
        simulator_profile=name,
        simulator_profile_hash=digest,
        model=run.plan.model,
        server_version=version[0],
        config=config,
        config_source=sources,
    )


def simulator_profile(environment) -> tuple[str | None, str | None]:
    """(the built-in simulator's profile, the SHA-256 of the profile as loaded) when it is the
    target of the run, else (None, None). The hash is of the validated profile, every field with
    its value (defaults filled in), so two files that load the same engine hash the same, and an
    edited file under the same name does not."""
    state = state_of(environment)
    sim = getattr(state, "simulator", None) if state is not None else None
    if sim is None or (environment.host or "").rstrip("/") != sim.url.rstrip("/"):
        return None, None
    from simulator.profiles import load_profile

    try:
        profile = load_profile(sim.profile)
    except InputError:  # the file changed since the simulator read it: its name alone
        return sim.profile, None
    data = profile.model_dump(mode="json", exclude={"name", "description"})
    return sim.profile, hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()


class RunSetup(Plugin):
    """The setup block. The server's version is asked before the run's clock starts, where the
    target is checked (`probe`: a headless start, every start from the web form, the built-in
    simulator's start), so that a server slow to answer takes nothing from the load's time; a start
    that no check preceded asks it beside the load, bounded by LATE_PROBE_S."""

    def __init__(self):
        self.probed: tuple[str, tuple] | None = None  # (host, server_identity) of the last check
        self.version: tuple = (None, None, {}, [])  # server_identity: version, its source, configuration, its gauges
        self.late = None  # the probe beside the load, when no check preceded the start

    def probe(self, host: str, plan) -> None:
        """Before the run's clock starts: the server's version and configuration, for the next run on `host`."""
        self.probed = (host, server_identity(host, plan))

    def run_started(self, run) -> None:
        host = run.environment.host
        probed, self.probed = self.probed, None
        self.late = None
        if probed is not None and probed[0] == host:
            self.version = probed[1]
        else:
            self.version = (None, None, {}, [])
            if host:
                self.late = gevent.spawn(server_identity, host, run.plan, LATE_PROBE_S)
                self.late.link_value(lambda g: self._late_version(run, g.value))
        self.hosts, self.workers = client_processes(run.environment)
        # the live view states it from the start; run_stopping completes it (time measured, workers)
        self._state(run, setup_block(run, self.version, self.hosts, self.workers))
        setup = run.summary_extra["setup"]
        if probed is not None and probed[0] == host:  # known before the load: the console names it as the run starts
            log.info("against: %s serving %s", setup.server, setup.target.text())
        if (
            run.plan.input_tokens is not None
            and not run.plan.tokenizer
            and simulator_profile(run.environment)[0] is None
        ):
            log.warning(
                "--input-tokens: counted by the estimate of 4 characters a token (no --tokenizer), what the built-in "
                "simulator counts; this server's model counts its own way: give --tokenizer with its tokenizer"
            )

    def _state(self, run, setup: Setup) -> None:
        """The setup block for summary.json and the live view, its target for run.json (written at the end)."""
        run.summary_extra["setup"] = setup
        run.writer.info.target = setup.target

    def _late_version(self, run, version) -> None:
        self.version = version
        if "setup" in run.summary_extra:
            self._state(run, setup_block(run, version, self.hosts, self.workers))

    def run_stopping(self, run) -> None:
        late, self.late = self.late, None
        if late is not None and not late.ready():
            late.kill(block=False)  # bounded by LATE_PROBE_S: only a run shorter than that ends first
        hosts, workers = getattr(self, "hosts", None), getattr(self, "workers", 0)
        now_hosts, now_workers = client_processes(run.environment)
        if now_workers >= workers:  # workers may join after the start; lost ones stay counted
            hosts, workers = now_hosts, now_workers
        self._state(run, setup_block(run, self.version, hosts or now_hosts, workers))
