"""The results writer keeps every record and never stalls the streams of the process it runs in.

In a local run the users and the writer share one process and one event loop: a row group's
compression and write (tens of milliseconds) must run beside the loop, not on it.
"""

from __future__ import annotations

import json
import threading
import time

import gevent
import gevent.event
import locust  # noqa: F401  patches the standard library like a real run
import pyarrow.parquet as pq
import pytest
from gevent import monkey

from metrics.record import RequestRecord
from metrics.summary import summarize
from plugin import results
from plugin.results import ResultsWriter
from runfolder import unwritten as results_memory
from runfolder.run_info import RunInfo

_real_sleep = monkey.get_original("time", "sleep")


def rows(n: int, start: int = 0) -> list[tuple]:
    now = time.time()
    return [
        RequestRecord(
            f"r{i}",
            "w",
            "chat",
            "short",
            10,
            16,
            t_send=1.0,
            wall_send=now,
            status=200,
            ok=True,
            ttft_s=0.1,
            e2e_s=1.6,
            tpot_s=0.1,
            prompt_tokens=10,
            output_tokens=16,
            n_chunks=16,
            chunk_times=[0.1 * (k + 1) for k in range(16)],
        ).as_row()
        for i in range(start, start + n)
    ]


@pytest.mark.timing
def test_row_groups_are_written_beside_the_event_loop_and_nothing_is_lost(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "FLUSH_ROWS", 500)
    writer = ResultsWriter(str(tmp_path), "run", RunInfo())
    real_write = writer._write_part
    threads, ticks_during_write = [], []
    ticks = [0]

    def slow_write(table, path):  # a slow disk: 0.3 s per part file, in real (GIL-free) sleep
        threads.append(threading.get_ident())
        before = ticks[0]
        _real_sleep(0.3)
        real_write(table, path)
        ticks_during_write.append(ticks[0] - before)

    writer._write_part = slow_write

    def ticker():  # stands for the streams: it must keep running while a row group is written
        while True:
            gevent.sleep(0.005)
            ticks[0] += 1

    handed = gevent.event.Event()

    def hand_over():  # like the finisher of a local run; killed as the run stops, mid-write
        for k in range(3):
            writer.add_rows(rows(700, 700 * k))
            gevent.sleep(0.35)
        writer.add_rows(rows(100, 2100))
        handed.set()
        gevent.sleep(10)

    g = gevent.spawn(ticker)
    giver = gevent.spawn(hand_over)
    try:
        assert handed.wait(30)  # every row handed over (not a fixed 1.2 s: a loaded machine hands them later)
        giver.kill()
        # the end of a run as plugin/hooks.py's Run.finish does it: every record back, the summary
        # computed from them, summary.json and the final run.json written
        table = writer.close_records()
        summary = summarize(table, 0.0, time.time() + 1).with_sections(run_id=writer.run_id, complete=True, reason=None)
        writer.write_summary(summary, True, None)
    finally:
        g.kill()
    assert len(threads) >= 3 and all(t != threading.get_ident() for t in threads)
    assert min(ticks_during_write) >= 10, ticks_during_write  # ~60 expected; 0 if written on the loop
    ids = pq.read_table(writer.records_path, columns=["request_id"]).column("request_id").to_pylist()
    assert sorted(ids) == sorted(f"r{i}" for i in range(2200)) and writer.rows_written == 2200
    assert table.num_rows == 2200 and not writer.not_written
    with open(tmp_path / "run" / "summary.json") as f:
        assert json.load(f)["overall"]["requests"]["sent"] == 2200
    with open(tmp_path / "run" / "run.json") as f:
        assert json.load(f)["records"] == 2200


def test_run_json_is_written_from_the_one_model_that_reads_it(tmp_path):
    """run.json is a RunInfo (runfolder/run_info.py) as the run starts, with only the start's keys,
    and completed at the end; what the reports read back is the model the writer wrote."""
    info = RunInfo(
        host="http://127.0.0.1:9",
        role="local",
        options={"num_users": 3},
        plan={"model": "m", "warmup_s": 2.0, "load": {"kind": "steps", "levels": [1, 2]}, "seed": 7},
        workload={"name": "mix", "path": "mix.yaml", "hash": "ab" * 32, "classes": {"short": {}}},
    )
    writer = ResultsWriter(str(tmp_path), "run", info)
    with open(tmp_path / "run" / "run.json") as f:
        start = json.load(f)
    assert start["run_id"] == "run" and start["plan"]["seed"] == 7 and start["workload"]["classes"] == {"short": {}}
    assert not {"ended_at", "complete", "reason", "records", "files"} & set(start)  # the start has no end
    writer.add_rows(rows(10))
    table = writer.close_records()
    writer.write_summary(summarize(table, 0.0, time.time() + 1).with_sections(run_id="run", complete=True), True, None)
    with open(tmp_path / "run" / "run.json") as f:
        read = RunInfo.model_validate(json.load(f))
    assert read == writer.info
    assert read.complete is True and read.records == 10 and read.files["requests.parquet"].rows == 10
    assert read.model == "m" and read.plan.warmup_s == 2.0 and read.workload.hash == "ab" * 32
    assert read.load_level() == {"kind": "steps", "levels": [1, 2]} and read.closed_loop_users is None


def test_rows_handed_over_wait_for_the_writer_and_none_is_dropped(tmp_path, monkeypatch):
    """Backpressure: with more than room_bytes of rows waiting, whoever hands rows over waits for a
    flush (one starts at once) instead of piling them up; past the memory limit nothing is dropped
    while writes succeed."""
    monkeypatch.setenv(results_memory.UNWRITTEN_LIMIT_ENV, str(40 * results_memory.row_bytes(rows(1)[0])))
    writer = ResultsWriter(str(tmp_path), "run", RunInfo())
    assert writer.room_bytes == 20 * results_memory.row_bytes(rows(1)[0])  # half the limit
    handed = 0

    def producer():
        nonlocal handed
        for i in range(200):
            writer.wait_for_room()
            writer.add_rows(rows(1, i))
            handed += 1
            assert writer._pending_bytes + writer._flushing_bytes <= writer.unwritten_limit

    gevent.spawn(producer).join(timeout=30)
    assert handed == 200
    table = writer.close_records()
    assert writer.rows_dropped == 0 and table.num_rows == 200 and writer.rows_written == 200
