"""Self-health of the load generator: is each client process still measuring accurately?

A Python client that runs out of CPU does not slow down evenly: its timings stay within
milliseconds up to about 70 % of a core, then jump to hundreds of milliseconds while mean TPOT
still looks right (bench/RESULTS.md "Client speed"). Locust's own warning comes at 90 % CPU,
sampled every 10 s, and never changes the result. So every process that runs
users (each worker, or a local run) watches itself:

  cpu        its own CPU, % of one core (psutil, every second)
  loop lag   how late a greenlet that sleeps 0.1 s wakes up (10 probes a second): the delay every
             read of every stream waits on top of the network. A loop blocked for seconds (one
             huge parse) cannot sample meanwhile: each second and each probe it missed counts,
             late by what was left of the stall at its moment, so a stall is never one sample
  token lag  with --sim-timestamps: chunk arrival minus the simulator's send time (`sim_t`), for
             every chunk, taken off the finisher's parsed streams (plugin.events.stream_parsed)

Each second gives one sample. A limit counts as passed when at least 80 % of the samples of the
last --health-sustain seconds exceed it (4 of 5 by default): a lone stall does not count, a
process that stays late does. The process is **client bound** when its CPU passes
--health-cpu-limit, or when its loop lag or token lag passes its limit while the process itself
is busy: it used the CPU or waited in the run queue for it (/proc/self/schedstat) at least half
the CPU limit on average over those seconds. A process starved by others on a crowded machine is
busy by this measure (it waits for a CPU all the time) even when it gets little CPU. Lag in a
process that is mostly idle is not the client's own doing but other processes delaying its
wake-ups: that is reported as **contended** (with the run-queue wait of the process and the
host's CPU pressure) and does not mark the run client bound, since more workers would not help.

Over the whole run (after --warmup, until the run begins to stop; streams cut by the stop left
out) the process is also **inaccurate** when its run-wide token-lag p99 (--sim-timestamps) or
loop-lag p99 (with at least MIN_LATE_PROBES late probes) passes its limit, however thinly the late
moments were spread: stalls of one ITL every few seconds at moderate CPU never fill a sustain
window, yet they put the run's TTFT and ITL tails off by that much (bench/RESULTS.md "Client
speed", eight workers). A bound process is inaccurate too; summary.json says `inaccurate`.

Workers ship their samples and state to the master in every worker report (Locust's
`report_to_master` / `worker_report`, every 3 s) and once more when they stop; a local run feeds
its own board. The board (the `Health` plugin's, on the master or the local process) warns on
the console once per worker when it first becomes client bound, and at the end writes
`summary.json` -> `client_bound`:

    {"bound": true, "workers": [{"worker", "index", "bound", "since", "reasons", "cpu_p95",
      "cpu_peak", "loop_lag_p99_ms", "token_lag_p99_ms", "contended", ...}],
     "workers_needed": 2, "advice": "...", "limits": {...}}

`Health.snapshot()` returns the same per-worker state plus each worker's recent
samples, for a live view (web UI).
"""

from __future__ import annotations

import logging
import math
import os
import time
from bisect import bisect_left
from collections import deque

import gevent
import psutil

from metrics.percentiles import percentile
from plugin import events as llm_events
from plugin.state import Plugin, role_of

log = logging.getLogger("llm.health")

REPORT_KEY = "llm_health"
FINAL_MESSAGE = "llm_health_final"
PROBE_S = 0.1  # loop-lag probe period
SUSTAIN_SHARE = 0.8  # share of the sustain window's samples that must pass a limit
RECENT_SAMPLES = 300  # per worker, for snapshot(); older samples only count in the run totals
MAX_MISSED_SAMPLES = 3600  # a stall longer than an hour is counted as an hour of late samples
MAX_MISSED_PROBES = MAX_MISSED_SAMPLES * 10
MIN_LATE_PROBES = 10  # run-wide loop-lag p99 counts only with at least this many late probes
# histogram bounds for run-wide lag percentiles: 20 us .. ~400 s in steps of 10 %
LAG_BOUNDS = [2e-5 * 1.1**i for i in range(177)]


class Limits:
    """The accuracy limits (options --health-*), checked at test start."""

    __slots__ = ("cpu_pct", "loop_lag_s", "token_lag_s", "sustain_s", "target_cpu_pct")

    def __init__(self, cpu_pct=70.0, loop_lag_s=0.010, token_lag_s=0.005, sustain_s=5.0, target_cpu_pct=60.0):
        self.cpu_pct = cpu_pct
        self.loop_lag_s = loop_lag_s
        self.token_lag_s = token_lag_s
        self.sustain_s = sustain_s
        self.target_cpu_pct = target_cpu_pct

    @classmethod
    def from_plan(cls, limits) -> "Limits":
        """From the plan's checked `HealthLimits` (plugin/plan.py validates the --health-* options)."""
        return cls(limits.cpu_pct, limits.loop_lag_s, limits.token_lag_s, limits.sustain_s, limits.target_cpu_pct)

    def to_dict(self) -> dict:
        return {
            "cpu_pct": self.cpu_pct, "loop_lag_ms": self.loop_lag_s * 1000, "token_lag_ms": self.token_lag_s * 1000,
            "sustain_s": self.sustain_s, "sustain_share": SUSTAIN_SHARE, "target_cpu_pct": self.target_cpu_pct,
        }  # fmt: skip


def _hist_pct(counts: list[int], q: float) -> float | None:
    """Upper bound (ms) of the histogram bucket holding the q-quantile; None when empty."""
    total = sum(counts)
    if not total:
        return None
    rank = q * total
    acc = 0
    for i, c in enumerate(counts):
        acc += c
        if acc >= rank:
            return round(LAG_BOUNDS[min(i, len(LAG_BOUNDS) - 1)] * 1000, 3)
    return round(LAG_BOUNDS[-1] * 1000, 3)


def _host_pressure() -> float | None:
    """The host's CPU pressure (PSI 'some avg10', %), where the kernel has it."""
    try:
        with open("/proc/pressure/cpu") as f:
            return float(f.readline().split()[1].split("=")[1])
    except (OSError, IndexError, ValueError):
        return None


def _run_delay_s() -> float | None:
    """Seconds this process's main thread has waited for a CPU (/proc/self/schedstat)."""
    try:
        with open("/proc/self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


class HealthMonitor:
    """One process that runs users, watching itself (one small greenlet: a 0.1 s sleep, a sample a second)."""

    def __init__(self, limits: Limits, token_lag: bool, name: str, index: int, warmup_s: float = 0.0):
        self.limits = limits
        self.warmup_s = warmup_s  # run-wide lag percentiles leave out the run's --warmup, like its statistics
        self.count_from = 0.0
        self.count_until = math.inf  # the run began to stop: killing streams and draining is not measuring
        self.token_lag = token_lag
        self.name = name
        self.index = index
        self.proc = psutil.Process()
        self.window = max(1, int(round(limits.sustain_s)))
        self.need = max(1, math.ceil(SUSTAIN_SHARE * self.window))
        self.samples: deque = deque(maxlen=RECENT_SAMPLES)
        self.unsent: list[dict] = []
        self._probes: list[float] = []  # loop lags of the current second
        self._tok_n = 0
        self._tok_over = 0
        self._tok_hist = [0] * (len(LAG_BOUNDS) + 1)  # current second
        self.loop_hist = [0] * (len(LAG_BOUNDS) + 1)  # whole run
        self.token_hist = [0] * (len(LAG_BOUNDS) + 1)
        self.cpu_all: list[float] = []
        self.demand_all: list[float] = []
        self.bound_since: float | None = None
        self.bound_reasons: list[str] = []
        self.contended_since: float | None = None
        self.peak = {}  # worst sample values while bound or contended
        self.on_sample = None  # called with each new sample (a local run's board)
        self._greenlets: list = []
        self._last_cpu_t = 0.0
        self._last_delay: float | None = None

    # -- collection ---------------------------------------------------------------------------
    def start(self) -> None:
        self.proc.cpu_percent(None)  # starts psutil's interval
        self._last_cpu_t = time.monotonic()
        self.count_from = time.perf_counter() + self.warmup_s
        self._last_delay = _run_delay_s()
        self._greenlets = [gevent.spawn(self._probe_loop)]

    def stop(self) -> None:
        for g in self._greenlets:
            g.kill(block=False)
        self._greenlets = []

    def _probe_loop(self) -> None:
        perf = time.perf_counter
        next_sample = time.monotonic() + 1.0
        run_hist = self.loop_hist
        spare = [0] * len(run_hist)  # the warm-up's probes: in the per-second samples, not the run-wide p99
        while True:
            t = perf()
            gevent.sleep(PROBE_S)
            lag = max(0.0, perf() - t - PROBE_S)
            self._probes.append(lag)
            hist = run_hist if self.count_from <= t < self.count_until else spare
            hist[bisect_left(LAG_BOUNDS, lag)] += 1
            # The loop was blocked for longer than a probe period: the probes that could not run
            # meanwhile were late too, each by what was left of the stall at its moment.
            for k in range(1, min(int(lag / PROBE_S), MAX_MISSED_PROBES) + 1):
                hist[bisect_left(LAG_BOUNDS, lag - k * PROBE_S)] += 1
            now = time.monotonic()
            if now >= next_sample:
                # Every sample moment that passed while the loop was blocked is a sample of its own,
                # late by as much as the loop was at that moment: a stall of 20 s is 20 late
                # samples, not one (which the sustained limits would ignore).
                missed = min(int(now - next_sample), MAX_MISSED_SAMPLES)
                blocked_since = now - lag
                stalled = [max(0.0, next_sample + i - blocked_since) for i in range(missed)]
                next_sample += missed + 1.0
                if next_sample < now:  # fell behind by more than MAX_MISSED_SAMPLES: resynchronise
                    next_sample = now + 1.0
                self._sample(stalled)

    def on_parsed(self, rec, parsed, **_kw) -> None:
        """Token lag of every chunk of a finished stream (needs --sim-timestamps); streams cut by the
        run's end are left out, like the statistics leave them out."""
        if rec.error == "stopped":
            return
        limit = self.limits.token_lag_s
        hist = self._tok_hist
        bounds = LAG_BOUNDS
        n = over = 0
        for c in parsed.chunks:
            lag = c.t - c.sim_t
            if lag == lag:  # not nan: the server stamped it
                n += 1
                if lag > limit:
                    over += 1
                hist[bisect_left(bounds, lag)] += 1
        self._tok_n += n
        self._tok_over += over

    def _sample(self, stalled: list[float] = ()) -> None:
        """One sample of the last second; `stalled`: the loop lags of the sample moments missed
        before it (the loop was blocked), each a sample of its own with the CPU of the interval."""
        now = time.monotonic()
        cpu = self.proc.cpu_percent(None)
        delay = _run_delay_s()
        elapsed = max(1e-3, now - self._last_cpu_t)
        runq = None
        if delay is not None and self._last_delay is not None:
            runq = round(100 * (delay - self._last_delay) / elapsed, 1)
        self._last_cpu_t, self._last_delay = now, delay
        probes, self._probes = self._probes, []
        wall = time.time()
        for i, late in enumerate(stalled):
            self._add_sample({
                "t": round(wall - (len(stalled) - i) , 3), "cpu": round(cpu, 1),
                "loop_lag_p99_ms": round(late * 1000, 2), "loop_lag_max_ms": round(late * 1000, 2),
                "runq_pct": runq, "demand": round(cpu + (runq or 0.0), 1), "host_pressure": None,
                **({"tokens": 0, "token_lag_p99_ms": None, "token_lag_over_share": None} if self.token_lag else {}),
            })  # fmt: skip
        sample = {
            "t": round(time.time(), 3),
            "cpu": round(cpu, 1),
            "loop_lag_p99_ms": round(percentile(probes, 99) * 1000, 2) if probes else None,
            "loop_lag_max_ms": round(max(probes) * 1000, 2) if probes else None,
            "runq_pct": runq,
            "demand": round(cpu + (runq or 0.0), 1),  # CPU it used plus CPU it waited for
            "host_pressure": _host_pressure(),
        }
        if self.token_lag:
            n, over, hist = self._tok_n, self._tok_over, self._tok_hist
            sample["tokens"] = n
            sample["token_lag_p99_ms"] = _hist_pct(hist, 0.99)
            sample["token_lag_over_share"] = round(over / n, 4) if n else None
            if self.count_from <= time.perf_counter() < self.count_until:  # warm-up, stop: not in the run-wide p99
                for i, c in enumerate(hist):
                    if c:
                        self.token_hist[i] += c
            self._tok_n = self._tok_over = 0
            self._tok_hist = [0] * (len(LAG_BOUNDS) + 1)
        self._add_sample(sample)
        if self.on_sample is not None:
            self.on_sample(self)

    def _add_sample(self, sample: dict) -> None:
        self.cpu_all.append(sample["cpu"])
        self.demand_all.append(sample["demand"])
        self.samples.append(sample)
        self.unsent.append(sample)
        self._judge(sample)

    def _judge(self, latest: dict) -> None:
        lim = self.limits
        recent = list(self.samples)[-self.window :]
        if len(recent) < self.window:
            return
        cpu_over = sum(1 for s in recent if s["cpu"] > lim.cpu_pct)
        loop_over = sum(1 for s in recent if (s["loop_lag_p99_ms"] or 0) > lim.loop_lag_s * 1000)
        # token lag p99 above the limit <=> more than 1 % of that second's chunks above it (exact)
        tok_over = sum(1 for s in recent if (s.get("token_lag_over_share") or 0) > 0.01)
        # busy: the process wanted the CPU (used it, or waited in the run queue for it) at least half
        # the CPU limit on average; an idle process that is late was kept from the CPU by others
        busy = sum(s["demand"] for s in recent) / len(recent) >= lim.cpu_pct / 2
        reasons = []
        if cpu_over >= self.need:
            reasons.append("cpu")
        lagging = []
        if loop_over >= self.need:
            lagging.append("loop_lag")
        if tok_over >= self.need:
            lagging.append("token_lag")
        if lagging and (busy or reasons):
            reasons += lagging
        if reasons:
            if self.bound_since is None:
                self.bound_since = self._first_breach(recent)
            for r in reasons:
                if r not in self.bound_reasons:
                    self.bound_reasons.append(r)
        elif lagging and self.contended_since is None:
            self.contended_since = self._first_breach(recent)
        if reasons or lagging:
            self._note_peak(recent)

    def _breaches(self, s: dict) -> bool:
        lim = self.limits
        return (s["cpu"] > lim.cpu_pct or (s["loop_lag_p99_ms"] or 0) > lim.loop_lag_s * 1000
                or (s.get("token_lag_over_share") or 0) > 0.01)  # fmt: skip

    def _first_breach(self, recent: list[dict]) -> float:
        return next((s["t"] for s in recent if self._breaches(s)), recent[-1]["t"])

    def _note_peak(self, recent: list[dict]) -> None:
        for key in ("cpu", "demand", "loop_lag_p99_ms", "token_lag_p99_ms", "runq_pct", "host_pressure"):
            values = [s[key] for s in recent if s.get(key) is not None]
            if values:
                self.peak[key] = max(self.peak.get(key, values[0]), max(values))

    # -- state --------------------------------------------------------------------------------
    def run_lags(self) -> tuple[float | None, float | None]:
        """Run-wide loop-lag and token-lag p99 (ms; token lag None without --sim-timestamps)."""
        return _hist_pct(self.loop_hist, 0.99), (_hist_pct(self.token_hist, 0.99) if self.token_lag else None)

    def inaccurate_reasons(self) -> list[str]:
        """Why this process's timings over the whole run are off: bound, or a run-wide lag p99 above its limit."""
        lim = self.limits
        loop, token = self.run_lags()
        reasons = ["bound"] if self.bound_since is not None else []
        # loop lag: 10 probes a second, so a p99 over a short run can rest on one or two probes; it
        # counts when at least MIN_LATE_PROBES were late (one stall of 40 ms in a 10 s window at
        # 66 % CPU left every token exact: bench/RESULTS.md "Client speed")
        late = sum(c for b, c in zip(LAG_BOUNDS, self.loop_hist) if b > lim.loop_lag_s)
        if loop is not None and loop > lim.loop_lag_s * 1000 and late >= MIN_LATE_PROBES:
            reasons.append("loop_lag_p99")
        if token is not None and token > lim.token_lag_s * 1000:
            reasons.append("token_lag_p99")
        return reasons

    def state(self) -> dict:
        """Where this process stands over the whole run (small: it rides in every worker report)."""
        cpu = self.cpu_all
        inaccurate = self.inaccurate_reasons()
        return {
            "worker": self.name,
            "index": self.index,
            "bound": self.bound_since is not None,
            "since": self.bound_since,
            "reasons": list(self.bound_reasons),
            "contended": self.contended_since is not None and self.bound_since is None,
            "contended_since": self.contended_since,
            "cpu_last": cpu[-1] if cpu else None,
            "cpu_p95": round(percentile(cpu, 95), 1) if cpu else None,
            "cpu_peak": max(cpu) if cpu else None,
            "demand_p95": round(percentile(self.demand_all, 95), 1) if self.demand_all else None,
            "loop_lag_p99_ms": _hist_pct(self.loop_hist, 0.99),
            "token_lag_p99_ms": _hist_pct(self.token_hist, 0.99) if self.token_lag else None,
            "peak_while_late": dict(self.peak),
            "samples": len(cpu),
            "inaccurate": bool(inaccurate),
            "inaccurate_reasons": inaccurate,
        }

    def snapshot(self) -> dict:
        return {**self.state(), "recent": list(self.samples)[-60:]}

    def take_unsent(self) -> list[dict]:
        out, self.unsent = self.unsent, []
        return out


class HealthBoard:
    """The master's (or a local run's) view of every worker's health: warnings, summary, snapshot."""

    def __init__(self):
        self.limits = Limits()
        self.workers: dict[str, dict] = {}  # key -> {"state": ..., "samples": deque}
        self.warned: set[str] = set()
        self.warned_contended: set[str] = set()
        self.warned_inaccurate: set[str] = set()
        self.running = False
        self.local: HealthMonitor | None = None

    def reset(self, limits: Limits) -> None:
        self.limits = limits
        self.workers = {}
        self.warned = set()
        self.warned_contended = set()
        self.warned_inaccurate = set()
        self.running = True

    def update(self, key: str, state: dict, samples: list[dict]) -> None:
        entry = self.workers.setdefault(key, {"state": state, "samples": deque(maxlen=RECENT_SAMPLES)})
        entry["state"] = state
        entry["samples"].extend(samples)
        if state.get("bound") and key not in self.warned:
            self.warned.add(key)
            log.warning("%s", self._bound_line(state))
        elif state.get("contended") and key not in self.warned_contended and key not in self.warned:
            self.warned_contended.add(key)
            log.warning("%s", self._contended_line(state))
        if state.get("inaccurate") and not state.get("bound") and key not in self.warned_inaccurate:
            self.warned_inaccurate.add(key)
            log.warning("%s", self._inaccurate_line(state))

    def on_local_sample(self, monitor: HealthMonitor) -> None:
        self.update(monitor.name, monitor.state(), monitor.take_unsent())

    def on_worker_report(self, client_id: str, data: dict, runner=None) -> None:
        payload = data.pop(REPORT_KEY, None)
        if payload:
            self._ingest(client_id, payload, runner)

    def _ingest(self, client_id: str, payload: dict, runner=None) -> None:
        state = dict(payload["state"])
        if runner is not None:
            try:
                state["index"] = runner.get_worker_index(client_id)
            except Exception:  # noqa: BLE001 - an unknown worker keeps its own index
                pass
        state["worker"] = client_id
        self.update(client_id, state, payload.get("samples", []))

    # -- reporting ----------------------------------------------------------------------------
    def _describe(self, s: dict) -> str:
        lim = self.limits
        peak = s.get("peak_while_late") or {}
        parts = []
        if "cpu" in s.get("reasons", []) or peak.get("cpu") is not None:
            cpu = f"CPU {peak.get('cpu', s.get('cpu_peak') or 0):.0f} %"
            if (peak.get("runq_pct") or 0) >= 20:
                cpu += f" + {peak['runq_pct']:.0f} % waiting for a CPU"
            parts.append(f"{cpu} (limit {lim.cpu_pct:g} %)")
        if peak.get("loop_lag_p99_ms") is not None:
            parts.append(f"loop lag p99 {peak['loop_lag_p99_ms']:.1f} ms (limit {lim.loop_lag_s * 1000:g} ms)")
        if peak.get("token_lag_p99_ms") is not None:
            parts.append(f"token lag p99 {peak['token_lag_p99_ms']:.1f} ms (limit {lim.token_lag_s * 1000:g} ms)")
        return ", ".join(parts)

    def _name(self, s: dict) -> str:
        return f"worker {s.get('index')} ({s.get('worker')})" if s.get("worker") != "local" else "the local process"

    def _bound_line(self, s: dict) -> str:
        since = time.strftime("%H:%M:%S", time.localtime(s["since"])) if s.get("since") else "now"
        return (
            f"client_bound: {self._name(s)} since {since}: {self._describe(s)} sustained over "
            f"{self.limits.sustain_s:g} s; its TTFT/ITL are no longer accurate. {self.advice()}"
        )

    def _inaccurate_line(self, s: dict) -> str:
        lim = self.limits
        parts = []
        if "loop_lag_p99" in s.get("inaccurate_reasons", []):
            parts.append(f"loop lag p99 {s.get('loop_lag_p99_ms'):.1f} ms (limit {lim.loop_lag_s * 1000:g} ms)")
        if "token_lag_p99" in s.get("inaccurate_reasons", []):
            parts.append(f"token lag p99 {s.get('token_lag_p99_ms'):.1f} ms (limit {lim.token_lag_s * 1000:g} ms)")
        return (
            f"client inaccurate: {self._name(s)}: over the run so far {', '.join(parts)}, at CPU p95 "
            f"{s.get('cpu_p95') or 0:.0f} %: its TTFT/ITL tails are off by about that much (late moments spread "
            "too thinly to count as sustained). Less load per worker, or a quieter machine."
        )

    def _contended_line(self, s: dict) -> str:
        peak = s.get("peak_while_late") or {}
        host = f", host CPU pressure {peak['host_pressure']:.0f} %" if peak.get("host_pressure") is not None else ""
        runq = f", waited for a CPU {peak['runq_pct']:.0f} % of the time" if peak.get("runq_pct") is not None else ""
        return (
            f"client contended: {self._name(s)} is late ({self._describe(s)}) while using little CPU{runq}{host}: "
            "other processes on its machine take the CPU; timings may be inflated; a quieter machine helps, more workers do not"
        )

    def workers_needed(self) -> int:
        """ceil(workers x peak CPU demand / target CPU): the worker processes this load needs."""
        states = [e["state"] for e in self.workers.values()]
        if not states:
            return 0
        # demand = CPU used + CPU waited for: on a crowded machine a saturated worker gets little CPU
        peaks = [max(s.get("demand_p95") or s.get("cpu_p95") or 0, (s.get("peak_while_late") or {}).get("demand") or 0) for s in states]
        peak = max(peaks)
        return max(len(states), math.ceil(len(states) * peak / self.limits.target_cpu_pct))

    def advice(self) -> str:
        states = [e["state"] for e in self.workers.values()]
        bound = [s for s in states if s.get("bound")]
        if not bound:
            if any(s.get("contended") for s in states):
                return ("No worker ran out of CPU, but some were late while idle: other processes on their machines took "
                        "the CPU. Run the load generator on a quieter machine for exact timings.")  # fmt: skip
            late = [s for s in states if s.get("inaccurate")]
            if late:
                return (f"{len(late)} of {len(states)} worker processes were late often enough over the run (lag p99 above its "
                        "limit) for the TTFT/ITL tails to be off, without a sustained overload: less load per worker, or a "
                        "quieter machine.")  # fmt: skip
            return "Every worker stayed within the accuracy limits."
        need = self.workers_needed()
        saturated = any(max(s.get("cpu_peak") or 0, s.get("demand_p95") or 0) >= 95 for s in bound)
        return (
            f"{len(bound)} of {len(states)} worker processes passed the accuracy limits: this load needs "
            f"{'at least ' if saturated else 'about '}{need} worker processes (ceil({len(states)} x peak CPU demand / "
            f"{self.limits.target_cpu_pct:g} %)), e.g. --processes {need} or --expect-workers {need}, or less load per worker."
        )

    def summary(self) -> dict:
        states = sorted((e["state"] for e in self.workers.values()), key=lambda s: (s.get("index") is None, s.get("index") or 0))
        keep = ("worker", "index", "bound", "since", "reasons", "cpu_p95", "cpu_peak", "demand_p95", "loop_lag_p99_ms",
                "token_lag_p99_ms", "contended", "contended_since", "peak_while_late", "samples", "inaccurate",
                "inaccurate_reasons")  # fmt: skip
        return {
            "bound": any(s.get("bound") for s in states),
            "inaccurate": any(s.get("inaccurate") or s.get("bound") for s in states),
            "contended": any(s.get("contended") for s in states),
            "workers": [{k: s.get(k) for k in keep} for s in states],
            "workers_needed": self.workers_needed(),
            "advice": self.advice(),
            "limits": self.limits.to_dict(),
            "definitions": {
                "cpu": "CPU of the process, % of one core, sampled every second (psutil)",
                "demand": "cpu plus the time its main thread waited in the run queue (/proc/self/schedstat), % of a second",
                "loop_lag": "how late a greenlet sleeping 0.1 s wakes up; p99 over the run from a 10 %-step histogram (bucket upper bound)",
                "token_lag": "chunk arrival minus the simulator's sim_t of that chunk (--sim-timestamps only); p99 as loop_lag",
                "bound": f"CPU above its limit, or loop/token lag above its limit while the process is busy (mean CPU + run-queue "
                         f"wait >= half the CPU limit), in at least {SUSTAIN_SHARE:.0%} of the one-second samples of a sustain window",
                "contended": "loop/token lag above its limit while the process is mostly idle: other processes delayed its wake-ups",
                "inaccurate": "bound, or the run-wide loop-lag p99 or token-lag p99 above its limit, however the late moments were "
                              "spread over the run: the run's timings are off by about that much",
            },  # fmt: skip
        }

    def snapshot(self) -> dict:
        """Live state for a UI: limits, verdict, advice and every worker's state and last minute of samples."""
        if self.local is not None:
            self.on_local_sample(self.local)  # fresh state between samples
        return {
            "running": self.running,
            "bound": any(e["state"].get("bound") for e in self.workers.values()),
            "limits": self.limits.to_dict(),
            "workers_needed": self.workers_needed(),
            "advice": self.advice(),
            "workers": [
                {**e["state"], "recent": list(e["samples"])[-60:]}
                for e in sorted(self.workers.values(), key=lambda e: e["state"].get("index") or 0)
            ],  # fmt: skip
        }


# --------------------------------------------------------------------------------------- wiring
class Health(Plugin):
    """Self-health on every load process: a monitor per run where users run, a board where results
    are written (the master gathers its workers' reports; a local run watches itself)."""

    def __init__(self):
        self.monitor: HealthMonitor | None = None  # this process's, while a run is on
        self.board: HealthBoard | None = None  # master, local

    def init(self, environment) -> None:
        if role_of(environment) != "worker":
            self.board = HealthBoard()
        if role_of(environment) == "master":
            runner = environment.runner
            runner.register_message(FINAL_MESSAGE, lambda msg, **kw: self.board._ingest(msg.node_id, msg.data, runner))

    def report_to_master(self, environment, data) -> None:
        m = self.monitor
        if m is not None:
            data[REPORT_KEY] = {"state": m.state(), "samples": m.take_unsent()}

    def worker_report(self, environment, client_id, data) -> None:
        self.board.on_worker_report(client_id, data, environment.runner)

    def test_start(self, environment) -> None:
        role = role_of(environment)
        limits = Limits.from_plan(environment.llm.plan.health)
        if self.board is not None:
            self.board.reset(limits)
        if role == "master":
            return
        self._stop_monitor()
        token_lag = environment.llm.plan.sim_timestamps
        name = "local" if role == "local" else f"{os.uname().nodename}-{os.getpid()}"
        runner = environment.runner
        index = runner.worker_index if role == "worker" and runner is not None else 0
        monitor = HealthMonitor(limits, token_lag, name, index, warmup_s=environment.llm.plan.warmup_s)
        if token_lag:
            llm_events.stream_parsed.add_listener(monitor.on_parsed)
        if role == "local":
            self.board.local = monitor
            monitor.on_sample = self.board.on_local_sample
        monitor.start()
        self.monitor = monitor

    def snapshot(self) -> dict | None:
        """The live state the web UI shows: the board's (master, local) or the monitor's."""
        source = self.board if self.board is not None else self.monitor
        return source.snapshot() if source is not None else None

    def test_stopping(self, environment) -> None:
        """A worker's last word, sent before its final records so it reaches the summary."""
        m = self.monitor
        if m is not None:
            m.count_until = time.perf_counter()
        if m is not None and role_of(environment) == "worker":
            environment.runner.send_message(FINAL_MESSAGE, {"state": m.state(), "samples": m.take_unsent()})

    def run_stopping(self, run) -> None:
        board = self.board
        if board is not None:
            if board.local is not None:
                board.on_local_sample(board.local)
            run.summary_extra["client_bound"] = board.summary()

    def test_stop(self, environment) -> None:
        board = self.board
        if board is not None:
            if board.local is not None:
                board.on_local_sample(board.local)
                board.local = None
            board.running = False
        self._stop_monitor()

    def _stop_monitor(self) -> None:
        m = self.monitor
        if m is not None:
            m.stop()
            try:
                llm_events.stream_parsed.remove_listener(m.on_parsed)
            except ValueError:
                pass
            self.monitor = None
