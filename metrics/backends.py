"""summary.json's `backends`: each backend's share of the load against its fair share, which backend
stands out, and when each backend's failures came and how long it took to recover.

The figures are the by_backend blocks (metrics/measure.py `Measure.by`, the grouping of by_class);
this module only compares them. The fair share is 1 / the replicas: those the run spread over
(several --host URLs, each with a row even when it served nothing), or behind a balancer those that
named a reply, or --backend-count when it says more (the others `unseen`, served nothing). The rule
that flags a backend (`RULE`):

  share   its share of the window's requests is more than SHARE_OFF (20 %) off its fair share
          (1 / backends), and further off than NOISE_SD standard deviations of a fair draw of as
          many requests (so 7 of 20 requests is not a skew; 350 of 1,000 is);
  slower  its TTFT p50 or TPOT p50 is more than SLOWER (1.5) times the median of the other
          backends' (each with at least MIN_OK successful requests in the window).

A balancer that pins its connections to one replica shows as a share flag; a slow replica as a
slower flag (and, under least-outstanding, a share flag too: it holds its requests longer).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from metrics.record import NOT_SERVER_FAILURES
from metrics.schema.backends import BackendCheck, BackendShare, Outage
from metrics.schema.figures import Block

SHARE_OFF = 0.20
NOISE_SD = 3.0
SLOWER = 1.5
MIN_OK = 10
RULE = (
    f"share: more than {SHARE_OFF:.0%} off the fair share (1 / backends) and more than {NOISE_SD:g} standard deviations "
    f"of a fair draw; slower: TTFT p50 or TPOT p50 above {SLOWER:g} x the median of the other backends' (each with at "
    f"least {MIN_OK} successful requests)"
)


def backend_check(
    by_backend: dict[str, Block],
    df: pd.DataFrame,
    start: float,
    end: float,
    known: tuple[str, ...] = (),
    count: int | None = None,
) -> BackendCheck:
    """`known`: the backends the run spread over (several --host URLs), each with its row even if
    it served nothing in the window; `count`: the replicas behind a balancer (--backend-count), of
    which those that named no reply are `unseen`. The fair share is 1 / all of them."""
    names = sorted({n for n in by_backend if n} | set(known))  # "" holds the requests no backend was named for
    rows = [figures_row(name, by_backend.get(name)) for name in names]
    ok = {name: b.requests.ok for name, b in by_backend.items()}
    flagged, unseen = judge_backends(rows, ok, count)
    source = "spread" if any("://" in n for n in names) else "header"
    return BackendCheck(source=source, rule=RULE, backends=rows, flagged=flagged, unseen=unseen, outages=outages(df))


def figures_row(name: str, b: Block | None) -> BackendShare:
    """A backend's row before the rule judges it: its figures from its block (None: a replica of
    the spread that no request of the window went to)."""
    if b is None:
        return BackendShare(backend=name, sent=0)
    return BackendShare(
        backend=name,
        sent=b.requests.sent,
        ttft_p50_ms=b.ttft_ms.p50,
        tpot_p50_ms=b.tpot_ms.p50,
        e2e_p50_ms=b.e2e_ms.p50,
        output_tokens_per_s=b.throughput.output_tokens_per_s,
        failed=b.requests.failed,
        by_error=dict(b.requests.by_error),
    )


def judge_backends(rows: list[BackendShare], ok: dict[str, int], count: int | None = None) -> tuple[list[str], int]:
    """The one rule (module doc, `RULE`), summary.json's and the live view's: fills each row's
    `share`, `fair_share`, `share_off` and `flags` from its `sent` and p50s; `ok`: each backend's
    successful requests; `count`: --backend-count. Returns (flagged, unseen)."""
    unseen = max(0, (count or 0) - len(rows))
    total = sum(r.sent for r in rows)
    fair = 1.0 / (len(rows) + unseen) if rows else None
    for row in rows:
        row.fair_share = fair
        row.share = row.sent / total if total else None
        row.share_off = (row.share - fair) / fair if row.share is not None and fair else None
    if len(rows) > 1 or unseen:
        for row in rows:
            row.flags = _flags(row, [r for r in rows if r is not row], ok, total)
    flagged = [r.backend for r in rows if r.flags]
    if unseen:
        flagged.append(f"{unseen} of the {count} replicas (--backend-count) named in no reply")
    return flagged, unseen


def _flags(row: BackendShare, others: list[BackendShare], ok: dict[str, int], total: int) -> list[str]:
    out = []
    fair = row.fair_share
    if row.share is not None and fair and total:
        noise = math.sqrt(fair * (1 - fair) / total)
        if abs(row.share_off) > SHARE_OFF and abs(row.share - fair) > NOISE_SD * noise:
            out.append(f"share {row.share:.1%} of {total} requests against a fair {fair:.1%} ({row.share_off:+.0%})")
    if ok.get(row.backend, 0) >= MIN_OK:
        for metric, key in (("TTFT", "ttft_p50_ms"), ("TPOT", "tpot_p50_ms")):
            mine = getattr(row, key)
            theirs = [getattr(o, key) for o in others if ok.get(o.backend, 0) >= MIN_OK and getattr(o, key) is not None]
            if mine is not None and theirs:
                ref = float(np.median(theirs))
                if ref > 0 and mine > SLOWER * ref:
                    out.append(
                        f"slower: {metric} p50 {mine:,.1f} ms against {ref:,.1f} ms on the others ({mine / ref:.2f}x)"
                    )
    return out


def outages(df: pd.DataFrame) -> list[Outage]:
    """Per backend with server failures (the whole run, not only the window): when its failures
    came and the first success after them."""
    out = []
    failed = ~df["ok"] & (df["error"] != "") & ~df["error"].isin(NOT_SERVER_FAILURES)
    ended = df["wall_send"] + df["e2e_s"].fillna(0.0)
    for name in sorted(set(df.loc[failed, "backend"].tolist())):
        mine = df["backend"] == name
        fails = failed & mine
        first, last = float(ended[fails].min()), float(ended[fails].max())
        after = df.loc[mine & df["ok"] & (df["wall_send"] >= last), "wall_send"]
        back = float(after.min()) if len(after) else None
        out.append(
            Outage(
                backend=name,
                failed=int(fails.sum()),
                by_error={str(k): int(v) for k, v in df.loc[fails, "error"].value_counts().sort_index().items()},
                first_failure=first,
                last_failure=last,
                recovered_at=back,
                recovery_s=None if back is None else back - first,
            )
        )
    return out
