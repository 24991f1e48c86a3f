"""Why the knee is where it is: the server's own metrics per load level, and one stated diagnosis.

The server's Prometheus samples (--server-metrics: server_metrics.parquet after the run, the
scraper's memory while it goes on) are aligned to each level's window (after its warm-up):
requests running and waiting (means), KV-cache use (peak), preemptions (the counter's increase),
the prefix-cache hit rate (hits over queries inside the window, or the server's own rate gauge),
and GPU utilisation (mean, where a DCGM exporter was scraped or GPU telemetry gave it per step).
The diagnosis looks at the knee, the lowest level that missed the SLO (without an SLO, or when
none missed, the highest level), and says which limit it hit:

- *memory-bound*: requests wait in the server's queue while the KV cache is (nearly) full, or the
  server preempts requests to free it. Full: KV_FULL used, or room for fewer than KV_ROOM more
  requests of the size the running ones have on average (peak over running): a first-come server
  stops admitting at the first waiting request that does not fit, so a cache whose requests are
  large can be full with a request's worth of it free (13 running, 89 % used);
- *scheduler-bound*: requests wait while the KV cache has room: the server runs no more requests
  at once (its max-num-seqs, or a token budget per step); or nothing waits while the GPU is mostly
  idle: the server's own loop (CPU) is the limit;
- *compute-bound*: nothing waits in the server's queue (or only for the step in progress, below);
  every request runs, and each step of the growing batch takes longer;
- *client inaccurate*: no server metrics, and the client's self-health flagged the run: its
  latencies are off, and so may be the knee;
- *unknown*: no server metrics to say (run with --server-metrics URL/metrics).

Without the server's gauges (a server with no /metrics) but with GPU telemetry, a GPU busy less
than GPU_IDLE at the knee is still a diagnosis: the server's own loop, not the GPU's compute, is
the limit (`transformers serve` on an H200: 20 % busy at its highest level); a busier GPU alone
cannot tell compute from memory or the scheduler.

Requests wait for a slot, not only for the step in progress, when their mean wait is more than
QUEUE_STEPS engine steps. In any continuous-batching server a request that arrives while a step
runs waits for that step to end, so a compute-bound server's queue gauge is not zero: with 24
users sending 8-token replies into 0.3 s steps it reads 1-3. By Little's law the mean wait is the
mean number waiting over the arrival rate (the level's requests completed per second, equal to
arrivals in a steady level), and the wait for the step in progress is at most one step (the
client's ITL p50); a queue for slots grows it to many steps (18 waiting at 6 slots: 90 steps).

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

from typing import TYPE_CHECKING

import numpy as np

from metrics.schema.client_health import ClientBound
from metrics.schema.server_side import KneeDiagnosis, LevelEvidence

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
}
SUMMED = ("running", "waiting", "preemptions", "prefix_hits", "prefix_queries")  # over label sets; the rest averaged
if TYPE_CHECKING:
    import pandas as pd

METRIC_NAMES = frozenset(n for names in NAMES.values() for n in names)

QUEUE_MIN = 1.0  # mean requests waiting in the server at the knee for "they queue"
QUEUE_STEPS = 2.0  # a mean wait (Little's law) of more engine steps than this is a queue for slots
KV_FULL = 0.90  # KV-cache use (peak) from which the cache is "full"
KV_ROOM = 2.0  # ... or room left for fewer requests than this, of the running ones' mean size
PREFIX_DROP = 0.2  # a fall of the prefix-cache hit rate (absolute) from the lowest level to the knee that explains it
GPU_IDLE = 0.5  # mean GPU utilisation under which nothing waiting is not "compute-bound"


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
        rows = server[base == name]
        if not rows.empty:
            grouped = rows.groupby("timestamp")["value"]
            sent = str(rows["metric"].iloc[0])  # as the server sent it (counters with _total)
            return sent, (grouped.sum() if role in SUMMED else grouped.mean()).sort_index()
    return None, pd.Series(dtype=float)


def _increase(s: pd.Series) -> float | None:
    """A counter's increase over its readings; a drop is a reset (the counter restarted at 0)."""
    v = s.to_numpy(dtype=float)
    if len(v) < 2:
        return None
    d = np.diff(v)
    return float(np.where(d >= 0, d, v[1:]).sum())


def level_evidence(server: pd.DataFrame | None, levels, gpu: dict | None = None) -> tuple[list[LevelEvidence], dict[str, str]]:
    """Each level's figures and the metric names they came from. `levels` are (step, users, window
    start, window end) in wall-clock seconds; `gpu` maps a step to its mean GPU utilisation (0..1)
    from GPU telemetry, when the run had it (a scraped DCGM exporter gives it otherwise)."""
    found = {role: _series(server, role) for role in NAMES}
    names = {role: name for role, (name, _) in found.items() if name is not None}
    out = []
    for step, users, start, end in levels:
        inside = {role: s[(s.index >= start) & (s.index <= end)] for role, (_, s) in found.items()}
        mean = lambda role: float(inside[role].mean()) if len(inside[role]) else None  # noqa: E731
        kv = float(inside["kv"].max()) if len(inside["kv"]) else None
        if kv is not None and kv > 1.0:
            kv /= 100.0  # a percentage where a share was expected
        hits, queries = _increase(inside["prefix_hits"]), _increase(inside["prefix_queries"])
        prefix = hits / queries if hits is not None and queries else mean("prefix_rate")
        busy = (gpu or {}).get(step)
        if busy is None and mean("gpu") is not None:
            busy = mean("gpu") / 100.0
        scrapes = max((len(v) for v in inside.values()), default=0)
        out.append(LevelEvidence(step=step, users=users, scrapes=scrapes, running=mean("running"), waiting=mean("waiting"),
                                 kv_cache_peak=kv, preemptions=_increase(inside["preemptions"]),
                                 prefix_cache_hit_rate=prefix, gpu_utilisation=busy))  # fmt: skip
    if gpu:
        names["gpu"] = "GPU telemetry (summary.json gpu.by_step utilization_pct_mean)"
    return out, names


def knee_of(steps, capacity) -> tuple[int | None, str]:
    """(users, why this level): the lowest level that missed the SLO; without one, the highest."""
    if capacity is not None and capacity.next_failing_users is not None:
        return capacity.next_failing_users, f"the lowest level that missed {capacity.slo}"
    if not steps:
        return None, ""
    why = "the highest level (no level missed the SLO)" if capacity is not None else "the highest level (no --slo)"
    return max(s.users for s in steps), why


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


def diagnose_levels(steps, capacity, server: pd.DataFrame | None, client: ClientBound | None = None,
                    gpu=None) -> KneeDiagnosis:  # fmt: skip
    """The run's diagnosis from its levels (summary.json by_step, or the live view's final steps),
    its capacity, the server's samples, the client's self-health and the GPU telemetry's section
    (summary.json `gpu`; absent without it)."""
    gpu = gpu_by_step(steps, gpu)
    whole = [s for s in steps if not s.partial]
    evidence, names = level_evidence(server, [(s.step, s.users, s.window.start, s.window.end) for s in whole], gpu)
    evidence = [e.model_copy(update={"request_rate": s.throughput.requests_per_s, "step_ms": s.itl_ms.p50})
                for e, s in zip(evidence, whole)]  # fmt: skip
    users, why = knee_of(whole, capacity)
    return diagnose(evidence, users, names, client.inaccurate_warning() if client is not None else "", why,
                    heading_of(capacity))


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


def diagnose(levels: list[LevelEvidence], knee_users: int | None, names: dict[str, str] | None = None,
             client: str = "", knee_why: str = "", heading: str = "Why the knee is there") -> KneeDiagnosis:  # fmt: skip
    """The stated diagnosis at the knee (`knee_users`; None: the highest level) from each level's
    figures (`names`: the metric each figure was read from); `client`: the client's own warning,
    when it flagged itself."""
    names = names or {}
    kind, users, sentence, evidence = _server_limit(levels, knee_users, names)
    if client:  # the warning is said once, beside the diagnosis (module doc)
        evidence.append("client self-health: its own timings were off (summary.json client_bound)")
        if kind == "unknown":
            kind, sentence = "client inaccurate", ("client inaccurate: no server metrics say why, and the client's own "
                                                   "timings were off (see its warning): the knee may be the client's")
        else:
            sentence += ". The client's own timings were off too (see its warning), so the knee's place may be off"
    return KneeDiagnosis(kind=kind, users=users, knee=knee_why, heading=heading, sentence=sentence, evidence=evidence,
                         metrics=names, levels=levels, client=client or None)  # fmt: skip


def _cache_full(g: LevelEvidence) -> bool:
    peak = g.kv_cache_peak
    if peak is None:
        return False
    per_request = peak / g.running if g.running else None
    return peak >= KV_FULL or (per_request is not None and 1.0 - peak < KV_ROOM * per_request)


def _gpu_only(levels: list[LevelEvidence], knee_users: int | None, names: dict[str, str]):
    """No server gauges (a server without /metrics, e.g. `transformers serve`): the GPU's own use
    still tells whether its compute is the limit."""
    busy = [g for g in levels if g.gpu_utilisation is not None]
    if not busy:
        return ("unknown", knee_users, "no server metrics aligned to the levels: run with --server-metrics URL/metrics "
                "(vLLM's /metrics) to say why the knee is there", [])  # fmt: skip
    knee = next((g for g in busy if g.users == knee_users), None) or max(busy, key=lambda g: g.users)
    gpu = _pct(knee.gpu_utilisation)
    evidence = [f"at {knee.users} users (step {knee.step}): {names.get('gpu', 'gpu')} mean {gpu}"]
    unseen = "the server sends no queue or KV-cache metrics (--server-metrics URL/metrics, where it has them)"
    if knee.gpu_utilisation < GPU_IDLE:
        return ("scheduler-bound", knee.users,
                f"scheduler-bound: at {knee.users} users the GPU is busy only {gpu}: its compute is not the limit, the "
                f"server's own loop (CPU, its scheduling of the batch) is; {unseen} to show its queue", evidence)  # fmt: skip
    return ("unknown", knee.users, f"at {knee.users} users the GPU is busy {gpu}, and {unseen}: compute cannot be told "
            "from memory or the scheduler", evidence)  # fmt: skip


def _server_limit(levels: list[LevelEvidence], knee_users: int | None, names: dict[str, str]):
    measured = [g for g in levels if g.scrapes and g.running is not None]
    if not measured:
        return _gpu_only(levels, knee_users, names)
    knee = next((g for g in measured if g.users == knee_users), None) or max(measured, key=lambda g: g.users)
    low = min(measured, key=lambda g: g.users)
    peak_running = max(g.running for g in measured)
    waiting = knee.waiting or 0.0
    n = lambda role: names.get(role, role)  # noqa: E731
    at = f"at {knee.users} users (step {knee.step}, {knee.scrapes} scrapes)"
    evidence = [f"{at}: {n('waiting')} mean {waiting:,.1f}", f"{at}: {n('running')} mean {knee.running:,.1f}"]
    if knee.kv_cache_peak is not None:
        evidence.append(f"{at}: {n('kv')} peak {_pct(knee.kv_cache_peak)}")
    if knee.preemptions is not None:
        evidence.append(f"{at}: {n('preemptions')} +{knee.preemptions:,.0f}")
    if knee.gpu_utilisation is not None:
        evidence.append(f"{at}: {n('gpu')} mean {_pct(knee.gpu_utilisation)}")
    prefix = ""
    if knee.prefix_cache_hit_rate is not None:
        source = n("prefix_rate") if "prefix_hits" not in names else f"{n('prefix_hits')} / {n('prefix_queries')}"
        evidence.append(f"{at}: prefix-cache hit rate {_pct(knee.prefix_cache_hit_rate)} ({source}; "
                        f"{_pct(low.prefix_cache_hit_rate)} at {low.users} users)")  # fmt: skip
        if low is not knee and low.prefix_cache_hit_rate is not None \
                and low.prefix_cache_hit_rate - knee.prefix_cache_hit_rate >= PREFIX_DROP:
            prefix = (f"; the prefix-cache hit rate fell from {_pct(low.prefix_cache_hit_rate)} at {low.users} users to "
                      f"{_pct(knee.prefix_cache_hit_rate)}: cached prefixes were evicted, so each request prefills more")  # fmt: skip
    wait_ms = waiting / knee.request_rate * 1000.0 if knee.request_rate and knee.step_ms else None
    if wait_ms is not None:
        evidence.append(f"{at}: each request waits {wait_ms:,.0f} ms on average ({n('waiting')} mean over "
                        f"{knee.request_rate:,.1f} requests/s) against one engine step of {knee.step_ms:,.0f} ms (ITL p50)")  # fmt: skip
    where = f"at {knee.users} users"
    kv = _pct(knee.kv_cache_peak)
    for_the_step = waiting >= QUEUE_MIN and wait_ms is not None and wait_ms <= QUEUE_STEPS * knee.step_ms
    if waiting >= QUEUE_MIN and not for_the_step:
        preempted = knee.preemptions is not None and knee.preemptions > 0
        if _cache_full(knee) or preempted:
            extra = f", {knee.preemptions:,.0f} preemptions" if preempted else ""
            return ("memory-bound", knee.users,
                    f"memory-bound: {where} requests wait in the server's queue (mean {waiting:,.1f}) while the KV cache is "
                    f"full (peak {kv}{extra}); {knee.running:,.1f} run at once{prefix}", evidence)  # fmt: skip
        return ("scheduler-bound", knee.users,
                f"scheduler-bound: {where} requests wait in the server's queue (mean {waiting:,.1f}) while the KV cache has "
                f"room (peak {kv}): the server runs no more than about {peak_running:,.0f} at once (its max-num-seqs or "
                f"token budget per step){prefix}", evidence)  # fmt: skip
    queue = (f"requests wait only for the step in progress (mean {waiting:,.1f} waiting, {wait_ms:,.0f} ms each against "
             f"{knee.step_ms:,.0f} ms steps)" if for_the_step else f"nothing waits in the server's queue (mean {waiting:,.1f})")  # fmt: skip
    if knee.gpu_utilisation is not None and knee.gpu_utilisation < GPU_IDLE:
        return ("scheduler-bound", knee.users,
                f"scheduler-bound: {where} {queue} and all "
                f"{knee.running:,.1f} requests run at once, yet the GPU is busy only {_pct(knee.gpu_utilisation)}: the "
                f"server's own loop (CPU) is the limit{prefix}", evidence)  # fmt: skip
    return ("compute-bound", knee.users,
            f"compute-bound: {where} {queue}; all {knee.running:,.1f} "
            f"requests run at once (KV cache peak {kv}"
            f"{'' if knee.gpu_utilisation is None else ', GPU ' + _pct(knee.gpu_utilisation)}) and each step of the larger "
            f"batch takes longer{prefix}", evidence)  # fmt: skip
