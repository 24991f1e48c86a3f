"""What a bench starts beside the suite: a free port on 127.0.0.1, and the built-in simulator on
one (its URL read from the line it prints when it listens), stopped when the bench is done."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the benches that import this module put only bench/ on the path

from core.server_process import ServerProcess  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def simulator(*args: str):
    """The simulator (`python -m simulator --port 0 ARGS`), yielding its URL (read from the line it
    prints when it listens); stopped at the end (SIGTERM to its process group, SIGKILL after 30 s)."""
    with tempfile.TemporaryDirectory(prefix="bench-simulator-") as tmp:
        server = ServerProcess(
            [sys.executable, "-m", "simulator", "--port", "0", *args],
            os.path.join(tmp, "simulator.log"),
            name="the simulator",
            cwd=ROOT,
            ready_line=r"listening on (?P<url>\S+)",
            stop_timeout=30,
        )
        with server.start(timeout=60):
            yield server.url
