"""Why the knee is where it is: the server's own metrics per load level, and one stated diagnosis.

The server's Prometheus samples (--server-metrics: server_metrics.parquet after the run, the
scraper's memory while it goes on) are aligned to each level's window: after its warm-up, and not
before the server has drained what the level before it left, its running plus waiting requests back
to this level's users (a step down in a bisection would otherwise carry the higher level's queue:
83 running and 19 waiting at a 96-user level). Per level: requests running and waiting (mean and
peak), KV-cache use (peak), preemptions (the counter's increase), the prefix-cache hit rate (hits
over queries inside the window, or the server's own rate gauge), GPU utilisation (mean, where a
DCGM exporter was scraped or GPU telemetry gave it per step), and the means of the server's own
histograms where it sends them: queue time, prefill time (scheduled to first token), and tokens per
engine step. The server's stated configuration (vLLM's `vllm:cache_config_info` labels; the
simulator's scheduler limits beside it) gives the caps: max_num_seqs, max_num_batched_tokens,
num_gpu_blocks. With them come the client's figures of each level: requests completed per second,
ITL p50 (one engine step), TTFT p50 and prompt tokens per request.

The diagnosis looks at the knee, the lowest level that missed the SLO (without an SLO, or when none
missed, the highest level). Each limit is one rule of metrics/limits.py (memory-bound,
scheduler-bound, prefill-bound, compute-bound, and front-end-bound: the first token late while the
engine's own queue and prefill stay short), which finds it holds, fails or cannot tell; here
they are weighed:

- one rule holds: that limit, with the figures and metric names it rests on;
- two or more hold, or requests queue and more than one rule cannot tell (a server that does not
  state max_num_seqs and max_num_batched_tokens, whose gauges alone cannot tell slots from the
  per-step budget): *undecided*, naming the limits the evidence does not separate;
- requests queue and one rule alone cannot tell while the others fail: that one, by elimination;
- nothing holds: *no limit reached*, with the nearest limit and its headroom (KV cache free at its
  peak, slots free at the peak, the step budget unused);
- *client-bound*: no limit reached and the client's self-health flagged the run: the knee is the
  client's; *client inaccurate*: no server metrics, and the client flagged itself;
- *unknown*: no server metrics to say (run with --server-metrics URL/metrics).

Without the server's gauges (a server with no /metrics) but with GPU telemetry, a GPU busy less
than GPU_IDLE at the knee is still a diagnosis: the server's own loop, not the GPU's compute, is
the limit (`transformers serve` on an H200: 20 % busy at its highest level); a busier GPU alone
cannot tell compute from memory or the scheduler.

A prefix-cache hit rate that falls by PREFIX_DROP or more from the lowest level to the knee is
named as part of the cause: cached prefixes were evicted, so each request prefills more.

The server's metrics are its own, whatever the client's accuracy: when the client flagged itself,
the limit stands and the sentence adds that the knee's place may be the client's. The client's
warning itself (what happened, and its advice: more workers when it ran out of CPU, a quieter
machine when other processes took it) is said once, beside the diagnosis, by whatever shows it
(summary.json `client_bound`, `diagnosis.client`); the sentence refers to it, never repeats it or
gives advice of its own that could contradict it. Every diagnosis
names what it rests on (`evidence`: the level, the figure and the server's metric name), and the
same function (`diagnose_levels`) makes summary.json's `diagnosis`, the live view's and the
report's.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

import numpy as np

from metrics.limits import GPU_IDLE, QUEUE_MIN, RULES, Knee, queued
from metrics.schema.client_health import ClientBound
from metrics.schema.server_side import KneeDiagnosis, LevelEvidence, level_load

# Each figure's metric names, by engine (the first present wins); vLLM's renamed metrics arrive
# under their current names (plugin/server_metrics.py canonical).
NAMES = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size"),
    "kv": ("vllm:kv_cache_usage_perc", "sglang:token_usage"),
    "preemptions": ("vllm:num_preemptions",),  # a counter
    "prefix_hits": ("vllm:prefix_cache_hits",),  # counters of tokens (vLLM V1)
    "prefix_queries": ("vllm:prefix_cache_queries",),
    "prefix_rate": ("vllm:prefix_cache_hit_rate", "sglang:cache_hit_rate"),  # a gauge, 0..1 (V0, SGLang)
    "gpu": ("DCGM_FI_DEV_GPU_UTIL",),  # percent, per GPU
    # histograms: a mean over the window is the increase of _sum over that of _count
    "queue_sum": ("vllm:request_queue_time_seconds_sum",),
    "queue_count": ("vllm:request_queue_time_seconds_count",),
    "prefill_sum": ("vllm:request_prefill_time_seconds_sum",),
    "prefill_count": ("vllm:request_prefill_time_seconds_count",),
    "step_tokens_sum": ("vllm:iteration_tokens_total_sum",),
    "step_tokens_count": ("vllm:iteration_tokens_total_count",),
}
SUMMED = (
    "running",
    "waiting",
    "preemptions",
    "prefix_hits",
    "prefix_queries",
    "queue_sum",
    "queue_count",
    "prefill_sum",
    "prefill_count",
    "step_tokens_sum",
    "step_tokens_count",
)  # over label sets; the rest averaged
# Info gauges whose labels state the server's configuration: vLLM's cache settings, and the
# scheduler's limits where a server states them (vLLM does not; the simulator does, in its own gauge).
CONFIG_METRICS = ("vllm:cache_config_info", "llm_simulator_scheduler_config_info")
CONFIG_KEYS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "num_gpu_blocks",
    "block_size",
    "gpu_memory_utilization",
    "max_model_len",
)
if TYPE_CHECKING:
    import pandas as pd

METRIC_NAMES = frozenset(n for names in NAMES.values() for n in names) | frozenset(CONFIG_METRICS)

PREFIX_DROP = 0.2  # a fall of the prefix-cache hit rate (absolute) from the lowest level to the knee that explains it


def _base(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def _series(server: pd.DataFrame, role: str) -> tuple[str | None, pd.Series]:
    """The first of a figure's metric names the server sent, and its values per scrape time (summed
    or averaged over label sets, as the figure is a count or a share)."""
    import pandas as pd  # loaded by the process that writes results, and the reports

    if server is None or server.empty:
        return None, pd.Series(dtype=float)
    base = server["metric"].map(_base)
    for name in NAMES[role]:
        rows = server[(base == name) | (server["metric"] == name)]
        if not rows.empty:
            sent = str(rows["metric"].iloc[0])  # as the server sent it (counters with _total)
            return sent, _combined(rows, role in SUMMED)
    return None, pd.Series(dtype=float)


def _combined(rows: pd.DataFrame, summed: bool) -> pd.Series:
    """One figure's values per scrape time, summed or averaged over label sets and over the scraped
    sources. Each source's scrapes have times of their own: at each time, a source counts with its
    latest reading so far, so that two replicas' counters add up to one that only grows (taken in
    turn, they would read as resets) and two replicas' gauges are seen together. (Each replica's own
    diagnosis reads its source alone: `of_source`.)"""
    import pandas as pd

    def one(r: pd.DataFrame) -> pd.Series:
        grouped = r.groupby("timestamp")["value"]
        return (grouped.sum() if summed else grouped.mean()).sort_index()

    if "source" not in rows or rows["source"].nunique() < 2:
        return one(rows)
    # from the first time every source has read: a replica's counter joining later would count its
    # whole value as an increase
    each = pd.concat({src: one(r) for src, r in rows.groupby("source")}, axis=1).sort_index().ffill().dropna()
    return each.sum(axis=1) if summed else each.mean(axis=1)


def _labels(text) -> dict:
    """A sample's labels: JSON as the scraper writes them, or "k=v,k=v" as the reports read a map."""
    if isinstance(text, dict):
        return text
    try:
        out = json.loads(text)
        return out if isinstance(out, dict) else {}
    except (TypeError, ValueError):
        return dict(p.split("=", 1) for p in str(text).split(",") if "=" in p)


def of_source(server: pd.DataFrame | None, source: str) -> pd.DataFrame | None:
    """The samples of one scraped endpoint (the `source` column: its URL as server_metrics.parquet
    names it): one replica's own figures, so that several replicas' gauges are never pooled into one
    diagnosis (targets/diagnosis.py diagnoses each); None where nothing came from it."""
    if server is None or server.empty or "source" not in server:
        return None
    rows = server[server["source"] == source]
    return rows if not rows.empty else None


def server_config(server: pd.DataFrame | None) -> tuple[dict[str, float], str | None]:
    """The server's stated limits (CONFIG_KEYS) from the newest scrape of its info gauges' labels,
    and the metrics they came from; ({}, None) where it states none."""
    if server is None or server.empty or "labels" not in server:
        return {}, None
    out, sources = {}, []
    for name in CONFIG_METRICS:
        rows = server[server["metric"] == name]
        if rows.empty:
            continue
        labels = _labels(rows.sort_values("timestamp")["labels"].iloc[-1])
        found = False
        for key in CONFIG_KEYS:
            try:
                value = float(labels[key])
            except (KeyError, TypeError, ValueError):
                continue
            if math.isfinite(value) and key not in out:
                out[key], found = value, True
        if found:
            sources.append(name)
    return out, (", ".join(sources) or None)


def _increase(s: pd.Series) -> float | None:
    """A counter's increase over its readings; a drop is a reset (the counter restarted at 0)."""
    v = s.to_numpy(dtype=float)
    if len(v) < 2:
        return None
    d = np.diff(v)
    return float(np.where(d >= 0, d, v[1:]).sum())


# Requests the server may count beyond a level's users once the level before it has drained: one a
# client has read to its end and sent again before the server's gauge let go of it.
DRAIN_SLACK = 1


def drained_from(found: dict, users: int, start: float, end: float) -> float:
    """Where a level's server window starts: its first scrape at or after `start` at which the
    server's running plus waiting requests are back to the level's users (DRAIN_SLACK), what the
    level before it left drained (module doc); past `end` where they never were; `start` where
    the server sends neither gauge."""
    running, waiting = found["running"][1], found["waiting"][1]
    if running.empty and waiting.empty:
        return start
    occupied = running.add(waiting, fill_value=0.0)
    inside = occupied[(occupied.index >= start) & (occupied.index <= end)]
    back = inside[inside <= users + DRAIN_SLACK]
    return float(back.index[0]) if len(back) else end + 1e-6


def level_evidence(
    server: pd.DataFrame | None, levels, gpu: dict | None = None
) -> tuple[list[LevelEvidence], dict[str, str]]:
    """Each level's figures and the metric names they came from. `levels` are (step, users, window
    start, window end) in wall-clock seconds; the window is cut further where the server had not
    drained the level before (drained_from); `gpu` maps a step to its mean GPU utilisation (0..1)
    from GPU telemetry, when the run had it (a scraped DCGM exporter gives it otherwise)."""
    found = {role: _series(server, role) for role in NAMES}
    names = {role: name for role, (name, _) in found.items() if name is not None}
    out = []
    for step, users, start, end in levels:
        start = drained_from(found, users, start, end)
        inside = {role: s[(s.index >= start) & (s.index <= end)] for role, (_, s) in found.items()}
        mean = lambda role, inside=inside: float(inside[role].mean()) if len(inside[role]) else None  # noqa: E731
        peak = lambda role, inside=inside: float(inside[role].max()) if len(inside[role]) else None  # noqa: E731
        kv = peak("kv")
        if kv is not None and kv > 1.0:
            kv /= 100.0  # a percentage where a share was expected
        hits, queries = _increase(inside["prefix_hits"]), _increase(inside["prefix_queries"])
        prefix = hits / queries if hits is not None and queries else mean("prefix_rate")

        def hist_mean(name: str, scale: float = 1.0, inside: dict = inside) -> float | None:
            total, count = _increase(inside[f"{name}_sum"]), _increase(inside[f"{name}_count"])
            return total / count * scale if total is not None and count else None

        busy = (gpu or {}).get(step)
        if busy is None and mean("gpu") is not None:
            busy = mean("gpu") / 100.0
        scrapes = max((len(v) for v in inside.values()), default=0)
        out.append(
            LevelEvidence(
                step=step,
                users=users,
                scrapes=scrapes,
                running=mean("running"),
                waiting=mean("waiting"),
                kv_cache_peak=kv,
                preemptions=_increase(inside["preemptions"]),
                prefix_cache_hit_rate=prefix,
                gpu_utilisation=busy,
                running_peak=peak("running"),
                waiting_peak=peak("waiting"),
                queue_ms=hist_mean("queue", 1000.0),
                prefill_ms=hist_mean("prefill", 1000.0),
                step_tokens=hist_mean("step_tokens"),
                window_start=start,
            )
        )
    if gpu:
        names["gpu"] = "GPU telemetry (summary.json gpu.by_step utilization_pct_mean)"
    return out, names


def knee_of(steps, capacity) -> tuple[float | None, str]:
    """(the level's load, why this level): the lowest level that missed the SLO; without one, the
    highest. The load is the users, or the rate of a search in requests/s (level_load)."""
    by_rate = capacity is not None and capacity.unit == "rate"
    missed = capacity.next_failing_rate if by_rate else capacity.next_failing_users if capacity is not None else None
    if missed is not None:
        return float(missed), f"the lowest level that missed {capacity.slo}"
    if not steps:
        return None, ""
    why = "the highest level (no level missed the SLO)" if capacity is not None else "the highest level (no --slo)"
    return max(level_load(s) for s in steps), why


def gpu_by_step(steps, gpu) -> dict[int, float]:
    """Each level's mean GPU utilisation (0..1) from summary.json's `gpu` section (GPU telemetry,
    one figure per level in by_step's order), where it measured one."""
    if gpu is None:
        return {}
    out = {}
    for s, g in zip(steps, gpu.by_step):
        if g.users == s.users and g.utilization_pct_mean is not None:
            out[s.step] = g.utilization_pct_mean / 100.0
    return out


def diagnose_levels(
    steps, capacity, server: pd.DataFrame | None, client: ClientBound | None = None, gpu=None
) -> KneeDiagnosis:
    """The run's diagnosis from its levels (summary.json by_step, or the live view's final steps),
    its capacity, the server's samples, the client's self-health and the GPU telemetry's section
    (summary.json `gpu`; absent without it)."""
    gpu = gpu_by_step(steps, gpu)
    whole = [s for s in steps if not s.partial]
    evidence, names = level_evidence(server, [(s.step, s.users, s.window.start, s.window.end) for s in whole], gpu)
    evidence = [
        e.model_copy(
            update={
                "rate": s.rate,
                "request_rate": s.throughput.requests_per_s,
                "step_ms": s.itl_ms.p50,
                "ttft_ms": s.ttft_ms.p50,
                "prompt_tokens": _prompt_tokens(s),
            }
        )
        for e, s in zip(evidence, whole)
    ]
    config, source = server_config(server)
    if source:
        names["config"] = source
    users, why = knee_of(whole, capacity)
    return diagnose(
        evidence,
        users,
        names,
        client.inaccurate_warning() if client is not None else "",
        why,
        heading_of(capacity),
        config,
        client_lag_ms(client),
    )


def client_lag_ms(client: ClientBound | None) -> float | None:
    """The client's worst read lag p99 over its workers (ms): how late a token or a first token was
    read, measured with --sim-timestamps, else its event loop's lag (None: not known)."""
    if client is None:
        return None
    lags = [
        w.get(key)
        for w in client.workers
        for key in ("token_lag_p99_ms", "first_token_lag_p99_ms", "loop_lag_p99_ms")
        if w.get(key) is not None
    ]
    return max(lags, default=None)


def _prompt_tokens(step) -> float | None:
    """Mean prompt tokens of a level's successful requests whose count is known (usage)."""
    t = step.tokens
    return t.prompt / t.prompt_known if t.prompt_known else None


def heading_of(capacity) -> str:
    """What the diagnosis is headed with: "Why the knee is there" only where a level missed the SLO
    (a run that found no knee does not say it has one)."""
    if capacity is not None and capacity.next_failing_users is not None:
        return "Why the knee is there"
    if capacity is not None:
        return "No level missed the SLO (no knee); what limits the highest level"
    return "What limits the highest level (no --slo, no knee)"


def _pct(x: float | None) -> str:
    return "unknown" if x is None else f"{x:.0%}"


def diagnose(
    levels: list[LevelEvidence],
    knee_users: float | None,
    names: dict[str, str] | None = None,
    client: str = "",
    knee_why: str = "",
    heading: str = "Why the knee is there",
    config: dict[str, float] | None = None,
    client_lag_ms: float | None = None,
) -> KneeDiagnosis:
    """The stated diagnosis at the knee (`knee_users`, or its rate in a search in requests/s: the level's
    LevelEvidence.load; None: the highest level) from each level's
    figures (`names`: the metric each figure was read from) and the server's stated configuration
    (`config`, server_config); `client`: the client's own warning, when it flagged itself, and
    `client_lag_ms` how late it read at worst (its p99), so that a rise it could explain is not
    put on the server."""
    names, config = names or {}, config or {}
    found = _server_limit(levels, knee_users, names, config, client_lag_ms if client else None)
    kind, sentence, evidence = found["kind"], found["sentence"], found["evidence"]
    if client:  # the warning is said once, beside the diagnosis (module doc)
        evidence.append("client self-health: its own timings were off (summary.json client_bound)")
        if kind == "unknown":
            kind, sentence = (
                "client inaccurate",
                (
                    "client inaccurate: no server metrics say why, and the client's own "
                    "timings were off (see its warning): the knee may be the client's"
                ),
            )
        elif kind == "no limit reached":
            kind = "client-bound"
            sentence = (
                "client-bound: " + sentence.removeprefix("no limit reached: ") + ". The server is near no limit "
                "and the client's own timings were off (see its warning): the knee is the client's"
            )
        else:
            sentence += ". The client's own timings were off too (see its warning), so the knee's place may be off"
    return KneeDiagnosis(
        kind=kind,
        users=found["users"],
        rate=found.get("rate"),
        knee=knee_why,
        heading=heading,
        sentence=sentence,
        evidence=evidence,
        metrics=names,
        levels=levels,
        client=client or None,
        candidates=found.get("candidates", []),
        nearest=found.get("nearest"),
        headroom=found.get("headroom"),
        config=config,
    )


def _level(g: LevelEvidence) -> dict:
    """The diagnosis's level: its users, and its rate in a search in requests/s."""
    return {"users": g.users, "rate": g.rate}


def _gpu_only(levels: list[LevelEvidence], knee_users: float | None, names: dict[str, str]) -> dict:
    """No server gauges (a server without /metrics, e.g. `transformers serve`): the GPU's own use
    still tells whether its compute is the limit."""
    busy = [g for g in levels if g.gpu_utilisation is not None]
    if not busy:
        level = next((g for g in levels if g.load == knee_users), None)
        return {
            "kind": "unknown",
            **(_level(level) if level is not None else {"users": knee_users}),
            "evidence": [],
            "sentence": (
                "no server metrics aligned to the levels: run with --server-metrics URL/metrics (vLLM's /metrics) to say "
                "why the knee is there"
            ),
        }
    knee = next((g for g in busy if g.load == knee_users), None) or max(busy, key=lambda g: g.load)
    gpu = _pct(knee.gpu_utilisation)
    evidence = [f"at {knee.at} (step {knee.step}): {names.get('gpu', 'gpu')} mean {gpu}"]
    unseen = "the server sends no queue or KV-cache metrics (--server-metrics URL/metrics, where it has them)"
    if knee.gpu_utilisation < GPU_IDLE:
        return {
            "kind": "scheduler-bound",
            **_level(knee),
            "evidence": evidence,
            "sentence": (
                f"scheduler-bound: at {knee.at} the GPU is busy only {gpu}: its compute is not the limit, the "
                f"server's own loop (CPU, its scheduling of the batch) is; {unseen} to show its queue"
            ),
        }
    return {
        "kind": "unknown",
        **_level(knee),
        "evidence": evidence,
        "sentence": (
            f"at {knee.at} the GPU is busy {gpu}, and {unseen}: compute cannot be told from memory or the scheduler"
        ),
    }


# What a limit named by elimination rests on (requests queue, the other rules fail, this one cannot tell).
ELIMINATED = {
    "scheduler-bound": "the server runs at most {cap} at once (the peak of {running}; it does not state its max_num_seqs)",
    "prefill-bound": "the prompts wait for the per-step token budget (the server states no max_num_batched_tokens "
    "nor the tokens of its steps)",
    "memory-bound": "the KV cache is the limit left (the server sends neither its use nor preemptions)",
    "compute-bound": "each step of the larger batch is the limit left",
}


def _server_limit(
    levels: list[LevelEvidence],
    knee_users: float | None,
    names: dict[str, str],
    config: dict[str, float],
    client_lag_ms: float | None = None,
) -> dict:
    """The weighing of the rules' findings at the knee (module doc)."""
    measured = [g for g in levels if g.scrapes and g.running is not None]
    if not measured:
        return _gpu_only(levels, knee_users, names)
    knee = next((g for g in measured if g.load == knee_users), None) or max(measured, key=lambda g: g.load)
    low = min(measured, key=lambda g: g.load)
    k = Knee(knee, None if low is knee else low, config, names, client_lag_ms=client_lag_ms)
    k.waits, k.wait_ms, queue_evidence = queued(k)
    n, where = k.n, f"at {knee.at}"
    evidence = [
        f"{k.where}: {n('waiting')} mean {knee.waiting or 0:,.1f}, peak {knee.waiting_peak or 0:,.0f}",
        *queue_evidence,
    ]
    findings = [rule(k) for rule in RULES]
    for f in findings:
        evidence += [e for e in f.evidence if e not in evidence]
    if knee.gpu_utilisation is not None and not any("gpu" in e.lower() for e in evidence):
        evidence.append(f"{k.where}: {n('gpu')} mean {_pct(knee.gpu_utilisation)}")
    prefix = _prefix_clause(knee, low, names, evidence, k.where)
    out = {**_level(knee), "evidence": evidence}
    holds = [f for f in findings if f.state == "holds"]
    holds = [f for f in holds if not f.weak] or holds  # a peak alone names a limit only where nothing else does
    # the engine's limits, one of which a queue in the engine must be (the front end's wait is not in it)
    maybe = [f for f in findings if f.state == "unknown" and f.limit in ELIMINATED]
    if len(holds) == 1:
        f = holds[0]
        return {**out, "kind": f.limit, "sentence": f"{f.limit}: {where} {f.because}{prefix}"}
    if len(holds) > 1:
        return {
            **out,
            "kind": "undecided",
            "candidates": [f.limit for f in holds],
            "sentence": (
                f"undecided: {where} the evidence does not separate {' from '.join(f.limit for f in holds)}: "
                + "; and ".join(f"{f.limit}, {f.because}" for f in holds)
                + prefix
            ),
        }
    queue = f"requests wait in the server's queue (mean {knee.waiting or 0:,.1f}) with the KV cache at peak {_pct(knee.kv_cache_peak)}"
    if k.waits and len(maybe) == 1:
        f = maybe[0]
        cap = min(knee.running_peak or 0.0, float(knee.users))
        because = ELIMINATED[f.limit].format(cap=f"{cap:,.0f}", running=n("running"))
        return {
            **out,
            "kind": f.limit,
            "sentence": f"{f.limit}: {where} {queue}, and no other limit explains it: {because}{prefix}",
        }
    if k.waits:
        unknown = [f.limit for f in maybe]
        what = (
            f"the server's figures do not separate {' from '.join(unknown)} (it does not state max_num_seqs or "
            f"max_num_batched_tokens, nor send the tokens of its steps)"
            if unknown
            else "no limit the suite knows explains it (the slots, the KV cache and the step budget all have room)"
        )
        return {
            **out,
            "kind": "undecided",
            "candidates": unknown,
            "sentence": f"undecided: {where} {queue}: {what}{prefix}",
        }
    return {**out, **_no_limit(k, findings, prefix)}


def _no_limit(k: Knee, findings, prefix: str) -> dict:
    """Nothing near a limit: say so, and name the nearest one with its headroom."""
    g = k.at
    step = k.grew("step_ms")
    steps = (
        f"steps take {step:.1f}x as long as at {k.low.at}"
        if step is not None
        else "it is the lowest level, so no step growth to measure"
        if k.low is None
        else "the step time is not known"
    )
    waiting = g.waiting or 0.0
    # requests counted as waiting whose wait is only for the step in progress (limits.queued): "nothing
    # waits" beside "mean 30.5 waiting" read as a contradiction
    queue = (
        f"requests wait only for the step in progress (mean {waiting:,.1f} waiting, {k.wait_ms:,.0f} ms each)"
        if waiting >= QUEUE_MIN and k.wait_ms is not None
        else f"nothing waits for a slot (mean {waiting:,.1f} waiting)"
    )
    sentence = f"no limit reached: at {g.at} {queue} and {steps}"
    near = [f for f in findings if f.headroom is not None]
    if not near:
        return {
            "kind": "no limit reached",
            "sentence": sentence + "; the server states no limit to measure headroom against" + prefix,
        }
    f = min(near, key=lambda f: f.headroom)
    return {
        "kind": "no limit reached",
        "nearest": f.limit,
        "headroom": f.headroom,
        "sentence": f"{sentence}; the nearest limit is {f.limit}: {f.headroom_text}, {_pct(f.headroom)} headroom{prefix}",
    }


def _prefix_clause(knee: LevelEvidence, low: LevelEvidence, names: dict[str, str], evidence: list[str], at: str) -> str:
    """The prefix-cache hit rate as evidence, and as part of the cause where it fell by PREFIX_DROP."""
    if knee.prefix_cache_hit_rate is None:
        return ""
    n = lambda role: names.get(role, role)  # noqa: E731
    source = n("prefix_rate") if "prefix_hits" not in names else f"{n('prefix_hits')} / {n('prefix_queries')}"
    evidence.append(
        f"{at}: prefix-cache hit rate {_pct(knee.prefix_cache_hit_rate)} ({source}; "
        f"{_pct(low.prefix_cache_hit_rate)} at {low.at})"
    )
    if (
        low is not knee
        and low.prefix_cache_hit_rate is not None
        and low.prefix_cache_hit_rate - knee.prefix_cache_hit_rate >= PREFIX_DROP
    ):
        return (
            f"; the prefix-cache hit rate fell from {_pct(low.prefix_cache_hit_rate)} at {low.at} to "
            f"{_pct(knee.prefix_cache_hit_rate)}: cached prefixes were evicted, so each request prefills more"
        )
    return ""
