"""Master and workers when one of them goes wrong: a master killed mid-run, a worker that cannot
start the run, a worker killed mid-run. Nothing is lost without being counted, nothing exits 0."""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import time
from datetime import datetime

import pytest

from plugin import exit_codes
from tests.edges import (
    ended,
    launch,
    record_ids,
    records,
    reports,
    slow_profile,
    summary_of,
    truth_count,
    truth_ids,
    wait_for,
)
from tests.helpers import ROOT, load_options, master_and_workers, simulator

pytestmark = pytest.mark.process

LOAD = ("--model", "sim-model", "--max-tokens-override", "30", "--seed", "6")


def load_args(url: str, tmp, run_id: str, seconds: int, *extra: str) -> tuple:
    """The master's options of a run of these tests, after those that make it a master."""
    return (*load_options(url, tmp, run_id, 12, seconds, 20), *LOAD, *extra)


# -- 2. a lost master: the worker stops its users, keeps its records, exits non-zero ----------------


def test_a_worker_whose_master_dies_stops_soon_and_keeps_its_unshipped_records(tmp_path):
    truth = str(tmp_path / "truth.jsonl")
    own = tmp_path / "worker-results"
    with simulator("--profile", slow_profile(tmp_path, 0.05, 0.05), truth_log=truth) as url:  # 1.5 s streams
        with master_and_workers(
            *load_args(url, tmp_path, "orphan", 60), expect_workers=1, log_path=tmp_path / "master.log", start=launch
        ) as run:
            worker = run.start_worker("--results-dir", str(own), log_path=tmp_path / "worker.log")
            wait_for(lambda: truth_count(truth) >= 20, 40, "load began")
            # the master has written records of its own (a batch can take longer on a loaded
            # machine than a fixed wait), and the worker has more since
            wait_for(
                lambda: glob.glob(str(tmp_path / "orphan" / "requests.parts" / "part-*.parquet")),
                40,
                "the master's first flushed records",
            )
            time.sleep(2)
            run.master.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            code = ended(worker, 25)
            stopped_after = time.monotonic() - killed
    served = set(truth_ids(truth))  # complete: the simulator flushed it as it stopped
    log = (tmp_path / "worker.log").read_text()
    assert code is not None, "the worker kept loading the server after its master died: " + log[-2000:]
    assert code != 0 and stopped_after < 15, (code, stopped_after, log[-3000:])
    kept = glob.glob(str(own / "orphan" / "worker-*.unshipped.parquet"))
    assert len(kept) == 1, log[-3000:]
    assert kept[0] in log  # the log says where
    unshipped = set(record_ids(kept[0]))
    assert unshipped
    built = reports("build", str(tmp_path / "orphan"))  # what the master had written
    assert built.returncode == 0, built.stdout + built.stderr
    at_master = set(record_ids(tmp_path / "orphan" / "requests.parquet"))
    missing = served - (at_master | unshipped)
    assert not missing, (
        f"{len(missing)} of {len(served)} served requests in neither the master's records nor the worker's"
    )
    assert (at_master | unshipped) <= served


# -- 5. one workload, trace and tokenizer per run: the master's, whatever a worker's disk holds ----

ONE_CLASS = """name: {name}
templates: {templates}
classes:
  {name}:
    weight: 1
    input_chars:   {{min: 20, max: 200, dist: uniform}}
    output_tokens: {{min: 20, max: 40, dist: uniform}}
"""


def test_a_worker_whose_workload_file_differs_runs_the_masters(tmp_path):
    """The master's workload/ mine.yaml has one class, alpha; the worker's file at the same path
    (its own working directory) has beta. The worker runs the master's workload: every record is
    alpha, and run.json names the master's workload by its hash."""
    from workloads import load_spec

    here, there = tmp_path / "master", tmp_path / "worker"
    for folder, name in ((here, "alpha"), (there, "beta")):
        (folder / "workload").mkdir(parents=True)
        (folder / "workload" / "mine.yaml").write_text(
            ONE_CLASS.format(name=name, templates=os.path.join(ROOT, "workloads", "templates.jsonl"))
        )
    with simulator("--profile", "fixed") as url:
        with master_and_workers(
            *load_args(url, tmp_path, "same", 6, "--workload", "workload/mine.yaml"),
            expect_workers=1,
            log_path=tmp_path / "master.log",
            cwd=str(here),
            start=launch,
        ) as run:
            run.start_worker(log_path=tmp_path / "worker.log", cwd=str(there))
            code = ended(run.master, 60)
    log = (tmp_path / "master.log").read_text()
    assert code == 0, log[-3000:]
    df = records(tmp_path / "same" / "requests.parquet")
    assert len(df) > 10 and set(df["request_class"]) == {"alpha"}, (tmp_path / "worker.log").read_text()[-3000:]
    with open(tmp_path / "same" / "run.json") as f:
        assert json.load(f)["workload"]["hash"] == load_spec(str(here / "workload" / "mine.yaml")).spec_hash


def test_workers_replay_the_masters_trace_and_count_with_its_tokenizer(tmp_path):
    """The master replays trace.jsonl and counts tokens with tok/, both in its working directory
    (the server sends no usage). One worker's working directory has another trace.jsonl and another
    tokenizer at tok/ (one token per byte); the other worker's has neither. Both run the master's:
    every request of its trace is sent once, none of the other trace, request i by process i mod 2
    at its logged time on one clock, and every record's output tokens are the master's tokenizer's
    count of the reply. Before, each worker read both from its own disk: the first replayed its own
    trace and counted with its own tokenizer, the second could not start and the run ended (exit 4)."""
    from pathlib import Path

    from transformers import AutoTokenizer

    from bench.servers.model import build_tokenizer
    from tests.test_run_start import byte_tokenizer
    from tests.test_sessions import CaptureServer

    here, other, bare = tmp_path / "master", tmp_path / "w-other", tmp_path / "w-bare"
    for folder, who in ((here, "master"), (other, "worker")):
        folder.mkdir()
        rows = [
            {"t": round(i * 0.1 + (0.03 if who == "worker" else 0), 3), "text": f"{who} question {i}", "max_tokens": 6}
            for i in range(40)
        ]
        (folder / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    bare.mkdir()
    build_tokenizer(Path(ROOT), here / "tok")
    byte_tokenizer(other / "tok")
    ours, theirs = (AutoTokenizer.from_pretrained(str(d / "tok")) for d in (here, other))

    def count(tok, text):
        return len(tok.encode(text, add_special_tokens=False))

    with CaptureServer(usage=False) as srv:
        with master_and_workers(
            "--host",
            srv.url,
            "--model",
            "capture",
            "--replay",
            "trace.jsonl",
            "--tokenizer",
            "./tok",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "carried",
            "--stop-timeout",
            "10",
            expect_workers=2,
            log_path=tmp_path / "master.log",
            cwd=str(here),
            start=launch,
        ) as run:
            for d in (other, bare):
                run.start_worker(log_path=tmp_path / f"{d.name}.log", cwd=str(d))
            code = ended(run.master, 120)
        bodies, replies = dict(srv.bodies), dict(srv.replies)
    log = (tmp_path / "master.log").read_text()
    assert code == 0, log[-3000:] + "".join((tmp_path / f"{d.name}.log").read_text()[-2000:] for d in (other, bare))
    df = records(tmp_path / "carried" / "requests.parquet").sort_values("t_intended")
    assert len(df) == 40 and df["ok"].all() and df["request_id"].is_unique
    assert [bodies[r]["messages"][-1]["content"] for r in df["request_id"]] == [
        f"master question {i}" for i in range(40)
    ]
    rel = df["t_intended"].to_numpy() - df["t_intended"].iloc[0]
    assert max(abs(rel - [i * 0.1 for i in range(40)])) < 1e-6  # the master's times, one clock
    by = df["worker"].to_numpy()
    assert len(set(by)) == 2 and (by[::2] == by[0]).all() and (by[1::2] != by[0]).all()
    texts = [replies[r] for r in df["request_id"]]
    assert any(count(ours, t) != count(theirs, t) for t in texts)  # the two tokenizers tell apart
    assert (df["tokens_source"] == "tokenizer").all()
    assert list(df["output_tokens"]) == [count(ours, t) for t in texts]


def test_a_worker_that_cannot_load_the_masters_tokenizer_ends_the_run_with_exit_4(tmp_path):
    """A worker without transformers (a package that fails to import, first on its path, stands in
    for a host where it is not installed) cannot count with the tokenizer its master sent: it says
    so in one line, the master stops the run at once, and the run ends incomplete (exit 4)."""
    from tests.test_run_start import byte_tokenizer

    here = tmp_path / "master"
    here.mkdir()
    byte_tokenizer(here / "tok")
    shim = tmp_path / "shim" / "transformers"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError(\"No module named 'transformers'\")\n")
    with simulator("--profile", "fixed") as url:
        with master_and_workers(
            *load_args(url, tmp_path, "nocount", 30, "--tokenizer", "./tok"),
            expect_workers=1,
            log_path=tmp_path / "master.log",
            cwd=str(here),
            start=launch,
        ) as run:
            worker = run.start_worker(log_path=tmp_path / "worker.log", path=(str(tmp_path / "shim"),))
            code = ended(run.master, 120)  # a hang, not a time: how soon the run stopped is read from its log below
            ended(worker, 2)
    log = (tmp_path / "master.log").read_text()
    assert code == exit_codes.INCOMPLETE, log[-3000:]
    stamps = {
        what: datetime.strptime(re.search(rf"^\[([^\]]+)\].*{what}", log, re.M).group(1), "%Y-%m-%d %H:%M:%S,%f")
        for what in ("Run time limit set", "Shutting down")
    }
    assert (stamps["Shutting down"] - stamps["Run time limit set"]).total_seconds() < 15, log[-3000:]  # not its -t 30s
    assert (
        "could not start the run: --tokenizer: this worker cannot load the master's tokenizer './tok' (ImportError)"
        in log
    )
    summary = summary_of(tmp_path / "nocount")
    assert summary["complete"] is False and "--tokenizer" in summary["reason"]


# -- 6. a worker killed mid-run: what it took with it is counted ------------------------------------


def test_a_killed_worker_counts_a_lower_bound_of_the_requests_it_lost(tmp_path):
    truth = str(tmp_path / "truth.jsonl")
    with simulator("--profile", slow_profile(tmp_path, 0.1, 0.1), truth_log=truth) as url:  # 3 s streams
        with master_and_workers(
            *load_args(url, tmp_path, "lost", 14),
            expect_workers=2,
            log_path=tmp_path / "master.log",
            worker_logs=[tmp_path / f"w{i}.log" for i in range(2)],
            start=launch,
        ) as run:
            wait_for(lambda: truth_count(truth) >= 12, 40, "load began")
            time.sleep(4.5)  # a report (every 3 s) has told the master what is in flight
            run.workers[0].send_signal(signal.SIGKILL)
            code = ended(run.master, 60)
    served = truth_ids(truth)  # complete: the simulator flushed it as it stopped
    log = (tmp_path / "master.log").read_text()
    assert code == exit_codes.INCOMPLETE, log[-3000:]
    summary = summary_of(tmp_path / "lost")
    assert summary["complete"] is False and "lost" in summary["reason"], summary.get("reason")
    lost = [(cid, w) for cid, w in summary["workers"].items() if w["lost_at"] is not None]
    assert len(lost) == 1, summary["workers"]
    cid, w = lost[0]
    assert w["lost_requests_min"] >= 1 and w["in_flight_when_lost"] >= 1, w
    at_master = set(record_ids(tmp_path / "lost" / "requests.parquet"))
    really_lost = len(set(served) - at_master)
    assert w["lost_requests_min"] <= really_lost, (w, really_lost)  # a lower bound ...
    assert summary["lost_work"]["requests_min"] == w["lost_requests_min"]
    line = re.search(rf"worker {re.escape(cid)}.*at least (\d+) requests? lost", log)
    assert line and int(line.group(1)) == w["lost_requests_min"], log[-3000:]


def test_a_worker_stopped_for_20_s_then_resumed_ships_its_late_records_into_the_run(tmp_path):
    """SIGSTOP a worker for 20 s, then SIGCONT, in the middle of a run of two workers: the master
    counts it missing meanwhile; once resumed, the worker finds its master's heartbeats waiting
    (it was the one stopped, not its master) and goes on, and its records reach the run's folder
    with no copy by hand: every request the server saw has exactly one record, no traceback."""
    truth = str(tmp_path / "truth.jsonl")
    with simulator("--profile", slow_profile(tmp_path, 0.1, 0.05), truth_log=truth) as url:
        with master_and_workers(
            *load_args(url, tmp_path, "paused", 40), expect_workers=2, log_path=tmp_path / "master.log", start=launch
        ) as run:
            workers = [
                run.start_worker("--results-dir", str(tmp_path / f"w{i}"), log_path=tmp_path / f"w{i}.log")
                for i in range(2)
            ]
            try:
                wait_for(lambda: truth_count(truth) >= 12, 40, "load began")
                time.sleep(2.0)
                workers[0].send_signal(signal.SIGSTOP)
                time.sleep(20)
                workers[0].send_signal(signal.SIGCONT)
                code = ended(run.master, 90)
                worker_codes = [ended(w, 30) for w in workers]
            finally:
                for w in workers:
                    if w.poll() is None:
                        w.send_signal(signal.SIGCONT)
        time.sleep(1.5)  # the simulator's truth log is flushed every second
    logs = {name: (tmp_path / f"{name}.log").read_text() for name in ("master", "w0", "w1")}
    for name, log in logs.items():
        assert "Traceback" not in log, (name, log[-3000:])
    assert not glob.glob(str(tmp_path / "w*" / "*" / "*.unshipped.parquet")), "records kept apart, to be copied by hand"
    ids = record_ids(tmp_path / "paused" / "requests.parquet")
    served = truth_ids(truth)
    assert len(ids) == len(set(ids)), "a record twice"
    assert set(served) == set(ids), f"{len(set(served) - set(ids))} of {len(served)} requests have no record"
    assert code == exit_codes.DONE and worker_codes == [exit_codes.DONE] * 2, (
        code,
        worker_codes,
        logs["master"][-3000:],
    )
    assert summary_of(tmp_path / "paused")["complete"] is True


def test_a_run_whose_only_worker_goes_missing_is_not_complete(tmp_path):
    """The only worker stopped (SIGSTOP) until its master has ended the run without it (Locust
    stops a run at once when its last worker goes missing): the master says the worker was lost
    and how many requests at least went with it, `complete: false`, exit 4; what it received is
    recorded once. (It exited 0 with `complete: true` before.)"""
    truth = str(tmp_path / "truth.jsonl")
    with simulator("--profile", slow_profile(tmp_path, 0.1, 0.05), truth_log=truth) as url:
        with master_and_workers(
            *load_args(url, tmp_path, "alone", 40), expect_workers=1, log_path=tmp_path / "master.log", start=launch
        ) as run:
            worker = run.start_worker("--results-dir", str(tmp_path / "w"), log_path=tmp_path / "w.log")
            try:
                wait_for(lambda: truth_count(truth) >= 12, 40, "load began")
                time.sleep(2.0)
                worker.send_signal(signal.SIGSTOP)
                code = ended(run.master, 90)
                worker.send_signal(signal.SIGCONT)
                ended(worker, 60)
            finally:
                if worker.poll() is None:
                    worker.send_signal(signal.SIGCONT)
        time.sleep(1.5)
    log = (tmp_path / "master.log").read_text()
    assert "Traceback" not in log, log[-3000:]
    assert code == exit_codes.INCOMPLETE, log[-3000:]
    summary = summary_of(tmp_path / "alone")
    assert summary["complete"] is False and "lost mid-run" in summary["reason"], summary.get("reason")
    assert summary["lost_work"]["requests_min"] > 0
    ids = record_ids(tmp_path / "alone" / "requests.parquet")
    assert len(ids) == len(set(ids)) and set(ids) <= set(truth_ids(truth))
