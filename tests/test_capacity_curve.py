"""The capacity from the curve through the levels (shapes/search/curve.py, stats/crossing.py), on
synthetic levels whose percentile is known: TTFTs exponential with a P95 that grows linearly with
the users and crosses the threshold at a known count. Pure arithmetic: no process."""

from __future__ import annotations

import math

import numpy as np
import pytest

from metrics.slo import parse_slo
from metrics.verdict import judge
from shapes.search import POLICIES, Tried, curve
from stats.crossing import decreasing, zero_of
from stats.longer_tail import longer_tail

pytestmark = pytest.mark.unit

P95 = parse_slo("ttft.p95<5s")
TRUE = 90.0  # the P95 below crosses 5 s here


def p95_at(users: float) -> float:
    return 4.4 + (users - 80) * 0.06


def level(rng, users: int, n: int, state: str = "undecided", ended: str = "decided") -> Tried:
    """A level of `n` first tokens whose true P95 is p95_at(users); its verdict at a look's 98 %."""
    v = rng.exponential(p95_at(users) / math.log(20), n)
    verdict = judge(P95, {P95[0].key: v}, n, 0, 0.98)
    margins = curve.margins({P95[0].key: v}, P95, users, 77, verdict.state == "missed")
    return Tried(users, verdict.state, verdict.margin, ended, verdict, margins)


def test_isotonic_fit_and_the_zero_of_a_falling_line():
    # a rise between two levels is pooled to their weighted mean; the rest is left as it is
    assert decreasing(np.array([0.5, 0.1, 0.3, -0.2]), np.array([1.0, 1.0, 3.0, 1.0])).tolist() == pytest.approx(
        [0.5, 0.25, 0.25, -0.2]
    )
    x = np.array([64.0, 80.0, 96.0])
    assert zero_of(x, np.array([0.2, 0.1, -0.1])) == (88.0, 2)
    assert zero_of(x, np.array([-0.1, -0.2, -0.3])) == (-math.inf, 0)  # below the levels tried
    assert zero_of(x, np.array([0.3, 0.2, 0.1])) == (math.inf, None)  # above them


def test_a_level_draws_reach_as_far_on_its_short_side_as_on_its_long_one():
    """A level that read low resamples to a short upper tail (its calm values reach little higher):
    draws 0.1 above the point at most, 0.5 below it. Both sides get the longer reach, quantile by
    quantile, each draw keeping its rank (the rows of the fit pair levels' draws at random); a tail
    already the longer is left as it is."""
    rng = np.random.default_rng(3)
    down = -0.5 * rng.random(600)
    up = 0.1 * rng.random(400)
    draws = 5.0 + rng.permutation(np.concatenate([down, up]))
    out = longer_tail(draws, 5.0)
    assert np.quantile(out, 0.9) - 5.0 == pytest.approx(5.0 - np.quantile(draws, 0.1), rel=0.02)
    assert np.quantile(out, 0.1) == pytest.approx(np.quantile(draws, 0.1))  # the long side as it was
    assert np.array_equal(np.argsort(out, kind="stable"), np.argsort(draws, kind="stable"))
    assert np.all(np.abs(out - 5.0) >= np.abs(draws - 5.0) - 1e-12)  # never narrower
    symmetric = 5.0 + np.linspace(-0.3, 0.3, 101)
    assert longer_tail(symmetric, 5.0) == pytest.approx(symmetric)


def test_the_crossing_interval_covers_a_known_crossing_at_its_confidence():
    """Levels 64, 80, 88, 96 and 128 users of 300 first tokens each: over 30 fits the 80 % interval
    holds the true 90 users about 80 % of the time (at least 19 of 30: below that is a binomial's
    lower 1 % tail), and is never open while levels stand on both sides of the crossing."""
    covered = 0
    for seed in range(30):
        rng = np.random.default_rng(seed)
        c = curve.fit([level(rng, u, 300) for u in (64, 80, 88, 96, 128)])
        assert c.lower is not None and c.upper is not None and c.below in (64, 80, 88, 96)
        covered += c.lower <= TRUE <= c.upper
    assert covered >= 19, covered


def test_the_adaptive_policy_places_levels_at_the_crossing_and_stops_within_its_precision():
    rng = np.random.default_rng(1)
    p = POLICIES["adaptive"]()
    far = [level(rng, 64, 400, "met"), level(rng, 128, 400, "missed")]
    # the knee is far between 64 and 128: the chord is not trusted, the next level is in the gap's middle half
    assert 80 <= p.next_level(far) <= 112
    near = [*far, level(rng, 84, 3000), level(rng, 96, 3000)]
    c = curve.fit(near)
    assert c.lower <= TRUE <= c.upper and curve.within(c, 0.05)
    assert p.next_level(near) is None  # within ±5 % of the estimate: the search is over
    # a level at the knee, its values straddling the threshold, is held while the fit cannot place the
    # crossing (across 64..128 the interval is the gap's); the last one near it is left once the fit
    # with its values is within the precision
    assert (c.below, c.above) == (84, 96)
    assert not p.leave(far, level(rng, 90, 150))
    assert p.leave(near[:-1], near[-1])
    wide = curve.fit(far)
    assert (wide.lower, wide.upper) == (64, 128)  # no line trusted across the whole gap: anywhere in it
    assert p.crossing(near)["within_precision"] is True


def test_across_a_cliff_the_interval_is_the_two_neighbouring_user_counts():
    """16 users far under (+70 %), 17 far over (-150 %): the line between them would put the
    crossing at 16.3 +- 0.03; a level is a whole number of users, so the interval is 16 to 17."""
    rng = np.random.default_rng(0)
    history = [
        Tried(u, s, m, "decided", None, curve.Margins(m, m + 0.05 * rng.standard_normal(1000)))
        for u, s, m in ((8, "met", 0.9), (16, "met", 0.7), (17, "missed", -1.5))
    ]
    c = curve.fit(history)
    assert 16 < c.estimate < 17 and (c.lower, c.upper, c.below, c.above) == (16, 17, 16, 17)
