"""Locustfile for bench/vllm_agreement.py: the suite, stopped after exactly N requests.

`vllm bench serve` sends a fixed number of prompts (--num-prompts) at a fixed concurrency and ends
when the last one has finished. Locust has no request-count limit, so this locustfile adds one
without touching the suite: the users are the suite's own (plugin.users.LLMUser, the same hot path,
records and results), and a shared counter lets exactly AGREEMENT_REQUESTS requests start; the
user that completes the last one quits the runner, which ends the run through the suite's usual
stop/drain/finish path. As in vllm bench, the last requests drain at falling concurrency.

    AGREEMENT_REQUESTS=200 locust -f bench/vllm_agreement_locustfile.py --headless -u 8 -r 1000 -t 10m ...
"""

from __future__ import annotations

import os
import sys

import gevent

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import plugin.hooks  # noqa: F401  options, results, event wiring
from plugin.users import LLMUser

LIMIT = int(os.environ.get("AGREEMENT_REQUESTS", "100"))
# bench/gpu_agreement.py pair runs: this file appears when the first request starts, and the
# reference client, waiting for it, starts its own then (both measure one server state)
STARTED_FILE = os.environ.get("AGREEMENT_STARTED_FILE", "")
_state = {"started": 0, "finished": 0}


class FixedCountUser(LLMUser):
    """Closed loop like ConfiguredUser, until LIMIT requests have been started in this process.

    The limit sits in send_request: Locust would run LLMUser's own task even if this class
    declared another one (tasks of base classes are merged)."""

    def send_request(self, request, *args, **kwargs):
        if _state["started"] >= LIMIT:
            gevent.sleep(0.05)  # done: wait for the last in-flight requests and the quit
            return None
        _state["started"] += 1
        if _state["started"] == 1 and STARTED_FILE:
            open(STARTED_FILE, "w").close()
        rec = super().send_request(request, *args, **kwargs)
        _state["finished"] += 1
        if _state["finished"] == LIMIT:
            gevent.spawn(self.environment.runner.quit)
        return rec
