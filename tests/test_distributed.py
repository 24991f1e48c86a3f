"""Master + workers: every request the simulator saw is in the master's records exactly once, the
end-of-run drain loses nothing, and a worker that dies does not stop the run."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from tests.helpers import free_port, read_results, read_truth, simulator, start_locust, stop, wait_for_lines

pytestmark = pytest.mark.process

COMMON = ("--max-tokens-override", "40", "--seed", "11")


def run_distributed(tmp, url, run_id, workers=2, seconds=15, extra=(), kill_worker_after=None, truth_log=None):
    port = free_port()
    master = start_locust(
        "--master", "--headless", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
        "--expect-workers", str(workers), "-u", "40", "-r", "40", "-t", f"{seconds}s", "--host", url,
        "--results-dir", str(tmp), "--run-id", run_id, "--stop-timeout", "20", *COMMON, *extra,
        log_path=str(tmp / f"{run_id}-master.log"),
    )  # fmt: skip
    procs = [
        start_locust("--worker", "--master-host", "127.0.0.1", "--master-port", str(port), log_path=str(tmp / f"{run_id}-w{i}.log"))
        for i in range(workers)
    ]
    try:
        if kill_worker_after is not None:  # seconds after the load began (process start-up varies)
            wait_for_lines(truth_log, 40)
            time.sleep(kill_worker_after)
            procs[0].send_signal(signal.SIGKILL)
        code = stop(master, timeout=seconds + 90)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
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
    assert code == 4 and summary["complete"] is False and "lost mid-run" in summary["reason"]  # the run goes on, but lost records
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
    port = free_port()
    with simulator("--profile", "fixed", truth_log=truth) as url:
        master = start_locust(
            "--master", "--headless", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
            "--expect-workers", "1", "-u", "20", "-r", "20", "-t", "14s", "--host", url, "--results-dir", str(tmp_path),
            "--run-id", "late", "--stop-timeout", "20", "--max-tokens-override", "17", "--seed", "3",
            log_path=str(tmp_path / "late-master.log"),
        )  # fmt: skip
        first = start_locust("--worker", "--master-port", str(port), log_path=str(tmp_path / "late-w0.log"))
        log = tmp_path / "late-master.log"
        wait_for_lines(truth, 20)
        time.sleep(3)
        late = start_locust("--worker", "--master-port", str(port), log_path=str(tmp_path / "late-w1.log"))
        try:
            assert stop(master, timeout=120) == 0, log.read_text()[-3000:]
        finally:
            for p in (first, late):
                if p.poll() is None:
                    p.kill()
    df, summary = read_results(str(tmp_path), "late")
    assert len(summary["workers"]) == 2
    per_worker = df.groupby("worker")
    assert per_worker.ngroups == 2
    assert (df["max_tokens"] == 17).all() and (df.loc[df["ok"], "output_tokens"] == 17).all()  # options reached it
    starts = per_worker["wall_send"].min().sort_values()
    assert starts.iloc[1] - starts.iloc[0] > 2.5  # the second worker began later ...
    assert (df["worker"] == starts.index[1]).sum() > 20  # ... and took a share of the users
    assert set(df["request_id"]) == {t["request_id"] for t in read_truth(truth)}

