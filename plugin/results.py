"""The results folder, written by one process only (the master, or the single local process).

results/<run-id>/
  requests.parquet   one row per request (metrics/record.py arrow_schema()), written at the end
  requests.parts/    during the run: one closed Parquet file per flush (every 5 s, or 5,000 rows, or
                     ROOM_BYTES / 2 of rows)
  run.json           options without secrets, package versions, workload hash, start/end, workers
  summary.json       metrics/summary.py, written at the end
  .lock              the writing run holds an OS lock on it (runfolder/ownership.py), released when it ends

Every flush is a whole Parquet file of its own, written under a temporary name and renamed, so
whatever was flushed stays readable when the process dies (kill -9, out of memory, a power cut
of the process): `recover(folder)` (runfolder/recovery.py; `python -m reports build FOLDER` calls it) turns the parts
into requests.parquet and a summary.json marked `complete: false`. At a clean end the parts are
joined into requests.parquet (row group by row group: never all records in memory) and removed.

While writes succeed, nothing is dropped: whoever hands rows over in the users' process (the
finisher of a local run) waits while more than ROOM_BYTES of rows wait to be written
(`wait_for_room`), and a flush starts at half of it.

A write that fails (disk full, permissions) is logged at once as an error; the rows stay in memory
and every later flush tries again, so that what is held is written once space comes back. Memory
is bounded: at most LLM_RESULTS_UNWRITTEN_LIMIT (runfolder/unwritten.py: 512MB, by `row_bytes`) of records
wait to be written; records handed over beyond it are dropped and counted, and the end of the run
says exactly how many. If records still cannot be written at the end, or any were dropped, the
summary is computed from what is on disk plus what is in memory, the console table is printed from
it, and the run exits with exit_codes.RESULTS_NOT_WRITTEN.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import time
from typing import TYPE_CHECKING

import gevent
import gevent.event

from core.files import write_json
from core.sizes import format_size
from metrics.record import RequestRecord, arrow_schema, rows_to_table
from plugin import exit_codes
from runfolder.layout import PARTS, RECORDS, RUN, SUMMARY
from runfolder.ownership import claim_folder, unlock_folder
from runfolder.provenance import package_versions, public_argv
from runfolder.records import join_parts, os_reason, read_parts, records_check
from runfolder.run_info import RunInfo
from runfolder.unwritten import UNWRITTEN_LIMIT_ENV, row_bytes, unwritten_limit

if TYPE_CHECKING:  # pyarrow loads with the writer's first table (metrics/record.py `arrow_schema`)
    import pyarrow as pa

log = logging.getLogger("llm")

FLUSH_ROWS = 5000
ROOM_BYTES = 64 << 20  # rows waiting, by `row_bytes`: while writing works, whoever hands rows over waits
# above it (`wait_for_room`; half the unwritten limit when that is lower), and a flush starts at half
SLICE_ROWS = 250
FLUSH_SECONDS = 5.0
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a smaller file may still fit


class ResultsWriter:
    """Owns one results folder: appends records, writes run.json (`info`, completed at the end) and,
    at the end, summary.json."""

    def __init__(self, results_dir: str, run_id: str, info: RunInfo, overwrite: bool = False):
        self.run_id = run_id
        self.unwritten_limit = unwritten_limit()
        self.room_bytes = min(ROOM_BYTES, self.unwritten_limit // 2)  # rows handed over wait above it (wait_for_room)
        self.path = claim_folder(results_dir, run_id, overwrite)
        self.records_path = os.path.join(self.path, RECORDS)
        self.parts_path = os.path.join(self.path, PARTS)
        os.makedirs(self.parts_path, exist_ok=True)
        self.info = info.model_copy(
            update={
                "run_id": run_id,
                "started_at": time.time(),
                "argv": info.argv or public_argv(),
                "versions": {**info.versions, **package_versions()},
            }
        )
        self._pending: list[tuple] = []
        self._written_callbacks: list = []  # called once the rows handed over with them are on disk
        self._pending_bytes = 0  # row_bytes of _pending
        self._flushing_bytes = 0  # row_bytes of the rows a flush is writing now
        self.rows_dropped = 0  # handed over while unwritten_limit was reached: lost, counted
        self.rows_held = 0  # in memory at the end, never written (the disk stayed full)
        self.unjoined: str | None = None  # why requests.parquet could not be joined from the parts
        self._dropped_why: str | None = None  # the write failure when the first was dropped (or the next one)
        self._parts = 0
        self._tag = secrets.token_hex(2)  # part names of this writer
        # pyarrow initialises its conversion machinery on first use (~0.3 s): do it now, before
        # load, not in the middle of a local run where it would stall every stream at once
        rows_to_table([RequestRecord("warm-up", "", "", "", 0, 0, chunk_times=[0.0], chunk_tokens=[1]).as_row()])
        self.rows_written = 0
        self.closed = False
        self.on_rows = None  # called with every batch of rows as it arrives
        self.write_error: str | None = None  # the last write that failed; None once one succeeds again
        self.not_written: list[str] = []  # at the end: what could not be written
        write_json(os.path.join(self.path, RUN), self.info.dump())
        # Parts are written by a greenlet of the writer's own: whoever hands rows over (the
        # finisher of a local run, the master's message handler) never blocks on a write, and a
        # greenlet killed as the run stops cannot take rows with it or leave a write half done.
        self._wake = gevent.event.Event()
        self._flushed = gevent.event.Event()  # pulsed after every flush, written or not (wait_for_room)
        self._stopping = False
        self._flusher = gevent.spawn(self._flush_loop)

    def add_rows(self, rows: list, on_written=None) -> None:
        """Hand rows over; `on_written()` is called once they are on disk (the master acknowledges
        a worker's batch only then, so a batch lost with the master is still on the worker).
        Rows that would take the unwritten ones past `unwritten_limit` are dropped and counted; a
        batch that lost any is never acknowledged (its worker keeps it, as for a lost master)."""
        held = self._pending_bytes + self._flushing_bytes
        kept = 0
        for row in rows:
            size = row_bytes(row)
            if held + size > self.unwritten_limit:
                break
            held += size
            kept += 1
        self._pending.extend(rows if kept == len(rows) else rows[:kept])
        self._pending_bytes = held - self._flushing_bytes
        if kept < len(rows):
            self._dropped(len(rows) - kept)
        elif on_written is not None:
            self._written_callbacks.append(on_written)
        if self.on_rows is not None:
            self.on_rows(rows)
        if len(self._pending) >= FLUSH_ROWS or self._pending_bytes >= self.room_bytes // 2:
            self._wake.set()

    def wait_for_room(self) -> None:
        """Backpressure, for a writer in the same process as the users: while writes succeed, wait
        while more than ROOM_BYTES of rows wait to be written (a flush is asked for at once). No
        record is dropped for writing that did not keep up. While writes fail (a full disk) it does
        not wait: rows are held up to the unwritten limit, then dropped and counted."""
        while (
            self.write_error is None
            and not self.closed
            and not self._stopping
            and not self._flusher.dead
            and self._pending_bytes + self._flushing_bytes > self.room_bytes
        ):
            self._wake.set()
            self._flushed.wait(1.0)

    @property
    def rows_in_memory(self) -> int:
        return len(self._pending)

    def _dropped(self, n: int) -> None:
        if not self.rows_dropped:
            self._dropped_why = self.write_error
            log.error(
                "results: %s of records wait to be written (%s), the most kept in memory (%s); records beyond it "
                "are dropped and counted, and the run exits %d",
                format_size(self.unwritten_limit),
                self.write_error or "writing has not kept up",
                UNWRITTEN_LIMIT_ENV,
                exit_codes.RESULTS_NOT_WRITTEN,
            )
        self.rows_dropped += n

    @property
    def dropped_why(self) -> str:
        """Why records were dropped: the write failure then, or the next one (the limit was reached
        before a flush found the disk full), or writing that did not keep up with the records."""
        return self._dropped_why or "writing had not kept up"

    def _flush_loop(self) -> None:
        while not self._stopping:
            self._wake.wait(FLUSH_SECONDS)
            self._wake.clear()
            try:
                self._flush()
            finally:  # wake those waiting for room (a fresh event for the next flush)
                flushed, self._flushed = self._flushed, gevent.event.Event()
                flushed.set()

    def _flush(self) -> None:
        """Write pending rows as part files. In a local run the users share this process, and
        nothing here may stall their streams: the conversion runs in slices with a yield to the
        event loop between them, and compressing and writing (30-70 ms per 1,000 records of 256
        tokens) runs in an OS thread, pyarrow releasing the GIL meanwhile. On a full disk the rows
        go out in halves, and halves of those, as far as they fit (`_write_rows`); what is not
        written is kept, with the callbacks, for the next flush."""
        if not self._pending or self.closed:
            return
        import pyarrow as pa

        rows, self._pending = self._pending, []
        callbacks, self._written_callbacks = self._written_callbacks, []
        self._flushing_bytes, self._pending_bytes = self._pending_bytes, 0
        try:
            slices = []
            for i in range(0, len(rows), SLICE_ROWS):
                slices.append(rows_to_table(rows[i : i + SLICE_ROWS]))
                gevent.sleep(0)
            written, error = self._write_rows(pa.concat_tables(slices))
        finally:
            self._flushing_bytes = 0
        self.rows_written += written
        if error is not None:
            rest = rows[written:]
            self._pending[:0] = rest
            self._written_callbacks[:0] = callbacks  # called once every row handed over with them is on disk
            self._pending_bytes += sum(map(row_bytes, rest))
            if written:
                log.warning(
                    "results: %d records that were kept in memory are on disk, %d still wait", written, len(rest)
                )
            self._write_failed(error)
            return
        if self.write_error is not None:
            log.warning("results: writing records again; %d records that were kept in memory are on disk", len(rows))
            self.write_error = None
        for callback in callbacks:
            callback()

    def _write_rows(self, table: pa.Table) -> tuple[int, OSError | None]:
        """`table` as one part file or, when the disk has no room for it, as halves (recursively)
        that fit: (the rows written, from the first; the failure that stopped the rest, or None)."""
        name = os.path.join(self.parts_path, f"part-{self._parts + 1:06d}-{self._tag}.parquet")
        error = gevent.get_hub().threadpool.apply(self._write_part, (table, name))
        if error is None:
            self._parts += 1
            return table.num_rows, None
        if table.num_rows < 2 or error.errno not in NO_ROOM:
            return 0, error
        half = table.num_rows // 2
        written, error = self._write_rows(table.slice(0, half))
        if error is not None:
            return written, error
        rest, error = self._write_rows(table.slice(half))
        return written + rest, error

    @staticmethod
    def _write_part(table: pa.Table, path: str) -> OSError | None:
        """One part file, whole or not at all: written under a temporary name, then renamed.
        A failure is returned, not raised: the thread pool would print a raised one's traceback."""
        import pyarrow.parquet as pq

        tmp = path + ".tmp"
        try:
            pq.write_table(table, tmp, compression="zstd", write_page_checksum=True)
            os.replace(tmp, path)
        except OSError as e:
            try:
                os.remove(tmp)
            except OSError:
                pass
            return e
        return None

    def _write_failed(self, e: OSError) -> None:
        text = os_reason(e)
        if text != self.write_error:  # said once per kind of failure, at once
            log.error(
                "results: cannot write records to %s (%s); %d records kept in memory (up to %s, %s; beyond it "
                "records are dropped and counted), tried again every %gs; if they cannot be written by the end, the "
                "console table comes from memory and the run exits %d",
                self.parts_path,
                text,
                len(self._pending),
                format_size(self.unwritten_limit),
                UNWRITTEN_LIMIT_ENV,
                FLUSH_SECONDS,
                exit_codes.RESULTS_NOT_WRITTEN,
            )
        self.write_error = text
        if self.rows_dropped and self._dropped_why is None:
            self._dropped_why = text

    # -- the end of the run --------------------------------------------------------------------

    def close_records(self) -> pa.Table:
        """Write what is pending, join the parts into requests.parquet; return every record (from
        disk, or from disk and memory when the records could not all be written)."""
        import pyarrow as pa

        self._stopping = True
        self._wake.set()
        self._flusher.join()  # a part being written ends first
        self._flush()  # the rest
        self.closed = True
        beyond = f"beyond the {format_size(self.unwritten_limit)} held in memory ({UNWRITTEN_LIMIT_ENV})"
        if self._pending:
            held = self.rows_held = len(self._pending)
            if self.rows_dropped:
                self.not_written.append(
                    f"{held + self.rows_dropped} records ({self.write_error}; {held} held in memory are "
                    f"in the table, {self.rows_dropped} dropped {beyond} are lost, in no table or file)"
                )
            else:
                self.not_written.append(f"{held} records ({self.write_error})")
            memory = rows_to_table(self._pending)
            return pa.concat_tables([*read_parts(self.parts_path), memory]) if self._parts else memory
        if self.rows_dropped:  # the disk came back: what was held is written, the dropped are not
            self.not_written.append(
                f"{self.rows_dropped} records ({self.dropped_why}; dropped {beyond}: lost, in no table or file)"
            )
        try:
            table = join_parts(self.parts_path, self.records_path)
            self.info.files = {RECORDS: records_check(self.records_path, table.num_rows)}
        except OSError as e:
            self.unjoined = f"{RECORDS} could not be written ({os_reason(e)}); the records are in {PARTS}/"
            self.not_written.append(f"{RECORDS} ({os_reason(e)}; the records are in {self.parts_path})")
            return pa.concat_tables(read_parts(self.parts_path)) if self._parts else arrow_schema().empty_table()
        return table

    def write_summary(self, summary, complete: bool, reason: str | None) -> None:
        """summary.json and the final run.json; a failure is noted in `not_written`, not raised.
        Any record that is not in the results on disk (held in memory when the disk stayed full,
        dropped past the memory limit) makes both say `complete: false` and how many (as does a
        requests.parquet that could not be joined from its parts: `python -m reports build` joins
        them)."""
        missing = self.rows_held + self.rows_dropped
        if missing or self.unjoined:
            why = []
            if self.rows_held:
                why.append(f"{self.rows_held} records held in memory could not be written ({self.write_error})")
            if self.rows_dropped:
                why.append(f"{self.rows_dropped} records dropped while they could not be written ({self.dropped_why})")
            if self.unjoined:
                why.append(self.unjoined)
            complete, reason = False, "; ".join(filter(None, (reason, *why)))
            sections = {
                "complete": False,
                "reason": reason,
                "records_not_written": {"records": missing, "held": self.rows_held, "dropped": self.rows_dropped},
            }
            if self.rows_dropped:
                sections["records_dropped"] = {
                    "records": self.rows_dropped,
                    "limit_bytes": self.unwritten_limit,
                    "reason": self.dropped_why,
                }
                self.info.records_dropped = self.rows_dropped
            summary = summary.with_sections(**sections)
            self.info.records_not_written = missing
        info = self.info
        info.ended_at, info.complete, info.reason, info.records = time.time(), complete, reason, self.rows_written
        for name, data in ((SUMMARY, summary.model_dump()), (RUN, info.dump())):
            try:
                write_json(os.path.join(self.path, name), data)
            except OSError as e:
                self.not_written.append(f"{name} ({os_reason(e)})")
        unlock_folder(self.path)  # the run's writing is done: the folder may be read, recovered or replaced
