"""Real servers for tests: started on a free 127.0.0.1 port, headless suite runs against them,
and their Prometheus counters.

Used by tests/test_real_*.py. Each server is a `core.server_process.ServerProcess` (a process
group of its own, its log in .cache/server-logs, stopped with SIGTERM then SIGKILL, every wait
bounded); its command line is bench/servers/launch.py's, which the benches start too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from bench.servers import launch, venvs
from bench.servers.workload import write_workload
from core.server_process import ServerProcess, http_get
from tests.helpers import free_port

__all__ = ["ServerProcess", "write_workload"]  # what the tests read from here besides the servers

REPO = venvs.REPO
LOG_DIR = launch.LOG_DIR


# --------------------------------------------------------------------------- the servers


def llamacpp(model_dir: Path, parallel: int = 4, threads: int = 1) -> ServerProcess:
    return launch.llamacpp(model_dir, free_port(), parallel=parallel, threads=threads)


def transformers_serve(model_dir: Path, blocks: int = 256, block_size: int = 32, threads: int = 1) -> ServerProcess:
    return launch.transformers_serve(model_dir, free_port(), blocks=blocks, block_size=block_size, threads=threads)


def vllm(
    model_dir: Path,
    threads: int = 1,
    max_num_seqs: int = 64,
    kv_cache_gib: int = 1,
    extra: list[str] | None = None,
    cpus: str = "",
) -> ServerProcess:
    """vLLM's CPU build; `cpus` (e.g. "0") pins all its processes to those cores (taskset)."""
    return launch.vllm(
        model_dir,
        free_port(),
        threads=threads,
        max_num_seqs=max_num_seqs,
        kv_cache_gib=kv_cache_gib,
        extra=extra,
        cpus=cpus,
    )


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

    def __sub__(self, before: Scrape) -> Scrape:
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


def run_suite(
    host: str,
    run_id: str,
    results_dir: Path,
    *,
    users: int,
    run_time: str,
    args: list[str],
    spawn_rate: float | None = None,
    timeout: float = 300,
) -> SuiteRun:
    """`locust -f locustfile.py --headless --host ...` to completion, and what it wrote."""
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(REPO / "locustfile.py"),
        "--headless",
        "--host",
        host,
        "-u",
        str(users),
        "-r",
        str(spawn_rate or users),
        "-t",
        run_time,
        "--results-dir",
        str(results_dir),
        "--run-id",
        run_id,
        "--only-summary",
        *args,
    ]
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


def scrape_settled(url: str, before: Scrape, counter: str, expected: float, timeout: float = 15.0) -> Scrape:
    """The delta since `before`, once `counter` has moved by `expected` (servers record a request's
    metrics a moment after its last byte; vLLM's output loop does) or the timeout passed."""
    deadline = time.monotonic() + timeout
    while True:
        delta = scrape(url) - before
        if delta.total(counter) >= expected or time.monotonic() > deadline:
            return delta
        time.sleep(0.2)
