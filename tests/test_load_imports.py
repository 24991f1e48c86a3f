"""What a process that only drives load imports: the locustfile, as a worker loads it, imports no
pandas (a fifth of a second of CPU per process start, and 300 modules); the process that writes
results loads it at init (plugin/hooks.py), before any run, never mid-run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.process

CHECK = """
import sys
import locust.main  # as the locust command does
import locustfile
assert "pandas" not in sys.modules, "the locustfile loaded pandas"
import plugin.run  # the results side's module itself does not either
assert "pandas" not in sys.modules, "plugin.run loaded pandas"
print("ok")
"""


def test_the_locustfile_loads_no_pandas():
    out = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr[-2000:]
