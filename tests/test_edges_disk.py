"""A disk that stays full: the records that cannot be written are held in memory up to
LLM_RESULTS_UNWRITTEN_LIMIT, those beyond it are dropped and counted, the end of the run says exactly
how many were lost and exits 5; writes are tried again, so what is held is written when space comes
back. A tmpfs of 2 MB filled to its last byte is the full disk (tests/test_edges_results.py)."""

from __future__ import annotations

import glob
import json
import os
import re
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from core.errors import InputError
from metrics.record import RequestRecord
from metrics.summary import summarize
from plugin import exit_codes
from plugin.results import ResultsWriter
from runfolder import ownership as results_folder
from runfolder import unwritten as results_memory
from runfolder.run_info import RunInfo
from runfolder.unwritten import row_bytes
from tests.edges import fill, record_ids, reports, run_on_a_full_disk
from tests.test_edges_results import LOAD, small_disk  # noqa: F401  small_disk: the tmpfs fixture
from tests.test_results_writer import rows

pytestmark = pytest.mark.process

HELD = 10  # the limit, in records of rows(): what the tests let the writer hold


def limited_writer(folder, monkeypatch) -> ResultsWriter:
    monkeypatch.setenv(results_memory.UNWRITTEN_LIMIT_ENV, str(HELD * row_bytes(rows(1)[0])))
    return ResultsWriter(str(folder), "run", RunInfo())


def test_records_beyond_the_limit_are_dropped_and_counted_exactly_while_the_disk_stays_full(small_disk, monkeypatch):  # noqa: F811
    writer = limited_writer(small_disk, monkeypatch)
    fill(small_disk)
    acked = []
    writer.add_rows(rows(4, 0), on_written=lambda: acked.append("a"))
    writer._flush()  # refused: the 4 stay in memory
    assert writer.write_error == "No space left on device" and writer.rows_in_memory == 4
    writer.add_rows(rows(5, 4), on_written=lambda: acked.append("b"))  # 9 held
    writer.add_rows(rows(3, 9), on_written=lambda: acked.append("c"))  # 1 kept, 2 dropped: never acknowledged
    writer.add_rows(rows(7, 12), on_written=lambda: acked.append("d"))  # all dropped
    for _ in range(3):
        writer._flush()
        assert writer.rows_in_memory == HELD and writer.rows_dropped == 9
    table = writer.close_records()
    assert sorted(table.column("request_id").to_pylist()) == sorted(f"r{i}" for i in range(HELD)), (
        "the held ones, from memory"
    )
    assert acked == [] and writer.rows_written == 0
    limit = HELD * row_bytes(rows(1)[0])
    assert writer.not_written == [
        f"19 records (No space left on device; 10 held in memory are in the table, 9 dropped beyond the {limit} bytes "
        f"held in memory ({results_memory.UNWRITTEN_LIMIT_ENV}) are lost, in no table or file)"
    ]


def test_what_is_held_is_written_when_space_comes_back_and_the_dropped_are_counted(small_disk, monkeypatch):  # noqa: F811
    writer = limited_writer(small_disk, monkeypatch)
    writer.add_rows(rows(3, 0))
    writer._flush()  # written before the disk filled
    fill(small_disk)
    acked = []
    writer.add_rows(rows(8, 3), on_written=lambda: acked.append("kept"))
    writer.add_rows(rows(4, 11), on_written=lambda: acked.append("cut"))  # 2 kept, 2 dropped
    writer._flush()
    assert writer.rows_in_memory == HELD and writer.rows_dropped == 2
    writer.add_rows(rows(1, 15))  # still full: dropped
    os.remove(small_disk / "filler")  # space comes back: the next flush writes what is held
    writer._flush()
    assert writer.write_error is None and writer.rows_in_memory == 0 and writer.rows_written == 13
    assert acked == ["kept"], "a batch that lost records was acknowledged"
    writer.add_rows(rows(1, 16))  # room again: kept, written at the end
    table = writer.close_records()
    summary = summarize(table, 0.0, time.time() + 1).with_sections(run_id="run", complete=True, reason=None)
    writer.write_summary(summary, True, None)
    assert sorted(record_ids(writer.records_path)) == sorted(f"r{i}" for i in (*range(13), 16))
    assert writer.rows_written == 14 and writer.rows_dropped == 3
    assert len(writer.not_written) == 1 and writer.not_written[0] == (
        f"3 records (No space left on device; dropped beyond the {HELD * row_bytes(rows(1)[0])} bytes held in memory "
        f"({results_memory.UNWRITTEN_LIMIT_ENV}): lost, in no table or file)"
    ), writer.not_written
    with open(os.path.join(writer.path, "summary.json")) as f:
        written = json.load(f)
    assert written["complete"] is False and written["records_dropped"]["records"] == 3
    assert written["reason"] == "3 records dropped while they could not be written (No space left on device)"
    assert written["records"]["total"] == 14
    with open(os.path.join(writer.path, "run.json")) as f:
        run = json.load(f)
    assert run["records_dropped"] == 3 and run["records"] == 14 and run["complete"] is False


def test_a_bad_limit_is_one_line_before_any_load(tmp_path, monkeypatch):
    monkeypatch.setenv(results_memory.UNWRITTEN_LIMIT_ENV, "lots")
    try:
        results_folder.check_folder(str(tmp_path), "", False)
    except InputError as e:
        assert (
            str(e)
            == f"{results_memory.UNWRITTEN_LIMIT_ENV}: 'lots' is not a size above 0; give e.g. 512MB or 2GB, or unset it"
        )
    else:
        raise AssertionError("not refused")


def test_a_run_whose_disk_stays_full_says_exactly_how_many_records_it_lost_and_exits_5(
    tmp_path,
    small_disk,  # noqa: F811 (the fixture)
    monkeypatch,
):
    """A real run, at most 320 KB of records held (about 180 of 20 tokens, 7 s of this load: more
    than the 5 s between two flushes): the disk is filled as load begins and stays full. The last
    line counts the records held (in the table) and those dropped (lost); with what was written
    before the disk filled, they are every request the server saw."""
    monkeypatch.setenv(results_memory.UNWRITTEN_LIMIT_ENV, "320KB")
    code, log, served = run_on_a_full_disk(
        tmp_path, small_disk, LOAD, 12, 16, "No space left on device", "are dropped and counted, and the run exits 5"
    )
    assert code == exit_codes.RESULTS_NOT_WRITTEN, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    last = next(ln for ln in reversed(log.splitlines()) if "results not written" in ln)
    m = re.search(
        r"(\d+) records \(No space left on device; (\d+) held in memory are in the table, (\d+) dropped beyond "
        r"the 320KB held in memory \(LLM_RESULTS_UNWRITTEN_LIMIT\) are lost",
        last,
    )
    assert m, last
    total, held, dropped = map(int, m.groups())
    assert total == held + dropped and dropped > 0 and 0 < held <= 320  # a record is at least ROW_BYTES, 1 KB
    table = re.search(r"^overall\s+(\d+)\s+(\d+)", log, re.M)
    assert table, "no console table: " + log[-3000:]
    parts = small_disk / "full" / "requests.parts"
    on_disk = sum(len(record_ids(p)) for p in parts.glob("part-*.parquet"))
    assert on_disk + total == served  # exact: written, held and dropped are every request the server saw
    # the table: the records held and written that were sent inside the run's window (a request a
    # closed-loop user began as the run ended is outside it: counted above, not in the table)
    assert 0 < int(table.group(1)) + int(table.group(2)) <= on_disk + held


def noisy_rows(n: int, start: int = 0) -> list[tuple]:
    """Records of 256 chunks at random times: about 2 KB each on disk (they hardly compress)."""
    rng = np.random.default_rng(start)
    now = time.time()
    return [
        RequestRecord(
            f"r{i}",
            "w",
            "chat",
            "short",
            10,
            256,
            t_send=1.0,
            wall_send=now,
            status=200,
            ok=True,
            ttft_s=0.1,
            e2e_s=1.6,
            tpot_s=0.1,
            prompt_tokens=10,
            output_tokens=256,
            n_chunks=256,
            chunk_times=list(np.cumsum(rng.random(256))),
        ).as_row()
        for i in range(start, start + n)
    ]


def test_records_held_at_the_end_make_the_run_incomplete_and_go_out_in_pieces_as_space_returns(small_disk):  # noqa: F811
    """The disk fills with 200 records held in memory; space for about half of them returns: they
    go out in pieces that fit (one part file of all 200 would not). At the end, the records still
    held make summary.json and run.json say `complete: false` with how many; once space is back,
    `python -m reports build` takes the folder (parts and a summary that says it is incomplete)."""
    writer = ResultsWriter(str(small_disk), "run", RunInfo())
    writer.add_rows(noisy_rows(20, 0))
    writer._flush()
    assert writer.rows_written == 20
    for name, size in (("reserve", 300 << 10), ("reserve2", 200 << 10)):
        with open(small_disk / name, "wb") as f:
            f.write(os.urandom(size))
    fill(small_disk)
    writer.add_rows(noisy_rows(200, 20))
    writer._flush()
    assert writer.write_error == "No space left on device" and writer.rows_in_memory == 200
    os.remove(small_disk / "reserve")  # 300 KB: room for part of the 400 KB held
    writer._flush()
    assert 20 + 50 <= writer.rows_written < 220 and writer.rows_in_memory == 220 - writer.rows_written
    table = writer.close_records()
    held = writer.rows_in_memory
    assert table.num_rows == 220 and held > 0
    os.remove(small_disk / "reserve2")  # room for summary.json and run.json, not for the held records
    summary = summarize(table, 0.0, time.time() + 1).with_sections(run_id="run", complete=True, reason=None)
    writer.write_summary(summary, True, None)
    on_disk = sum(pq.read_metadata(p).num_rows for p in glob.glob(os.path.join(writer.parts_path, "part-*.parquet")))
    assert on_disk == writer.rows_written == 220 - held
    with open(os.path.join(writer.path, "summary.json")) as f:
        written = json.load(f)
    with open(os.path.join(writer.path, "run.json")) as f:
        run = json.load(f)
    assert written["complete"] is False and run["complete"] is False
    assert written["records_not_written"]["records"] == held == run["records_not_written"]
    assert f"{held} records held in memory could not be written (No space left on device)" in written["reason"]
    os.remove(small_disk / "filler")  # space is back
    built = reports("build", writer.path)
    assert built.returncode == 0, built.stderr[-2000:]
    assert sorted(record_ids(writer.records_path)) == sorted(f"r{i}" for i in range(220 - held))
    recovered = json.load(open(os.path.join(writer.path, "summary.json")))
    assert recovered["complete"] is False and recovered["records_not_written"]["records"] == held
    assert recovered["records"]["total"] == 220 - held
