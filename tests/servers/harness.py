"""Real server processes, headless suite runs against them, and their Prometheus counters.

Used by tests/test_real_*.py and bench/vllm_agreement.py. Every server is a child process in a
session of its own on 127.0.0.1, with its log in a file, stopped (SIGTERM, then SIGKILL) by the
process-group id this module started; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from tests.helpers import free_port
from tests.servers import venvs

REPO = venvs.REPO
LOG_DIR = venvs.CACHE / "server-logs"


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class ServerProcess:
    """One server: start, wait until its health URL answers 200, stop."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], port: int, health: str = "/health"):
        self.name, self.argv, self.env, self.port, self.health = name, argv, env, port, health
        self.url = f"http://127.0.0.1:{port}"
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.log_path = LOG_DIR / f"{name}-{port}.log"
        self.proc: subprocess.Popen | None = None
        self.ready_s = float("nan")

    def start(self, timeout: float) -> "ServerProcess":
        t0 = time.monotonic()
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            self.argv, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} while starting:\n{self.log_tail()}")
            try:
                status, _ = http_get(self.url + self.health, timeout=2)
                if status == 200:
                    self.ready_s = time.monotonic() - t0
                    return self
            except OSError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 20.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        pgid = proc.pid  # start_new_session: the server leads its own process group
        try:
            os.killpg(pgid, signal.SIGTERM)
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            proc.wait(10)
        except ProcessLookupError:
            pass
        # children that outlived their leader (vLLM's engine core) share the group id
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


# --------------------------------------------------------------------------- the servers


def llamacpp(model_dir: Path, parallel: int = 4, threads: int = 1) -> ServerProcess:
    port = free_port()
    py = venvs.ensure_venv("servers")
    argv = [str(py), str(venvs.HERE / "llamacpp_server.py"), str(model_dir / "model-f32.gguf"), str(port),
            "--parallel", str(parallel), "--threads", str(threads), "--alias", "tiny-llama"]  # fmt: skip
    env = venvs.venv_env("servers")
    env["OMP_NUM_THREADS"] = str(threads)
    return ServerProcess("llamacpp", argv, env, port)


def transformers_serve(model_dir: Path, blocks: int = 256, block_size: int = 32, threads: int = 1) -> ServerProcess:
    port = free_port()
    venvs.ensure_venv("servers")
    argv = [str(venvs.venv_dir("servers") / "bin" / "transformers"), "serve", str(model_dir), "--continuous-batching",
            "--cb-num-blocks", str(blocks), "--cb-block-size", str(block_size), "--device", "cpu", "--dtype", "float32",
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]  # fmt: skip
    env = venvs.venv_env("servers")
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return ServerProcess("transformers-serve", argv, env, port)


def vllm(model_dir: Path, threads: int = 1, max_num_seqs: int = 64, kv_cache_gib: int = 1, extra: list[str] | None = None,
         cpus: str = "") -> ServerProcess:  # fmt: skip
    """vLLM's CPU build; `cpus` (e.g. "0") pins all its processes to those cores (taskset)."""
    port = free_port()
    py = venvs.ensure_venv("vllm")
    pin = ["taskset", "-c", cpus] if cpus else []
    argv = [*pin, str(py), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
            "--served-model-name", "tiny-llama", "--host", "127.0.0.1", "--port", str(port), "--enforce-eager",
            "--dtype", "float32", "--max-model-len", "4096", "--max-num-seqs", str(max_num_seqs),
            "--disable-uvicorn-access-log", "--generation-config", "vllm", *(extra or [])]  # fmt: skip
    env = venvs.venv_env("vllm")
    env.update(
        VLLM_CPU_KVCACHE_SPACE=str(kv_cache_gib), VLLM_CPU_OMP_THREADS_BIND="nobind", VLLM_CPU_NUM_OF_RESERVED_CPU="0",
        OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
    )  # fmt: skip
    return ServerProcess("vllm", argv, env, port)


# --------------------------------------------------------------------------- Prometheus


@dataclass
class Scrape:
    """Samples of one /metrics scrape: {(name, frozenset(labels)): value}."""

    samples: dict[tuple[str, frozenset], float] = field(default_factory=dict)

    def total(self, name: str, **labels: str) -> float:
        """Sum of a metric's samples over every label set that matches `labels`."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and want <= ls)

    def buckets(self, name: str) -> dict[float, float]:
        """Cumulative histogram counts by upper bound, summed over label sets (le excluded)."""
        out: dict[float, float] = {}
        for (n, ls), v in self.samples.items():
            if n == name + "_bucket":
                le = float(dict(ls)["le"])
                out[le] = out.get(le, 0.0) + v
        return dict(sorted(out.items()))

    def __sub__(self, before: "Scrape") -> "Scrape":
        return Scrape({k: v - before.samples.get(k, 0.0) for k, v in self.samples.items()})


def scrape(url: str) -> Scrape:
    from prometheus_client.parser import text_string_to_metric_families

    status, body = http_get(url + "/metrics", timeout=10)
    if status != 200:
        raise RuntimeError(f"GET {url}/metrics answered {status}")
    out = Scrape()
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out.samples[(s.name, frozenset(s.labels.items()))] = float(s.value)
    return out


# --------------------------------------------------------------------------- the suite


@dataclass
class SuiteRun:
    returncode: int
    output: str
    path: Path
    records: pd.DataFrame
    summary: dict
    wall_s: float


def run_suite(host: str, run_id: str, results_dir: Path, *, users: int, run_time: str, args: list[str],
              spawn_rate: float | None = None, timeout: float = 300) -> SuiteRun:  # fmt: skip
    """`locust -f locustfile.py --headless --host ...` to completion, and what it wrote."""
    cmd = [sys.executable, "-m", "locust", "-f", str(REPO / "locustfile.py"), "--headless", "--host", host,
           "-u", str(users), "-r", str(spawn_rate or users), "-t", run_time, "--results-dir", str(results_dir),
           "--run-id", run_id, "--only-summary", *args]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    path = results_dir / run_id
    output = proc.stdout + proc.stderr
    if not (path / "summary.json").exists():
        raise RuntimeError(f"the suite wrote no summary (exit {proc.returncode}):\n{output[-4000:]}")
    records = pq.read_table(path / "requests.parquet").to_pandas()
    summary = json.loads((path / "summary.json").read_text())
    return SuiteRun(proc.returncode, output, path, records, summary, wall)


def write_workload(path: Path, *, input_chars: int, output_tokens: int, system_share: float = 0.0,
                   langs: list[str] | None = None) -> Path:  # fmt: skip
    """A one-class workload YAML with fixed input length (chars) and fixed max_tokens."""
    lines = [
        f"name: fixed-{input_chars}c-{output_tokens}t",
        "description: one class, fixed input and output lengths (real-server tests)",
        f"system_prompt: {{share: {system_share}}}",
    ]
    if langs:
        lines.append(f"templates: {{langs: [{', '.join(langs)}]}}")
    lines += [
        "classes:",
        "  fixed:",
        "    weight: 1.0",
        f"    input_chars: {{dist: fixed, value: {input_chars}}}",
        f"    output_tokens: {{dist: fixed, value: {output_tokens}}}",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def scrape_settled(url: str, before: Scrape, counter: str, expected: float, timeout: float = 15.0) -> Scrape:
    """The delta since `before`, once `counter` has moved by `expected` (servers record a request's
    metrics a moment after its last byte; vLLM's output loop does) or the timeout passed."""
    deadline = time.monotonic() + timeout
    while True:
        delta = scrape(url) - before
        if delta.total(counter) >= expected or time.monotonic() > deadline:
            return delta
        time.sleep(0.2)
