"""What load ran against what target: summary.json's `setup` block, stated first by every report.

The load model and its parameters, the time asked for and measured, the SLO, the workload's name
and content hash, the server (its URL without credentials), the model, the server's version where
it tells it and where it did (GET /version, an info gauge's version label on /metrics, or a
response header: server_version), the client hosts and the number of processes that
ran users, and the suite's version (read as the run started: run.json `versions.suite`). Written by the process that writes the results (a master or a
local run); the reports and the live view read it from there.
"""

from __future__ import annotations

import logging
import socket

import orjson
from prometheus_client.parser import text_string_to_metric_families

from core.errors import InputError
from metrics.schema.run_setup import LoadSetup, Setup
from plugin.server import get_with_headers
from core.urls import public_url
from plugin.state import Plugin

log = logging.getLogger("llm")


def server_version(host: str, plan) -> tuple[str | None, str | None]:
    """(the server's version, where it said so), or (None, None). In order: GET /version
    ({"version": ...}, vLLM's and SGLang's answer); the `version` label of an info gauge on
    GET /metrics (a `*_info` sample of the server's own, not the Prometheus client's python_info);
    the response headers (`x-...-version`, else `server:`, such as uvicorn's or llama.cpp's)."""
    try:
        status, headers, body = get_with_headers(host, "/version", plan)
    except InputError:
        return None, None
    if status == 200:
        try:
            version = orjson.loads(body).get("version")
        except (orjson.JSONDecodeError, AttributeError):
            version = None
        if version:
            return str(version), "GET /version"
    try:
        status, _, text = get_with_headers(host, "/metrics", plan)
    except InputError:
        status = 0
    if status == 200:
        version, name = version_from_metrics(text.decode("utf-8", errors="replace"))
        if version:
            return version, f"GET /metrics {name}{{version}}"
    return version_from_headers(headers)


def version_from_metrics(text: str) -> tuple[str | None, str | None]:
    """(version, sample name) from Prometheus text: the `version` label of an info sample (a name
    ending in _info) of the server's own, the engine's first; (None, None) when there is none."""
    try:
        samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    except Exception:  # noqa: BLE001 - not Prometheus text: no version from it
        return None, None
    found = [(s.name, str(s.labels["version"])) for s in samples
             if s.labels.get("version") and s.name.endswith("_info") and s.name not in CLIENT_INFO]  # fmt: skip
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
        load=LoadSetup(kind=load["kind"], text=plan.summary_line(), users=users,
                       parameters={k: v for k, v in load.items() if k != "kind"}),
        run_time_s=plan.run_time_s, measured_s=max(0.0, end - run.window_start), slo=[o.text for o in plan.slo],
        workload=spec.name, workload_hash=spec.spec_hash, server=public_url(environment.host or ""),
        model=plan.model, server_version=version[0], server_version_source=version[1], client_hosts=hosts, workers=workers,
        suite_version=run.writer.info.versions.get("suite") or "unknown",  # read as the run started (run.json)
    )  # fmt: skip


class RunSetup(Plugin):
    def run_started(self, run) -> None:
        self.version = server_version(run.environment.host, run.plan) if run.environment.host else (None, None)
        self.hosts, self.workers = client_processes(run.environment)
        # the live view states it from the start; run_stopping completes it (time measured, workers)
        run.summary_extra["setup"] = setup_block(run, self.version, self.hosts, self.workers)

    def run_stopping(self, run) -> None:
        hosts, workers = getattr(self, "hosts", None), getattr(self, "workers", 0)
        now_hosts, now_workers = client_processes(run.environment)
        if now_workers >= workers:  # workers may join after the start; lost ones stay counted
            hosts, workers = now_hosts, now_workers
        run.summary_extra["setup"] = setup_block(run, getattr(self, "version", (None, None)), hosts or now_hosts, workers)
