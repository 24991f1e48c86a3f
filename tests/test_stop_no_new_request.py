"""No user starts a request once the run is stopping.

Locust kills a user that is between two tasks when the stop comes, but the kill is a callback of
the event loop: a user whose last task ended in the same turn of the loop is resumed first, and
began its next request before the kill reached it. That request was cut at once and recorded
`stopped` though the server answered it (a worker starved of CPU, where every reply and the
master's drain land in one turn, showed it in the fault matrix). Here the turn is made on purpose:
every user's request ends, and the stop begins, before any of them is resumed. The users are the
suite's own (`LLMUser.send`); only the request itself is replaced by a stand-in that counts it.
"""

from __future__ import annotations

import types

import gevent
import pytest
from gevent.event import Event
from locust.env import Environment

from plugin.load_models.base import ClosedPacer
from plugin.users import FailurePacing, LLMUser

pytestmark = pytest.mark.unit

USERS = 20


def run_until_stop(stop_timeout: float):
    """USERS users, each in its request; the requests all end, and the stop begins before any user
    is resumed. Returns (requests sent before the stop, requests sent after it)."""
    release, stopping = Event(), Event()
    sent = {"before": 0, "after": 0}

    class Sampler:
        def next(self):
            return types.SimpleNamespace(turns=0)  # one request, not a conversation

    ctx = types.SimpleNamespace(stopping=stopping)

    class Probe(LLMUser):
        host = "http://127.0.0.1:9"  # never dialled: the request is the stand-in below

        def on_start(self):
            self.ctx = ctx
            self.failures = FailurePacing()
            self.last_exchange = None

        def send_request(self, request, t_intended=float("nan"), **_kw):
            sent["after" if stopping.is_set() else "before"] += 1
            release.wait()  # the reply: all of them come together

    ctx.pacer = ClosedPacer(Sampler())
    env = Environment(user_classes=[Probe], stop_timeout=stop_timeout)
    env.events.test_stopping.add_listener(lambda **_kw: stopping.set())  # as the suite's hook does, first
    runner = env.create_local_runner()
    runner.start(USERS, spawn_rate=USERS * 100)
    with gevent.Timeout(10):
        while sent["before"] < USERS:
            gevent.sleep(0.01)
    release.set()  # every user is resumed by one callback, ends its task and yields between tasks ...
    gevent.sleep(0)  # ... all of them before this greenlet runs again
    with gevent.Timeout(10):
        runner.stop()  # the users are between tasks: killed by callbacks queued behind their own
    runner.greenlet.kill(block=True)
    return sent["before"], sent["after"]


@pytest.mark.parametrize("stop_timeout", [30.0, 0.0], ids=["graceful", "at-once"])
def test_no_user_starts_a_request_after_the_stop_began(stop_timeout):
    before, after = run_until_stop(stop_timeout)
    assert before == USERS
    assert after == 0, f"{after} requests started after the stop began ({USERS} users)"
