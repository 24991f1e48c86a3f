"""Several hosts on one machine: master, two workers and the simulator each in its own network
namespace with its own address. Where namespaces cannot be made the test says why and runs the
same checks with processes on 127.0.0.1 instead (never a silent pass)."""

from __future__ import annotations

import signal
import time
import warnings

import numpy as np
import pytest

from tests.helpers import (
    load_options,
    master_and_workers,
    read_results,
    read_truth,
    run_locust,
    simulator,
    stop,
    wait_for_lines,
)
from tests.netns import topology, unavailable_reason

pytestmark = pytest.mark.process

SEED_ARGS = ("--seed", "5", "--max-tokens-override", "30")
MASTER_PORT = 5557
SIM_PORT = 8000


@pytest.fixture(scope="module")
def hosts():
    reason = unavailable_reason()
    if reason:
        warnings.warn(
            f"network namespaces unavailable ({reason}): falling back to processes on 127.0.0.1", stacklevel=2
        )
        yield None
        return
    with topology(["sim", "master", "w1", "w2"]) as topo:
        yield topo


def _addr(topo, name):
    return topo.address(name) if topo else "127.0.0.1"


def _wrap(topo, name):
    return (lambda cmd: topo.wrap(name, cmd)) if topo else None


def run_cluster(topo, tmp, run_id, seconds, kill_after=None):
    truth = str(tmp / f"{run_id}-truth.jsonl")
    sim_port = SIM_PORT if topo else 0
    with simulator(
        "--profile", "fixed", truth_log=truth, host=_addr(topo, "sim"), port=sim_port, wrap=_wrap(topo, "sim")
    ) as url:
        with master_and_workers(
            *load_options(url, tmp, run_id, 30, seconds, 15),
            *SEED_ARGS,
            expect_workers=2,
            host=_addr(topo, "master"),
            port=MASTER_PORT if topo else 5600,
            log_path=str(tmp / f"{run_id}-master.log"),
            wrap=_wrap(topo, "master"),
        ) as run:
            for name in ("w1", "w2"):
                run.start_worker(log_path=str(tmp / f"{run_id}-{name}.log"), wrap=_wrap(topo, name))
            if kill_after is not None:
                wait_for_lines(truth, 30)
                time.sleep(kill_after)
                run.workers[0].send_signal(signal.SIGKILL)
            code = stop(run.master, timeout=seconds + 90)
    df, summary = read_results(str(tmp), run_id)
    return code, df, summary, read_truth(truth)


@pytest.mark.timing  # what the client adds to the server's TTFT, to 2 ms at the median: a busy CPU adds more
def test_seeded_run_across_hosts_matches_one_process(hosts, tmp_path):
    code, df, summary, truth = run_cluster(hosts, tmp_path, "multi", seconds=12)
    assert code == 0, (tmp_path / "multi-master.log").read_text()[-3000:]
    completed = {t["request_id"] for t in truth if t["outcome"] == "ok"}
    assert df["request_id"].is_unique
    assert set(df.loc[df["ok"], "request_id"]) == completed
    assert len(df) == len(truth)
    w = summary["window"]
    in_window = df[(df["wall_send"] >= w["start"]) & (df["wall_send"] <= w["end"])]
    for name, block in summary["by_class"].items():
        assert block["requests"]["sent"] == int((in_window["request_class"] == name).sum())
    # one process, same seed and load, same simulator profile
    single_truth = str(tmp_path / "single-truth.jsonl")
    with simulator("--profile", "fixed", truth_log=single_truth) as url:
        single = run_locust(
            "--host",
            url,
            "-u",
            "30",
            "-r",
            "30",
            "-t",
            "12s",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "single",
            "--stop-timeout",
            "15",
            *SEED_ARGS,
        )
    assert single.returncode == 0, single.stderr[-2000:]
    one_df, one = read_results(str(tmp_path), "single")
    # medians within 5 %
    for key in ("ttft_ms", "e2e_ms", "itl_ms"):
        a, b = summary["overall"][key]["p50"], one["overall"][key]["p50"]
        assert abs(a - b) / b < 0.05, (key, a, b)
    # Tails: four processes on two shared cores make the simulator's own timers late in the tail
    # (its truth log's TTFT p95 was 141 ms against 104 ms in one process, where the profile says
    # 100 ms), which is no measurement's fault. Across hosts the client adds to the server's TTFT
    # what it adds in one process: p95 of (measured - truth) per request, within a few ms.
    added = {
        name: _added_ttft_ms(frame, read_truth(path))
        for name, frame, path in (("hosts", df, str(tmp_path / "multi-truth.jsonl")), ("one", one_df, single_truth))
    }
    assert all(abs(np.median(a)) < 2.0 for a in added.values()), {
        k: np.percentile(a, [50, 95]) for k, a in added.items()
    }
    assert np.percentile(added["hosts"], 95) < np.percentile(added["one"], 95) + 10.0, {
        k: np.percentile(a, [50, 95, 99]) for k, a in added.items()
    }
    # the same load: each run kept its 30 users busy, at the rate its latencies allow (Little's law)
    for s, frame in ((summary, df), (one, one_df)):
        ok = frame[
            frame["ok"] & (frame["wall_send"] >= s["window"]["start"]) & (frame["wall_send"] <= s["window"]["end"])
        ]
        busy = s["overall"]["throughput"]["requests_per_s"] * ok["e2e_s"].mean()
        assert 0.85 * 30 < busy <= 30.5, (busy, s["overall"]["throughput"])


def _added_ttft_ms(df, truth) -> np.ndarray:
    """What the client adds to the server's TTFT, per successful request, in ms."""
    t = {x["request_id"]: x for x in truth}
    ok = df[df["ok"]]
    server = np.array([t[r]["first_token"] - t[r]["arrival"] for r in ok["request_id"]])
    return (ok["ttft_s"].to_numpy() - server) * 1000.0


def test_worker_lost_across_hosts(hosts, tmp_path):
    code, df, summary, truth = run_cluster(hosts, tmp_path, "lost", seconds=14, kill_after=5)
    lost = [w for w in summary["workers"].values() if w["lost_at"] is not None]
    assert len(lost) == 1, summary["workers"]
    survivor = [w for w in summary["workers"].values() if w["lost_at"] is None][0]
    assert survivor["final_received"] and survivor["missing_batches"] == []
    # nothing the master acknowledged is missing: every batch number up to the last received is there
    assert lost[0]["missing_batches"] == [] and lost[0]["records"] > 0
    truth_ids = {t["request_id"] for t in truth}
    assert df["request_id"].is_unique and set(df["request_id"]) <= truth_ids
    assert np.isfinite(df.loc[df["ok"], "ttft_s"]).all()
