"""The results folder, written by one process only (the master, or the single local process).

results/<run-id>/
  requests.parquet   one row per request (metrics/record.py ARROW_SCHEMA), streamed in row groups
  run.json           options without secrets, package versions, workload hash, start/end, workers
  summary.json       metrics/summary.py

Records are appended as they arrive and flushed to Parquet row groups, so a long run never holds
all its records in memory.
"""

from __future__ import annotations

import os
import platform
import secrets
import sys
import time
from datetime import datetime, timezone
from importlib import metadata

import gevent
import gevent.event
import pyarrow as pa
import pyarrow.parquet as pq

from core.files import write_json
from metrics.record import ARROW_SCHEMA, RequestRecord, rows_to_table

FLUSH_ROWS = 5000
SLICE_ROWS = 250
FLUSH_SECONDS = 5.0
PACKAGES = ("locust", "geventhttpclient", "gevent", "pyarrow", "pandas", "numpy", "transformers", "orjson")


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def package_versions() -> dict:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


class ResultsWriter:
    """Owns one results folder: appends records, writes run.json and, at the end, summary.json."""

    def __init__(self, results_dir: str, run_id: str, run_info: dict):
        self.run_id = run_id
        self.path = os.path.join(results_dir, run_id)
        os.makedirs(self.path, exist_ok=True)
        self.records_path = os.path.join(self.path, "requests.parquet")
        self.run_info = {"run_id": run_id, "started_at": time.time(), "argv": _argv(), "versions": package_versions(), **run_info}
        self._pending: list[tuple] = []
        self._writer = pq.ParquetWriter(self.records_path, ARROW_SCHEMA, compression="zstd")
        # pyarrow initialises its conversion machinery on first use (~0.3 s): do it now, before
        # load, not in the middle of a local run where it would stall every stream at once
        rows_to_table([RequestRecord("warm-up", "", "", "", 0, 0, chunk_times=[0.0], chunk_tokens=[1]).as_row()])
        self.rows_written = 0
        self.closed = False
        self.on_rows = None  # called with every batch of rows as it arrives
        self.summary = None  # metrics.schema.Summary, once finish() has written summary.json
        write_json(os.path.join(self.path, "run.json"), self.run_info)
        # Row groups are written by a greenlet of the writer's own: whoever hands rows over (the
        # finisher of a local run, the master's message handler) never blocks on a write, and a
        # greenlet killed as the run stops cannot take rows with it or leave a write half done.
        self._wake = gevent.event.Event()
        self._stopping = False
        self._flusher = gevent.spawn(self._flush_loop)

    def add_rows(self, rows: list) -> None:
        self._pending.extend(rows)
        if self.on_rows is not None:
            self.on_rows(rows)
        if len(self._pending) >= FLUSH_ROWS:
            self._wake.set()

    def _flush_loop(self) -> None:
        while not self._stopping:
            self._wake.wait(FLUSH_SECONDS)
            self._wake.clear()
            self._flush()

    def _flush(self) -> None:
        """Write pending rows as one row group. In a local run the users share this process, and
        nothing here may stall their streams: the conversion runs in slices with a yield to the
        event loop between them, and compressing and writing the row group (30-70 ms per 1,000
        records of 256 tokens) runs in an OS thread, pyarrow releasing the GIL meanwhile."""
        if self._pending and not self.closed:
            rows, self._pending = self._pending, []
            slices = []
            for i in range(0, len(rows), SLICE_ROWS):
                slices.append(rows_to_table(rows[i : i + SLICE_ROWS]))
                gevent.sleep(0)
            gevent.get_hub().threadpool.apply(self._writer.write_table, (pa.concat_tables(slices),))
            self.rows_written += len(rows)

    def finish(self, window_start: float, window_end: float, extra: dict, complete: bool = True, **summary_args) -> dict:
        """Close the records file, write summary.json and the final run.json; return the summary
        in its JSON form (the typed one is `self.summary`, a metrics.schema.Summary).
        `summary_args` go to metrics.summary.summarize (run_start, plan, objectives, target_rate);
        `extra` holds the plugins' sections."""
        from metrics.summary import summarize  # pandas: only the writing process, only at the end

        self._stopping = True
        self._wake.set()
        self._flusher.join()  # a row group being written ends first
        self._flush()  # the rest
        if not self.closed:
            self._writer.close()
            self.closed = True
        table = pq.read_table(self.records_path)
        summary = summarize(table, window_start, window_end, **summary_args)
        self.summary = summary.with_sections(run_id=self.run_id, complete=complete, **extra)
        write_json(os.path.join(self.path, "summary.json"), self.summary.model_dump())
        self.run_info.update(ended_at=time.time(), complete=complete, records=self.rows_written)
        write_json(os.path.join(self.path, "run.json"), self.run_info)
        return self.summary.model_dump()


def _argv() -> list[str]:
    """The command line with secret values blanked (an API key may be given as a flag, also
    abbreviated as argparse allows: --api-k KEY)."""
    out, hide = [], False
    for arg in sys.argv:
        flag, eq, _ = arg.partition("=")
        secret = len(flag) > 2 and "--api-key".startswith(flag)
        if hide:
            out.append("***")
            hide = False
        elif secret and eq:
            out.append(f"{flag}=***")
        else:
            out.append(arg)
            hide = secret
    return out
