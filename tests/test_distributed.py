"""Master + workers: every request the simulator saw is in the master's records exactly once, the
end-of-run drain loses nothing, and a worker that dies does not stop the run."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from tests.helpers import load_options, master_and_workers, read_results, read_truth, simulator, stop, wait_for_lines

pytestmark = pytest.mark.process

COMMON = ("--max-tokens-override", "40", "--seed", "11")


def run_distributed(tmp, url, run_id, workers=2, seconds=15, extra=(), kill_worker_after=None, truth_log=None):
    with master_and_workers(
        *load_options(url, tmp, run_id, 40, seconds, 20),
        *COMMON,
        *extra,
        expect_workers=workers,
        log_path=str(tmp / f"{run_id}-master.log"),
        worker_logs=[str(tmp / f"{run_id}-w{i}.log") for i in range(workers)],
    ) as run:
        if kill_worker_after is not None:  # seconds after the load began (process start-up varies)
            wait_for_lines(truth_log, 40)
            time.sleep(kill_worker_after)
            run.workers[0].send_signal(signal.SIGKILL)
        code = stop(run.master, timeout=seconds + 90)
    log = (tmp / f"{run_id}-master.log").read_text()
    return code, log


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dist")
    truth = str(tmp / "truth.jsonl")
    with simulator("--profile", "fixed", truth_log=truth) as url:
        code, log = run_distributed(tmp, url, "d2")
    assert code == 0, log[-3000:]
    df, summary = read_results(str(tmp), "d2")
    return df, summary, read_truth(truth), log


def test_master_records_equal_the_truth_log(two_workers):
    df, summary, truth, _ = two_workers
    assert len(df) > 200
    assert df["request_id"].is_unique, "a record counted twice"
    completed = {t["request_id"] for t in truth}
    assert set(df["request_id"]) == completed, "records lost or invented"
    assert df["ok"].all()


def test_both_workers_shipped_everything_with_acknowledged_batches(two_workers):
    df, summary, _, _ = two_workers
    workers = summary["workers"]
    assert len(workers) == 2
    for w in workers.values():
        assert w["final_received"] and w["missing_batches"] == [] and w["lost_at"] is None
        assert w["records"] == w["records_reported_by_worker"] > 50
    assert sum(w["records"] for w in workers.values()) == len(df)
    assert df["worker"].nunique() == 2


def test_workers_draw_different_seeded_sequences(two_workers):
    df, *_ = two_workers
    by_worker = [g.sort_values("t_send")["input_chars"].head(20).tolist() for _, g in df.groupby("worker")]
    assert by_worker[0] != by_worker[1]


def test_percentiles_are_computed_from_the_merged_records(two_workers):
    df, summary, _, _ = two_workers
    w = summary["window"]
    sel = df[(df["wall_send"] >= w["start"]) & (df["wall_send"] <= w["end"]) & df["ok"]]
    assert summary["overall"]["ttft_ms"]["p95"] == pytest.approx(np.percentile(sel["ttft_s"] * 1000, 95), rel=1e-9)
    assert summary["overall"]["requests"]["ok"] == len(sel)


def test_drain_keeps_streams_in_flight_at_the_end(tmp_path):
    """Long streams (40 tokens x 0.2 s) are in flight when the run time ends; the drain waits for
    them. Locust's own quit would give up after 0.5 s and lose them (the master waits only 0.5 s
    for the workers' final reports)."""
    truth = str(tmp_path / "truth.jsonl")
    profile = tmp_path / "slow.yaml"
    profile.write_text("kind: fixed\nttft_s: 0.1\nitl_s: 0.2\n")
    with simulator("--profile", str(profile), truth_log=truth) as url:
        code, log = run_distributed(tmp_path, url, "drain", seconds=6, extra=("--max-tokens-override", "20"))
    assert code == 0, log[-3000:]
    df, summary = read_results(str(tmp_path), "drain")
    assert set(df["request_id"]) == {t["request_id"] for t in read_truth(truth)}
    assert df["ok"].all() and len(df) >= 40  # every stream of the last round finished and arrived
    assert (df["e2e_s"] > 3.5).all()


def test_a_killed_worker_does_not_stop_the_run(tmp_path):
    truth = str(tmp_path / "truth.jsonl")
    with simulator("--profile", "fixed", truth_log=truth) as url:
        code, log = run_distributed(tmp_path, url, "kill", seconds=16, kill_worker_after=5, truth_log=truth)
    df, summary = read_results(str(tmp_path), "kill")
    assert (
        code == 4 and summary["complete"] is False and "lost mid-run" in summary["reason"]
    )  # the run goes on, but lost records
    lost = [w for w in summary["workers"].values() if w["lost_at"] is not None]
    alive = [w for w in summary["workers"].values() if w["lost_at"] is None]
    assert len(lost) == 1 and len(alive) == 1, summary["workers"]
    assert alive[0]["final_received"] and alive[0]["missing_batches"] == []
    assert lost[0]["records"] > 0  # what it shipped before dying is kept
    assert "lost at" in log
    truth_ids = {t["request_id"] for t in read_truth(truth)}
    assert set(df["request_id"]) <= truth_ids and df["request_id"].is_unique
    assert (df["wall_send"] > lost[0]["lost_at"]).any(), "the surviving worker kept sending after the loss"
    assert os.path.exists(tmp_path / "kill" / "requests.parquet")


def test_a_worker_that_joins_late_gets_the_options_and_load(tmp_path):
    truth = str(tmp_path / "truth.jsonl")
    with simulator("--profile", "fixed", truth_log=truth) as url:
        with master_and_workers(
            *load_options(url, tmp_path, "late", 20, 20, 20),
            "--max-tokens-override",
            "17",
            "--seed",
            "3",
            expect_workers=1,
            log_path=str(tmp_path / "late-master.log"),
            worker_logs=[str(tmp_path / "late-w0.log")],
        ) as run:
            log = tmp_path / "late-master.log"
            wait_for_lines(truth, 20)
            time.sleep(3)  # the run has 16 s left: time for a worker to start on a loaded machine (8-12 s seen)
            run.start_worker(log_path=str(tmp_path / "late-w1.log"))
            assert stop(run.master, timeout=120) == 0, log.read_text()[-3000:]
    df, summary = read_results(str(tmp_path), "late")
    assert len(summary["workers"]) == 2
    per_worker = df.groupby("worker")
    assert per_worker.ngroups == 2
    assert (df["max_tokens"] == 17).all() and (df.loc[df["ok"], "output_tokens"] == 17).all()  # options reached it
    starts = per_worker["wall_send"].min().sort_values()
    assert starts.iloc[1] - starts.iloc[0] > 2.5  # the second worker began later ...
    assert (df["worker"] == starts.index[1]).sum() > 0  # ... and took a share of the users (its requests are theirs)
    assert set(df["request_id"]) == {t["request_id"] for t in read_truth(truth)}


def test_a_step_ramp_sends_the_run_start_once_per_worker(tmp_path, monkeypatch):
    """The run's start (plan, workload, tokenizer's files) travels in Locust's spawn messages, and a
    step ramp sends one to each worker at every step. Two workers run six steps with a tokenizer;
    a third joins in the first steps. Each worker gets the start once, with its first spawn
    message (the late one too, whose records show it ran); the other spawn messages are a few kB.
    Before, every spawn message carried it: one per worker and step (and rebalance), each with the
    tokenizer. The ramp lasts 30 s, so that the late worker joins inside it on a loaded machine too."""
    import glob
    import json

    from tests.test_run_start import byte_tokenizer

    byte_tokenizer(tmp_path / "tok")
    counts = tmp_path / "counts"
    counts.mkdir()
    monkeypatch.setenv("SPAWN_BENCH_OUT", str(counts))  # bench/spawn_messages_locustfile.py counts the messages
    counted = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "spawn_messages_locustfile.py"
    )

    def measured(cmd):
        return [counted if part.endswith("locustfile.py") else part for part in cmd]

    with simulator("--profile", "fixed") as url:
        with master_and_workers(
            "--steps",
            "2,4,6,8,10,12",
            "--step-time",
            "5s",
            "--step-warmup",
            "1s",
            "--host",
            url,
            "--tokenizer",
            str(tmp_path / "tok"),
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "once",
            "--stop-timeout",
            "20",
            *COMMON,
            expect_workers=2,
            log_path=str(tmp_path / "once-master.log"),
            wrap=measured,
        ) as run:
            for i in range(2):
                run.start_worker(log_path=str(tmp_path / f"once-w{i}.log"), wrap=measured)
            deadline = time.monotonic() + 60
            while "run once:" not in (tmp_path / "once-master.log").read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(3)  # into the first step
            run.start_worker(log_path=str(tmp_path / "once-w2.log"), wrap=measured)
            code = run.master.wait(timeout=150)
            for w in run.workers:  # they quit with their master, and write their counts as they do
                w.wait(timeout=60)
    log = (tmp_path / "once-master.log").read_text()
    assert code == 0, log[-3000:]
    files = {os.path.basename(f): json.load(open(f)) for f in glob.glob(str(counts / "*.json"))}
    sent = next(v["sent"] for k, v in files.items() if k.startswith("master"))
    received = [v["received"] for k, v in files.items() if k.startswith("worker")]
    assert len(received) == 3 and all(received), (files.keys(), received)
    assert [[m["carries_start"] for m in r] for r in received] == [[True] + [False] * (len(r) - 1) for r in received]
    assert sum(m["carries_start"] for m in sent) == 3 and len(sent) >= 13, sent
    tokenizer_bytes = sum(os.path.getsize(f) for f in glob.glob(str(tmp_path / "tok" / "*")))
    assert min(m["bytes"] for m in sent if m["carries_start"]) > tokenizer_bytes / 4  # the start, compressed
    assert max(m["bytes"] for m in sent if not m["carries_start"]) < 8000
    df, _summary = read_results(str(tmp_path), "once")
    assert df[df["ok"]]["worker"].nunique() == 3  # each worker ran the start it got once, the late one too
