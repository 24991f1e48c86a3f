"""Rankings of a sweep's points, each one function in a registry: the figure it ranks by (with its
interval) and which way is better. `rank` orders the points, names the best with its margin over
the runner-up, and says "no difference measured" when their intervals overlap.

A new ranking is one function:

    @ranking("name", "what it ranks by (unit)", higher_is_better=True)
    def name(row: dict) -> Estimate | None: ...

A label's `{unit}` is the unit of the points' capacity: users, or requests/s for searches in
requests/s (sweeps/capacity_unit.py, which refuses points that mix the two).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from sweeps.capacity_unit import USERS, refuse_mixed

BEST = "best"
NO_DIFFERENCE = "no difference measured"
ONLY_ONE = "one point measured"
NONE = "no point measured"

# Exit codes of `python -m sweeps run` (docs/tuning.md lists them)
EXIT_BEST = 0  # a best point, beyond the runner-up's interval (or the only point measured)
EXIT_NO_DIFFERENCE = 1  # the best and the runner-up's intervals overlap: no difference measured
EXIT_BAD_INPUT = 2  # refused before anything started
EXIT_NONE = 3  # no point could be ranked (each failed, or none had the figure)
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class Estimate:
    value: float
    lo: float | None  # None: not bounded on that side
    hi: float | None


@dataclass(frozen=True)
class Ranking:
    name: str
    label: str
    higher_is_better: bool
    figure: Callable[[dict], Estimate | None]


RANKINGS: dict[str, Ranking] = {}


def ranking(name: str, label: str, higher_is_better: bool):
    def register(fn: Callable[[dict], Estimate | None]):
        RANKINGS[name] = Ranking(name, label, higher_is_better, fn)
        return fn

    return register


def _est(row: dict, key: str) -> Estimate | None:
    v = row.get(key)
    if v is None or not math.isfinite(v):
        return None
    return Estimate(float(v), row.get(f"{key}_lo"), row.get(f"{key}_hi"))


@ranking("capacity", "capacity at the SLO ({unit})", higher_is_better=True)
def by_capacity(row: dict) -> Estimate | None:
    """A capacity search's answer, in its own unit, with the interval [level met, level missed]."""
    return _est(row, "capacity")


@ranking("throughput", "throughput at the SLO (total tokens/s)", higher_is_better=True)
def by_throughput(row: dict) -> Estimate | None:
    """Total tokens/s of the points that met the SLO (all points when no SLO was given)."""
    if row.get("slo_state") not in (None, "met"):
        return None
    return _est(row, "throughput")


@ranking("ttft", "P95 TTFT (ms)", higher_is_better=False)
def by_ttft(row: dict) -> Estimate | None:
    return _est(row, "ttft_p95_ms")


def overlap(a: Estimate, b: Estimate) -> bool:
    """Whether two intervals share more than an end point. A capacity's interval is [met, missed):
    a point met at the level another missed at is above it, though the numbers touch. A side
    without a bound (None) reaches everything on that side."""
    a_lo, a_hi = (-math.inf if a.lo is None else a.lo), (math.inf if a.hi is None else a.hi)
    b_lo, b_hi = (-math.inf if b.lo is None else b.lo), (math.inf if b.hi is None else b.hi)
    return a_lo < b_hi and b_lo < a_hi


AUTO = "auto"


def chosen(rows: list[dict], name: str) -> str:
    """`auto`: by capacity when a point has a capacity answer (the load was a capacity search or a
    step ramp with --slo), else by throughput at the SLO."""
    if name != AUTO:
        return name
    return "capacity" if any(r.get("capacity") is not None for r in rows) else "throughput"


def capacity_unit(rows: list[dict], load_unit: str | None = None) -> str:
    """The unit of the measured points' capacity (`load_unit`, the load's, where none has one;
    users without either); refused when they mix users and requests/s."""
    found = refuse_mixed(
        {row.get("label", row["point"]): row.get("capacity_unit") for row in rows if row.get("status") == "done"}
    )
    return found or load_unit or USERS


def rank(rows: list[dict], name: str, load_unit: str | None = None) -> dict:
    """The ranked points (best first), the verdict, the margin and the exit code. `load_unit`: the
    unit the load searches capacity in (sweeps/capacity_unit.py of_load), for the label where no
    point has a capacity."""
    r = RANKINGS[chosen(rows, name)]
    unit = capacity_unit(rows, load_unit)
    label = r.label.format(unit=unit)
    scored = [(row, est) for row in rows if row.get("status") == "done" and (est := r.figure(row)) is not None]
    sign = -1 if r.higher_is_better else 1
    scored.sort(key=lambda pair: (sign * pair[1].value, pair[0].get("index", 0)))
    order = [
        {"point": row["point"], "label": row.get("label", row["point"]), "value": est.value, "lo": est.lo, "hi": est.hi}
        for row, est in scored
    ]
    out = {
        "ranking": r.name,
        "by": label,
        "capacity_unit": unit,
        "higher_is_better": r.higher_is_better,
        "order": order,
        "best": None,
        "runner_up": None,
        "margin": None,
        "margin_pct": None,
        "verdict": NONE,
        "exit_code": EXIT_NONE,
        "sentence": f"no point has a {label}",
    }
    if not scored:
        return out
    best_row, best = scored[0]
    out["best"] = order[0]
    if len(scored) == 1:
        out.update(
            verdict=ONLY_ONE,
            exit_code=EXIT_BEST,
            sentence=f"{best_row.get('label')}: {_fmt(best.value)} ({label}); the only point measured",
        )
        return out
    second_row, second = scored[1]
    out["runner_up"] = order[1]
    margin = abs(best.value - second.value)
    out["margin"] = margin
    out["margin_pct"] = margin / abs(second.value) * 100 if second.value else None
    pct = f", {out['margin_pct']:.1f} %" if out["margin_pct"] is not None else ""
    if margin == 0 or overlap(best, second):
        out.update(
            verdict=NO_DIFFERENCE,
            exit_code=EXIT_NO_DIFFERENCE,
            sentence=f"no difference measured between {best_row.get('label')} ({_fmt(best.value)} {_iv(best)}) and "
            f"{second_row.get('label')} ({_fmt(second.value)} {_iv(second)}): their intervals overlap "
            f"({label})",
        )
    else:
        out.update(
            verdict=BEST,
            exit_code=EXIT_BEST,
            sentence=f"best: {best_row.get('label')} with {_fmt(best.value)} {_iv(best)} ({label}), "
            f"{'above' if r.higher_is_better else 'below'} the runner-up {second_row.get('label')} "
            f"({_fmt(second.value)} {_iv(second)}) by {_fmt(margin)}{pct}, beyond both intervals",
        )
    return out


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.3g}"


def _iv(e: Estimate) -> str:
    return f"[{_fmt(e.lo) if e.lo is not None else '-inf'}, {_fmt(e.hi) if e.hi is not None else 'inf'}]"
