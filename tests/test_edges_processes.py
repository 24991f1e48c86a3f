"""`--processes N` with bad input: the refusal is one line and exit 2, and the forked workers end
with it. Locust forks them before the suite sees the options, and its own clean-up takes a running
child for an ended one, so they used to wait a minute for a master's heartbeat, holding the
terminal's pipe open (a CI step waited that minute) and printing after the prompt came back."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.helpers import ROOT, own_master_port

pytestmark = pytest.mark.process


def test_a_refused_run_with_forked_workers_ends_at_once_with_them(tmp_path):
    run_id = f"refused-{uuid.uuid4().hex[:8]}"  # marks this run's processes
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(Path(ROOT) / "locustfile.py"),
        "--headless",
        *own_master_port(
            [
                "--processes",
                "2",
                "-u",
                "2",
                "-t",
                "5s",
                "--host",
                "http://127.0.0.1:9",
                "--slo",
                "ttft.p95<abc",
                "--results-dir",
                str(tmp_path),
                "--run-id",
                run_id,
            ]
        ),
    ]
    t0 = time.monotonic()
    # capture_output reads the pipes to their end: it returns only when every forked worker has closed them
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert errors == ["error: --slo: 'ttft.p95<abc': threshold 'abc' is not a duration; write e.g. 5s or 80ms"], (
        proc.stderr
    )
    assert took < 20, f"the refused run held its output open for {took:.0f} s (forked workers left behind)"
    left = [p for p in psutil.process_iter(["cmdline"]) if run_id in " ".join(p.info["cmdline"] or [])]
    assert not left, f"processes of the refused run still running: {[p.pid for p in left]}"
    assert "Didn't get heartbeat" not in proc.stderr + proc.stdout
