"""summary.json's judgements: the verdict of a set of requests on the --slo, and the capacity found.

One verdict, one rule (metrics/verdict.py): a load level (`by_step[].verdict`), the whole run
(`slo`), each block (`overall.slo`, `by_class.*.slo`, ...) and the live view's window are all an
`SloVerdict`: met, missed or undecided, each objective with its confidence bounds and its signed
margin to the threshold.
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from metrics.schema.base import Model, Num
from metrics.schema.level_endings import Ending

State = Literal["met", "missed", "undecided"]


def _passed_from_state(data):
    """`passed` is `state == "met"`, whatever was given. A verdict written before the three states
    (a point estimate: `passed` and no `state`) reads as met or missed, without bounds."""
    if isinstance(data, dict):
        if "state" not in data and "passed" in data:
            data = {**data, "state": "met" if data["passed"] else "missed"}
        data = {**data, "passed": data.get("state") == "met"}
    return data


class ObjectiveEvidence(Model):
    """One objective judged on one set of requests (metrics/verdict.py)."""

    objective: str  # as given: "ttft.p95<5s"
    metric: str  # "ttft.p95"
    threshold_ms: float
    value_ms: Num = None  # the statistic of the set (a percentile: an order statistic)
    lower_ms: Num = None  # confidence bounds of the statistic (None: too few values for one)
    upper_ms: Num = None
    samples: int = 0  # values it rests on (ITL: pooled gaps), the censored ones among them
    censored: int = 0  # first-token values still waiting at the level's cut: known only to exceed (cut - send)
    state: State
    # (threshold - the deciding bound) / threshold: > 0 met (room), <= 0 missed (excess), 0 undecided;
    # None without a value or with an infinite bound (metrics/verdict.py)
    margin: Num = None
    passed: bool = False  # state == "met": for a reader of a two-state verdict

    _passed = model_validator(mode="before")(_passed_from_state)


class SloVerdict(Model):
    """The one verdict of a set of requests: a load level's (what the live search decided, the table
    and the report show), the whole run's, a block's, the live window's."""

    state: State
    requests: int = 0  # successful requests of the set
    failed: int = 0
    confidence: Num = None  # of each one-sided bound
    objectives: list[ObjectiveEvidence]
    reason: str = ""
    margin: Num = None  # the binding objective's margin (metrics/verdict.py); None: no value to measure it on
    passed: bool = False  # state == "met"

    _passed = model_validator(mode="before")(_passed_from_state)


class SearchLevel(Model):
    """One level of a capacity search, in the order tried, and why it ended (shapes/capacity.py)."""

    users: int
    state: State
    margin: Num = None  # its verdict's signed margin (metrics/verdict.py)
    ended: Ending  # why it ended (metrics/schema/level_endings.py)
    seconds: Num = None  # from its change to its end
    warmup_s: Num = None  # its warm-up (an adaptive search's lasts until the requests before it ended)
    looks: int = 1  # times its verdict was looked at (a fixed hold: its steps)
    requests: int = 0
    binding: str | None = None  # the objective its margin is
    rate: Num = None  # a search in requests/s: the level's rate (`users` is its in-flight cap)


class Crossing(Model):
    """Where the curve through an adaptive search's levels crosses the SLO (shapes/search/curve.py):
    the estimate and its interval (None: open on that side), interpolated between two levels."""

    users: float
    lower: Num = None
    upper: Num = None
    confidence: float
    between: list[int | float | None]  # the two levels either side of the crossing (a search in requests/s: rates)
    within_precision: bool  # both ends within ±precision of `users`, the two levels close enough


class Capacity(Model):
    slo: str
    # what the levels were: users (a closed loop) or rate (open-loop requests/s: --capacity-unit rate,
    # --rate-steps), whose answer is `rate` and `next_failing_rate`, and `users` stays None
    unit: Literal["users", "rate"] = "users"
    users: int | None = None  # the highest level met below the lowest missed; None: none met
    next_failing_users: int | None = None  # the lowest level missed
    rate: Num = None  # unit rate: the highest rate met below the lowest missed, requests/s
    next_failing_rate: Num = None  # unit rate: the lowest rate missed
    undecided_rates: list[float] = []  # unit rate: the rates neither met nor missed
    samples: int | None = None  # successful requests the `users` verdict rests on
    next_failing_samples: int | None = None
    undecided: list[int] = []  # levels neither met nor missed (too few requests, or too close)
    confidence: Num = None
    plus_minus: Num = None
    total_tokens_per_s: Num = None
    output_tokens_per_s: Num = None
    requests_per_s: Num = None
    # the interval the capacity lies in: from `users` (met) up to below `next_failing_users` (missed),
    # at interval_confidence (each end's verdict wrong at most 1 - its confidence over its looks)
    interval_confidence: Num = None
    width: Num = None  # (next_failing_users - users) / users (unit rate: of the rates)
    binding: str | None = None  # the objective that sets the answer: missed at the lowest missed level
    cliff: bool = False  # met with room, and the next level tried above far over (metrics/capacity.py)
    policy: str | None = None  # --capacity-policy of a capacity search
    precision: Num = None  # its target width (the adaptive policy's --capacity-precision)
    precision_reached: bool | None = None  # width within precision (None: no interval)
    timed_out: bool = False  # -t ended the search before its policy did
    # the run ended before the search did: the web UI's STOP, a signal, the all-failed stop, a lost worker
    stopped: bool = False
    levels: list[SearchLevel] = []  # a capacity search's levels in the order tried
    crossing: Crossing | None = None  # an adaptive search's capacity from the curve through its levels
    # what the search said before it started: what its first level needs to be decided, how high it may go
    precheck: str | None = None
    sentence: str
