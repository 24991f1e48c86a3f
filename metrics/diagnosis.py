"""Why the knee is where it is: the server's own gauges per load level, and one stated diagnosis.

The server's Prometheus samples (server_metrics.parquet, vLLM's names) are aligned to each level's
window: requests running and waiting (means), KV-cache use (peak) and preemptions (the counter's
increase). The diagnosis looks at the knee, the lowest level that missed the SLO (without an SLO,
or when none missed, the highest level), and says which limit it hit:

- *memory-bound*: requests wait in the server's queue while the KV cache is (nearly) full, or the
  server preempts requests to free it;
- *scheduler-bound*: requests wait while the KV cache has room: the server runs no more requests
  at once (its max-num-seqs, or a token budget per step);
- *compute-bound*: nothing waits in the server's queue; every request runs, and each step of the
  growing batch takes longer;
- *client inaccurate*: no server gauges, and the client's self-health flagged the run: its
  latencies are off, and so may be the knee;
- *unknown*: no server gauges to say (run with --server-metrics URL/metrics).

The server's gauges are its own, whatever the client's accuracy: when the client flagged itself,
the limit stands and the sentence adds that the knee's place may be the client's.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"
KV, PREEMPTIONS = "vllm:kv_cache_usage_perc", "vllm:num_preemptions"
QUEUE_MIN = 1.0  # mean requests waiting in the server at the knee for "they queue"
KV_FULL = 0.90  # KV-cache use (peak) from which the cache is "full"


@dataclass(frozen=True, slots=True)
class LevelGauges:
    users: int
    samples: int  # scrapes inside the level's window
    running: float | None  # mean
    waiting: float | None  # mean
    kv_peak: float | None  # 0..1
    preemptions: float | None  # increase inside the window


@dataclass(frozen=True, slots=True)
class Diagnosis:
    kind: str  # client inaccurate | memory-bound | scheduler-bound | compute-bound | unknown
    users: int | None  # the knee's level
    sentence: str


def _series(server: pd.DataFrame, name: str) -> pd.Series:
    """A gauge or counter summed over its labels (and sources) per scrape time."""
    rows = server[(server["metric"] == name) | (server["metric"] == name + "_total")]
    return rows.groupby("timestamp")["value"].sum().sort_index()


def level_gauges(server: pd.DataFrame | None, levels) -> list[LevelGauges]:
    """Each level's gauges; `levels` are (users, window start, window end) in wall-clock seconds."""
    out = []
    series = {} if server is None or server.empty else {n: _series(server, n) for n in (RUNNING, WAITING, KV, PREEMPTIONS)}
    for users, start, end in levels:
        def inside(name):
            s = series.get(name)
            return s[(s.index >= start) & (s.index <= end)] if s is not None and not s.empty else pd.Series(dtype=float)

        run, wait, kv, pre = (inside(n) for n in (RUNNING, WAITING, KV, PREEMPTIONS))
        mean = lambda s: float(s.mean()) if len(s) else None  # noqa: E731
        out.append(LevelGauges(users, int(max(len(run), len(wait))), mean(run), mean(wait),
                               float(kv.max()) if len(kv) else None,
                               float(max(0.0, pre.iloc[-1] - pre.iloc[0])) if len(pre) > 1 else None))  # fmt: skip
    return out


def diagnose(gauges: list[LevelGauges], knee_users: int | None, client_inaccurate: str = "") -> Diagnosis:
    """The stated diagnosis at the knee (`knee_users`; None: the highest level); `client_inaccurate`:
    the client's own warning, when it flagged itself."""
    d = _server_limit(gauges, knee_users)
    if not client_inaccurate:
        return d
    if d.kind == "unknown":
        return Diagnosis("client inaccurate", knee_users,
                         f"client inaccurate: {client_inaccurate} The knee may be the client's: add workers and run again")
    return Diagnosis(d.kind, d.users, f"{d.sentence}. The client was inaccurate too, so the knee's place may be off: "
                     f"{client_inaccurate}")  # fmt: skip


def _server_limit(gauges: list[LevelGauges], knee_users: int | None) -> Diagnosis:
    measured = [g for g in gauges if g.samples and g.running is not None]
    if not measured:
        return Diagnosis("unknown", knee_users, "no server gauges aligned to the levels: run with --server-metrics "
                         "URL/metrics (vLLM's /metrics) to say why the knee is there")
    knee = next((g for g in measured if g.users == knee_users), None) or max(measured, key=lambda g: g.users)
    peak_running = max(g.running for g in measured)
    kv = f"{knee.kv_peak:.0%}" if knee.kv_peak is not None else "unknown"
    waiting = knee.waiting or 0.0
    where = f"at {knee.users} users"
    if waiting >= QUEUE_MIN:
        preempted = knee.preemptions is not None and knee.preemptions > 0
        if (knee.kv_peak is not None and knee.kv_peak >= KV_FULL) or preempted:
            extra = f", {knee.preemptions:,.0f} preemptions" if preempted else ""
            return Diagnosis("memory-bound", knee.users,
                             f"memory-bound: {where} requests wait in the server's queue (mean {waiting:,.1f}) while the "
                             f"KV cache is full (peak {kv}{extra}); {knee.running:,.1f} run at once")  # fmt: skip
        return Diagnosis("scheduler-bound", knee.users,
                         f"scheduler-bound: {where} requests wait in the server's queue (mean {waiting:,.1f}) while the KV "
                         f"cache has room (peak {kv}): the server runs no more than about {peak_running:,.0f} at once "
                         f"(its max-num-seqs or token budget per step)")  # fmt: skip
    return Diagnosis("compute-bound", knee.users,
                     f"compute-bound: {where} nothing waits in the server's queue (mean {waiting:,.1f}); all "
                     f"{knee.running:,.1f} requests run at once (KV cache peak {kv}) and each step of the larger batch "
                     f"takes longer")  # fmt: skip


def knee_of(steps, capacity) -> int | None:
    """The lowest level that missed the SLO; without one, the highest level."""
    if capacity is not None and capacity.next_failing_users is not None:
        return capacity.next_failing_users
    return max((s.users for s in steps), default=None) if steps else None

