"""What a bench starts beside the suite: a free port on 127.0.0.1, and the built-in simulator on
one (its URL read from the line it prints when it listens), stopped when the bench is done."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def simulator(*args: str):
    """The simulator (`python -m simulator --port 0 ARGS`), yielding its URL; SIGTERM at the end."""
    sim = subprocess.Popen([sys.executable, "-m", "simulator", "--port", "0", *args], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        line = sim.stdout.readline()
        if "listening on " not in line:
            raise RuntimeError(f"the simulator did not start: {line!r}")
        yield line.split("listening on ", 1)[1].split()[0]
    finally:
        if sim.poll() is None:
            sim.send_signal(signal.SIGTERM)
            sim.wait(timeout=30)
