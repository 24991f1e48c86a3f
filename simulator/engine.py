"""The engine model: the step arithmetic of a continuous-batching server.

This module has no I/O and no clock.  :class:`BatchEngine.step` plans one
engine step from the current state, advances the state to the end of that
step and returns the step's duration plus the sequences that emitted a token
at its end.  The real-time runner (``simulator.runtime``) sleeps for the
duration and then writes the chunks; the virtual-time driver
(``simulator.virtual``) just adds the duration to its clock.  Both call the
same ``step``; nothing else computes timing.

One step
--------
1. *Admit* waiting requests in FIFO order while running < ``max_num_seqs``,
   KV tokens used + (prompt + max_tokens) <= ``kv_cache_tokens`` and some of
   the step's token budget is left.  With ``admission: fifo`` the head of the
   queue blocks the rest, as in vLLM; with ``first_fit`` requests that fit
   overtake a head that waits for KV space.
2. *Prefill*: prompt tokens are processed within the per-step budget
   ``max_num_batched_tokens``.
   - ``chunked`` (vLLM V1): decoding sequences take 1 budget token each
     first; the remaining budget goes to prompts in admission order, a prompt
     may be split over several steps (chunked prefill).
   - ``prefill_first`` (vLLM V0 default): if the head of the queue can be
     admitted, the step is a prefill-only step of whole prompts (as many as fit
     the budget; decoding sequences wait, i.e. prefill is prioritised over
     decode); otherwise it is a decode step of all running sequences.
   A sequence whose prefill completes in the step emits its first token at
   the end of the step.
3. *Decode*: every running sequence past prefill emits one token.
4. *Duration*: :func:`step_duration`.
Sequences that reach ``max_tokens`` finish at the end of the step and free
their slot and KV reservation.
"""
from __future__ import annotations

import math
from collections import deque


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
    synchronisation overhead once per step, whatever the batch).
    """
    return (
        p.step_base_s
        + (p.prefill_step_base_s if prefill_tokens else 0.0)
        + p.per_seq_s * decode_batch
        + p.per_prefill_token_s * prefill_tokens
        + p.per_context_token_s * context_tokens
    )


class Seq:
    """One request inside the engine."""

    __slots__ = ("prompt_tokens", "max_tokens", "prefill_left", "generated", "kv", "cancelled", "owner")

    def __init__(self, prompt_tokens: int, max_tokens: int, owner=None):
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.prefill_left = prompt_tokens
        self.generated = 0
        self.kv = 0
        self.cancelled = False
        self.owner = owner


class BatchEngine:
    """Continuous-batching state machine (see module docstring)."""

    def __init__(self, profile):
        self.p = profile
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.kv_used = 0
        self._n_cancelled = 0
        self.steps = 0

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
        return self.kv_used / self.p.kv_cache_tokens

    # -- the step ---------------------------------------------------------
    def _purge(self) -> None:
        keep = []
        for s in self.running:
            if s.cancelled:
                self.kv_used -= s.kv
                s.kv = 0
            else:
                keep.append(s)
        self.running = keep
        if any(s.cancelled for s in self.waiting):
            self.waiting = deque(s for s in self.waiting if not s.cancelled)
        self._n_cancelled = 0

    def _can_admit_any(self) -> bool:
        p = self.p
        if len(self.running) >= p.max_num_seqs:
            return False
        free = p.kv_cache_tokens - self.kv_used
        n = 1 if p.admission == "fifo" else p.admission_lookahead
        for i, s in enumerate(self.waiting):
            if i >= n:
                break
            if s.prompt_tokens + s.max_tokens <= free:
                return True
        return False

    def _admit(self, s: Seq) -> None:
        s.kv = s.prompt_tokens + s.max_tokens
        self.kv_used += s.kv
        self.running.append(s)

    def _admissions(self, budget: int, whole: bool):
        """Admit waiting requests (see module docstring) and return them.

        ``budget``: prefill tokens available in this step; ``whole``: a
        prompt must fit the remaining budget entirely (``prefill_first``),
        except the first one.  ``admission: fifo`` stops at the first request
        that cannot be admitted; ``first_fit`` skips it and tries the next
        ones (up to ``admission_lookahead`` of them), so small requests
        overtake a large one that waits for KV space.
        """
        p = self.p
        out = []
        waiting = self.waiting
        if not waiting or budget <= 0 or len(self.running) >= p.max_num_seqs:
            return out
        fifo = p.admission == "fifo"
        skipped = []
        looked = 0
        while waiting and budget > 0 and len(self.running) < p.max_num_seqs:
            s = waiting[0]
            ok = self.kv_used + s.prompt_tokens + s.max_tokens <= p.kv_cache_tokens
            if ok and whole and out and s.prompt_tokens > budget:
                break
            if ok:
                waiting.popleft()
                self._admit(s)
                out.append(s)
                budget -= s.prompt_tokens
            elif fifo:
                break
            else:
                skipped.append(waiting.popleft())
                looked += 1
                if looked >= p.admission_lookahead:
                    break
        if skipped:
            waiting.extendleft(reversed(skipped))
        return out

    def step(self):
        """Run one step.  Returns ``(duration_s, emitted)``: the sequences
        that emit one token at the end of the step (finished ones included;
        a sequence is finished when ``generated == max_tokens``)."""
        if self._n_cancelled:
            self._purge()
        p = self.p
        self.steps += 1
        emitted: list[Seq] = []
        if p.scheduler == "prefill_first" and self.waiting and self._can_admit_any():
            tokens = 0
            for s in self._admissions(p.max_num_batched_tokens, whole=True):
                tokens += s.prompt_tokens
                s.prefill_left = 0
                emitted.append(s)
            duration = step_duration(p, 0, tokens, 0)
        else:
            decode = []
            ctx = 0
            prefilling = []
            for s in self.running:
                if s.prefill_left:
                    prefilling.append(s)
                else:
                    decode.append(s)
                    ctx += s.prompt_tokens + s.generated
            tokens = 0
            if p.scheduler == "chunked":
                budget = p.max_num_batched_tokens - len(decode)
                for s in prefilling:
                    if budget <= 0:
                        break
                    n = s.prefill_left if s.prefill_left <= budget else budget
                    s.prefill_left -= n
                    budget -= n
                    tokens += n
                    if not s.prefill_left:
                        emitted.append(s)
                for s in self._admissions(budget, whole=False):
                    n = s.prefill_left if s.prefill_left <= budget else budget
                    s.prefill_left -= n
                    budget -= n
                    tokens += n
                    if not s.prefill_left:
                        emitted.append(s)
            duration = step_duration(p, len(decode), tokens, ctx)
            if emitted:
                decode.extend(emitted)
            emitted = decode
        done = False
        for s in emitted:
            s.generated += 1
            if s.generated >= s.max_tokens:
                done = True
        if done:
            keep = []
            for s in self.running:
                if s.generated >= s.max_tokens:
                    self.kv_used -= s.kv
                    s.kv = 0
                else:
                    keep.append(s)
            self.running = keep
        return duration, emitted


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
