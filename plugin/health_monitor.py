"""Self-health's measuring side: a process that runs users (each worker, or a local run)
watching whether it still measures accurately.

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

A stall in which the process used almost no CPU and waited for none (FREEZE_SHARE of it, at least
FREEZE_MIN_S long) is a **freeze**: the process did not run at all (SIGSTOP, a paused VM or host,
swapping). It is not contention, and not the client's load: the chunks its streams received
meanwhile wait in the socket and are read together when it resumes, with one stamp, so the ITL of
every stream in flight then is off (one gap the length of the freeze, then gaps of zero), and the
TTFT of those whose first token came during it. The state names each freeze (`freezes`: start,
seconds); its late samples do not make the process contended.

Each second gives one sample. A limit counts as passed when at least 80 % of the samples of the
last --health-sustain seconds exceed it (4 of 5 by default): a lone stall does not count, a
process that stays late does. Only the seconds the statistics count are judged (after --warmup,
before the stop): four workers starting 2,400 users each passed the token-lag limit for seconds of
the ramp, then read every token on time for the whole window. The process is **client bound** when its CPU passes
--health-cpu-limit, or when its loop lag or token lag passes its limit while the process itself
is busy: it used the CPU or waited in the run queue for it (/proc/self/schedstat) at least half
the CPU limit on average over those seconds. A process starved by others on a crowded machine is
busy by this measure (it waits for a CPU all the time) even when it gets little CPU (its advice
then names the machine, not more workers: plugin/health_board.py). Lag in a
process that is mostly idle is not the client's own doing but other processes delaying its
wake-ups: that is reported as **contended** (with the run-queue wait of the process and the
host's CPU pressure) and does not mark the run client bound, since more workers would not help.

With --sim-timestamps the lateness of every read is measured, not inferred: CPU and loop lag are
only its proxies, and wrong both ways (four workers at 3,600 streams each ran 79-85 % CPU with
loop-lag p99 up to 106 ms while every token and first token was read within 1 ms of its sending:
bench/RESULTS.md "Self-health both ways"). There the process is bound only when its token lag
passes the limit (sustained, while busy; seconds in which no token was parsed measured nothing,
and the proxies stand for them), with CPU and loop lag named beside it as its cause; on
their own they do not mark it.

Over the whole run (after --warmup, until the run begins to stop; streams cut by the stop left
out) the process is also **inaccurate** when its run-wide token-lag p99 or first-token-lag p99
(--sim-timestamps; the first token is what TTFT reads, and one in hundreds of chunks, so the
all-chunk p99 can hide it being late) passes its limit, or, without tokens so measured in the
run's window, its loop-lag p99 (with at least MIN_LATE_PROBES late probes) does, however thinly the late
moments were spread: stalls of one ITL every few seconds at moderate CPU never fill a sustain
window, yet they put the run's TTFT and ITL tails off by that much (bench/RESULTS.md "Client
speed", eight workers). A bound process is inaccurate too; summary.json says `inaccurate`.

Record by record, the monitor also logs the loop's stalls to the millisecond
(plugin/health_stalls.py) and marks each record with how far a stall inside its wait for the first
token may have moved its first-token stamp (`stamp_skew_ms`); the records where that is material
are counted (`stamp_suspect`, after the --warmup, streams cut by the stop left out): a burst of a second is enough, as it
is enough to put a run's TTFT tail off.

A worker ships its monitor's state and new samples to the master (plugin/health.py); the board
that judges every worker together is plugin/health_board.py.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections import deque

import gevent
import psutil

from metrics.percentiles import percentile
from plugin.health_stalls import StallLog, stamp_skew_s, suspect

PROBE_S = 0.1  # loop-lag probe period
SUSTAIN_SHARE = 0.8  # share of the sustain window's samples that must pass a limit
RECENT_SAMPLES = 300  # per worker, for snapshot(); older samples only count in the run totals
MAX_MISSED_SAMPLES = 3600  # a stall longer than an hour is counted as an hour of late samples
MAX_MISSED_PROBES = MAX_MISSED_SAMPLES * 10
MIN_LATE_PROBES = 10  # run-wide loop-lag p99 counts only with at least this many late probes
FREEZE_MIN_S = 1.0  # a stall this long at least ...
FREEZE_SHARE = 0.25  # ... in which the process ran or waited to run less than this share of it, froze
MAX_FREEZES = 20  # kept in the state (it rides in every report); their seconds are all summed
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
    def from_plan(cls, limits) -> Limits:
        """From the plan's checked `HealthLimits` (plugin/plan.py validates the --health-* options)."""
        return cls(limits.cpu_pct, limits.loop_lag_s, limits.token_lag_s, limits.sustain_s, limits.target_cpu_pct)

    def to_dict(self) -> dict:
        return {
            "cpu_pct": self.cpu_pct,
            "loop_lag_ms": self.loop_lag_s * 1000,
            "token_lag_ms": self.token_lag_s * 1000,
            "sustain_s": self.sustain_s,
            "sustain_share": SUSTAIN_SHARE,
            "target_cpu_pct": self.target_cpu_pct,
        }


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

    def __init__(
        self, limits: Limits, token_lag: bool, name: str, index: int, warmup_s: float = 0.0, kernel_stamps: bool = False
    ):
        self.limits = limits
        self.kernel_stamps = kernel_stamps  # reads stamped by the kernel (plugin/health_stalls.py `suspect`)
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
        self._counted: deque = deque(maxlen=self.window)  # the last samples inside the counted window
        self.unsent: list[dict] = []
        self._probes: list[float] = []  # loop lags of the current second
        self._tok_n = 0
        self._tok_over = 0
        self._tok_hist = [0] * (len(LAG_BOUNDS) + 1)  # current second
        self.loop_hist = [0] * (len(LAG_BOUNDS) + 1)  # whole run
        self.token_hist = [0] * (len(LAG_BOUNDS) + 1)
        self.first_token_hist = [0] * (len(LAG_BOUNDS) + 1)  # whole run: each stream's first token
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
        self.freezes: list[tuple[float, float]] = []  # (wall-clock start, seconds) of the last MAX_FREEZES
        self.frozen_s = 0.0
        self.stalls = StallLog()
        self.stamp_judged = 0  # records with a first token inside the counted window
        self.stamp_suspect = 0  # of those, the ones a stall may have moved (plugin/health_stalls.py)
        self.stamp_skew_max_ms = 0.0

    # -- collection ---------------------------------------------------------------------------
    def start(self) -> None:
        self.proc.cpu_percent(None)  # starts psutil's interval
        self._last_cpu_t = time.monotonic()
        self.count_from = time.perf_counter() + self.warmup_s
        self._last_delay = _run_delay_s()
        self._greenlets = [gevent.spawn(self._probe_loop)]
        self.stalls.start()

    def stop(self) -> None:
        for g in self._greenlets:
            g.kill(block=False)
        self._greenlets = []
        self.stalls.stop()

    def on_record(self, rec, **_kw) -> None:
        """Mark a finished record with the stall its first-token stamp may carry (`stamp_skew_ms`),
        and count it when suspect; streams cut by the run's end are left out, as the statistics leave them."""
        skew = stamp_skew_s(self.stalls, rec.t_send, rec.ttft_s)
        if skew != skew:
            return
        rec.stamp_skew_ms = skew_ms = round(skew * 1000, 3)
        if rec.error == "stopped" or rec.t_send < self.count_from:  # (no request starts once the stop began)
            return
        self.stamp_judged += 1
        if suspect(skew_ms, rec.ttft_s, rec.chunk_times, self.kernel_stamps, rec.stream):
            self.stamp_suspect += 1
            if skew_ms > self.stamp_skew_max_ms:
                self.stamp_skew_max_ms = skew_ms

    def _probe_loop(self) -> None:
        perf = time.perf_counter
        next_sample = time.monotonic() + 1.0
        run_hist = self.loop_hist
        spare = [0] * len(run_hist)  # the warm-up's probes: in the per-second samples, not the run-wide p99
        ran = time.process_time
        while True:
            t, cpu0 = perf(), ran()
            gevent.sleep(PROBE_S)
            lag = max(0.0, perf() - t - PROBE_S)
            frozen = lag >= FREEZE_MIN_S and self._froze(lag, ran() - cpu0)
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
                self._sample(stalled, frozen)

    def _froze(self, lag: float, cpu_s: float) -> bool:
        """A stall of `lag` seconds in which the process used `cpu_s` of CPU: a freeze when it also
        waited for a CPU little (its wait since the last sample, a second at most before the stall)."""
        delay = _run_delay_s()
        waited = delay - self._last_delay if delay is not None and self._last_delay is not None else 0.0
        if cpu_s + waited >= FREEZE_SHARE * lag:
            return False
        self.freezes = [*self.freezes, (round(time.time() - lag, 3), round(lag, 3))][-MAX_FREEZES:]
        self.frozen_s += lag
        return True

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
        if n and parsed.chunks:  # the first token-bearing chunk: the one TTFT is read from
            first = parsed.chunks[0]
            lag = first.t - first.sim_t
            if lag == lag and self.count_from <= first.t < self.count_until:
                self.first_token_hist[bisect_left(bounds, lag)] += 1

    def _sample(self, stalled: list[float] = (), frozen: bool = False) -> None:
        """One sample of the last second; `stalled`: the loop lags of the sample moments missed
        before it (the loop was blocked), each a sample of its own with the CPU of the interval;
        `frozen`: the process did not run meanwhile (those samples say so)."""
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
            self._add_sample(
                {
                    "t": round(wall - (len(stalled) - i), 3),
                    "cpu": round(cpu, 1),
                    "loop_lag_p99_ms": round(late * 1000, 2),
                    "loop_lag_max_ms": round(late * 1000, 2),
                    "runq_pct": runq,
                    "demand": round(cpu + (runq or 0.0), 1),
                    "host_pressure": None,
                    "frozen": frozen,
                    **({"tokens": 0, "token_lag_p99_ms": None, "token_lag_over_share": None} if self.token_lag else {}),
                }
            )
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
        # the sustained limits judge the seconds the statistics count: not the --warmup (users being
        # started cost CPU and delay reads that no statistic keeps), not the stop
        if self.count_from <= time.perf_counter() < self.count_until:
            self._counted.append(sample)
            self._judge(sample)

    def _judge(self, latest: dict) -> None:
        lim = self.limits
        recent = list(self._counted)
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
        if any(s.get("frozen") for s in recent):  # late because the process did not run: not others taking the CPU
            lagging = []
        if self.token_lag and "token_lag" not in reasons and all(s.get("tokens") for s in recent):
            # lateness was measured in each of these seconds: CPU or loop lag alone is a proxy that the
            # tokens contradict. (Seconds without parsed tokens, e.g. a finisher far behind a starved
            # loop, measured nothing: the proxies stand.)
            if reasons:
                self._note_peak(recent)
            reasons = []
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
        return (
            s["cpu"] > lim.cpu_pct
            or (s["loop_lag_p99_ms"] or 0) > lim.loop_lag_s * 1000
            or (s.get("token_lag_over_share") or 0) > 0.01
        )

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
        if token is not None and token > lim.token_lag_s * 1000:
            reasons.append("token_lag_p99")
        first = _hist_pct(self.first_token_hist, 0.99) if self.token_lag else None
        if first is not None and first > lim.token_lag_s * 1000:
            reasons.append("first_token_lag_p99")
        if token is not None:  # measured: the tokens' own lateness decides, not the loop's
            return reasons
        # loop lag: 10 probes a second, so a p99 over a short run can rest on one or two probes; it
        # counts when at least MIN_LATE_PROBES were late (one stall of 40 ms in a 10 s window at
        # 66 % CPU left every token exact: bench/RESULTS.md "Client speed")
        late = sum(c for b, c in zip(LAG_BOUNDS, self.loop_hist) if b > lim.loop_lag_s)
        if loop is not None and loop > lim.loop_lag_s * 1000 and late >= MIN_LATE_PROBES:
            reasons.append("loop_lag_p99")
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
            "first_token_lag_p99_ms": _hist_pct(self.first_token_hist, 0.99) if self.token_lag else None,
            "peak_while_late": dict(self.peak),
            "samples": len(cpu),
            "inaccurate": bool(inaccurate),
            "inaccurate_reasons": inaccurate,
            "freezes": [list(f) for f in self.freezes],
            "frozen_s": round(self.frozen_s, 1),
            "stamp_judged": self.stamp_judged,
            "stamp_suspect": self.stamp_suspect,
            "stamp_skew_max_ms": self.stamp_skew_max_ms,
        }

    def snapshot(self) -> dict:
        return {**self.state(), "recent": list(self.samples)[-60:]}

    def take_unsent(self) -> list[dict]:
        out, self.unsent = self.unsent, []
        return out
