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
    out = subprocess.run(
        [sys.executable, "-c", DISPATCH.format(fix=fix)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    state, after = out.stdout.strip().splitlines()
    assert state == ("ended" if fixed else "in progress")
    assert after == "{'a': {'U': 5}, 'b': {'U': 5}}"


STOPS = """
import time, gevent
from locust import User, task, constant, events
from locust.env import Environment
import plugin.hooks  # applies plugin/locust_fixes.py, as the locustfile does

class InTask(User):  # in a 1 s task nearly all the time
    wait_time = constant(0)
    @task
    def t(self):
        gevent.sleep(1.0)

class Waiting(User):  # between tasks nearly all the time
    wait_time = constant(10)
    @task
    def t(self):
        pass

def stopped(cls, stop_timeout, users=300):
    env = Environment(user_classes=[cls], events=events, stop_timeout=stop_timeout)
    runner = env.create_local_runner()
    runner.start(users, 1e9)
    gevent.sleep(0.2)
    t = time.perf_counter()
    runner.stop()
    return runner, time.perf_counter() - t

for cls, stop_timeout in [(InTask, 0), (InTask, 5), (Waiting, 5), (InTask, 0.3)]:
    runner, took = stopped(cls, stop_timeout)
    print(cls.__name__, stop_timeout, runner.user_count, took)
env = Environment(user_classes=[InTask], events=events, stop_timeout=5)
runner = env.create_local_runner()
runner.start(300, 1e9)
gevent.sleep(0.2)
runner.start(100, 1e9, wait=False)  # a ramp-down: 200 users end their task, then stop
gevent.sleep(1.5)
print("ramp-down", runner.user_count)
"""


def test_the_stop_in_batches_stops_every_user_as_locust_did():
    """Every user gone when the stop returns, after as long as Locust's own stop takes: no stop
    timeout, or a user between tasks, killed at once; a user in its task ends it (0.8 s left of a
    1 s task), or is killed at the stop timeout; a ramp-down stops just the users it names."""
    out = subprocess.run(
        [sys.executable, "-c", STOPS], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.split("\n")
    took = {}
    for line in lines[:4]:
        name, stop_timeout, left, seconds = line.split()
        assert left == "0", line
        took[name, float(stop_timeout)] = float(seconds)
    assert took["InTask", 0] < 0.5 and took["Waiting", 5] < 0.5, took  # killed at once
    assert 0.7 < took["InTask", 5] < 2.0, took  # waited for the task's end, 0.8 s away
    assert 0.3 <= took["InTask", 0.3] < 1.0, took  # killed at the stop timeout
    assert lines[4] == "ramp-down 100", out.stdout


MASTER_STOPS = """
import gevent
from gevent.event import Event
from locust import User, events
from locust.env import Environment
from locust.runners import STATE_RUNNING
{fix}
from tests.helpers import free_port

class U(User):
    pass

env = Environment(user_classes=[U], events=events)
runner = env.create_master_runner("127.0.0.1", free_port())
runner.update_state(STATE_RUNNING)
drained = Event()
seen = []

def stopping(**kw):  # the suite's hook: the first stop drains the workers, a later one returns at once
    seen.append("stopping")
    if seen.count("stopping") == 1:
        drained.wait()

events.test_stopping.add_listener(stopping)
events.test_stop.add_listener(lambda **kw: seen.append("stop"))
first = gevent.spawn(runner.quit)  # a replay's end: its drain waits inside test_stopping
gevent.sleep(0.1)
again = gevent.spawn(runner.quit)  # -t, or the replay's watch of lost workers, meanwhile
stop = gevent.spawn(runner.stop)  # the heartbeat's "last worker went missing"
gevent.sleep(0.3)
print("before the drain ended:", ",".join(seen))
drained.set()
gevent.joinall([first, again, stop], timeout=5)
print("after:", ",".join(seen))
"""


@pytest.mark.parametrize("fixed", [False, True])
def test_a_second_stop_or_quit_while_a_master_drains_waits_for_the_drain(fixed):
    """Without the fix a second quit during the first one's drain (inside test_stopping, while
    Locust's state still says running) fires test_stop at once: the run's results were written
    with only the records the drain had received (20 of 40, exit 0)."""
    fix = "import plugin.hooks" if fixed else ""
    out = subprocess.run(
        [sys.executable, "-c", MASTER_STOPS.format(fix=fix)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    before, after = (line for line in out.stdout.splitlines() if line.startswith(("before", "after")))
    if fixed:
        assert before == "before the drain ended: stopping", out.stdout
        assert after == "after: stopping,stop", out.stdout
    else:
        assert "stop" in before.split(": ")[1].split(","), out.stdout  # the run ended before its drain
