"""The results folder when a run goes wrong: a writer killed with SIGKILL, a disk that fills up
mid-run, a run id used twice; and the exit codes documented in one table."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from plugin import exit_codes
from plugin.results import FLUSH_SECONDS
from tests.edges import (
    kill_all,
    launch,
    record_ids,
    reports,
    run_on_a_full_disk,
    slow_profile,
    summary_of,
    truth_count,
    truth_ids,
    wait_for,
)
from tests.helpers import ROOT, read_truth, run_locust, simulator

pytestmark = pytest.mark.process

LOAD = ("--headless", "--model", "sim-model", "--max-tokens-override", "20", "--seed", "3")


# -- 1. a writer killed with SIGKILL leaves records that can be read --------------------------------


def test_sigkilled_run_leaves_readable_records_and_reports_builds_them(tmp_path):
    """kill -9 eight seconds into a run: every request served a flush (5 s) and a margin before it is readable,
    and `python -m reports build` makes requests.parquet and summary.json (complete: false) from it."""
    truth = str(tmp_path / "truth.jsonl")
    with simulator("--profile", slow_profile(tmp_path, 0.05, 0.05), truth_log=truth) as url:
        proc = launch(
            *LOAD,
            "--host",
            url,
            "-u",
            "8",
            "-r",
            "8",
            "-t",
            "60s",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "killed",
            log_path=tmp_path / "killed.log",
        )
        try:
            wait_for(lambda: truth_count(truth) >= 10, 30, "load began")
            time.sleep(8)
            killed_at = time.perf_counter()  # the simulator's truth log stamps perf_counter too (one clock)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            kill_all(proc)
        served = set(truth_ids(truth))
        # finished a flush and then some before the kill: the writer had flushed them (a flush every
        # FLUSH_SECONDS, the margin for a loaded machine's late flush and the finisher's hand-over)
        flushed = {
            t["request_id"]
            for t in read_truth(truth)
            if t.get("request_id") and (t.get("last_token") or t["arrival"]) < killed_at - FLUSH_SECONDS - 3.0
        }
    folder = tmp_path / "killed"
    assert not (folder / "summary.json").exists()
    built = reports("build", str(folder))
    assert built.returncode == 0, built.stdout + built.stderr
    summary = summary_of(folder)
    assert summary["complete"] is False and "recovered" in summary["reason"], summary.get("reason")
    ids = record_ids(folder / "requests.parquet")
    assert len(flushed) >= 5 and flushed <= set(ids), (
        f"{len(flushed - set(ids))} of the {len(flushed)} requests served before the last flush are not recoverable "
        f"({len(ids)} of {len(served)} served are)"
    )
    assert len(set(ids)) == len(ids) and set(ids) <= served
    assert summary["records"]["total"] == len(ids)
    assert (folder / "report.html").exists()
    with open(folder / "run.json") as f:
        assert json.load(f)["complete"] is False


# -- 3. a full disk: said at once, rows kept, the table printed, exit 5 ----------------------------


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root needed): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_is_said_at_once_and_the_run_ends_with_its_table_and_exit_5(tmp_path, small_disk):
    code, log, served = run_on_a_full_disk(tmp_path, small_disk, LOAD, 6, 14, "No space left on device")
    assert code == exit_codes.RESULTS_NOT_WRITTEN, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    line = next(ln for ln in log.splitlines() if "No space left on device" in ln)
    assert "ERROR" in line and "kept in memory" in line, line
    table = re.search(r"^overall\s+(\d+)\s+(\d+)", log, re.M)
    assert table, "no console table: " + log[-3000:]
    last = next(ln for ln in reversed(log.splitlines()) if "results not written" in ln)
    held = re.search(r"\(exit 5\): (\d+) records \(No space left on device\)", last)
    assert held, last
    on_disk = sum(len(record_ids(p)) for p in (small_disk / "full" / "requests.parts").glob("part-*.parquet"))
    assert int(held.group(1)) + on_disk == served  # every record: held in memory, or written before the disk filled
    # The table counts the requests sent inside the run's window. A closed-loop user may begin one
    # more request in the moment between the run's end and Locust stopping it (longer on a loaded
    # machine): served and recorded above, outside the window, so not in the table.
    assert 0 < int(table.group(1)) + int(table.group(2)) <= served


# -- 7. a run id in use is refused before load -------------------------------------------------------


def test_an_existing_run_id_is_refused_before_load_unless_overwrite(tmp_path):
    truth = str(tmp_path / "truth.jsonl")
    with simulator("--profile", "fixed", truth_log=truth) as url:
        args = (
            *LOAD,
            "--host",
            url,
            "-u",
            "2",
            "-r",
            "2",
            "-t",
            "2s",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "same",
        )
        first = run_locust(*args, timeout=60)
        assert first.returncode == 0, first.stderr[-3000:]
        before = record_ids(tmp_path / "same" / "requests.parquet")
        time.sleep(1.5)  # the simulator's truth log is flushed every second
        served = truth_count(truth)
        again = run_locust(*args, timeout=60)
        time.sleep(1.5)
        assert again.returncode == exit_codes.BAD_INPUT, again.stderr[-3000:]
        errors = [ln for ln in again.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "--run-id" in errors[0] and "--overwrite" in errors[0], again.stderr[-2000:]
        assert truth_count(truth) == served, "the refused run sent requests"
        assert record_ids(tmp_path / "same" / "requests.parquet") == before, "the earlier run was touched"
        replaced = run_locust(*args, "--overwrite", timeout=60)
        assert replaced.returncode == 0, replaced.stderr[-3000:]
    after = record_ids(tmp_path / "same" / "requests.parquet")
    assert after and not set(after) & set(before), "--overwrite did not replace the earlier run"


# -- 8. the exit codes, one table, the same in the docs --------------------------------------------


def test_docs_failures_has_the_exit_code_table():
    with open(os.path.join(ROOT, "docs", "failures.md"), encoding="utf-8") as f:
        text = f.read()
    assert exit_codes.markdown_table() in text, "docs/failures.md: paste the output of python -m plugin.exit_codes"
    codes = [int(c) for c in re.findall(r"^\| (\d+) \|", text, re.M)]
    assert sorted(codes) == sorted(code for code, _, _ in exit_codes.TABLE)


def test_severity_orders_every_code_of_the_table():
    class Env:
        process_exit_code = None

    env = Env()
    for code in (
        exit_codes.REQUEST_FAILURES,
        exit_codes.SLO_MISSED,
        exit_codes.INCOMPLETE,
        exit_codes.INTERRUPTED,
        exit_codes.RESULTS_NOT_WRITTEN,
    ):
        exit_codes.raise_to(env, code)
        assert env.process_exit_code == code
    exit_codes.raise_to(env, exit_codes.SLO_MISSED)
    assert env.process_exit_code == exit_codes.RESULTS_NOT_WRITTEN


def test_a_workers_file_of_unshipped_records_is_merged_once(tmp_path):
    """A worker that lost its master kept what the master never acknowledged; copied into the
    run's folder, `python -m reports build` merges it, each request once, and only once."""
    import pyarrow.parquet as pq

    from metrics.record import RequestRecord, rows_to_table

    def rows(ids):
        now = time.time()
        return rows_to_table(
            [
                RequestRecord(
                    f"r{i}",
                    "w",
                    "chat",
                    "short",
                    10,
                    16,
                    t_send=1.0,
                    wall_send=now + i,
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
                for i in ids
            ]
        )

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "run.json").write_text(
        json.dumps({"run_id": "run", "started_at": time.time() - 1, "plan": {"warmup_s": 0}})
    )
    pq.write_table(rows(range(10)), folder / "requests.parquet")
    pq.write_table(rows(range(5, 15)), folder / "worker-0-abc.unshipped.parquet")
    built = reports("build", str(folder))
    assert built.returncode == 0, built.stdout + built.stderr
    assert sorted(record_ids(folder / "requests.parquet")) == sorted(f"r{i}" for i in range(15))
    summary = summary_of(folder)
    assert summary["complete"] is False and "1 worker file" in summary["reason"]
    again = reports("show", str(folder))
    assert again.returncode == 0 and "recovered" not in again.stdout.split("\n")[0]
    assert len(record_ids(folder / "requests.parquet")) == 15
