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


DISPATCH = """
from locust import User
from locust.dispatch import UsersDispatcher
from locust.runners import WorkerNode
{fix}

class U(User):
    pass

def dispatch(d, users):
    d.new_dispatch(users, users)  # as the master's runner.start does, then runs the generator out
    out = None
    for out in d:
        pass
    return out

a, b = WorkerNode("a"), WorkerNode("b")
d = UsersDispatcher([a, b], [U])
assert dispatch(d, 10) == {{"a": {{"U": 5}}, "b": {{"U": 5}}}}
d.remove_worker(a)  # a froze: its users move to b
assert dispatch(d, 10) == {{"b": {{"U": 10}}}}
print("in progress" if d.dispatch_in_progress else "ended")  # the master dispatches again on a's return only when ended
d.add_worker(a)
print(dispatch(d, 10))
"""


@pytest.mark.parametrize("fixed", [False, True])
def test_a_rebalance_that_keeps_the_user_count_ends_its_dispatch(fixed):
    """Without the fix the dispatch stays "in progress" after one rebalance, and Locust's master
    gives a worker back from a freeze no users (the other one keeps its 10: 15 in all)."""
    fix = "import plugin.hooks" if fixed else ""
    out = subprocess.run([sys.executable, "-c", DISPATCH.format(fix=fix)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    state, after = out.stdout.strip().splitlines()
    assert state == ("ended" if fixed else "in progress")
    assert after == "{'a': {'U': 5}, 'b': {'U': 5}}"
