"""How a configuration's server is started: a command template filled per point, or the built-in
simulator with the point's settings written as profile fields over a base profile, or a server
already running at a URL (nothing to start). Each start goes through core's `ServerProcess`, so a
failed start is told apart and classified the same way everywhere.
"""

from __future__ import annotations

import os
import random
import shlex
import sys
from dataclasses import dataclass

import yaml

from core.errors import InputError
from core.ports import FIRST_PORT, ephemeral_start, first_free
from core.server_process import ServerProcess
from simulator.profiles import profile_fields, profile_from_dict
from sweeps.grid import Point, fill

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER_LOG = "server.log"
PROFILE_FILE = "profile.yaml"
TRUTH_LOG = "truth.jsonl"


def free_port() -> int:
    """A free 127.0.0.1 port below the kernel's ephemeral range (core/ports.py says why)."""
    top = max(FIRST_PORT + 100, ephemeral_start())
    port = first_free(random.randrange(FIRST_PORT, top) for _ in range(200))
    if port is None:
        raise RuntimeError("no free port below the ephemeral range among 200 tried")
    return port


@dataclass
class Launch:
    """What starts one configuration at one point: `process` None for a server already running."""

    url: str
    process: ServerProcess | None
    command: str  # as printed by --dry-run and recorded in the journal


class TemplateServer:
    """A command template, e.g. 'vllm serve M --port {port} --max-num-seqs {max_num_seqs}': filled
    with the point's values as written and a free port, split like a shell would (no shell runs)."""

    kind = "template"

    def __init__(self, template: str, start_timeout: float):
        self.template, self.start_timeout = template, start_timeout

    def prepare(self, point: Point, folder: str, port: int | None = None) -> Launch:
        port = port or free_port()
        command = fill(self.template, point, port)
        argv = shlex.split(command)
        url = f"http://127.0.0.1:{port}"
        proc = ServerProcess(
            argv, os.path.join(folder, SERVER_LOG), name="server", url=url, start_timeout=self.start_timeout
        )
        return Launch(url, proc, command)


class SimulatorServer:
    """The built-in simulator: the base profile's fields with the point's settings over them,
    written as the point's profile.yaml; its truth log kept beside it."""

    kind = "simulator"

    def __init__(self, base: str, start_timeout: float, extra: dict | None = None):
        self.base_name, self.base = base, profile_fields(base)[0]
        self.extra = dict(extra or {})
        self.label = ", ".join(f"{k}={v}" for k, v in self.extra.items()) or "its own fields"
        self.start_timeout = start_timeout

    def fields(self, point: Point) -> dict:
        return {**self.base, **self.extra, **point.values}

    def check(self, point: Point, option: str = "--param") -> None:
        """The point's profile is valid: an unknown field or a bad value is one line before any start."""
        try:
            profile_from_dict(self.fields(point), self.base_name)
        except InputError as e:
            raise InputError(f"{option} ({point.label}): {e}" if point.texts else f"{option}: {e}") from None

    def prepare(self, point: Point, folder: str, port: int | None = None) -> Launch:
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, PROFILE_FILE)
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"# {self.base_name} with {point.label}\n")
            yaml.safe_dump(self.fields(point), f, sort_keys=False)
        port = port or free_port()
        argv = [
            sys.executable,
            "-m",
            "simulator",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--profile",
            path,
            "--truth-log",
            os.path.join(folder, TRUTH_LOG),
        ]
        proc = ServerProcess(
            argv,
            os.path.join(folder, SERVER_LOG),
            name="simulator",
            url=f"http://127.0.0.1:{port}",
            cwd=ROOT,
            start_timeout=self.start_timeout,
        )
        return Launch(proc.url, proc, shlex.join(argv))


class RunningServer:
    """A server someone else runs: nothing to start or stop, and no setting to change."""

    kind = "url"

    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def prepare(self, point: Point, folder: str, port: int | None = None) -> Launch:
        return Launch(self.url, None, f"(running at {self.url})")
