"""plugin/locust_fixes.py, checked in a process of its own: the fixes patch Locust's module and the
hooks register command-line options, neither of which may leak into other tests' parsers."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.process

CHECK = """
from locust import argument_parser

original = argument_parser.default_args_dict
calls = []
def counted():
    calls.append(1)
    return original()
argument_parser.default_args_dict = counted
expected = original()

import plugin.hooks  # applies plugin/locust_fixes.py, as the locustfile does

assert getattr(argument_parser.default_args_dict, "memoized", False)
first = argument_parser.default_args_dict()
assert first == expected
first["host"] = "changed by a caller"  # each caller gets its own copy
for _ in range(100):
    assert argument_parser.default_args_dict() == expected
assert len(calls) == 1, len(calls)
print("ok")
"""


def test_locust_default_args_are_parsed_once_with_the_same_result():
    out = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
