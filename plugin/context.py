"""Per-process run state that virtual users read: the plan, sampler, pacer, token counter, model, record sink.

Built at `test_start` (on a worker that is when the master's option values arrive: Locust sends
them only in its spawn message), once per process and per run, never at import: `--processes`
forks after the locustfile is imported, which would copy anything built there into every process.
"""

from __future__ import annotations

import itertools
import logging
import random
import secrets
from dataclasses import replace

import orjson
from gevent.event import Event

from core.errors import InputError
from plugin.plan import RunPlan
from plugin.request_budget import budget_pacer
from workloads import Sampler, load_spec
from workloads.bodies import body as request_body
from workloads.bodies import expected_results
from workloads.endpoints import ENDPOINTS, NAMES
from workloads.token_prompts import TokenSizedSampler

log = logging.getLogger("llm")


def load_workload(plan: RunPlan):
    try:
        spec = load_spec(plan.workload)
    except InputError as e:
        raise InputError(f"--workload: {e}") from None
    if not ENDPOINTS[plan.endpoint].attachments:  # tools and images go in chat messages or Responses items
        carriers = " or ".join(name for name in NAMES if ENDPOINTS[name].attachments)
        for c in spec.classes.values():
            if c.tools is not None or c.images is not None:
                raise InputError(
                    f"--endpoint {plan.endpoint}: class '{c.name}' of the workload has tools or images, "
                    f"which need --endpoint {carriers}"
                )
    return spec


class RunContext:
    """What every virtual user of this process shares during one run."""

    def __init__(
        self,
        plan: RunPlan,
        inputs,
        run_id: str,
        worker_index: int,
        sink,
        run_start: float,
        processes: int = 1,
        environment=None,
    ):
        self.plan = plan
        self.run_id = run_id
        self.sink = sink
        # the run's inputs (plugin.run_start.RunInputs), read once with the plan (a worker's: those its master sent)
        self.spec = inputs.workload
        # --max-tokens-override is decided where a request is drawn: by the sampler, and here, once,
        # for a replayed trace's requests; their bodies and records read the request's max_tokens
        self.trace = inputs.trace
        if self.trace is not None and plan.max_tokens_override:
            self.trace = replace(
                self.trace, requests=tuple(replace(r, max_tokens=plan.max_tokens_override) for r in self.trace.requests)
            )
        seed = plan.seed + worker_index if plan.seed is not None else None
        self.sampler = Sampler(self.spec, seed, plan.max_tokens_override)
        if (
            plan.input_tokens is not None
        ):  # --input-tokens: each prompt cut to a drawn token count by the client's count
            self.sampler = TokenSizedSampler(self.sampler, *plan.input_tokens, inputs.tokenizer, seed)
        self.run_start = run_start  # wall clock, the master's test start: steps are cut on it
        self.step_s = plan.step_s
        self.in_flight = 0  # requests of this process on the wire now
        self.streams: dict = {}  # their Exchange -> RequestRecord (the web UI counts what arrived so far)
        self.stopping = Event()  # set when the run begins to stop: open-loop users send nothing more
        self._sessions = itertools.count()
        self.pacer = plan.load.pacer(self, worker_index, processes, environment)  # the load model says when and which
        self.pacer = budget_pacer(
            self.pacer, plan, worker_index, processes, self.stopping, environment
        )  # --num-requests
        self.count_tokens = inputs.tokenizer.count if inputs.tokenizer is not None else None
        self.tag = f"{run_id}-w{worker_index}-{secrets.token_hex(2)}"
        self._ids = itertools.count()
        self.rng = random.Random(seed)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if plan.api_key:
            headers["Authorization"] = f"Bearer {plan.api_key}"
        if plan.sim_timestamps:
            headers["X-Sim-Timestamps"] = "1"
        self.headers = headers
        extras = {}
        if plan.ignore_eos:
            extras["ignore_eos"] = True
        if plan.min_tokens is not None:
            extras["min_tokens"] = plan.min_tokens
        extras.update(plan.extra)
        self.extras = extras

    def step_at(self, wall: float) -> int:
        return int((wall - self.run_start) // self.step_s) if self.step_s else -1

    def next_request_id(self) -> str:
        return f"{self.tag}-{next(self._ids)}"

    def next_session_id(self) -> str:
        return f"{self.tag}-s{next(self._sessions)}"

    def body(self, endpoint: str, request) -> tuple[bytes, int]:
        """The JSON request body for one sampled request (workloads/bodies.py), with --extra-body, and
        the results its reply must hold (embeddings, rerank; 0 for generation)."""
        s = self.plan
        body = request_body(endpoint, request, s.model, s.stream)
        body.update(self.extras)
        return orjson.dumps(body), expected_results(endpoint, body)
