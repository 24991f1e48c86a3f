"""summary.json's `backends`: how the load spread over the run's backends (several --host URLs, or
one load balancer's --backend-header) and which backend stood out; the figures of each are
`by_backend`, blocks like by_class's (metrics/backends.py computes this section)."""

from __future__ import annotations

from metrics.schema.base import Model, Num
from metrics.schema.figures import Block
from metrics.schema.server_side import KneeDiagnosis


class BackendBlock(Block):
    """A backend's block in `by_backend`: a class's block (metrics/measure.py), and in a run with
    load levels and --server-metrics of that replica, the replica's own diagnosis at the run's knee
    (targets/diagnosis.py)."""

    diagnosis: KneeDiagnosis | None = None


class BackendShare(Model):
    """One backend's share of the load and its headline figures (from its by_backend block)."""

    backend: str
    sent: int  # requests sent in the window
    share: Num = None  # of the window's requests
    fair_share: Num = None  # 1 / the number of backends
    share_off: Num = None  # (share - fair_share) / fair_share: +0.3 = 30 % more than its fair share
    ttft_p50_ms: Num = None
    tpot_p50_ms: Num = None
    e2e_p50_ms: Num = None
    output_tokens_per_s: Num = None
    failed: int = 0
    by_error: dict[str, int] = {}
    flags: list[str] = []  # why it stands out, each with its figures (the rule: BackendCheck.rule)


class Outage(Model):
    """A backend's failures (server failures: not stopped or cancelled) over the whole run: when the
    first and the last ended, and the first success after the last, the recovery."""

    backend: str
    failed: int
    by_error: dict[str, int]
    first_failure: float  # wall-clock seconds: the first failure ended (its send plus its time to fail)
    last_failure: float
    recovered_at: Num = None  # the first success sent after the last failure ended; None: none came
    recovery_s: Num = None  # from the first failure to that success


class BackendCheck(Model):
    source: str  # "spread": the suite picked each backend (--balance); "header": a balancer said (--backend-header)
    rule: str  # the flagging rule, in words
    backends: list[BackendShare]
    flagged: list[str] = []  # the backends with a flag (and a line for replicas behind a balancer that named no reply)
    unseen: int = 0  # replicas of --backend-count that no reply named: each served nothing (share 0)
    outages: list[Outage] = []
