"""Open-loop arrivals: `--request-rate R --arrival poisson|gamma|constant [--burstiness k]`.

One global schedule of send times is drawn from the run's seed; with N load processes, process i
takes arrivals i, i+N, i+2N, ... Every process draws the same global sequence, so the union of
their shares is exactly the global process at rate R (not N x R), for constant and gamma arrivals
as well as Poisson. Arrivals follow the schedule whatever the server does: a request whose send
time comes while every user of the process is busy is sent late, and its lateness is recorded
(t_send - t_intended), so latency can be reported from the intended time (no coordinated omission).

Gamma inter-arrival times have shape k = burstiness and mean 1/R (k = 1 is Poisson; k < 1 burstier),
as in vLLM's benchmark.
"""

from __future__ import annotations

import numpy as np

BLOCK = 4096
START_DELAY_S = 1.0  # the first arrival comes this long after the run starts: users are spawned by then


class ArrivalSchedule:
    def __init__(self, rate: float, kind: str, burstiness: float, seed: int, processes: int, index: int, t0: float):
        """`t0` is the run's start on this process's perf_counter clock."""
        if rate <= 0:
            raise ValueError("rate must be above 0")
        self.rate, self.kind, self.k = rate, kind, burstiness
        self.rng = np.random.default_rng(seed)
        self.processes = max(1, processes)
        self.index = index % self.processes
        self.clock = t0 + START_DELAY_S  # time of the last global arrival drawn
        self.drawn = 0  # global arrivals drawn so far
        self.mine: list[float] = []
        self.taken = 0

    def _gaps(self, n: int) -> np.ndarray:
        mean = 1.0 / self.rate
        if self.kind == "constant":
            return np.full(n, mean)
        if self.kind == "gamma":
            return self.rng.gamma(self.k, mean / self.k, n)
        return self.rng.exponential(mean, n)

    def _refill(self) -> None:
        times = self.clock + np.cumsum(self._gaps(BLOCK))
        numbers = np.arange(self.drawn, self.drawn + BLOCK)  # global arrival numbers of this block
        self.mine.extend(times[numbers % self.processes == self.index].tolist())
        self.drawn += BLOCK
        self.clock = float(times[-1])

    def count_between(self, start: float, end: float) -> int:
        """How many of this process's send times fall in [start, end] (this schedule's clock), drawn
        as `take` draws them; it uses the schedule up (a fresh one is made for the count)."""
        n = 0
        while self.clock < end:
            self._refill()
            times = np.asarray(self.mine, dtype=float)
            n += int(np.count_nonzero((times >= start) & (times <= end)))
            self.mine = []
        return n

    def take(self) -> float:
        """The next send time of this process (perf_counter), in order; one per call."""
        while self.taken >= len(self.mine):
            self._refill()
        t = self.mine[self.taken]
        self.taken += 1
        if self.taken > BLOCK:  # keep memory flat on long runs
            del self.mine[: self.taken]
            self.taken = 0
        return t
