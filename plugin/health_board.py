"""Self-health's judging side: the master's (or a local run's) board of every load process's
health (plugin/health_monitor.py), its console warnings, the `client_bound` section of summary.json
and the live snapshot the web UI shows.

The board warns on the console once per worker when it first becomes client bound (or contended,
or inaccurate over the run), and at the end writes `summary.json` -> `client_bound`:

    {"bound": true, "workers": [{"worker", "index", "bound", "since", "reasons", "cpu_p95",
      "cpu_peak", "loop_lag_p99_ms", "token_lag_p99_ms", "contended", ...}],
     "workers_needed": 2, "advice": "...", "limits": {...}}

`HealthBoard.snapshot()` returns the same per-worker state plus each worker's recent
samples, for a live view (web UI).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque

from plugin.health_monitor import RECENT_SAMPLES, SUSTAIN_SHARE, HealthMonitor, Limits
from plugin.health_stalls import SUSPECT_FLOOR_S, SUSPECT_SHARE

log = logging.getLogger("llm.health")

REPORT_KEY = "llm_health"  # a worker's state and samples in its report to the master
# what a freeze (plugin/health_monitor.py) puts off, and what it does not
FREEZE_SKEWS = (
    "The chunks its streams received meanwhile were read together when it resumed, with one stamp: the ITL of "
    "the streams in flight then is off (one gap the length of the freeze, then gaps of zero), and the TTFT "
    "of those whose first token came during it; its other requests are timed as usual. A freeze is not "
    "load: more workers do not help."
)

WITHIN_LIMITS = "Every worker stayed within the accuracy limits."


def stall_help(crowded: bool) -> str:
    """What helps when a stall of the client's loop may have stamped first tokens late, by the one
    rule for a crowded machine (`crowded()`): there more worker processes would wait for a CPU too,
    so the help is a quieter machine or more machines, as the other advice says; else fewer users
    started at once, or more worker processes. The console, summary.json, the report and the live
    view's Client card all say it with these words."""
    if crowded:
        return (
            "Other processes take this machine's CPU, so more worker processes here would wait for one too: "
            "run the load generator on a quieter machine, or spread its workers over more machines."
        )
    return "Spawn users slower (-r) or add worker processes (--processes)."


def stamp_sentence(n: int, of: int, worst_ms: float, crowded: bool) -> str:
    """One sentence on the records a loop stall may have skewed, with what to do (`crowded`: the
    board's `crowded()` over every worker, never one worker's own state)."""
    return (
        f"{n:,} of {of:,} requests waited for their first token through a stall of the client's event loop (up to "
        f"{worst_ms:.0f} ms; their records' stamp_skew_ms): their TTFT may read up to that much high. "
        f"{stall_help(crowded)}"
    )


def starved(state: dict, cpu_limit: float) -> bool:
    """Bound while using little CPU: the process spent as long waiting for a CPU as using one (CPU
    p95 under half its limit, demand p95, CPU plus run-queue wait, at least twice that). Its load is
    not what it cannot carry: the machine's other processes took the CPU."""
    cpu, demand = state.get("cpu_p95"), state.get("demand_p95")
    return cpu is not None and demand is not None and cpu < cpu_limit / 2 and demand >= 2 * cpu


def crowded(states: list[dict], cpu_limit: float) -> bool:
    """Other processes took the machine's CPU (every bound worker starved, or none bound and one
    late while idle): more worker processes there would wait for a CPU too, a quieter machine helps.
    The one rule for the advice, the stall sentence and the web UI's Client card."""
    bound = [s for s in states if s.get("bound")]
    if bound:
        return all(starved(s, cpu_limit) for s in bound)
    return any(s.get("contended") for s in states)


class HealthBoard:
    """The master's (or a local run's) view of every worker's health: warnings, summary, snapshot."""

    def __init__(self):
        self.limits = Limits()
        self.workers: dict[str, dict] = {}  # key -> {"state": ..., "samples": deque}
        self.warned: set[str] = set()
        self.warned_contended: set[str] = set()
        self.warned_inaccurate: set[str] = set()
        self.warned_freezes: dict[str, int] = {}  # worker -> its freezes warned of
        self.warned_stamps: set[str] = set()
        self.running = False
        self.local: HealthMonitor | None = None

    def reset(self, limits: Limits) -> None:
        self.limits = limits
        self.workers = {}
        self.warned = set()
        self.warned_contended = set()
        self.warned_inaccurate = set()
        self.warned_freezes = {}
        self.warned_stamps = set()
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
        freezes = state.get("freezes") or []
        for start, seconds in freezes[self.warned_freezes.get(key, 0) :]:  # each new one, as it is reported
            log.warning("%s", self._frozen_line(state, start, seconds))
        self.warned_freezes[key] = len(freezes)
        if state.get("inaccurate") and not state.get("bound") and key not in self.warned_inaccurate:
            self.warned_inaccurate.add(key)
            log.warning("%s", self._inaccurate_line(state))
        if state.get("stamp_suspect") and key not in self.warned_stamps:
            self.warned_stamps.add(key)
            log.warning(
                "client stalled: %s: %s",
                self._name(state),
                self._stamp_line(
                    state["stamp_suspect"], state.get("stamp_judged") or 0, state.get("stamp_skew_max_ms") or 0.0
                ),
            )

    def watch_local(self, monitor: HealthMonitor) -> None:
        """A local run: the board takes every sample of its own process's monitor, named "local"."""
        monitor.name = "local"
        self.local = monitor
        monitor.on_sample = self.on_local_sample

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
            except Exception:
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

    def _frozen_line(self, s: dict, start: float, seconds: float) -> str:
        at = time.strftime("%H:%M:%S", time.localtime(start))
        return (
            f"client frozen: {self._name(s)} did not run for {seconds:.1f} s from {at} (no CPU used or waited for: "
            f"stopped by a signal, a paused VM or host, swapping). {FREEZE_SKEWS}"
        )

    def _inaccurate_line(self, s: dict) -> str:
        lim = self.limits
        parts = []
        if "loop_lag_p99" in s.get("inaccurate_reasons", []):
            parts.append(f"loop lag p99 {s.get('loop_lag_p99_ms'):.1f} ms (limit {lim.loop_lag_s * 1000:g} ms)")
        if "token_lag_p99" in s.get("inaccurate_reasons", []):
            parts.append(f"token lag p99 {s.get('token_lag_p99_ms'):.1f} ms (limit {lim.token_lag_s * 1000:g} ms)")
        if "first_token_lag_p99" in s.get("inaccurate_reasons", []):
            parts.append(
                f"first-token lag p99 {s.get('first_token_lag_p99_ms'):.1f} ms (limit {lim.token_lag_s * 1000:g} ms)"
            )
        if s.get("freezes") and s.get("inaccurate_reasons") == ["loop_lag_p99"]:  # its late probes: the freezes'
            return (
                f"client inaccurate: {self._name(s)}: over the run so far {', '.join(parts)}, from {self._froze(s)} "
                "(client frozen): the ITL of the streams in flight during it is off, not its other requests' timings"
            )
        return (
            f"client inaccurate: {self._name(s)}: over the run so far {', '.join(parts)}, at CPU p95 "
            f"{s.get('cpu_p95') or 0:.0f} %: its TTFT/ITL tails are off by about that much (late moments spread "
            "too thinly to count as sustained). Less load per worker, or a quieter machine."
        )

    @staticmethod
    def _froze(s: dict) -> str:
        n = len(s.get("freezes") or [])
        return f"{'a freeze' if n == 1 else f'{n} freezes'} of {s.get('frozen_s') or 0:.1f} s in all"

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
        peaks = [
            max(s.get("demand_p95") or s.get("cpu_p95") or 0, (s.get("peak_while_late") or {}).get("demand") or 0)
            for s in states
        ]
        peak = max(peaks)
        return max(len(states), math.ceil(len(states) * peak / self.limits.target_cpu_pct))

    def stamps(self) -> tuple[int, int, float]:
        """Records whose first-token stamp a loop stall may have moved, of those judged, and the
        longest such stall (ms), over every worker."""
        states = [e["state"] for e in self.workers.values()]
        return (
            sum(s.get("stamp_suspect") or 0 for s in states),
            sum(s.get("stamp_judged") or 0 for s in states),
            max((s.get("stamp_skew_max_ms") or 0.0 for s in states), default=0.0),
        )

    def advice(self) -> str:
        """What the workers' health says to do; with records a stall may have skewed, that too."""
        base = self._advice()
        n, of, worst = self.stamps()
        if not n:
            return base
        line = self._stamp_line(n, of, worst)
        return line if base == WITHIN_LIMITS else f"{base} {line}"

    def crowded(self) -> bool:
        """The machine, as every worker's state now says it (`crowded()`)."""
        return crowded([e["state"] for e in self.workers.values()], self.limits.cpu_pct)

    def _stamp_line(self, n: int, of: int, worst_ms: float) -> str:
        """The stall sentence with the help the whole board calls for: the console's warning and the
        advice (summary.json, the report) read it here, so a crowded machine is never told to add
        worker processes by one of them."""
        return stamp_sentence(n, of, worst_ms, self.crowded())

    def _advice(self) -> str:
        states = [e["state"] for e in self.workers.values()]
        bound = [s for s in states if s.get("bound")]
        if not bound:
            if any(s.get("contended") for s in states):
                return (
                    "No worker ran out of CPU, but some were late while idle: other processes on their machines took "
                    "the CPU. Run the load generator on a quieter machine for exact timings."
                )
            late = [s for s in states if s.get("inaccurate")]
            frozen = [s for s in late if s.get("freezes") and s.get("inaccurate_reasons") == ["loop_lag_p99"]]
            if frozen and len(frozen) == len(late):
                names = ", ".join(f"{self._name(s)}: {self._froze(s)}" for s in frozen)
                return f"{len(frozen)} of {len(states)} worker processes froze ({names}). {FREEZE_SKEWS}"
            if late:
                return (
                    f"{len(late)} of {len(states)} worker processes were late often enough over the run (lag p99 above its "
                    "limit) for the TTFT/ITL tails to be off, without a sustained overload: less load per worker, or a "
                    "quieter machine."
                )
            return WITHIN_LIMITS
        if self.crowded():  # every bound worker starved by the machine
            return self._starved_advice(bound, len(states))
        need = self.workers_needed()
        saturated = any(max(s.get("cpu_peak") or 0, s.get("demand_p95") or 0) >= 95 for s in bound)
        return (
            f"{len(bound)} of {len(states)} worker processes went past the accuracy limits: this load needs "
            f"{'at least ' if saturated else 'about '}{need} worker processes (ceil({len(states)} x peak CPU demand / "
            f"{self.limits.target_cpu_pct:g} %)), e.g. --processes {need} or --expect-workers {need}, or less load per worker."
        )

    def _starved_advice(self, starved: list[dict], of: int) -> str:
        """More worker processes on a crowded machine wait for the CPU too: the advice is the machine."""
        cpu = max(s["cpu_p95"] for s in starved)
        demand = max(s["demand_p95"] for s in starved)
        pressure = [p for s in starved if (p := (s.get("peak_while_late") or {}).get("host_pressure")) is not None]
        host = f"; the host's CPU pressure reached {max(pressure):.0f} %" if pressure else ""
        return (
            f"{len(starved)} of {of} worker processes went past the accuracy limits while getting little CPU (p95 "
            f"{cpu:.0f} % of a core, {demand:.0f} % with the time spent waiting for one{host}): other processes took "
            "this machine's CPU. More worker processes here would wait too: run the load generator on a quieter "
            "machine, or spread its workers over more machines."
        )

    def summary(self) -> dict:
        states = sorted(
            (e["state"] for e in self.workers.values()), key=lambda s: (s.get("index") is None, s.get("index") or 0)
        )
        keep = (
            "worker",
            "index",
            "bound",
            "since",
            "reasons",
            "cpu_p95",
            "cpu_peak",
            "demand_p95",
            "loop_lag_p99_ms",
            "token_lag_p99_ms",
            "first_token_lag_p99_ms",
            "contended",
            "contended_since",
            "peak_while_late",
            "samples",
            "inaccurate",
            "inaccurate_reasons",
            "freezes",
            "frozen_s",
            "stamp_judged",
            "stamp_suspect",
            "stamp_skew_max_ms",
        )
        suspect, judged, worst = self.stamps()
        return {
            "bound": any(s.get("bound") for s in states),
            "inaccurate": any(s.get("inaccurate") or s.get("bound") for s in states),
            "contended": any(s.get("contended") for s in states),
            "stamp_suspect": suspect,
            "stamp_judged": judged,
            "stamp_skew_max_ms": worst,
            "workers": [{k: s.get(k) for k in keep} for s in states],
            "workers_needed": self.workers_needed(),
            "advice": self.advice(),
            "limits": self.limits.to_dict(),
            "definitions": {
                "cpu": "CPU of the process, % of one core, sampled every second (psutil)",
                "demand": "cpu plus the time its main thread waited in the run queue (/proc/self/schedstat), % of a second",
                "loop_lag": "how late a greenlet sleeping 0.1 s wakes up; p99 over the run from a 10 %-step histogram (bucket upper bound)",
                "token_lag": "chunk arrival minus the simulator's sim_t of that chunk (--sim-timestamps only); p99 as loop_lag",
                "first_token_lag": "token_lag of each stream's first token-bearing chunk, the one TTFT is read from; p99 as loop_lag",
                "bound": f"CPU above its limit, or loop/token lag above its limit while the process is busy (mean CPU + run-queue "
                f"wait >= half the CPU limit), in at least {SUSTAIN_SHARE:.0%} of the one-second samples of a sustain "
                "window; with --sim-timestamps only token lag so sustained (CPU and loop lag are then named as its cause)",
                "contended": "loop/token lag above its limit while the process is mostly idle: other processes delayed its wake-ups",
                "stamp_suspect": f"records (inside the counted window, not stopped) that waited for their first token through a "
                f"stall of the event loop of at least {SUSPECT_FLOOR_S * 1000:g} ms, and whose first token was read "
                "together with the next (kernel receive stamps; else: a stall of at least "
                f"{SUSPECT_SHARE:.0%} of their TTFT): their first-token stamp may be late by up to that stall "
                "(the record's stamp_skew_ms)",
                "inaccurate": "bound, or the run-wide token-lag or first-token-lag p99 (--sim-timestamps), else the loop-lag p99, "
                "above its limit, however the late moments were spread over the run: the run's timings are off by "
                "about that much",
            },
        }

    def snapshot(self) -> dict:
        """Live state for a UI: limits, verdict, advice and every worker's state and last minute of samples."""
        if self.local is not None:
            self.on_local_sample(self.local)  # fresh state between samples
        suspect, judged, _ = self.stamps()
        return {
            "running": self.running,
            "bound": any(e["state"].get("bound") for e in self.workers.values()),
            "stamp_suspect": suspect,
            "stamp_judged": judged,
            "limits": self.limits.to_dict(),
            "workers_needed": self.workers_needed(),
            "advice": self.advice(),
            "workers": [
                {**e["state"], "recent": list(e["samples"])[-60:]}
                for e in sorted(self.workers.values(), key=lambda e: e["state"].get("index") or 0)
            ],
        }
