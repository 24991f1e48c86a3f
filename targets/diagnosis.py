"""Each replica's own diagnosis: the knee's diagnosis (metrics/diagnosis.py) made once per backend,
from that backend's records and that replica's own /metrics, never from the gauges of all the
replicas pooled (two replicas' "running" summed, one's full KV cache averaged with the other's
empty one, says nothing about either).

A backend is tied to the --server-metrics URL of the same host and port (`address`); one with no
such URL gets no diagnosis. Each replica is diagnosed at the run's knee: the level the whole run
missed its SLO at (or the highest level), the figures of that level being the replica's share of
it: its own requests' rates, ITL and TTFT, its own server's queue, KV cache and preemptions.

A replica whose limit differs from the others' (one memory-bound while the others reach none, or
another limit) is flagged in summary.json `backends` beside the share and speed flags
(metrics/backends.py): `limit: memory-bound at 24 users; the others: no limit reached`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from metrics.diagnosis import diagnose_levels, of_source
from metrics.measure import Measure, records_frame
from metrics.record import with_all_columns
from metrics.schema.backends import BackendBlock
from targets.backends import address

if TYPE_CHECKING:
    import pandas as pd

    from metrics.schema import Summary

# a diagnosis that names the limit a replica reached (the others: none reached, or cannot say)
LIMITS = ("memory-bound", "scheduler-bound", "prefill-bound", "compute-bound", "front-end-bound")
# what says nothing about a replica's limit, and is left out of the comparison
SILENT = ("unknown", "client inaccurate")


def diagnose_backends(summary: Summary, table: pa.Table, plan, run_start: float, server: pd.DataFrame | None) -> None:
    """Give each backend of `summary.by_backend` whose replica was scraped its own diagnosis (the
    records `table`, the run's step plan `plan` as summary.json's by_step was cut, the scraped
    samples `server` with their `source`), and flag a replica whose limit differs from the others'."""
    from metrics.summary import by_step  # pandas: the process that writes results

    if not summary.by_step or not summary.by_backend or server is None or "source" not in server:
        return
    sources = {address(s): s for s in sorted(set(server["source"].tolist()))}
    table = with_all_columns(table)
    names = table.column("backend").to_numpy(zero_copy_only=False)
    end = summary.window.end
    diagnosed = {}
    for name, block in summary.by_backend.items():
        mine = of_source(server, sources.get(address(name))) if name else None
        if mine is None:
            continue
        rows = table.filter(pa.array(names == name))
        steps = by_step(plan, run_start, end, Measure(records_frame(rows), rows.column("chunk_times")))
        d = diagnose_levels(steps, summary.capacity, mine, summary.client_bound)
        summary.by_backend[name] = BackendBlock.model_validate({**block.model_dump(), "diagnosis": d})
        diagnosed[name] = d
    flags = limit_flags(diagnosed)
    if flags and summary.diagnosis is not None:  # the pooled figures hide it: the run's sentence says so
        each = "; ".join(f"{name} {d.kind}" for name, d in diagnosed.items())
        summary.diagnosis.sentence += (
            f". The replicas' limits differ, each from its own server metrics (summary.json by_backend): {each}"
        )
    if summary.backends is None:
        return
    for backend, flag in flags.items():
        row = next((r for r in summary.backends.backends if r.backend == backend), None)
        if row is not None:
            row.flags = [*row.flags, flag]
            if backend not in summary.backends.flagged:
                summary.backends.flagged.append(backend)


def limit_flags(diagnoses: dict) -> dict[str, str]:
    """backend -> its flag, for each replica that reached a limit the others did not all reach (of
    the replicas whose diagnosis says something: SILENT ones are left out). One replica
    memory-bound and the others at no limit: that one; two replicas at two different limits: both."""
    said = {name: d for name, d in diagnoses.items() if d.kind not in SILENT}
    out = {}
    for name, d in said.items():
        others = [o.kind for n, o in said.items() if n != name]
        if d.kind in LIMITS and others and any(k != d.kind for k in others):
            theirs = ", ".join(sorted(set(others)))
            at = f"{d.rate:g} requests/s" if d.rate is not None else f"{d.users} users"
            out[name] = f"limit: {d.kind} at {at}; the other{'s' if len(others) > 1 else ''}: {theirs}"
    return out
