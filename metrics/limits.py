"""The limits the diagnosis can name, one rule each (metrics/diagnosis.py says where the figures come
from and decides between the rules' findings).

Every rule looks at the knee's level (`Knee.at`), the lowest level (`Knee.low`, to see what grew)
and the server's stated configuration (`Knee.config`: vLLM's `vllm:cache_config_info` labels, the
simulator's scheduler limits), and finds its limit `holds`, `fails` or `unknown` (the figures it
needs were not sent), with the figures and metric names it rests on, and, where it can be told, the
headroom left before the limit. A cap it quotes is the server's configured maximum or a peak of the
level's own scrapes, never a mean.

Whether requests queue is one finding the rules share (`queued`): requests wait for a slot, not only
for the step in progress, when the mean wait is more than QUEUE_STEPS engine steps. In any
continuous-batching server a request that arrives while a step runs waits for that step to end, so
a compute-bound server's queue gauge is not zero: with 24 users sending 8-token replies into 0.3 s
steps it reads 1-3. The mean wait is the server's own (vllm:request_queue_time_seconds, its sum's
increase over its count's inside the window) where it sends it; else, by Little's law, the mean
number waiting over the arrival rate (the level's requests completed per second, equal to arrivals
in a steady level). The step is the client's ITL p50. A queue for slots grows the wait to many steps
(18 waiting at 6 slots: 90 steps).

A new limit is a new function here with its thresholds beside it, added to RULES.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from metrics.schema.server_side import LevelEvidence

QUEUE_MIN = 1.0  # mean requests waiting in the server at the knee for "they queue"
QUEUE_STEPS = 2.0  # a mean wait of more engine steps than this is a queue for slots (module doc)


@dataclass
class Knee:
    """What every rule looks at: the knee's level, the lowest level (None when it is the knee), the
    server's stated configuration, the metric names the figures came from, and whether requests
    queue there (`queued`)."""

    at: LevelEvidence
    low: LevelEvidence | None
    config: dict[str, float]
    names: dict[str, str]
    waits: bool = False
    wait_ms: float | None = None
    client_lag_ms: float | None = None  # the client's worst read lag p99 when it flagged itself (self-health)

    def n(self, role: str) -> str:
        return self.names.get(role, role)

    @property
    def where(self) -> str:
        g = self.at
        return f"at {g.at} (step {g.step}, {g.scrapes} scrapes)"

    def grew(self, attr: str) -> float | None:
        """The knee's figure over the lowest level's (None without both, or without a lower level)."""
        if self.low is None:
            return None
        a, b = getattr(self.at, attr), getattr(self.low, attr)
        return a / b if a is not None and b else None


@dataclass
class Finding:
    limit: str
    state: str  # "holds" | "fails" | "unknown"
    because: str = ""  # what the figures say, as the sentence's clause
    evidence: list[str] = field(default_factory=list)
    headroom: float | None = None  # 0..1 left before the limit, where it can be told
    headroom_text: str = ""  # ... in words, with the metric it rests on
    weak: bool = False  # holds on a peak alone: named only where no other rule holds (the weighing)


def queued(k: Knee) -> tuple[bool, float | None, list[str]]:
    """Requests wait for a slot at the knee (module doc): (they do, the mean wait in ms, evidence)."""
    g = k.at
    waiting = g.waiting or 0.0
    evidence = []
    wait_ms = None
    if g.queue_ms is not None:
        wait_ms = g.queue_ms
        evidence.append(
            f"{k.where}: each request waits {wait_ms:,.0f} ms on average to be scheduled "
            f"({k.n('queue_sum')} / {k.n('queue_count')})"
        )
    elif g.request_rate:
        wait_ms = waiting / g.request_rate * 1000.0
        evidence.append(
            f"{k.where}: each request waits {wait_ms:,.0f} ms on average ({k.n('waiting')} mean over "
            f"{g.request_rate:,.1f} requests/s)"
        )
    if wait_ms is not None and g.step_ms:
        evidence[-1] += f" against one engine step of {g.step_ms:,.0f} ms (ITL p50)"
    for_the_step = wait_ms is not None and g.step_ms is not None and wait_ms <= QUEUE_STEPS * g.step_ms
    return waiting >= QUEUE_MIN and not for_the_step, wait_ms, evidence


def _pct(x: float | None) -> str:
    return "unknown" if x is None else f"{x:.0%}"


def _ms(x: float | None) -> str:
    """A level with no request ended OK has no step time: "unknown", not "0 ms"."""
    return "unknown" if x is None else f"{x:,.0f} ms"


# -- memory -----------------------------------------------------------------------------------

KV_FULL = 0.90  # KV-cache use (peak) from which the cache is "full"
KV_ROOM = 2.0  # ... or room left for fewer requests than this, of the running ones' mean size: a
# first-come server stops admitting at the first waiting request that does not fit, so a cache whose
# requests are large is full with a request's worth of it free (13 running, 89 % used)


def memory(k: Knee) -> Finding:
    """Memory-bound: the KV cache is full (KV_FULL, KV_ROOM) while requests wait, or the server
    preempts running requests to free blocks (any preemption inside the window: vLLM preempts only
    when a step needs a block and none is free)."""
    g = k.at
    peak, preempted = g.kv_cache_peak, (g.preemptions or 0.0) > 0
    evidence = []
    if peak is not None:
        evidence.append(f"{k.where}: {k.n('kv')} peak {_pct(peak)}")
    if g.preemptions is not None:
        evidence.append(f"{k.where}: {k.n('preemptions')} +{g.preemptions:,.0f}")
    headroom = None if peak is None else max(0.0, 1.0 - peak)
    room = "" if headroom is None else f"the KV cache ({k.n('kv')} peak {_pct(peak)}: {_pct(headroom)} free)"
    if peak is None and g.preemptions is None:
        return Finding("memory-bound", "unknown", evidence=evidence)
    per_request = peak / g.running if peak is not None and g.running else None
    full = peak is not None and (peak >= KV_FULL or (per_request is not None and 1.0 - peak < KV_ROOM * per_request))
    if preempted or (k.waits and full):
        extra = f", {g.preemptions:,.0f} preemptions ({k.n('preemptions')})" if preempted else ""
        blocks = k.config.get("num_gpu_blocks")
        size = f" of {blocks:,.0f} blocks (vllm:cache_config_info)" if blocks else ""
        why = (
            f"requests wait in the server's queue (mean {g.waiting or 0:,.1f}) while the KV cache{size} is full "
            f"(peak {_pct(peak)}{extra}); {g.running or 0:,.1f} run on average, {g.running_peak or 0:,.0f} at the peak"
        )
        return Finding("memory-bound", "holds", why, evidence, headroom, room)
    return Finding("memory-bound", "fails", evidence=evidence, headroom=headroom, headroom_text=room)


# -- scheduler (slots) ------------------------------------------------------------------------

SEQS_FULL = 0.75  # running at max_num_seqs at the peak and at 75 % of it or more on average: the slots
# are full. A scrape can fall between one batch's end and the next one's admission at the following
# step (6 slots, 24 users sending in step, 30-step replies: 4.0 running on average under a queue of
# 17), so a full peak with a lower mean still names the slots, but only where no other rule holds
# (weak): a moment's peak of a server whose queue is the KV cache's or the budget's is not its limit
GPU_IDLE = 0.5  # mean GPU utilisation under which nothing waiting is not compute-bound: the server's loop is


def scheduler(k: Knee) -> Finding:
    """Scheduler-bound: requests wait while every slot is taken (running at the server's stated
    max_num_seqs at the peak, SEQS_FULL); or nothing waits and every request runs, yet the GPU is mostly idle
    (GPU_IDLE): the server's own loop (CPU) is the limit. Without the stated max_num_seqs a queue
    with room in the KV cache is `unknown` here: slots and the per-step token budget (prefill) look
    alike from the gauges alone."""
    g = k.at
    seqs = k.config.get("max_num_seqs")
    evidence = [f"{k.where}: {k.n('running')} mean {g.running or 0:,.1f}, peak {g.running_peak or 0:,.0f}"]
    headroom, room = None, ""
    if seqs:
        evidence.append(f"max_num_seqs {seqs:,.0f} ({k.n('config')})")
        headroom = max(0.0, 1.0 - (g.running_peak or 0.0) / seqs)
        room = f"the slots ({g.running_peak or 0:,.0f} of max_num_seqs {seqs:,.0f} running at the peak)"
    if not k.waits:
        if g.gpu_utilisation is not None and g.gpu_utilisation < GPU_IDLE:
            evidence.append(f"{k.where}: {k.n('gpu')} mean {_pct(g.gpu_utilisation)}")
            why = (
                f"nothing waits for a slot and all {g.running or 0:,.1f} requests run at once, yet the GPU is busy "
                f"only {_pct(g.gpu_utilisation)}: the server's own loop (CPU) is the limit"
            )
            return Finding("scheduler-bound", "holds", why, evidence, headroom, room)
        return Finding("scheduler-bound", "fails", evidence=evidence, headroom=headroom, headroom_text=room)
    if seqs is None:
        return Finding("scheduler-bound", "unknown", evidence=evidence)
    if seqs <= g.users and (g.running_peak or 0.0) >= seqs:
        why = (
            f"requests wait in the server's queue (mean {g.waiting or 0:,.1f}) while every slot is taken: "
            f"{g.running_peak:,.0f} run at the peak ({g.running or 0:,.1f} on average), at most {seqs:,.0f} (its "
            f"max_num_seqs), with room in the KV cache (peak {_pct(g.kv_cache_peak)})"
        )
        weak = (g.running or 0.0) < SEQS_FULL * seqs
        return Finding("scheduler-bound", "holds", why, evidence, headroom, room, weak=weak)
    return Finding("scheduler-bound", "fails", evidence=evidence, headroom=headroom, headroom_text=room)


# -- prefill (the per-step token budget) ------------------------------------------------------

BUDGET_FULL = 0.8  # engine steps that carry 80 % of max_num_batched_tokens or more, on average, are
# full: the budget's rest is a step with nothing more to prefill, or the last chunk of a prompt
STEP_GROWTH = 1.5  # a step (ITL p50) this many times the lowest level's has "grown"; under it, "short"
PREFILL_GROWTH = 3.0  # without the budget stated: the server's mean prefill time this many times the
# lowest level's says prompts wait for the budget, chunk by chunk (a slot limit leaves it as it was;
# the converse does not hold: a server may keep prompts in its queue until the budget has room)


def prefill(k: Knee) -> Finding:
    """Prefill-bound: requests wait while the engine steps are full of tokens (their mean at
    BUDGET_FULL of the stated max_num_batched_tokens, vllm:iteration_tokens_total) and stay short
    (under STEP_GROWTH of the lowest level's): long prompts take the budget chunk by chunk, so TTFT
    grows while decoding is as fast as ever. Without the stated budget, the server's prefill time
    growing PREFILL_GROWTH-fold while the steps stay short says the same; a prefill time that did
    not grow cannot tell (`unknown`)."""
    g = k.at
    budget = k.config.get("max_num_batched_tokens")
    step = k.grew("step_ms")
    short = step is None or step < STEP_GROWTH
    evidence = []
    if g.ttft_ms is not None and k.low is not None and k.low.ttft_ms is not None:
        evidence.append(
            f"{k.where}: TTFT p50 {g.ttft_ms:,.0f} ms against {k.low.ttft_ms:,.0f} ms at {k.low.at}, "
            f"steps (ITL p50) {_ms(g.step_ms)} against {_ms(k.low.step_ms)}"
        )
    if g.prompt_tokens is not None:
        evidence.append(f"{k.where}: {g.prompt_tokens:,.0f} prompt tokens per request (client, usage)")
    headroom, room = None, ""
    if budget and g.step_tokens is not None:
        use = g.step_tokens / budget
        evidence.append(
            f"{k.where}: {g.step_tokens:,.1f} tokens per engine step ({k.n('step_tokens_sum')} / "
            f"{k.n('step_tokens_count')}) of max_num_batched_tokens {budget:,.0f} ({k.n('config')}): {_pct(use)}"
        )
        headroom = max(0.0, 1.0 - use)
        room = f"the per-step token budget ({g.step_tokens:,.1f} of {budget:,.0f} tokens a step used)"
        if k.waits and use >= BUDGET_FULL and short:
            why = (
                f"requests wait in the server's queue (mean {g.waiting or 0:,.1f}) while every engine step carries "
                f"{_pct(use)} of its budget of {budget:,.0f} tokens (max_num_batched_tokens) and stays short"
                f"{'' if step is None else f' ({g.step_ms:,.0f} ms, {step:.1f}x the lowest level)'}: prompts of "
                f"{g.prompt_tokens or 0:,.0f} tokens are prefilled chunk by chunk, so TTFT grows while decoding "
                f"is as fast as ever"
            )
            return Finding("prefill-bound", "holds", why, evidence, headroom, room)
        return Finding("prefill-bound", "fails", evidence=evidence, headroom=headroom, headroom_text=room)
    if not k.waits:
        return Finding("prefill-bound", "fails", evidence=evidence)
    grown = k.grew("prefill_ms")
    if grown is None or (g.preemptions or 0.0) > 0:  # a preempted request is prefilled again: its time says nothing
        return Finding("prefill-bound", "unknown", evidence=evidence)
    evidence.append(
        f"{k.where}: the server's prefill takes {g.prefill_ms:,.0f} ms on average ({k.n('prefill_sum')}), "
        f"{grown:.1f}x the {k.low.prefill_ms:,.0f} ms at {k.low.at}"
    )
    if grown >= PREFILL_GROWTH and short:
        why = (
            f"requests wait in the server's queue (mean {g.waiting or 0:,.1f}) and each prompt's prefill takes "
            f"{grown:.1f}x as long as at {k.low.at} while the steps stay short: prompts share the per-step "
            f"token budget (its max_num_batched_tokens, not stated by the server)"
        )
        return Finding("prefill-bound", "holds", why, evidence)
    # a prefill time as it was does not rule the budget out: a server that admits a prompt only when
    # the budget has room for it keeps the wait in its queue (the simulator's prefill-bound profile:
    # 185 ms at 24 users against 139 ms at 2, under a queue of 3 s)
    return Finding("prefill-bound", "unknown", evidence=evidence)


# -- compute ----------------------------------------------------------------------------------


def compute(k: Knee) -> Finding:
    """Compute-bound: nothing waits for a slot (or only for the step in progress), every request
    runs, and each step of the larger batch takes longer: the step (ITL p50) at least STEP_GROWTH
    times the lowest level's, with more requests running. One level alone, or an idle server whose
    steps take as long as at the lowest level, is not compute-bound."""
    g = k.at
    step = k.grew("step_ms")
    evidence = []
    if step is not None:
        evidence.append(
            f"{k.where}: one engine step (ITL p50) {g.step_ms:,.0f} ms, {step:.1f}x the {k.low.step_ms:,.0f} ms "
            f"at {k.low.at} ({k.low.running or 0:,.1f} running there)"
        )
    if k.waits:
        return Finding("compute-bound", "fails", evidence=evidence)
    if step is None:
        return Finding("compute-bound", "fails" if g.step_ms is not None else "unknown", evidence=evidence)
    if step >= STEP_GROWTH and (g.running or 0.0) > (k.low.running or 0.0):
        queue = (
            f"requests wait only for the step in progress (mean {g.waiting or 0:,.1f} waiting, {k.wait_ms:,.0f} ms each)"
            if (g.waiting or 0.0) >= QUEUE_MIN and k.wait_ms is not None
            else f"nothing waits in the server's queue (mean {g.waiting or 0:,.1f})"
        )
        gpu = "" if g.gpu_utilisation is None else f", GPU {_pct(g.gpu_utilisation)}"
        why = (
            f"{queue}; every request runs ({g.running or 0:,.1f} on average; KV cache peak {_pct(g.kv_cache_peak)}{gpu}) and "
            f"each step of the larger batch takes longer: {g.step_ms:,.0f} ms, {step:.1f}x the {k.low.step_ms:,.0f} ms "
            f"at {k.low.at}"
        )
        return Finding("compute-bound", "holds", why, evidence)
    return Finding("compute-bound", "fails", evidence=evidence)


# -- the front end (before the engine) --------------------------------------------------------

FRONT_SHARE = 0.25  # the engine's part of the TTFT's rise under which the rest lies outside it
FRONT_MIN_MS = 100.0  # a TTFT rise under this, or under FRONT_STEPS engine steps, is no limit's
FRONT_STEPS = 4.0
FRONT_CLIENT = 4.0  # the unexplained rise must be this many times the client's own read lag p99


def front_end(k: Knee) -> Finding:
    """Front-end-bound: the first token comes much later than at the lowest level, yet the engine
    accounts for little of that: its own queue and prefill times (vllm:request_queue_time_seconds,
    vllm:request_prefill_time_seconds, timed from when the engine received the request) grew by
    less than FRONT_SHARE of the client's TTFT p50 rise. The rest is spent before the engine has
    the request or after it made the token: in the API server (HTTP intake, tokenization, each
    stream's detokenization and writes; vLLM runs one Python process per --api-server-count), whose
    wait no engine gauge shows. A rise the client's own read lag could explain (FRONT_CLIENT) is not
    the server's. Without the server's queue and prefill times, or a lower level, `unknown`."""
    g, low = k.at, k.low
    if low is None or None in (g.ttft_ms, low.ttft_ms, g.queue_ms, low.queue_ms, g.prefill_ms, low.prefill_ms):
        return Finding("front-end-bound", "unknown")
    rise = g.ttft_ms - low.ttft_ms
    engine = (g.queue_ms + g.prefill_ms) - (low.queue_ms + low.prefill_ms)
    outside = rise - max(engine, 0.0)
    evidence = [
        f"{k.where}: TTFT p50 rose {rise:,.0f} ms over {low.at}; the engine's own queue and prefill times "
        f"({k.n('queue_sum')}, {k.n('prefill_sum')}) rose {engine:,.0f} ms "
        f"({g.queue_ms + g.prefill_ms:,.0f} ms against {low.queue_ms + low.prefill_ms:,.0f} ms)"
    ]
    floor = max(FRONT_MIN_MS, FRONT_STEPS * (g.step_ms or 0.0))
    client = FRONT_CLIENT * (k.client_lag_ms or 0.0)
    if rise >= floor and engine < FRONT_SHARE * rise and outside > client:
        why = (
            f"the first token comes {rise:,.0f} ms later than at {low.at} (TTFT p50 {g.ttft_ms:,.0f} ms), "
            f"but the engine's own queue and prefill account for {max(engine, 0.0):,.0f} ms of that: requests wait "
            f"outside the engine, in the API server's intake, tokenization and streaming (its front end), with "
            f"{g.running or 0:,.1f} running and the KV cache at peak {_pct(g.kv_cache_peak)}"
        )
        return Finding("front-end-bound", "holds", why, evidence)
    return Finding("front-end-bound", "fails", evidence=evidence)


# The rules, in the order a sentence names them when the evidence does not separate two.
RULES: tuple[Callable[[Knee], Finding], ...] = (memory, scheduler, prefill, compute, front_end)
