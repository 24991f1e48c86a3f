"""The capacity search's answer against the truth, over many seeds, in virtual time. Not run by CI.

    python bench/capacity_coverage.py                                            # v100-7b-tp8, ttft.p95<5s, seeds 1-20
    python bench/capacity_coverage.py --profile scheduler-bound --slo "ttft.p95<1s" --truth-users 6,7,8,9,10,11,12

What runs is the search's own code, shapes.capacity.CapacitySearch with its policy (the levels it
picks, the warm-up, the looks, each verdict judged by metrics.measure on request records, the
levels passed, left or held, the answer's interval), fed with requests from the simulator's
virtual-time closed loop (simulator.virtual: the engine's own step arithmetic, no sleeping)
instead of a Locust run: a 300 s search takes about a second. What it is not: each level is its
own closed loop of that many users, started 10 virtual seconds before the level begins (so the
level starts on a loaded server, as after the level before; the warm-up still waits, as the search
does, for the previous level's requests that are still open), with every user starting at once;
no HTTP, no client CPU, no Locust ramp; the records reach the search when their request ends,
as they do in one process. So it measures the policy and its interval on the engine's latencies,
not the client's timing.

The truth: the user count where the percentile of the SLO crosses its threshold in long fixed-level
virtual runs (--truth-s each after a warm-up, one per --truth-users level, interpolated between the
two levels either side).

--replay-stops weighs rules for the adaptive search's stop on the crossing (STOP_RULES) without a
run of each: every search runs once with that stop never taken (`Replay`), keeping the crossing at
each look (at several confidences, and without each of its two neighbouring levels), and each rule
is then played back over those looks: it ends the search at the first look where it holds. That is
the search the rule would have run, look for look: until its stop, a rule changes nothing the
search does (every other decision is the same at a look where it does not hold).

The crossing's interval itself is weighed by running the whole search with another way of drawing
a level's statistic (--draws, DRAWS: in place of shapes.search.curve.statistic_draws), of fitting
the crossing (--crossing, CROSSINGS: in place of stats.crossing.crossing) or another confidence
(--confidence: the interval's and so the stop's). --calibration puts each level's draws beside its
own truth (the long runs at --truth-users, interpolated): how often the truth falls outside their
80 % range, which is 20 % of the levels if the draws are as wide as the level's error. --synthetic
runs the crossing alone on levels whose draws are exactly that wide, to show how often an interval
that is right on the whole holds the truth when it is narrow.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from metrics.record import RequestRecord
from metrics.slo import parse_slo
from shapes.capacity import CapacitySearch
from shapes.search import POLICIES, curve
from shapes.search.adaptive import Adaptive
from shapes.search.curve import CONFIDENCE, SPAN, fit, within
from simulator import virtual
from simulator.profiles import load_profile
from stats.longer_tail import longer_tail

PREWARM_S = 10.0  # each level's closed loop starts this long before the level
TAIL_S = 150.0  # and runs this long past its longest hold, so the requests it sent have ended


def closed_loop(profile, users: int, seconds: float, seed: int) -> list:
    """Every request of a virtual closed loop of `users` users over `seconds`: (arrival, first token,
    last token) in its own seconds. simulator.virtual returns statistics only; its requests are
    taken on their way to them."""
    kept: list = []
    stats = virtual._stats

    def keep(done, *rest):
        kept.extend(done)
        return stats(done, *rest)

    virtual._stats = keep
    try:
        virtual.simulate_closed_loop(profile, users, duration_s=seconds, warmup_s=0.0, seed=seed)
    finally:
        virtual._stats = stats
    return [(r.arrival, r.first, r.last) for r in kept]


def truth(profile, objective, users: list[int], seconds: float, warmup: float) -> tuple[float | None, dict]:
    """(users where the objective's statistic crosses its threshold, {users: statistic}) from long
    fixed-level virtual runs (first-token objectives: TTFT of requests sent after the warm-up)."""
    at = {}
    for u in users:
        reqs = closed_loop(profile, u, seconds + warmup + 60.0, seed=1000 + u)
        ttft = np.array([f - a for a, f, last in reqs if a >= warmup and a <= warmup + seconds])
        at[u] = float(objective.statistic(np.sort(ttft)))
    xs = sorted(at)
    for a, b in zip(xs, xs[1:], strict=False):
        if at[a] < objective.threshold_s <= at[b]:
            return a + (b - a) * (objective.threshold_s - at[a]) / (at[b] - at[a]), at
    return None, at


WIDER = (0.90, 0.95, 0.98)  # the confidences a look's crossing is kept at besides the reported one


class Replay(Adaptive):
    """The adaptive search whose stop on the crossing is never taken; at each look (a fit with new
    values) it keeps the crossing at CONFIDENCE and WIDER; at 1 - (1 - CONFIDENCE) / k at the k-th
    look where the stop could be taken (a crossing between levels within curve.SPAN of it: a
    Bonferroni correction for the looks so far); and, where the crossing is within the precision, the
    crossing without each of its two neighbouring levels."""

    def __init__(self, clock, **kwargs):
        super().__init__(**kwargs)
        self.clock = clock  # the search's seconds at the look
        self.looks: list[dict] = []
        self.seen = None

    def stops(self, history, c) -> bool:
        look = tuple((t.users, t.margins.point) for t in history if t.margins is not None)
        if look == self.seen:  # the same values (a level ended at the look that was just taken)
            return False
        self.seen = look
        fits = {CONFIDENCE: c, **{q: fit(history, self.precision, q) for q in WIDER}}
        # looks at which the stop could be taken: a crossing between levels close enough (curve.SPAN)
        near = bool(c is not None and c.gap is not None and c.gap <= SPAN * self.precision * c.estimate)
        looked = sum(x["near"] for x in self.looks) + near
        fits["bonferroni"] = fit(history, self.precision, 1.0 - (1.0 - CONFIDENCE) / max(1, looked))
        without = []
        if within(c, self.precision):
            without = [fit([t for t in history if t.users != u], self.precision) for u in (c.below, c.above)]
        self.looks.append(
            {
                "s": self.clock(),
                "levels": [u for u, _ in look],
                "newest": history[-1].users,
                "near": near,
                "fits": fits,
                "without": without,
            }
        )
        return False


def narrow_in_a_row(n: int, q: float = CONFIDENCE):
    return lambda looks, p: len(looks) >= n and all(within(x["fits"][q], p) for x in looks[-n:])


def narrow_since_another_level(looks, p) -> bool:
    """Narrow now and at every look back to one whose values were of another level."""
    if not within(looks[-1]["fits"][CONFIDENCE], p):
        return False
    for x in reversed(looks[:-1]):
        if not within(x["fits"][CONFIDENCE], p):
            return False
        if x["newest"] != looks[-1]["newest"] or x["levels"] != looks[-1]["levels"]:
            return True
    return False


def narrow_without(need: int):
    """Narrow, and still narrow without `need` of its two neighbouring levels (either one: 1)."""
    return lambda looks, p: (
        within(looks[-1]["fits"][CONFIDENCE], p) and sum(within(c, p) for c in looks[-1]["without"]) >= need
    )


# A stop rule: (the looks so far, the precision) -> the search ends at the latest look.
STOP_RULES = {
    "interval-80": lambda looks, p: within(looks[-1]["fits"][CONFIDENCE], p),  # the search's own
    **{f"interval-{q * 100:.0f}": narrow_in_a_row(1, q) for q in WIDER},
    "two-looks": narrow_in_a_row(2),
    "three-looks": narrow_in_a_row(3),
    "two-looks-90": narrow_in_a_row(2, 0.90),
    "another-level": narrow_since_another_level,
    "bonferroni": lambda looks, p: within(looks[-1]["fits"]["bonferroni"], p),
    "without-either": narrow_without(1),
    "without-both": narrow_without(2),
}


def replayed(r: dict, rule, precision: float, run_time: float) -> dict:
    """The search `r` (run by Replay) as a stop rule would have ended it (module doc); a stop at the
    look -t's cut made is -t's end."""
    looks = r["looks"]
    for k in range(len(looks)):
        if rule(looks[: k + 1], precision):
            c = looks[k]["fits"][CONFIDENCE]
            return {
                "c": c,
                "within": True,
                "search_s": looks[k]["s"],
                "timed_out": looks[k]["s"] >= run_time,
            }
    return {
        "c": looks[-1]["fits"][CONFIDENCE] if looks else None,
        "within": False,
        "search_s": r["search_s"],
        "timed_out": r["timed_out"],
    }


def holds(c, true: float) -> bool | None:
    """The interval holds the truth (an end open, beyond the levels tried, holds it on that side);
    None without a crossing."""
    if c is None or c.estimate is None:
        return None
    return (c.lower is None or c.lower <= true) and (c.upper is None or true <= c.upper)


def replay_table(rows: list[dict], true: float, precision: float, run_time: float) -> None:
    print(
        "| stop rule | with an interval (closed) | holds the truth (closed) | closed width, median | "
        "within ±precision (holding the truth) | search s, median | -t ended it |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, rule in STOP_RULES.items():
        out = [replayed(r, rule, precision, run_time) for r in rows]
        some = [o for o in out if o["c"] is not None and o["c"].estimate is not None]
        closed = [o for o in some if o["c"].lower is not None and o["c"].upper is not None]
        widths = [(o["c"].upper - o["c"].lower) / o["c"].estimate for o in closed]
        stops = [o for o in out if o["within"]]
        print(
            f"| {name} | {len(some)} ({len(closed)}) | {sum(holds(o['c'], true) for o in some)}/{len(some)} "
            f"({sum(holds(o['c'], true) for o in closed)}/{len(closed)}) | "
            f"{statistics.median(widths) if widths else float('nan'):.1%} | {len(stops)} "
            f"({sum(holds(o['c'], true) for o in stops)}) | {statistics.median(o['search_s'] for o in out):.0f} | "
            f"{sum(o['timed_out'] for o in out)}/{len(out)} |"
        )


def iact(x: np.ndarray, window: float = 5.0) -> float:
    """The integrated autocorrelation time of a series, 1 + 2 x the sum of its autocorrelations up
    to the smallest lag M with M >= `window` x that sum (Sokal's window); 1 for a constant series."""
    x = np.asarray(x, dtype=float) - np.mean(x)
    n = x.size
    var = float(x.var())
    if n < 2 or var <= 0:
        return 1.0
    f = np.fft.rfft(x, 2 * n)
    acf = np.fft.irfft(f * np.conj(f))[:n] / (var * n)
    tau = 1.0
    for m in range(1, n):
        tau = 1.0 + 2.0 * float(acf[1 : m + 1].sum())
        if m >= window * tau:
            break
    return max(1.0, tau)


def blocks_of(v: np.ndarray, length: int, statistic, draws: int, rng) -> np.ndarray:
    """Moving-block resamples of `v` with blocks of `length` values (stats/moving_blocks.py, its
    length given)."""
    n = v.size
    length = max(1, min(length, n))
    k = math.ceil(n / length)
    starts = rng.integers(0, n - length + 1, size=(draws, k))
    return statistic(v[(starts[:, :, None] + np.arange(length)).reshape(draws, k * length)[:, :n]])


def iact_blocks(v, point, statistic, draws, rng):
    """Blocks at least twice the exceedance indicator's integrated autocorrelation time."""
    length = max(math.ceil(math.sqrt(v.size)), math.ceil(2.0 * iact((v > point).astype(float))))
    return longer_tail(blocks_of(v, length, statistic, draws, rng), point)


def long_blocks(v, point, statistic, draws, rng):
    """Blocks of a sixth of the level's values: the window's time in six pieces."""
    return longer_tail(blocks_of(v, math.ceil(v.size / 6), statistic, draws, rng), point)


def spread_floor(d: np.ndarray, point: float, sd: float) -> np.ndarray:
    """`d` stretched about `point` so that its central 80 % is at least +-1.2816 `sd` wide."""
    lo, hi = np.quantile(d, [0.1, 0.9])
    have = (hi - lo) / 2.0
    want = 1.2816 * sd
    return d if have >= want or have <= 0 else point + (d - point) * (want / have)


def halves_floor(v, point, statistic, draws, rng):
    """The spread at least the one the level's two halves give: their statistics differ by about
    2 x the whole window's standard deviation (each half has half the values)."""
    d = curve_draws(v, point, statistic, draws, rng)
    h = v.size // 2
    sd = abs(float(statistic(v[None, :h])[0]) - float(statistic(v[None, h:])[0])) / 2.0
    return spread_floor(d, point, sd)


def stretched(k: float):
    def draws_(v, point, statistic, draws, rng):
        d = curve_draws(v, point, statistic, draws, rng)
        return point + (d - point) * k

    return draws_


def lack_of_fit(reach: float):
    """The levels' draws stretched about their points by sqrt of the reduced chi-square of a weighted
    straight line through the levels within `reach` x the estimate of it (3 or more): levels that
    scatter about the line more than their draws allow say the spread is too small."""

    def crossing_(x, point, draws, confidence=0.8, span=math.inf):
        first = curve_crossing(x, point, draws, confidence, span)
        x_, p_, d_ = np.asarray(x, dtype=float), np.asarray(point, dtype=float), np.asarray(draws, dtype=float)
        if first.estimate is None:
            return first
        near = np.abs(x_ - first.estimate) <= reach * first.estimate
        if near.sum() < 3:
            return first
        w = 1.0 / np.maximum(d_.var(axis=0), 1e-12)
        line = np.polyfit(x_[near], p_[near], 1, w=np.sqrt(w[near]))
        chi2 = float(np.sum(w[near] * (p_[near] - np.polyval(line, x_[near])) ** 2)) / (near.sum() - 2)
        if chi2 <= 1.0:
            return first
        return curve_crossing(x, point, p_ + (d_ - p_) * math.sqrt(chi2), confidence, span)

    return crossing_


curve_crossing = curve.crossing
CROSSINGS = {"linear": curve_crossing, "lack-of-fit-20": lack_of_fit(0.20), "lack-of-fit-30": lack_of_fit(0.30)}
curve_draws = curve.statistic_draws
# a level's resampled statistic, as curve.statistic_draws (--draws): the curve's own and candidates
DRAWS = {
    "moving-blocks": curve_draws,
    "iact-blocks": iact_blocks,
    "long-blocks": long_blocks,
    "halves-floor": halves_floor,
    "stretch-1.25": stretched(1.25),
    "stretch-1.5": stretched(1.5),
}


def search(profile, objectives, policy: str, seed: int, a) -> dict:
    """One capacity search in virtual time (module doc); policy "replay": the adaptive one run by
    Replay, its looks in the result."""
    clock = {"s": 0.0}
    if policy == "replay":
        chosen = Replay(lambda: clock["s"], max_users=a.max_users)
    else:
        chosen = POLICIES[policy](max_users=a.max_users)
    s = CapacitySearch(objectives, a.step_time, a.step_warmup, a.run_time, policy=chosen)
    s.run_start = 0.0
    grain = s.step_s
    levels: list[dict] = []  # {begin, end, reqs: [(send, first, last)], fed}
    now = 0.0

    def open_streams():
        sent, ttft = [], []
        for lv in levels:
            for send, first, last in lv["reqs"]:
                if send < lv["end"] and send <= now < last:
                    sent.append(send)
                    ttft.append(first - send if first <= now else math.nan)
        return [
            {
                "t": now,
                "sent": sent,
                "ttft": ttft,
                "ttfa": [math.nan] * len(sent),
                "step": [int(x // grain) for x in sent],
            }
        ]

    s.open_streams = open_streams
    index, users, requests = 0, s.level_for(0), 0
    rng_seed = seed * 1000
    while users is not None:
        if not levels or users != levels[-1]["users"]:
            if levels:
                levels[-1]["end"] = index * grain
            begin = index * grain
            rng_seed += 1
            loop = closed_loop(profile, users, PREWARM_S + 3 * a.step_time + TAIL_S, rng_seed)
            reqs = [(begin - PREWARM_S + x, begin - PREWARM_S + f, begin - PREWARM_S + y) for x, f, y in loop]
            levels.append({"users": users, "end": math.inf, "reqs": [r for r in reqs if r[0] >= begin], "fed": set()})
        index += 1
        now = index * grain
        rows = []
        for lv in levels:
            for i, (send, first, last) in enumerate(lv["reqs"]):
                if send < min(lv["end"], now) and last <= now and i not in lv["fed"]:
                    lv["fed"].add(i)
                    rows.append(row(int(send // grain), send, first - send, last - send))
        requests += len(rows)
        s.on_rows(rows)
        clock["s"] = now
        users = s.level_for(index)
    rec = s.record()
    lo, hi = s.bounds()
    return {
        **({"calibration": calibration(s.history, a.truth_at, objectives[0].threshold_s)} if a.truth_at else {}),
        "policy": policy,
        "seed": seed,
        "users": lo,
        "missed": hi,
        "crossing": rec.get("crossing"),
        "timed_out": rec["timed_out"],
        "search_s": (len(s.levels)) * grain,
        "requests": requests,
        "levels": " ".join(
            f"{e['users']}{e['state'][:2]}{'/' + e['ended'][:2] if e['ended'] != 'decided' else ''}:{e['seconds']:.0f}s"
            for e in rec["levels"]
        ),
        **({"looks": chosen.looks} if policy == "replay" else {}),
    }


def calibration(history, at: dict, threshold: float) -> list[dict]:
    """Each level with draws inside the truth's levels: where its true margin (the long runs' statistic,
    interpolated between the truth's levels) lies among its draws (the share of draws below it), and
    how far from its point in the draws' spread (the 80 % range's half-width / 1.2816)."""
    xs = sorted(at)
    out = []
    for t in history:
        if t.margins is None or not xs[0] <= t.users <= xs[-1]:
            continue
        true = (threshold - float(np.interp(t.users, xs, [at[x] for x in xs]))) / threshold
        d = t.margins.draws
        lo, hi = np.quantile(d, [0.1, 0.9])
        sd = (hi - lo) / 2 / 1.2816
        out.append(
            {
                "users": t.users,
                "ended": t.ended,
                "state": t.state,
                "below": round(float(np.mean(d < true)), 3),
                "z": round((true - t.margins.point) / sd, 2) if sd > 0 else None,
            }
        )
    return out


def calibration_table(rows: list[dict], true: float, around: float) -> None:
    """How often a level's 80 % range of draws misses its truth, the levels within `around` users of
    the crossing's truth, by why they ended."""
    print(
        f"\n| levels within {around:g} users of {true:.1f} | levels | truth under the 10 % draw | over the 90 % | sd of z |"
    )
    print("| --- | --- | --- | --- | --- |")
    cal = [c for r in rows for c in r.get("calibration", ()) if abs(c["users"] - true) <= around]
    for name in ("all", "decided", "held", "placed"):
        mine = [c for c in cal if name == "all" or c["ended"] == name]
        z = [c["z"] for c in mine if c["z"] is not None]
        if mine:
            print(
                f"| {name} | {len(mine)} | {sum(c['below'] < 0.1 for c in mine)} | {sum(c['below'] > 0.9 for c in mine)} | "
                f"{statistics.pstdev(z) if len(z) > 1 else float('nan'):.2f} |"
            )


def synthetic(trials: int = 1500, sd: float = 0.06, slope: float = 0.017, true: float = 81.5) -> None:
    """The crossing's interval (stats.crossing, as the fit calls it) when every level's draws are
    exactly as wide as its error: margins on a straight line through `true` (`slope` a user, about
    the reference profile's near its knee), each level's point off the line by a normal error of `sd`
    and its draws normal about the point with that sd. How often the 80 % interval (whole users,
    outward) holds `true`, and how often when it is within ±5 % (where the search stops)."""
    rng = np.random.default_rng(1)
    print("\n| levels | crossings | interval holds the truth | within ±5 % | of those, holding the truth |")
    print("| --- | --- | --- | --- | --- |")
    for levels in ([78, 84], [80, 87], [77, 87], [76, 80, 84], [74, 78, 82, 86]):
        held, within_, within_held, n = 0, 0, 0, 0
        for _ in range(trials):
            point = np.array([slope * (true - u) for u in levels]) + rng.normal(0.0, sd, len(levels))
            c = curve_crossing(levels, point, point + rng.normal(0.0, sd, (400, len(levels))), CONFIDENCE, 20.0)
            if c.estimate is None:
                continue
            n += 1
            lo = -math.inf if c.lower is None else math.floor(c.lower)
            hi = math.inf if c.upper is None else math.ceil(c.upper)
            ok = lo <= true <= hi
            narrow = c.estimate - lo <= 0.05 * c.estimate and hi - c.estimate <= 0.05 * c.estimate
            held += ok
            within_ += narrow
            within_held += ok and narrow
        print(
            f"| {','.join(map(str, levels))} | {n} | {held / n:.0%} | {within_} | {within_held / max(1, within_):.0%} |"
        )


def oracle(profile, objective, true: float, at: dict, windows: list[float], seeds: range, warmup: float) -> None:
    """The best any search can do that judges the objective's statistic on a level's values: one that
    knows where the truth lies and how steep the curve is there, and spends all of a window of T
    seconds at the level nearest the truth. Its estimate is that level's statistic carried to the
    threshold along the known slope (the truth's levels either side); the spread of that estimate
    over seeds is a floor under any interval a real search can honestly give after T seconds at the
    knee, before any probing. Each seed's level is its own closed loop (as in `search`), judged on
    the requests sent from its warm-up's end to the window's end."""
    xs = sorted(at)
    below = max(u for u in xs if u <= true)
    above = min(u for u in xs if u > true)
    slope = (at[above] - at[below]) / (above - below)  # seconds of the statistic per user
    level = round(true)
    longest = max(windows)
    runs = [closed_loop(profile, level, PREWARM_S + warmup + longest + TAIL_S, seed=seed) for seed in seeds]
    print(
        f"\noracle: all of T at {level} users, slope {slope * 1000:.0f} ms a user ({below}-{above} users), "
        f"truth {true:.1f} users, {len(runs)} seeds\n"
    )
    print(
        "| T (s) | values at the level, median | sd of its statistic (ms) | sd of the estimate (users) | "
        "80 % interval, width | 90 % interval, width | estimates within ±5 % | within ±2.5 % |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    start = PREWARM_S + warmup
    for w in windows:
        stats_, counts = [], []
        for reqs in runs:
            ttft = np.sort(np.array([f - a for a, f, _ in reqs if start <= a <= start + w]))
            stats_.append(objective.statistic(ttft))
            counts.append(len(ttft))
        estimates = level + (objective.threshold_s - np.array(stats_)) / slope
        sd_users = float(np.std(estimates, ddof=1))
        near = np.abs(estimates - true)
        print(
            f"| {w:g} | {statistics.median(counts):.0f} | {np.std(stats_, ddof=1) * 1000:.0f} | {sd_users:.2f} | "
            f"{2 * 1.2816 * sd_users / true:.1%} | {2 * 1.6449 * sd_users / true:.1%} | "
            f"{np.mean(near <= 0.05 * true):.0%} | {np.mean(near <= 0.025 * true):.0%} |"
        )


def row(step: int, sent: float, ttft: float, e2e: float) -> tuple:
    return RequestRecord(
        "r",
        "w",
        "chat",
        "default",
        10,
        4,
        step=step,
        wall_send=sent,
        status=200,
        ok=True,
        ttft_s=ttft,
        e2e_s=e2e,
        tpot_s=(e2e - ttft) / 100,
        chunk_times=[ttft, e2e],
    ).as_row()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="v100-7b-tp8")
    ap.add_argument("--slo", default="ttft.p95<5s")
    ap.add_argument("--policies", default="adaptive,doubling")
    ap.add_argument("--seeds", default="1-20")
    ap.add_argument("--step-time", type=float, default=30.0)
    ap.add_argument("--step-warmup", type=float, default=10.0)
    ap.add_argument("-t", "--run-time", type=float, default=300.0)
    ap.add_argument("--max-users", type=int, default=None)
    ap.add_argument("--truth-users", default="70,74,78,82,86,90,94,98,102,106,110")
    ap.add_argument("--truth-s", type=float, default=1800.0)
    ap.add_argument("--json", default="")
    ap.add_argument(
        "--replay-stops",
        action="store_true",
        help="the adaptive search under each of STOP_RULES, played back over one run per seed (module doc)",
    )
    ap.add_argument("--draws", default="moving-blocks", choices=sorted(DRAWS), help="a level's resampled statistic")
    ap.add_argument("--crossing", default="linear", choices=sorted(CROSSINGS), help="the fit's crossing")
    ap.add_argument(
        "--calibration",
        action="store_true",
        help="each level's draws against its truth (the long runs at --truth-users, interpolated): how often the 80 %% range misses it",
    )
    ap.add_argument(
        "--synthetic",
        action="store_true",
        help="the crossing's interval on levels whose draws are exactly as wide as their error",
    )
    ap.add_argument("--confidence", type=float, default=None, help="the crossing's interval's confidence")
    ap.add_argument(
        "--oracle",
        default="",
        help="windows in seconds (e.g. 30,60,90,150,300): the floor under the interval of any search after that long at the knee",
    )
    a = ap.parse_args()
    if a.synthetic:
        synthetic()
        return
    curve.statistic_draws = DRAWS[a.draws]
    curve.crossing = CROSSINGS[a.crossing]
    if a.confidence is not None:  # the interval's (and the stop's) confidence, the fit's default
        curve.fit.__defaults__ = (curve.fit.__defaults__[0], a.confidence)
    objectives = parse_slo(a.slo)
    profile = load_profile(a.profile)
    lo, _, hi = a.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    t0 = time.time()
    true, at = truth(profile, objectives[0], [int(u) for u in a.truth_users.split(",")], a.truth_s, 120.0)
    stat = objectives[0].key
    a.truth_at = at if a.calibration else None
    print(f"truth ({a.truth_s:g} s a level): " + ", ".join(f"{u}: {v:.3g}s" for u, v in at.items()))
    print(f"truth: {stat} crosses {objectives[0].threshold_s:g}s at {true} users ({time.time() - t0:.0f} s)")
    if a.oracle:
        windows = [float(w) for w in a.oracle.split(",")]
        oracle(profile, objectives[0], true, at, windows, seeds, a.step_warmup)
        return
    if a.replay_stops:
        rows = []
        for seed in seeds:
            r = search(profile, objectives, "replay", seed, a)
            rows.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "looks"}), flush=True)
        print(f"\n{a.profile}, {a.slo}, -t {a.run_time:g} s, seeds {a.seeds}: truth {true:.1f} users\n")
        replay_table(rows, true, Replay(None).precision, a.run_time)
        return
    rows = []
    for policy in a.policies.split(","):
        for seed in seeds:
            r = search(profile, objectives, policy, seed, a)
            c = r["crossing"]
            r["covered"] = bool(
                c and c["lower"] is not None and c["upper"] is not None and c["lower"] <= true <= c["upper"]
            )
            r["width"] = (
                (c["upper"] - c["lower"]) / c["users"]
                if c and c["lower"] is not None and c["upper"] is not None
                else None
            )
            r["within"] = bool(c and c["within_precision"])
            r["holds"] = bool(
                c and (c["lower"] is None or c["lower"] <= true) and (c["upper"] is None or true <= c["upper"])
            )
            r["bracket_width"] = (
                None if r["users"] is None or r["missed"] is None else (r["missed"] - r["users"]) / r["users"]
            )
            r["bracket_covers"] = (
                r["users"] is not None and r["missed"] is not None and r["users"] <= true < r["missed"]
            )
            rows.append(r)
            print(json.dumps(r), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"truth": true, "at": at, "rows": rows}, f, indent=1)
    print(f"\n{a.profile}, {a.slo}: truth {true:.1f} users\n")
    print(
        "| policy | seeds | interval covers the truth | holds it (an open end holding) | width (median) | within ±precision (holding the truth) | bracket covers | bracket width (median) | search s (median) | requests (median) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for policy in a.policies.split(","):
        mine = [r for r in rows if r["policy"] == policy]
        widths = [r["width"] for r in mine if r["width"] is not None]
        brackets = [r["bracket_width"] for r in mine if r["bracket_width"] is not None]
        print(
            f"| {policy} | {len(mine)} | {sum(r['covered'] for r in mine)}/{len(mine)} | "
            f"{sum(r['holds'] for r in mine)}/{sum(r['crossing'] is not None for r in mine)} | "
            f"{statistics.median(widths) if widths else float('nan'):.1%} | {sum(r['within'] for r in mine)}/{len(mine)} "
            f"({sum(r['within'] and r['holds'] for r in mine)}) | "
            f"{sum(r['bracket_covers'] for r in mine)}/{len(mine)} | "
            f"{statistics.median(brackets) if brackets else float('nan'):.0%} | {statistics.median(r['search_s'] for r in mine):.0f} | "
            f"{statistics.median(r['requests'] for r in mine):.0f} |"
        )
    if a.calibration:
        calibration_table(rows, true, 8.0)


if __name__ == "__main__":
    main()
