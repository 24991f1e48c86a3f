"""Real-time runners: they turn engine time into wall-clock time.

* :class:`BatchRunner` drives :class:`simulator.engine.BatchEngine`: it asks
  the engine for one step, arms a timer for the step's end (absolute schedule:
  the next step starts at the previous step's scheduled end, so lateness of
  the event loop does not accumulate), then hands the emitted tokens to the
  streams and plans the next step.  With nothing to do it stops until a
  request arrives.  It stamps each request's engine times (``Seq.queued_t``
  when it enters the waiting queue, ``Seq.scheduled_t`` the start of the step
  that first admits it).  It runs on timer callbacks alone (``call_later``,
  ``call_soon``), so ``bench/simulator_cpu.py`` can drive it on a virtual clock.
* :class:`FixedRunner` gives each request its own timer -- first token at
  ``arrival + ttft_s``, then one token every ``itl_s`` -- with no shared
  state.  Token deadlines are grouped into ticks of ``tick_s`` (1 ms): one
  event-loop timer per tick writes every stream due in it.

uvloop timers have millisecond resolution and a cached clock (they can fire
up to ~1 ms early); both runners read ``time.perf_counter()`` when woken and
go back to sleep if the deadline is still ahead.
"""

from __future__ import annotations

import math
import random
from time import perf_counter

from .engine import BatchEngine, Frontend, Seq

EARLY_TOLERANCE_S = 0.0002  # a timer that fires earlier than this re-arms
MAX_BEHIND_S = 0.25  # further behind than this, the schedule restarts at "now"


def _delay_ms(delay: float) -> float:
    """A uvloop delay (rounded to whole ms) that does not fire before ``delay``."""
    return math.ceil(delay * 1000.0) / 1000.0 if delay > 0 else 0.0


class BatchRunner:
    def __init__(self, profile, loop, seed=0):
        self.p = profile
        self.loop = loop
        self.engine = BatchEngine(profile)
        self.frontend = Frontend(profile, random.Random(seed + 1))
        self.pending = 0  # requests in their frontend latency / stall, not yet queued
        self._idle = True  # no step in flight: the next request starts one
        self._stopped = False
        self._t_end = 0.0  # scheduled end of the step in flight
        self._emitted = ()  # ... and the sequences that emit a token at its end
        self.on_step = None  # called with each step's tokens (the server's vllm:iteration_tokens_total)

    # -- gauges ----------------------------------------------------------
    def num_running(self):
        return self.engine.num_running

    def num_waiting(self):
        return self.engine.num_waiting + self.pending

    def kv_usage(self):
        return self.engine.kv_usage()

    # -- requests ----------------------------------------------------------
    def submit(self, stream, extra_delay: float = 0.0) -> None:
        seq = Seq(stream.prompt_tokens, stream.max_tokens, stream, stream.block_keys)
        stream.seq = seq
        in_flight = self.engine.num_running + self.engine.num_waiting + self.pending
        delay = self.frontend.latency(perf_counter(), in_flight) + extra_delay
        if delay > 0:
            self.pending += 1
            self.loop.call_later(delay, self._enqueue_later, seq)
        else:
            self._enqueue(seq)

    def _enqueue_later(self, seq):
        self.pending -= 1
        self._enqueue(seq)

    def _enqueue(self, seq):
        if seq.cancelled:
            return
        seq.queued_t = perf_counter()
        self.engine.add(seq)
        if self._idle and not self._stopped:
            self._idle = False
            self.loop.call_soon(self._next_step, None)

    def cancel(self, stream) -> None:
        seq = stream.seq
        if seq is not None:
            self.engine.cancel(seq)

    def finished(self, stream):
        pass

    def stop(self):
        self._stopped = True

    # -- the step loop -------------------------------------------------------
    def _next_step(self, t_end):
        """Plan the step that starts at ``t_end``, the previous step's scheduled end (None: idle
        until now), or now when the loop is further behind than MAX_BEHIND_S."""
        eng = self.engine
        if self._stopped or not eng.has_work():
            self._idle = True
            return
        now = perf_counter()
        t_start = now if t_end is None or now - t_end > MAX_BEHIND_S else t_end
        duration, self._emitted = eng.step()
        for s in eng.first_scheduled:
            # the step's start, or its own arrival where it came while the loop was late planning
            # this step: admitted now, it was never scheduled before it was queued
            s.scheduled_t = max(t_start, s.queued_t)
        if self.on_step is not None:
            self.on_step(eng.step_tokens)
        self._t_end = t_start + duration
        self.loop.call_later(_delay_ms(self._t_end - now), self._fire)

    def _fire(self):
        """At the step's end: the emitted tokens to their streams, then the next step.  uvloop
        timers may fire up to ~1 ms early; an early one re-arms."""
        if self._stopped:
            return
        t_end = self._t_end
        d = t_end - perf_counter()
        if d > EARLY_TOLERANCE_S:
            self.loop.call_later(_delay_ms(d), self._fire)
            return
        emitted = self._emitted
        self.frontend.observe(t_end, len(emitted))
        for s in emitted:
            s.owner.on_token(s.generated)
        self._next_step(t_end)


class FixedRunner:
    """Per-request constant TTFT / ITL, grouped into timer ticks."""

    def __init__(self, profile, loop, seed=0):
        self.p = profile
        self.loop = loop
        self.q = profile.tick_s
        self.ttft = profile.ttft_s + profile.frontend_latency_s
        self.itl = profile.itl_s
        self.si = profile.stream_interval
        self.buckets: dict[int, list] = {}
        self.active = 0

    def num_running(self):
        return self.active

    def num_waiting(self):
        return 0

    def kv_usage(self):
        return 0.0

    def submit(self, stream, extra_delay: float = 0.0) -> None:
        base = stream.start_t
        stream.t_first = base + self.ttft + extra_delay
        stream.shift = 0.0
        # streaming: the first token alone, then groups of stream_interval;
        # non-streaming: one write when the last token is due
        stream.next_count = 1 if stream.is_stream else stream.max_tokens
        self.active += 1
        self._schedule(stream, stream.t_first + (stream.next_count - 1) * self.itl)

    def cancel(self, stream) -> None:
        pass  # a finished/aborted stream is skipped when its tick fires

    def stop(self):
        pass

    def _schedule(self, stream, t):
        b = math.ceil(t / self.q)
        lst = self.buckets.get(b)
        if lst is None:
            self.buckets[b] = [stream]
            self.loop.call_later(_delay_ms(b * self.q - perf_counter()), self._fire, b)
        else:
            lst.append(stream)

    def _fire(self, b):
        due = b * self.q
        now = perf_counter()
        if now < due - EARLY_TOLERANCE_S:
            self.loop.call_later(_delay_ms(due - now), self._fire, b)
            return
        lst = self.buckets.pop(b)
        itl = self.itl
        si = self.si
        for s in lst:
            # every chunk of the stream due by the end of this tick, in this callback; from the
            # second on, in one write (a tiny itl_s: thousands of chunks a second per stream, no
            # timer or syscall each). The usual tick has one chunk per stream, written as it is
            # made: gathering it too cost a list, a join and two calls per chunk, for nothing
            held = False
            while not s.done:
                c = s.next_count
                s.emit(c)
                if s.done:
                    break
                if s.hold_s:  # stall_between: a gap before the next token
                    s.shift += s.hold_s
                    s.hold_s = 0.0
                nc = c + si  # the first token alone, then groups of stream_interval
                if nc > s.max_tokens:
                    nc = s.max_tokens
                s.next_count = nc
                t = s.t_first + s.shift + (nc - 1) * itl
                if t > due:
                    self._schedule(s, t)
                    break
                if not held:
                    s.hold_writes()
                    held = True
            if held:
                s.flush_writes()

    def finished(self, stream):
        self.active -= 1
