"""The built-in simulator as the default target: started when no --host is given.

It runs as its own process (`python -m simulator`) on a free 127.0.0.1 port, so its CPU time is
not the load generator's, and it is stopped when the run's process exits. Its output goes to a
log file in the temporary folder; the line it prints when it listens gives its address.
"""

from __future__ import annotations

import atexit
import os
import sys
import tempfile

from core.server_process import ServerProcess, ServerStartError

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READY_LINE = r"listening on (?P<url>\S+)"  # "simulator listening on http://HOST:PORT profile=NAME"


class EmbeddedSimulator:
    def __init__(self, profile: str, extra_args: list[str] | None = None, port: int = 0):
        """`port` 0 picks a free one; a restart with another profile asks for the same port, so the
        address in the web form stays right."""
        self.profile = profile
        cmd = [sys.executable, "-m", "simulator", "--host", "127.0.0.1", "--port", str(port), "--profile", profile]
        fd, log_path = tempfile.mkstemp(prefix="simulator-", suffix=".log")
        os.close(fd)
        self.server = ServerProcess(
            cmd + (extra_args or []),
            log_path,
            name="the simulator",
            cwd=ROOT,
            ready_line=READY_LINE,
            stop_timeout=STOP_TIMEOUT_S,
        )
        atexit.register(self.stop)
        try:
            self.server.start(START_TIMEOUT_S)
        except ServerStartError as e:
            # the simulator's own one-line error (a bad profile, a port in use) is its log's last line
            lines = e.log_tail.strip().splitlines()
            raise RuntimeError(
                lines[-1] if lines else f"the simulator did not start within {START_TIMEOUT_S:g}s"
            ) from None
        self.url = self.server.url
        self.port = int(self.url.rsplit(":", 1)[1])

    def stop(self) -> None:
        self.server.stop()


def scrape_when_target(plan, simulator: EmbeddedSimulator | None, host: str):
    """The plan with the built-in simulator's /metrics to scrape when the simulator is the run's
    target and no --server-metrics was given: its gauges (running, waiting, KV cache) and scheduler
    limits are what the knee's diagnosis reads. One decision for a headless run (at init) and for
    every start from the web form (webui/start_check.py), whose plan is built again from the
    options: the form's runs were not scraped, and had no diagnosis."""
    if simulator is not None and host.rstrip("/") == simulator.url and not plan.server_metrics:
        return plan.with_server_metrics((simulator.url + "/metrics",))
    return plan
