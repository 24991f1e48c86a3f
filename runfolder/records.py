"""The records' files in a results folder: the part files flushed during a run, joined at its end
into requests.parquet, read back with their checksums verified, and a worker's file of records its
lost master never acknowledged.
"""

from __future__ import annotations

import glob
import os
import shutil
from typing import TYPE_CHECKING

from core.files import file_digest
from metrics.record import arrow_schema, rows_to_table
from runfolder.layout import UNSHIPPED
from runfolder.run_info import FileCheck

if TYPE_CHECKING:  # pyarrow loads at first use (metrics/record.py `arrow_schema`)
    import pyarrow as pa


def os_reason(e: OSError) -> str:
    """An OSError's reason in a few words ("No space left on device"), pyarrow's included."""
    return os.strerror(e.errno) if e.errno else (e.strerror or str(e))


def part_files(parts_path: str) -> list[str]:
    return sorted(glob.glob(os.path.join(parts_path, "part-*.parquet")))


def read_records(path: str) -> pa.Table:
    """A records file, its pages' checksums verified (a damaged page is an error, not values)."""
    import pyarrow.parquet as pq

    return pq.read_table(path, schema=arrow_schema(), page_checksum_verification=True)


def read_parts(parts_path: str) -> list[pa.Table]:
    return [read_records(p) for p in part_files(parts_path)]


def records_check(path: str, rows: int) -> FileCheck:
    """What run.json records of requests.parquet (`files`): its rows, size and SHA-256, checked by
    every reader (runfolder/reading.py) before it reads a value."""
    return FileCheck(rows=rows, **file_digest(path))


def join_parts(parts_path: str, records_path: str) -> pa.Table:
    """The part files, in order, as one requests.parquet (a row group per part), written under a
    temporary name and renamed; the parts are removed once it is in place. Returns the records
    (as read from the parts, their checksums verified: what the file holds, not read again)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = records_path + ".tmp"
    tables = []
    try:
        with pq.ParquetWriter(tmp, arrow_schema(), compression="zstd", write_page_checksum=True) as writer:
            for part in part_files(parts_path):
                table = read_records(part)
                writer.write_table(table)
                tables.append(table)
        os.replace(tmp, records_path)
    except OSError:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    shutil.rmtree(parts_path, ignore_errors=True)
    return pa.concat_tables(tables) if tables else arrow_schema().empty_table()


def write_unshipped(folder: str, name: str, rows: list) -> str:
    """A worker's records that no master acknowledged, in `folder/<name>.unshipped.parquet`."""
    import pyarrow.parquet as pq

    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name + UNSHIPPED)
    tmp = path + ".tmp"
    pq.write_table(
        rows_to_table(rows) if rows else arrow_schema().empty_table(), tmp, compression="zstd", write_page_checksum=True
    )
    os.replace(tmp, path)
    return path
