"""summary.json's judgements: the SLO verdict of a set of requests, each load level's verdict with its
evidence (metrics/verdict.py), and the capacity found."""

from __future__ import annotations

from typing import Literal

from metrics.schema.base import Model, Num


class Verdict(Model):
    """One SLO objective judged on a run or a step."""

    objective: str  # as given: "ttft.p95<5s"
    metric: str  # "ttft.p95"
    threshold_ms: float
    value_ms: Num = None
    passed: bool


class Slo(Model):
    passed: bool
    objectives: list[Verdict]


class ObjectiveEvidence(Model):
    """One objective judged on a load level's declared set (metrics/verdict.py)."""

    objective: str  # as given: "ttft.p95<5s"
    metric: str  # "ttft.p95"
    threshold_ms: float
    value_ms: Num = None  # the statistic of the set
    lower_ms: Num = None  # confidence bounds of the statistic (None: too few values for one)
    upper_ms: Num = None
    samples: int  # values it rests on (ITL: pooled gaps), the censored ones among them
    censored: int = 0  # first-token values still waiting at the level's cut: known only to exceed (cut - send)
    state: Literal["met", "missed", "undecided"]


class LevelVerdict(Model):
    """A load level's one verdict: what the live search decided, the table and the report show."""

    state: Literal["met", "missed", "undecided"]
    requests: int  # successful requests of the set
    failed: int
    confidence: float  # of each one-sided bound
    objectives: list[ObjectiveEvidence]
    reason: str = ""


class Capacity(Model):
    slo: str
    users: int | None = None  # the highest level met below the lowest missed; None: none met
    next_failing_users: int | None = None  # the lowest level missed
    samples: int | None = None  # successful requests the `users` verdict rests on
    next_failing_samples: int | None = None
    undecided: list[int] = []  # levels neither met nor missed (too few requests, or too close)
    confidence: Num = None
    plus_minus: Num = None
    total_tokens_per_s: Num = None
    output_tokens_per_s: Num = None
    requests_per_s: Num = None
    sentence: str
