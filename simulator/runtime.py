"""Real-time runners: they turn engine time into wall-clock time.

* :class:`BatchRunner` drives :class:`simulator.engine.BatchEngine`: it asks
  the engine for one step, sleeps until the step's end (absolute schedule:
  the next step starts at the previous step's scheduled end, so lateness of
  the event loop does not accumulate), then hands the emitted tokens to the
  streams.  With nothing to do it sleeps until a request arrives.
* :class:`FixedRunner` gives each request its own timer -- first token at
  ``arrival + ttft_s``, then one token every ``itl_s`` -- with no shared
  state.  Token deadlines are grouped into ticks of ``tick_s`` (1 ms): one
  event-loop timer per tick writes every stream due in it.

uvloop timers have millisecond resolution and a cached clock (they can fire
up to ~1 ms early); both runners read ``time.perf_counter()`` when woken and
go back to sleep if the deadline is still ahead.
"""
from __future__ import annotations

import asyncio
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
        self._wake: asyncio.Future | None = None
        self._task = loop.create_task(self._run())

    # -- gauges ----------------------------------------------------------
    def num_running(self):
        return self.engine.num_running

    def num_waiting(self):
        return self.engine.num_waiting + self.pending

    def kv_usage(self):
        return self.engine.kv_usage()

    # -- requests ----------------------------------------------------------
    def submit(self, stream, extra_delay: float = 0.0) -> None:
        seq = Seq(stream.prompt_tokens, stream.max_tokens, stream)
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
        self.engine.add(seq)
        w = self._wake
        if w is not None and not w.done():
            w.set_result(None)

    def cancel(self, stream) -> None:
        seq = stream.seq
        if seq is not None:
            self.engine.cancel(seq)

    def finished(self, stream):
        pass

    def stop(self):
        self._task.cancel()

    # -- the step loop -------------------------------------------------------
    async def _sleep_until(self, t):
        loop = self.loop
        while True:
            d = t - perf_counter()
            if d <= EARLY_TOLERANCE_S:
                return
            f = loop.create_future()
            h = loop.call_later(_delay_ms(d), f.set_result, None)
            try:
                await f
            except BaseException:
                h.cancel()
                raise

    async def _run(self):
        eng = self.engine
        t_end = None
        while True:
            if not eng.has_work():
                self._wake = self.loop.create_future()
                await self._wake
                self._wake = None
                t_end = None
            now = perf_counter()
            t_start = now if t_end is None or now - t_end > MAX_BEHIND_S else t_end
            duration, emitted = eng.step()
            t_end = t_start + duration
            await self._sleep_until(t_end)
            self.frontend.observe(t_end, len(emitted))
            for s in emitted:
                s.owner.on_token(s.generated)


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
