"""One ordinary run of the suite against one server: `locust -f locustfile.py --headless` as a
child process in a process group of its own, its results folder under the point's folder, bounded
in time, and stopped at once when the server it measures dies.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from core.durations import duration_s
from core.errors import InputError
from core.server_process import ServerProcess
from metrics.schema import load_summary
from runfolder.layout import SUMMARY
from sweeps.server_metrics import fill_server_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCUSTFILE = os.path.join(ROOT, "locustfile.py")
RUN_ID = "run"  # the point's results folder: <point folder>/run
LOAD_LOG = "locust.log"
# Options a sweep sets itself for every run: the target and where the results go.
OWN = ("--host", "-H", "--results-dir", "--run-id", "--overwrite", "-f", "--locustfile", "--headless")
SLACK_S = 120.0  # beyond the load's own run time: start, the drain (--stop-timeout), the report
UNKNOWN_RUN_S = 1800.0  # bound of a run whose length the load arguments do not say


@dataclass
class LoadResult:
    exit_code: int | None  # None: stopped by the sweep (the server died, or the bound passed)
    folder: str
    seconds: float
    server_exit: int | None = None  # the server's exit code when it died during the run
    timed_out: bool = False


def check_load_args(args: list[str]) -> None:
    for a in args:
        name = a.split("=", 1)[0]
        if name in OWN:
            raise InputError(
                f"{name} after --: the sweep sets it for each run (the server's URL, the point's results "
                "folder); leave it out of the load arguments"
            )


def run_time_s(args: list[str]) -> float | None:
    """The load's -t / --run-time in seconds, when the arguments give one."""
    for i, a in enumerate(args):
        value = None
        if a in ("-t", "--run-time") and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith("--run-time="):
            value = a.split("=", 1)[1]
        if value is not None:
            try:
                return duration_s(value)
            except ValueError:
                raise InputError(f"-t {value}: not a duration; give e.g. 60s, 10m") from None
    return None


def has_option(args: list[str], *names: str) -> bool:
    return any(a in names or a.split("=", 1)[0] in names for a in args)


def locust_argv(url: str, point_folder: str, args: list[str], seed: int | None) -> list[str]:
    args = fill_server_metrics(args, url)
    argv = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        LOCUSTFILE,
        "--headless",
        "--host",
        url,
        "--results-dir",
        point_folder,
        "--run-id",
        RUN_ID,
        "--overwrite",
        *args,
    ]
    if seed is not None and not has_option(args, "--seed"):
        argv += ["--seed", str(seed)]
    return argv


def is_complete(point_folder: str) -> bool:
    """A results folder whose run ended as asked: summary.json written and not marked partial."""
    path = os.path.join(point_folder, RUN_ID, SUMMARY)
    if not os.path.isfile(path):
        return False
    try:
        return load_summary(path).complete
    except InputError:
        return False


def run_load(
    url: str,
    point_folder: str,
    args: list[str],
    *,
    seed: int | None,
    bound_s: float,
    server: ServerProcess | None = None,
) -> LoadResult:
    """Runs the load to its end; stops it (SIGINT, then SIGKILL to its group) when `bound_s` passes
    or the server exits. Locust's output goes to the point's locust.log."""
    os.makedirs(point_folder, exist_ok=True)
    argv = locust_argv(url, point_folder, args, seed)
    t0 = time.monotonic()
    with open(os.path.join(point_folder, LOAD_LOG), "wb") as log:
        log.write(f"$ {shlex.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    folder = os.path.join(point_folder, RUN_ID)
    try:
        while True:
            code = proc.poll()
            if code is not None:
                return LoadResult(code, folder, time.monotonic() - t0)
            dead = server.proc.poll() if server is not None and server.proc is not None else None
            if dead is not None:
                _stop(proc)
                return LoadResult(None, folder, time.monotonic() - t0, server_exit=dead)
            if time.monotonic() - t0 > bound_s:
                _stop(proc)
                return LoadResult(None, folder, time.monotonic() - t0, timed_out=True)
            time.sleep(0.2)
    finally:
        if proc.poll() is None:  # interrupted (Ctrl-C of the sweep): never leave a load running
            _stop(proc)


def _stop(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGINT first: the run writes what it measured, marked complete: false; then SIGKILL."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(10)
