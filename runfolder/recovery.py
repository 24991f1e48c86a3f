"""A run that did not finish: a results folder whose writer was killed (or whose disk stayed
full at the end), made readable again from the part files it flushed and the records its workers
kept (`python -m reports build FOLDER` calls `recover`).
"""

from __future__ import annotations

import glob
import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import ValidationError

from core.files import write_json
from metrics.record import arrow_schema
from runfolder.layout import PARTS, RECORDS, RUN, SUMMARY, UNSHIPPED
from runfolder.records import part_files, read_records, records_check
from runfolder.run_info import RunInfo


def _read_run(path: str) -> RunInfo | None:
    """The folder's run.json; None when it has none that can be read."""
    try:
        with open(os.path.join(path, RUN), encoding="utf-8") as f:
            return RunInfo.model_validate(json.load(f))
    except (OSError, json.JSONDecodeError, ValidationError):
        return None


def _unshipped_files(path: str) -> list[str]:
    return sorted(glob.glob(os.path.join(path, "worker-*" + UNSHIPPED)))


def _said_complete(path: str) -> bool:
    """summary.json exists and says the run is complete."""
    try:
        with open(os.path.join(path, SUMMARY), encoding="utf-8") as f:
            return json.load(f).get("complete") is not False
    except (OSError, ValueError, AttributeError):
        return False


def needs_recovery(path: str) -> bool:
    """A results folder with parts on disk whose writer stopped before the end (no summary.json) or
    whose summary says it is incomplete (the disk was full at the end: the parts could not all be
    written or joined), or one a worker's file of unshipped records was copied into and not yet
    merged."""
    if part_files(os.path.join(path, PARTS)) and not _said_complete(path):
        return True
    run = _read_run(path)
    merged = set(run.merged_unshipped) if run is not None else set()
    return any(os.path.basename(p) not in merged for p in _unshipped_files(path))


def recover(path: str) -> dict:
    """Make a readable run of a folder whose writer was killed: requests.parquet from every part
    flushed (or the requests.parquet there is), with every `worker-*.unshipped.parquet` a worker
    kept and that was copied into the folder, each request once; summary.json and run.json marked
    `complete: false` with the reason. Returns the summary."""
    from metrics.summary import summarize

    run = _read_run(path)
    known = run or RunInfo()
    parts_path, records = os.path.join(path, PARTS), os.path.join(path, RECORDS)
    parts = part_files(parts_path)
    if os.path.isdir(parts_path) or not os.path.isfile(records):
        tables = [read_records(p) for p in parts]
        source = (
            f"the {len(parts)} part files on disk"
            if known.ended_at
            # the writer ended, the disk full
            else f"{len(parts)} part files flushed before the writer stopped (killed or crashed; records of its last seconds are missing)"
        )
    else:
        tables = [read_records(records)]
        source = RECORDS
    unshipped = _unshipped_files(path)
    tables += [read_records(p) for p in unshipped]
    table = pa.concat_tables(tables) if tables else arrow_schema().empty_table()
    if unshipped:  # a batch may be both on the master's disk and on the worker's: keep it once
        _, first = np.unique(table.column("request_id").to_numpy(zero_copy_only=False), return_index=True)
        table = table.take(pa.array(np.sort(first)))
    tmp = records + ".tmp"
    pq.write_table(table, tmp, compression="zstd", write_page_checksum=True)
    os.replace(tmp, records)
    shutil.rmtree(parts_path, ignore_errors=True)

    started = known.started_at
    wall = table.column("wall_send").to_numpy(zero_copy_only=False)
    start = float(started) + known.plan.warmup_s if started else (float(wall.min()) if len(wall) else 0.0)
    end = float(wall.max()) if len(wall) else start
    earlier = known.reason or ""
    reason = earlier if source == RECORDS and earlier.startswith("recovered") else f"recovered from {source}"
    if unshipped:
        reason += f", with {len(unshipped)} worker file(s) of records its master never acknowledged"
    if earlier and not earlier.startswith("recovered"):  # the writer's own (interrupted, lost worker)
        reason = f"{earlier}; {reason}"
    missing = {"records_not_written": {"records": known.records_not_written}} if known.records_not_written else {}
    summary = summarize(table, start, max(start, end)).with_sections(
        run_id=known.run_id or os.path.basename(path), complete=False, reason=reason, **missing
    )
    write_json(os.path.join(path, SUMMARY), summary.model_dump())
    if run is not None:
        run.complete, run.reason, run.records = False, reason, table.num_rows
        run.files = {RECORDS: records_check(records, table.num_rows)}
        run.merged_unshipped = [os.path.basename(p) for p in unshipped]
        write_json(os.path.join(path, RUN), run.dump())
    return summary.model_dump()
