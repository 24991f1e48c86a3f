"""The built-in simulator as the default target: started when no --host is given.

It runs as its own process (`python -m simulator`) on a free 127.0.0.1 port, so its CPU time is
not the load generator's, and it is stopped when the run's process exits.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import tempfile

import gevent

START_TIMEOUT_S = 30.0
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class EmbeddedSimulator:
    def __init__(self, profile: str, extra_args: list[str] | None = None, port: int = 0):
        """`port` 0 picks a free one; a restart with another profile asks for the same port, so the
        address in the web form stays right."""
        self.profile = profile
        cmd = [sys.executable, "-m", "simulator", "--host", "127.0.0.1", "--port", str(port), "--profile", profile]
        self.log = tempfile.NamedTemporaryFile("w+", prefix="simulator-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            cmd + (extra_args or []), cwd=ROOT, stdout=subprocess.PIPE, stderr=self.log, text=True
        )
        atexit.register(self.stop)
        self.url = self._read_url()
        self.port = int(self.url.rsplit(":", 1)[1])
        gevent.spawn(self.proc.stdout.read)  # keep its stdout drained so it never blocks on a full pipe

    def _read_url(self) -> str:
        line = ""
        with gevent.Timeout(START_TIMEOUT_S, False):
            line = self.proc.stdout.readline()  # "simulator listening on http://HOST:PORT profile=NAME"
        if "listening on " not in line:
            self.stop()
            self.log.seek(0)
            err = self.log.read().strip().splitlines()
            raise RuntimeError(err[-1] if err else f"the simulator did not start within {START_TIMEOUT_S:g}s")
        return line.split("listening on ", 1)[1].split()[0]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
