"""The engine model: the step arithmetic of a continuous-batching server.

This module has no I/O and no clock.  :class:`BatchEngine.step` plans one
engine step from the current state, advances the state to the end of that
step and returns the step's duration plus the sequences that emitted a token
at its end.  The real-time runner (``simulator.runtime``) sleeps for the
duration and then writes the chunks; the virtual-time driver
(``simulator.virtual``) just adds the duration to its clock.  Both call the
same ``step``; nothing else computes timing.  The KV cache (blocks, prefix
cache) is ``simulator.kv_cache``; the engine calls it where a step touches KV:
admission, a running sequence's growth, its end, its preemption.

A sequence's tokens are its prompt and the tokens generated so far; a step
computes some of those not yet computed (the whole rest, a chunk of it, or the
one token a decode step feeds back) and emits a new token when it has computed
them all.  A sequence holds KV blocks for the tokens it has computed.

One step
--------
``chunked`` (vLLM V1):

1. *Running* sequences, oldest first, each take the tokens they have left to
   compute (1 for a decoding sequence, the rest of a prompt or a chunk of it)
   within the per-step budget ``max_num_batched_tokens``, and the blocks those
   tokens need.  When no block is free, the newest running sequence is
   *preempted*: its blocks are freed, its computed tokens forgotten, and it
   goes back to the front of the waiting queue, to be computed again (prompt
   and the tokens it had generated) when it is admitted again (recompute, as
   vLLM does); if it was the sequence that needed the block, the step goes on
   without it.
2. *Admission*, unless the step preempted: waiting requests in FIFO order,
   while running < ``max_num_seqs`` and budget is left, each with its
   prefix-cache hits and the blocks of its first chunk.  With ``admission:
   fifo`` a head that does not fit blocks the rest, as in vLLM; with
   ``first_fit`` requests that fit overtake it (up to ``admission_lookahead``
   examined).

``prefill_first`` (vLLM V0): if a waiting request can be admitted, the step is
a prefill-only step of whole prompts (as many as fit the budget and the free
blocks; the first one even if it alone exceeds the budget; decoding sequences
wait); otherwise it is a decode step of every running sequence, preempting as
above when a block is missing.

*Duration*: :func:`step_duration` of the step's decoding sequences, prompt
tokens and decode context.  Sequences that reach ``max_tokens`` finish at the
end of the step and free their blocks.
"""

from __future__ import annotations

import math
from collections import deque

from .kv_cache import KVCache, num_gpu_blocks

UNLIMITED = 1 << 62  # the token budget of a decode-only step (every running sequence decodes)


def step_duration(p, decode_batch: int, prefill_tokens: int, context_tokens: int) -> float:
    """Duration of one engine step (seconds) -- the only timing formula.

    ``step_base_s + per_seq_s * decode_batch + per_prefill_token_s *
    prefill_tokens + per_context_token_s * context_tokens`` plus
    ``prefill_step_base_s`` when the step prefills anything, where
    ``context_tokens`` is the sum of (prompt + generated) tokens over the
    decoding sequences (attention reads the whole KV cache of each).
    ``prefill_step_base_s`` models the extra fixed cost of a step that is not
    a pure decode step (vLLM captures CUDA graphs for decode batches only;
    prefill runs eagerly, paying kernel-launch and tensor-parallel
    synchronisation overhead once per step, whatever the batch).  Tokens
    computed again after a preemption are prompt tokens here.
    """
    return (
        p.step_base_s
        + (p.prefill_step_base_s if prefill_tokens else 0.0)
        + p.per_seq_s * decode_batch
        + p.per_prefill_token_s * prefill_tokens
        + p.per_context_token_s * context_tokens
    )


class Seq:
    """One request inside the engine.

    ``keys``: the prefix-cache keys of its prompt's full blocks (``simulator.prefix``; empty
    without prefix caching).  ``queued_t`` and ``scheduled_t`` are set by the runner: when it
    entered the waiting queue, and the start of the step that first admitted it.
    """

    __slots__ = (
        "prompt_tokens",
        "max_tokens",
        "keys",
        "computed",
        "generated",
        "blocks",
        "shared",
        "registered",
        "preemptions",
        "cached_tokens",
        "admitted",
        "cancelled",
        "owner",
        "queued_t",
        "scheduled_t",
    )

    def __init__(self, prompt_tokens: int, max_tokens: int, owner=None, keys=()):
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.keys = keys
        self.computed = 0  # tokens whose KV the sequence holds
        self.generated = 0
        self.blocks = 0  # KV blocks held (simulator.kv_cache)
        self.shared = []  # ... of which registered prefix blocks
        self.registered = 0  # leading prompt blocks registered or taken from the prefix cache
        self.preemptions = 0
        self.cached_tokens = 0  # prefix-cache hits at its first admission (usage's cached_tokens)
        self.admitted = False
        self.cancelled = False
        self.owner = owner
        self.queued_t = None
        self.scheduled_t = None


class BatchEngine:
    """Continuous-batching state machine (see module docstring)."""

    def __init__(self, profile):
        self.p = profile
        self.kv = KVCache(num_gpu_blocks(profile), profile.block_size, profile.enable_prefix_caching)
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self._n_cancelled = 0
        self.steps = 0
        self.preemptions = 0
        self._finished = False  # an admission's first token was its last (max_tokens 1)
        self.step_tokens = 0  # tokens the last step computed
        self.first_scheduled: list[Seq] = []  # admitted for the first time by the last step

    # -- state changes from outside -------------------------------------
    def add(self, seq: Seq) -> None:
        self.waiting.append(seq)

    def cancel(self, seq: Seq) -> None:
        """The client went away: drop the sequence at the next step."""
        if not seq.cancelled:
            seq.cancelled = True
            self._n_cancelled += 1

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def kv_usage(self) -> float:
        return self.kv.usage()

    # -- the step ---------------------------------------------------------
    def _purge(self) -> None:
        keep = []
        for s in self.running:
            if s.cancelled:
                self.kv.free(s)
            else:
                keep.append(s)
        self.running = keep
        if any(s.cancelled for s in self.waiting):
            self.waiting = deque(s for s in self.waiting if not s.cancelled)
        self._n_cancelled = 0

    def _preempt(self, s: Seq) -> None:
        """Recompute: free ``s``'s blocks and put it at the front of the queue."""
        self.kv.free(s)
        s.computed = 0
        s.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(s)

    def _admissions(self, budget: int, chunked: bool, emitted: list) -> int:
        """Step 2 (module docstring): admit waiting requests and compute their first tokens,
        appending those that emit to ``emitted`` (their token counted); returns the prompt
        tokens computed.
        ``chunked``: a prompt may be split to fit the budget; otherwise prompts are whole and stop
        at the budget, except the first one."""
        p = self.p
        kv = self.kv
        waiting = self.waiting
        running = self.running
        fifo = p.admission == "fifo"
        skipped = []
        looked = 0
        tokens = 0
        while waiting and budget > 0 and len(running) < p.max_num_seqs:
            s = waiting[0]
            hit = kv.lookup(s)
            total = s.prompt_tokens + s.generated
            n = total - len(hit) * kv.block_size
            if chunked:
                if n > budget:
                    n = budget
            elif n > budget and tokens:
                break
            if kv.admit(s, hit, n):
                waiting.popleft()
                running.append(s)
                if not s.admitted:
                    s.admitted = True
                    s.cached_tokens = s.computed
                    if kv.prefix_caching:
                        kv.queries += s.prompt_tokens
                        kv.hits += s.computed
                    self.first_scheduled.append(s)
                budget -= n
                tokens += n
                s.computed += n
                if s.computed == total:
                    emitted.append(s)
                    s.generated += 1
                    if s.generated >= s.max_tokens:
                        self._finished = True
                if kv.prefix_caching and s.keys:
                    kv.register(s)
            elif fifo:
                break
            else:
                skipped.append(waiting.popleft())
                looked += 1
                if looked >= p.admission_lookahead:
                    break
        if skipped:
            waiting.extendleft(reversed(skipped))
        return tokens

    def step(self):
        """Run one step.  Returns ``(duration_s, emitted)``: the sequences
        that emit one token at the end of the step (finished ones included;
        a sequence is finished when ``generated == max_tokens``)."""
        if self._n_cancelled:
            self._purge()
        p = self.p
        kv = self.kv
        self.steps += 1
        if self.first_scheduled:
            self.first_scheduled = []
        emitted: list[Seq] = []
        decode = prefill = ctx = 0
        if p.scheduler == "prefill_first":
            if self.waiting:
                prefill = self._admissions(p.max_num_batched_tokens, False, emitted)
            budget = UNLIMITED if not emitted else 0  # a prefill step decodes nothing
        else:
            budget = p.max_num_batched_tokens
        # Step 1 (module docstring), computed as it is planned: a sequence planned stays planned,
        # as preemption takes the newest, which the loop has not reached yet
        running = self.running
        bs = kv.block_size
        register = kv.prefix_caching
        preempted = done = False
        i = 0
        n_run = len(running)
        while i < n_run and budget > 0:
            s = running[i]
            g = s.generated
            total = s.prompt_tokens + g
            c = s.computed
            if c + 1 == total and g:  # decoding: the token the last step emitted (most steps' all)
                if total > s.blocks * bs and not kv.grow(s, total):
                    self._preempt(running.pop())  # the newest; when that was `s`, the loop ends
                    n_run -= 1
                    preempted = True
                    continue
                i += 1
                budget -= 1
                s.computed = total
                decode += 1
                ctx += total
                emitted.append(s)
                s.generated = g = g + 1
                if g >= s.max_tokens:
                    done = True
                continue
            n = total - c  # a prompt (or a preempted request's tokens), whole or a chunk of it
            if n > budget:
                n = budget
            c += n
            if c > s.blocks * bs and not kv.grow(s, c):
                self._preempt(running.pop())
                n_run -= 1
                preempted = True
                continue
            i += 1
            budget -= n
            s.computed = c
            prefill += n
            if c == total:
                emitted.append(s)
                s.generated = g = g + 1
                if g >= s.max_tokens:
                    done = True
            if register and s.registered < len(s.keys):
                kv.register(s)
        if p.scheduler == "chunked" and not preempted and self.waiting and budget > 0:
            prefill += self._admissions(budget, True, emitted)
        if done or self._finished:
            self._finished = False
            keep = []
            for s in running:
                if s.generated >= s.max_tokens:
                    kv.free(s)
                else:
                    keep.append(s)
            self.running = keep
        self.step_tokens = decode + prefill
        return step_duration(p, decode, prefill, ctx), emitted


class Frontend:
    """Latency of the API-server front end before a request reaches the queue.

    ``frontend_latency_s`` is a fixed part.  With ``frontend_service_s`` > 0
    a queueing part is added.  The API server is one process (one CPU core)
    that serves every request it holds at once: it takes new requests in
    (parsing, chat template, tokenisation) and detokenises and streams the
    tokens of all the others, turn by turn.  A new request's intake work,
    drawn exponential with mean ``frontend_service_s``, is therefore
    stretched by the number of requests in flight (processor sharing: its
    turn comes once per round over all of them) and by the CPU that
    streaming takes, ``u = token_rate * frontend_cpu_per_token_s`` (token
    rate averaged over the last ``FRONTEND_TAU_S`` seconds, capped at
    ``FRONTEND_U_MAX``):

        intake ~ Exponential(mean = frontend_service_s * (1 + in_flight) / (1 - u))

    So TTFT grows with the number of users from the first ones on (as the
    published 8xV100 measurement does: about 20 ms per user), and with an
    exponential tail at every load (its P95 is 2.3-2.8 times its mean).
    """

    FRONTEND_TAU_S = 2.0
    FRONTEND_U_MAX = 0.97

    def __init__(self, profile, rng):
        self.fixed = profile.frontend_latency_s
        self.service = profile.frontend_service_s
        self.per_token = profile.frontend_cpu_per_token_s
        self.rng = rng
        self.t = None
        self.tok_rate = 0.0

    def observe(self, now: float, tokens: int) -> None:
        """Account ``tokens`` streamed at ``now``."""
        if not self.service:
            return
        if self.t is not None and now > self.t:
            self.tok_rate *= math.exp(-(now - self.t) / self.FRONTEND_TAU_S)
        self.t = now if self.t is None or now > self.t else self.t
        self.tok_rate += tokens / self.FRONTEND_TAU_S

    def utilisation(self) -> float:
        u = self.tok_rate * self.per_token
        return u if u < self.FRONTEND_U_MAX else self.FRONTEND_U_MAX

    def latency(self, now: float, in_flight: int) -> float:
        """Front-end latency of a request arriving at ``now`` while the server
        holds ``in_flight`` other requests (queued or running)."""
        if not self.service:
            return self.fixed
        self.observe(now, 0)
        mean = self.service * (1 + in_flight) / (1.0 - self.utilisation())
        return self.fixed + self.rng.expovariate(1.0 / mean)
