"""The difference B - A of one metric measured in paired rounds (an A/B in interleaved rounds, each
round's two runs with the same seeds), its interval, its verdict and the smallest change it could
have detected. Pure: numbers in, numbers out.

The estimate is the mean over rounds of the paired differences d_r = B_r - A_r.

Its interval is the estimate plus or minus the larger of two half-widths:
  within runs    half the central `confidence` range of the bootstrap replicates of the mean
                 difference (each run's replicates from the block bootstrap, stats/
                 block_bootstrap.py, replicate j of A and of B drawn with the same block weights
                 when the caller pairs them; the replicate of the mean is the mean over rounds of
                 B's minus A's), which holds the noise inside each run;
  between rounds t(confidence, n - 1) x sd(d_r) / sqrt(n), the paired t interval, which holds
                 what changes from one round to the next (a server's state, the machine's load).
                 It is left out with fewer than 3 rounds when replicates are given: one degree of
                 freedom estimates nothing (t = 12.7); with no replicates (a figure without a
                 bootstrap) it is the only half-width and needs 2 rounds.

Paired or independent replicates (`paired_replicates`): a paired bootstrap of a round's two runs
cancels what they share and narrows the interval several times over, but it cannot see what
differs between two runs as a whole (the machine busier during one of them); only the
between-round term holds that, and it needs 3 rounds. So the replicates are paired from
PAIRED_FROM rounds on, and independent below (each run resampled on its own, which keeps each
run's whole noise in the interval). Measured on the simulator (bench/RESULTS.md): in 40 A/A
pairs of 2 rounds, paired replicates alone said "better" or "worse" on TPOT P95 in 7, and
independent ones in none.

The verdict: "better" or "worse" when the interval excludes 0 (by the metric's direction), else
"no difference measured". The half-width is the smallest change the comparison could have told
from no change: a change smaller than it reads as "no difference measured" whatever its truth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stats.student_t import t_critical

BETTER, WORSE, NO_DIFFERENCE = "better", "worse", "no difference measured"
ENOUGH = 0.9  # below this share of finite replicates, the within-run half-width is unknown
PAIRED_FROM = 3  # rounds from which a round's runs are resampled paired (see the module's docstring)


def paired_replicates(rounds: int) -> bool:
    return rounds >= PAIRED_FROM


@dataclass(frozen=True)
class RoundsDifference:
    rounds: int
    a: float  # mean of A over rounds
    b: float
    diff: float  # mean of B - A
    lo: float | None
    hi: float | None
    half_width: float | None  # the smallest change it could have detected (same unit)
    within: float | None  # the two half-widths it took the larger of
    between: float | None
    verdict: str

    @property
    def diff_pct(self) -> float | None:
        return self.diff / abs(self.a) * 100 if self.a else None

    @property
    def detectable_pct(self) -> float | None:
        """The half-width in percent of A: the smallest relative change it could have detected."""
        return self.half_width / abs(self.a) * 100 if self.a and self.half_width is not None else None

    @property
    def interval_pct(self) -> tuple[float | None, float | None]:
        if not self.a or self.lo is None:
            return None, None
        return self.lo / abs(self.a) * 100, self.hi / abs(self.a) * 100


def verdict(lo: float | None, hi: float | None, higher_is_better: bool) -> str:
    if lo is None or hi is None:
        return NO_DIFFERENCE
    if lo > 0:
        return BETTER if higher_is_better else WORSE
    if hi < 0:
        return WORSE if higher_is_better else BETTER
    return NO_DIFFERENCE


def rounds_difference(
    a: list[float],
    b: list[float],
    higher_is_better: bool,
    confidence: float = 0.95,
    a_reps: list[np.ndarray] | None = None,
    b_reps: list[np.ndarray] | None = None,
) -> RoundsDifference:
    """See the module's docstring. `a[r]`, `b[r]`: the metric of round r's runs; `a_reps[r]`,
    `b_reps[r]`: their bootstrap replicates (the same count for every run), or None."""
    if len(a) != len(b) or not a:
        raise ValueError("one value of A and one of B per round")
    av, bv = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    d = bv - av
    n = d.size
    diff = float(d.mean())
    within = between = None
    if a_reps is not None and b_reps is not None:
        reps = np.mean(
            [np.asarray(rb, dtype=float) - np.asarray(ra, dtype=float) for ra, rb in zip(a_reps, b_reps)], axis=0
        )
        finite = reps[np.isfinite(reps)]
        if finite.size >= ENOUGH * reps.size and finite.size:
            alpha = (1 - confidence) / 2 * 100
            lo, hi = np.percentile(finite, [alpha, 100 - alpha])
            within = float(hi - lo) / 2
    if n >= (3 if within is not None else 2):
        between = t_critical(confidence, n - 1) * float(d.std(ddof=1)) / math.sqrt(n)
    widths = [w for w in (within, between) if w is not None and math.isfinite(w)]
    half = max(widths) if widths else None
    lo, hi = (diff - half, diff + half) if half is not None else (None, None)
    return RoundsDifference(
        n, float(av.mean()), float(bv.mean()), diff, lo, hi, half, within, between, verdict(lo, hi, higher_is_better)
    )


def bracket_difference(
    a: list[tuple[float, float | None]], b: list[tuple[float, float | None]], higher_is_better: bool = True
) -> tuple[float | None, float | None, str]:
    """The difference of two quantities each known per round only as an interval [lo, hi) (a
    capacity search's answer: [level met, level missed); hi None when none missed): the interval
    of the mean difference, [mean(B.lo - A.hi), mean(B.hi - A.lo)], and "better" only when B met,
    in every round, a level A missed (B.lo >= A.hi), "worse" only for the reverse."""
    lows = [bl - ah if ah is not None else None for (bl, _bh), (_al, ah) in zip(b, a)]
    highs = [bh - al if bh is not None else None for (_bl, bh), (al, _ah) in zip(b, a)]
    lo = float(np.mean(lows)) if all(x is not None for x in lows) else None
    hi = float(np.mean(highs)) if all(x is not None for x in highs) else None
    b_above = all(ah is not None and bl >= ah for (bl, _), (_, ah) in zip(b, a))
    a_above = all(bh is not None and al >= bh for (_, bh), (al, _) in zip(b, a))
    if b_above:
        return lo, hi, BETTER if higher_is_better else WORSE
    if a_above:
        return lo, hi, WORSE if higher_is_better else BETTER
    return lo, hi, NO_DIFFERENCE
