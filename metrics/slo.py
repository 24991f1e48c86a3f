"""Service-level objectives: `--slo "ttft.p95<5s,tpot.p95<80ms"`, per-request goodput, verdicts.

An objective names a metric (ttft, ttfa, tpot, itl, e2e), a statistic (mean or any percentile pNN[.N])
and a threshold. It is judged twice:
  - for a set of requests (a load level, the whole run, a block, the live window): the one verdict
    rule of metrics/verdict.py, met when the statistic's upper confidence bound is under the
    threshold, missed when its lower bound is at or above it, undecided otherwise;
  - for each request (goodput): its own value must be under the threshold. For itl the request's
    own value is the same statistic over its own chunk gaps (p95 of its gaps for itl.p95).
A successful reply without an answer token (only reasoning) has no ttfa: it misses a ttfa objective
(its user never saw an answer), where a NaN of another metric passes (TPOT of a one-token reply).
Goodput counts the requests that succeeded and met every objective; the good fraction divides by
every request that ended in the window, failures and timeouts included ("stopped" excluded).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from core.durations import parse_duration
from core.errors import InputError
from metrics.percentiles import mean, percentile, percentile_by_group
from metrics.timing import itl_gaps

METRICS = {"ttft": "ttft_s", "ttfa": "ttfa_s", "tpot": "tpot_s", "itl": None, "e2e": "e2e_s"}
_EXPR = re.compile(r"^\s*(ttft|ttfa|tpot|itl|e2e)\.(mean|p\d{1,2}(?:\.\d+)?)\s*<\s*(\S+)\s*$")


@dataclass(frozen=True, slots=True)
class Objective:
    metric: str  # ttft | ttfa | tpot | itl | e2e
    stat: str  # "mean" or "p95", "p99.9", ...
    threshold_s: float
    text: str

    @property
    def key(self) -> str:
        return f"{self.metric}.{self.stat}"

    def percentile(self) -> float | None:
        return None if self.stat == "mean" else float(self.stat[1:])

    def statistic(self, values_s) -> float:
        """The objective's statistic of `values_s` (seconds; NaN left out); NaN without a value,
        which is never under a threshold (`value < threshold` is False)."""
        value = mean(values_s) if self.stat == "mean" else percentile(values_s, self.percentile())
        return math.nan if value is None else value


def parse_slo(text: str) -> list[Objective]:
    """'ttft.p95<5s,tpot.p95<80ms' -> objectives; a mistake is one line naming the part and the fix."""
    out = []
    for part in [p for p in (text or "").split(",") if p.strip()]:
        m = _EXPR.match(part)
        if not m:
            raise InputError(
                f"--slo: cannot read '{part.strip()}'; write METRIC.STAT<THRESHOLD with METRIC one of "
                "ttft, ttfa, tpot, itl, e2e and STAT mean or pNN, e.g. 'ttft.p95<5s,tpot.p95<80ms'"
            )
        metric, stat, threshold = m.groups()
        if stat != "mean" and not 0 < float(stat[1:]) < 100:
            raise InputError(f"--slo: '{part.strip()}': the percentile must be between 0 and 100")
        if re.fullmatch(r"\d+(?:\.\d+)?", threshold):  # a bare number: seconds? milliseconds? say which
            raise InputError(f"--slo: '{part.strip()}': give a unit, e.g. 5s or 500ms")
        try:
            seconds = parse_duration("slo", threshold)
        except InputError:
            raise InputError(
                f"--slo: '{part.strip()}': threshold '{threshold}' is not a duration; write e.g. 5s or 80ms"
            ) from None
        if seconds <= 0:
            raise InputError(f"--slo: '{part.strip()}': the threshold must be above 0")
        out.append(Objective(metric, stat, seconds, part.strip()))
    keys = [o.key for o in out]
    if len(set(keys)) != len(keys):
        raise InputError("--slo: an objective is given twice; give each METRIC.STAT once")
    return out


def request_values(obj: Objective, df, chunk_times) -> np.ndarray:
    """Each request's own value of the objective's metric (seconds; NaN where undefined). For itl,
    the statistic of the request's own chunk gaps (metrics.timing.itl_gaps)."""
    if obj.metric == "ttfa":  # no answer token: the objective is missed (module docstring)
        return np.nan_to_num(df["ttfa_s"].to_numpy(dtype=float), nan=np.inf)
    if obj.metric != "itl":
        return df[METRICS[obj.metric]].to_numpy(dtype=float)
    gaps, rows = itl_gaps(chunk_times)
    n = len(df)
    if obj.stat == "mean":
        count = np.bincount(rows, minlength=n)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, np.bincount(rows, weights=gaps, minlength=n) / np.maximum(count, 1), np.nan)
    return percentile_by_group(gaps, rows, n, obj.percentile())


def good_mask(objectives, df, chunk_times) -> np.ndarray:
    """Requests that succeeded and met every objective's threshold (NaN metric values pass,
    e.g. TPOT of a one-token reply, as in vLLM's goodput); `ok` without objectives.
    `chunk_times` is the records' Arrow column, in the order of `df`'s rows."""
    good = df["ok"].to_numpy(dtype=bool).copy()
    for obj in objectives:
        values = request_values(obj, df, chunk_times)
        good &= ~(values >= obj.threshold_s)  # NaN compares False: passes
    return good
