"""The capacity from the curve through the levels: where their margins cross zero, with an interval.

Near the knee no single level can be decided: its percentile is within a few % of the threshold,
and at 98 % bounds per look even a level held 90 s leaves them straddling it. The levels around it
still say where the curve crosses: one a little under (+3 %), one a little over (-4 %) put the
crossing between them, nearer the first. This module fits that (stats/crossing.py): each level's
margin, (threshold - statistic) / threshold of every objective (the least, as the verdict's), is
resampled from the values its verdict judged (its first tokens, the ones still waiting at the cut
at their minimum), in the order they came, by a moving-block bootstrap (stats/moving_blocks.py:
the first tokens of one level are correlated through the server's queue, and resampling them one
by one would understate how far a level's P95 moves), each side of the level's point value then
given the reach of the longer of its two tails (stats/longer_tail.py: a level that read low by
chance resamples to a short upper tail, the very side the truth is on); per draw the margins are
made to fall with the users (assumption 1: latency grows with load) and the crossing is
interpolated between the two neighbouring levels either side of zero (assumption 2: the curve is
about straight between them).
A level joins the fit once each percentile has TAIL_VALUES values above it (200 for a P95: a
resample of fewer puts the percentile on the same few largest values, and its spread is too narrow)
and at least the values its verdict needs to be met at the look's confidence, or once its verdict
missed (a level far over bounds the crossing from above whatever its spread).

The interval is the central 80 % of the crossings over the draws (10 % per side, as the bracket
between the highest met and the lowest missed level at 90 % per side per level). A curve that
bends between the two neighbours moves the crossing by up to the gap between them, which the
resampling does not see: a draw whose neighbours are more than SPAN x precision of its crossing
apart counts as anywhere between them (assumption 1 alone), so across a wide gap the interval is
the gap's. It counts as within --capacity-precision when both its ends are within precision of
the estimate (±5 % by default: at most 10 % wide) and the two levels are within that span.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from metrics.percentiles import ORDER
from metrics.record import with_all_columns
from metrics.timing import pooled_itl
from metrics.verdict import level_values
from shapes.search.registry import DEFAULT_PRECISION, Tried
from stats.crossing import Crossing, crossing
from stats.longer_tail import longer_tail
from stats.moving_blocks import moving_block_draws

if TYPE_CHECKING:
    import pyarrow as pa

DRAWS = 1000
TAIL_VALUES = 10  # a percentile's values above it before a level joins the fit (module doc)
CONFIDENCE = 0.80  # two-sided: 10 % per side
SPAN = 4.0  # the neighbours the crossing lies between, at most this many x precision of it apart


@dataclass(frozen=True, slots=True, eq=False)
class Margins:
    """A level's margin (the least over its objectives) and its resampled draws."""

    point: float
    draws: np.ndarray


def values_of(table: pa.Table, level, objectives, open_streams=None) -> dict[str, np.ndarray]:
    """Each objective's values of a level (records holding at least its requests, the streams still
    open), as its verdict judged them (metrics.measure.Measure.level): a first-token objective's
    exact first tokens in the records' order, then the waiting ones at their minimum."""
    import pyarrow as pa

    from metrics.measure import Measure, records_frame  # pandas: loaded by the process that judges

    table = with_all_columns(table)
    m = Measure(records_frame(table), table.column("chunk_times"), objectives)
    mask = m.in_level(level)
    sub = m.df[mask]
    values = level_values(objectives, sub[sub["ok"]], pooled_itl(m.chunk_times.filter(pa.array(mask & m.ok))))
    if level.cut is not None:
        exact, censored = m.first_tokens(level, open_streams)
        for key in exact:
            values[key] = np.concatenate([exact[key], censored[key]])
    return values


def row_statistic(objective):
    """The objective's statistic of each row of an array (a level's statistic, as its verdict takes
    it: a percentile is an order statistic, metrics/percentiles.ORDER)."""
    if objective.stat == "mean":
        return lambda a: a.mean(axis=1)
    q = objective.percentile()
    return lambda a: np.percentile(a, q, axis=1, method=ORDER)


def margins(values: dict[str, np.ndarray], objectives, users: int, need: int, missed: bool, draws: int = DRAWS):
    """The level's Margins from its objectives' values (`values_of`), or None while an objective has
    fewer than `need` values and the level has not missed. The draws are seeded by the level's
    users: a level's draws do not change as others are added."""
    rng = np.random.default_rng(users)
    points, rows = [], []
    for o in objectives:
        v = np.asarray(values.get(o.key, ()), dtype=float)
        v = v[~np.isnan(v)]
        least = need if o.stat == "mean" else max(need, math.ceil(TAIL_VALUES / (1.0 - o.percentile() / 100.0)))
        if v.size == 0 or (v.size < least and not missed):
            return None
        t = o.threshold_s
        point = o.statistic(v)
        points.append((t - point) / t)
        rows.append((t - statistic_draws(v, point, row_statistic(o), draws, rng)) / t)
    return Margins(min(points), np.min(np.vstack(rows), axis=0))


def statistic_draws(v: np.ndarray, point: float, statistic, draws: int, rng: np.random.Generator) -> np.ndarray:
    """`draws` values of a level's statistic as it could have come out: moving-block resamples of its
    values, both tails given the reach of the longer (module doc)."""
    return longer_tail(moving_block_draws(v, statistic, draws, rng), point)


def fit(history: list[Tried], precision: float = DEFAULT_PRECISION, confidence: float = CONFIDENCE) -> Crossing | None:
    """The crossing of the curve through the levels that have values (at least two), or None; a
    draw whose neighbours are more than SPAN x `precision` of its crossing apart counts as anywhere
    between them (the line is not trusted across a gap that wide). Its interval in whole users."""
    users, points, columns = [], [], []
    for t in history:
        m = t.margins
        if m is not None:
            users.append(t.users)
            points.append(m.point)
            columns.append(m.draws)
    if len(users) < 2:
        return None
    c = crossing(users, points, np.column_stack(columns), confidence, SPAN * precision)
    # in whole users, outward: a level is a whole number of users, and between two neighbouring
    # counts (a cliff: 16 met far under, 17 far over) the line says nothing finer than "between them"
    return replace(
        c,
        lower=None if c.lower is None else float(math.floor(c.lower)),
        upper=None if c.upper is None else float(math.ceil(c.upper)),
    )


def within(c: Crossing | None, precision: float) -> bool:
    """The interval is within ±`precision` of the estimate, interpolated between levels close enough
    (SPAN) for the straight line between them to be trusted."""
    if c is None or c.estimate is None or c.lower is None or c.upper is None or c.gap is None:
        return False
    reach = precision * c.estimate
    return c.estimate - c.lower <= reach and c.upper - c.estimate <= reach and c.gap <= SPAN * reach


def record(c: Crossing | None, precision: float) -> dict | None:
    """summary.json capacity.crossing: the estimate, its interval and confidence, the two levels it
    is interpolated between, and whether it is within the precision."""
    if c is None or c.estimate is None:
        return None
    r = lambda x: None if x is None else round(x, 2)  # noqa: E731
    return {
        "users": r(c.estimate),
        "lower": r(c.lower),
        "upper": r(c.upper),
        "confidence": c.confidence,
        "between": [c.below, c.above],
        "within_precision": within(c, precision),
    }
