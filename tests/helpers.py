"""Starting the real pieces for tests: the simulator process and Locust processes (local, master,
workers), and reading what they wrote. Every process is bounded in time and killed at the end."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager

import pyarrow.parquet as pq

from core.ports import FIRST_PORT, ephemeral_start, first_free
from core.server_process import ServerProcess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCUST = [sys.executable, "-m", "locust", "-f", os.path.join(ROOT, "locustfile.py")]
_next_port = None  # free_port's walk through this process's slice


@contextmanager
def simulator(*args: str, truth_log: str | None = None, host: str = "127.0.0.1", port: int = 0, wrap=None):
    """A real simulator process (on a free 127.0.0.1 port by default); yields its base URL, read from
    the line it prints when it listens. `wrap(cmd)` runs it elsewhere, e.g. inside a network namespace.
    Started and stopped as every server is (core/server_process.py), its output in a log of its own."""
    cmd = [sys.executable, "-m", "simulator", "--host", host, "--port", str(port), *args]
    if truth_log:
        cmd += ["--truth-log", truth_log]
    if wrap is not None:
        cmd = wrap(cmd)
    with tempfile.TemporaryDirectory(prefix="test-simulator-") as tmp:
        server = ServerProcess(
            cmd,
            os.path.join(tmp, "simulator.log"),
            name="the simulator",
            cwd=ROOT,
            ready_line=r"listening on (?P<url>\S+)",
            start_timeout=60,
            stop_timeout=10,
        )
        with server.start():
            yield server.url


def own_master_port(args) -> list[str]:
    """`args` with a free master port of its own when they start a master (`--master`, or
    `--processes`, whose forked workers dial `--master-port`): Locust's default 5557 is one port for
    every test of the machine, and a worker of one test would join another's master."""
    args = list(args)
    if ("--master" in args or "--processes" in args) and "--master-bind-port" not in args:
        port = str(free_port())
        args += ["--master-bind-port", port] + (["--master-port", port] if "--processes" in args else [])
    return args


def run_locust(*args: str, timeout: float = 180, env: dict | None = None) -> subprocess.CompletedProcess:
    """One headless Locust process to completion."""
    return subprocess.run(
        [*LOCUST, "--headless", *own_master_port(args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def start_locust(*args: str, log_path: str | None = None, wrap=None) -> subprocess.Popen:
    out = open(log_path, "w") if log_path else subprocess.DEVNULL
    cmd = [*LOCUST, *own_master_port(args)]
    if wrap is not None:
        cmd = wrap(cmd)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # tests watch the log as it is written
    return subprocess.Popen(
        cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True, env=env, preexec_fn=_default_sigint
    )


def load_options(url: str, results_dir, run_id: str, users: int, seconds: int, stop_timeout: int) -> tuple[str, ...]:
    """A run's load and where it goes: `users` users, all started at once, for `seconds` against
    `url`, its results in `results_dir`/`run_id`, streams in flight at the end given `stop_timeout`
    seconds to finish."""
    return (
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        f"{seconds}s",
        "--host",
        url,
        "--results-dir",
        str(results_dir),
        "--run-id",
        run_id,
        "--stop-timeout",
        str(stop_timeout),
    )


class Cluster:
    """A Locust master and its workers, as `master_and_workers` started them."""

    def __init__(self, start, host: str, port: int):
        self._start, self.host, self.port = start, host, port
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []

    def start_worker(self, *args: str, **kw) -> subprocess.Popen:
        """One more worker of this master (`args` after the options that connect it), ended with it."""
        proc = self._start("--worker", "--master-host", self.host, "--master-port", str(self.port), *args, **kw)
        self.workers.append(proc)
        return proc


def _kill(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(5)


@contextmanager
def master_and_workers(
    *args: str,
    expect_workers: int,
    worker_logs=(),
    host: str = "127.0.0.1",
    port: int | None = None,
    headless: bool = True,
    start=start_locust,
    kill=_kill,
    **kw,
):
    """A Locust master listening on `host`:`port` (a free port by default) for `expect_workers`
    workers, `args` after its own options, started by `start` with `kw` (log_path, cwd, wrap, ...);
    then one worker for each of `worker_logs` (its log path, or None for none), and more through
    the yielded Cluster's `start_worker`. Whatever the test does meanwhile, every one of them still
    running at the end is ended by `kill`: none outlives its test to load the machine or hold a port."""
    cluster = Cluster(start, host, free_port() if port is None else port)
    cluster.master = start(
        "--master",
        *(("--headless",) if headless else ()),
        "--master-bind-host",
        host,
        "--master-bind-port",
        str(cluster.port),
        "--expect-workers",
        str(expect_workers),
        *args,
        **kw,
    )
    try:
        for log_path in worker_logs:
            cluster.start_worker(log_path=log_path)
        yield cluster
    finally:
        for proc in (cluster.master, *cluster.workers):
            if proc.poll() is None:
                kill(proc)


def _default_sigint() -> None:
    """Ctrl-C reaches Locust as it would in a terminal. A shell without job control starts its
    background jobs with SIGINT ignored, and that is inherited: tests run that way would see
    Locust ignore the SIGINT a test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def free_port() -> int:
    """A 127.0.0.1 TCP port nobody listens on, for a process the test starts to bind later.

    Not the kernel's pick (bind to port 0): that comes from the ephemeral range, from which every
    outgoing connection on the machine draws its local port too, so between the pick and the
    server's bind another test's connection could take it (a Locust master once failed so: "Address
    already in use"). The kernel hands out no port below that range; each test process
    (pytest-xdist worker) walks its own slice of them from a random start, so no two processes of a
    run pick the same one, and skips any it cannot bind (listened on, or still in TIME_WAIT)."""
    global _next_port
    if _next_port is None:
        ephemeral = ephemeral_start()
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
        size = (ephemeral - FIRST_PORT) // count
        if size < 100:
            raise RuntimeError(
                f"ports {FIRST_PORT}..{ephemeral} are too few for {count} test processes: "
                "net.ipv4.ip_local_port_range starts too low (tests/helpers.py free_port)"
            )
        ports, start = range(FIRST_PORT + index * size, FIRST_PORT + (index + 1) * size), random.randrange(size)
        _next_port = itertools.cycle([*ports[start:], *ports[:start]])
    port = first_free(itertools.islice(_next_port, 1000))
    if port is None:
        raise RuntimeError("no free port among 1,000 tried (tests/helpers.py free_port)")
    return port


def read_results(results_dir: str, run_id: str):
    path = os.path.join(results_dir, run_id)
    table = pq.read_table(os.path.join(path, "requests.parquet"))
    with open(os.path.join(path, "summary.json")) as f:
        summary = json.load(f)
    return table.to_pandas(), summary


def read_truth(path: str) -> list[dict]:
    deadline = time.monotonic() + 5
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.1)
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def stop(proc: subprocess.Popen, timeout: float = 30) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        raise


def wait_for_lines(path: str, n: int, timeout: float = 60) -> None:
    """Until the file (a truth log) has at least n lines: the load has really begun."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path) as f:
                if sum(1 for _ in f) >= n:
                    return
        time.sleep(0.2)
    raise AssertionError(f"{path}: fewer than {n} lines after {timeout}s")
