"""Virtual-time closed loop: drive N users through the engine without sleeping.

Used to fit profiles (``bench/fit_v100.py``).  The clock advances by the
durations returned from :meth:`simulator.engine.BatchEngine.step`, the very
same step arithmetic the real-time server uses.

The workload is the suite's default mix (closed loop, no think time):

=======  =====  ======================  ====================
class    share  input (characters)      output (max_tokens)
=======  =====  ======================  ====================
short    40 %   20-200 uniform          20-200 uniform
medium   40 %   201-800                 100-500
long     20 %   801-2000                300-1000
=======  =====  ======================  ====================

Half the prompts are Chinese (1 token per character), half English (1 token
per 4 characters); 30 % carry a short English system prompt (20-80
characters).  Prompt tokens are counted with :mod:`simulator.tokens`, as the
server would (chat template overhead included).
"""

from __future__ import annotations

import heapq
import math
import random

from .engine import BatchEngine, Frontend, Seq
from .tokens import CHAT_TOKENS_PER_MESSAGE, estimate_tokens

MIX = (
    ("short", 0.4, (20, 200), (20, 200)),
    ("medium", 0.4, (201, 800), (100, 500)),
    ("long", 0.2, (801, 2000), (300, 1000)),
)
CHINESE_SHARE = 0.5
SYSTEM_PROMPT_SHARE = 0.3
SYSTEM_PROMPT_CHARS = (20, 80)


def sample_request(rng: random.Random) -> tuple[int, int, str]:
    """One request of the default mix: ``(prompt_tokens, max_tokens, class)``."""
    x = rng.random()
    acc = 0.0
    for entry in MIX:  # the class x falls in (the last one for x past the shares' sum)
        acc += entry[1]
        if x < acc:
            break
    name, _share, (clo, chi), (olo, ohi) = entry
    chars = rng.randint(clo, chi)
    text = ("\u6a21" * chars) if rng.random() < CHINESE_SHARE else ("x" * chars)
    tokens = estimate_tokens(text) + CHAT_TOKENS_PER_MESSAGE
    if rng.random() < SYSTEM_PROMPT_SHARE:
        tokens += estimate_tokens("s" * rng.randint(*SYSTEM_PROMPT_CHARS)) + CHAT_TOKENS_PER_MESSAGE
    return tokens, rng.randint(olo, ohi), name


class _Req:
    __slots__ = ("arrival", "first", "last", "prompt", "out", "cls")

    def __init__(self, arrival, prompt, out, cls):
        self.arrival = arrival
        self.first = None
        self.last = None
        self.prompt = prompt
        self.out = out
        self.cls = cls


def _pct(sorted_vals, q):
    if not sorted_vals:
        return math.nan
    k = (len(sorted_vals) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (k - lo)


def simulate_closed_loop(
    profile,
    users: int,
    duration_s: float = 600.0,
    warmup_s: float = 60.0,
    seed: int = 0,
    client_rtt_s: float = 0.002,
    ramp_s: float = 0.0,
    sampler=sample_request,
) -> dict:
    """Closed loop of ``users`` users for ``duration_s`` virtual seconds.

    Statistics cover requests that *arrive* after ``warmup_s`` and finish
    before ``duration_s`` (TTFT, E2E, per-stream speed) and the tokens of
    requests finished inside ``[warmup_s, duration_s]`` (throughput); the
    engine's figures (mean running and waiting, mean step, share of steps at
    the token budget, KV-cache peak, preemptions) cover the steps after
    ``warmup_s``.
    ``client_rtt_s`` is the delay between a request's last token and the
    arrival of the user's next request (so, as in real time, it misses the
    step that starts right at the end of the previous one).
    """
    rng = random.Random(seed)
    done: list[_Req] = []
    if profile.kind == "fixed":
        for u in range(users):
            t = ramp_s * u / max(users, 1)
            while t < duration_s:
                prompt, out, cls = sampler(rng)
                r = _Req(t, prompt, out, cls)
                r.first = t + profile.frontend_latency_s + profile.ttft_s
                r.last = r.first + (out - 1) * profile.itl_s
                done.append(r)
                t = r.last + client_rtt_s
        done = [r for r in done if r.last <= duration_s]
        return _stats(done, users, warmup_s, duration_s, {})

    eng = BatchEngine(profile)
    fe = Frontend(profile, random.Random(seed + 1))
    pending: list = []  # (enqueue time, tie, Seq)
    tie = 0

    def new_request(t_arrival):
        nonlocal tie
        prompt, out, cls = sampler(rng)
        r = _Req(t_arrival, prompt, out, cls)
        s = Seq(prompt, out, r)
        tie += 1
        in_flight = len(eng.running) + len(eng.waiting) + len(pending)
        heapq.heappush(pending, (t_arrival + fe.latency(t_arrival, in_flight), tie, s))

    for u in range(users):
        new_request(ramp_s * u / max(users, 1))
    t = 0.0
    busy = 0.0
    run_area = wait_area = 0.0
    steps = at_budget = kv_peak = preempted0 = 0
    budget = profile.max_num_batched_tokens
    while True:
        while pending and pending[0][0] <= t:
            eng.add(heapq.heappop(pending)[2])
        if not eng.has_work():
            if not pending:
                break
            t = pending[0][0]
            continue
        if t >= duration_s:
            break
        nr, nw = len(eng.running), len(eng.waiting)
        dur, emitted = eng.step()
        if t >= warmup_s:
            run_area += nr * dur
            wait_area += nw * dur
            busy += dur
            if not steps:
                preempted0 = eng.preemptions
            steps += 1
            if eng.step_tokens >= budget:
                at_budget += 1
            if eng.kv.used > kv_peak:
                kv_peak = eng.kv.used
        t += dur
        fe.observe(t, len(emitted))
        for s in emitted:
            r = s.owner
            if s.generated == 1:
                r.first = t
            if s.generated >= s.max_tokens:
                r.last = t
                done.append(r)
                new_request(t + client_rtt_s)
    extra = {
        "mean_running": run_area / busy if busy else 0.0,
        "mean_waiting": wait_area / busy if busy else 0.0,
        "steps": eng.steps,
        "mean_step_s": busy / steps if steps else 0.0,
        "budget_steps": at_budget / steps if steps else 0.0,  # share of steps that used the whole token budget
        "kv_peak": kv_peak / eng.kv.num_blocks,  # KV-cache usage, peak
        "preemptions": eng.preemptions - preempted0,
    }
    return _stats(done, users, warmup_s, duration_s, extra)


def _stats(done, users, warmup_s, duration_s, extra) -> dict:
    window = duration_s - warmup_s
    fin = [r for r in done if warmup_s <= r.last <= duration_s]
    meas = [r for r in done if r.arrival >= warmup_s and r.last <= duration_s]
    ttft = sorted(r.first - r.arrival for r in meas)
    e2e = [r.last - r.arrival for r in meas]
    speed = [(r.out - 1) / (r.last - r.first) for r in meas if r.out > 1 and r.last > r.first]
    out_tok = sum(r.out for r in fin)
    prompt_tok = sum(r.prompt for r in fin)
    res = {
        "users": users,
        "requests": len(meas),
        "ttft_mean": sum(ttft) / len(ttft) if ttft else math.nan,
        "ttft_p50": _pct(ttft, 0.5),
        "ttft_p95": _pct(ttft, 0.95),
        "e2e_mean": sum(e2e) / len(e2e) if e2e else math.nan,
        "stream_tps": sum(speed) / len(speed) if speed else math.nan,
        "req_per_s": len(fin) / window,
        "output_tps": out_tok / window,
        "total_tps": (out_tok + prompt_tok) / window,
        "mean_prompt": prompt_tok / len(fin) if fin else math.nan,
        "mean_output": out_tok / len(fin) if fin else math.nan,
    }
    res.update(extra)
    return res
