"""Several replicas as one target, against each replica's own truth log: the suite's spread over two
simulators (each record's backend is the replica that logged it), a slowed replica flagged, one
replica killed mid-run and restarted on its port (its requests failed on it, none lost, the spread
leaves it and probes it back at a bounded pace), and nginx in front of two replicas with its
X-Upstream header (each record's backend is the one nginx named; a replica killed behind it shows
where and when the failures came and when it served again)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from targets import nginx
from tests.helpers import ROOT, free_port, read_results, read_truth, run_locust, start_locust, stop, wait_for_lines

pytestmark = pytest.mark.process

SLOW_PROFILE = """kind: fixed
description: the fixed profile with four times its time to first token
model: sim-model
ttft_s: 0.4
itl_s: 0.02
stream_interval: 1
max_model_len: 1048576
"""


STARTED: list = []  # every replica a test started: stopped after it, whatever failed (the autouse fixture)


@pytest.fixture(autouse=True)
def _stop_replicas():
    yield
    while STARTED:
        STARTED.pop().stop()


class Replica:
    """One simulator process on a port of its own, killed (SIGKILL) and started again on that port."""

    def __init__(self, port: int, truth: str, profile: str = "fixed", log: str | None = None):
        self.port, self.truth, self.profile, self.log = port, truth, profile, log or truth + ".log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, truth: str | None = None) -> Replica:
        cmd = [
            sys.executable,
            "-m",
            "simulator",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--profile",
            self.profile,
            "--truth-log",
            truth or self.truth,
        ]
        out = open(self.log, "a")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        STARTED.append(self)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with open(self.log) as f:
                if f.read().count("listening on") > getattr(self, "_starts", 0):
                    self._starts = getattr(self, "_starts", 0) + 1
                    return self
            assert self.proc.poll() is None, open(self.log).read()[-2000:]
            time.sleep(0.05)
        raise AssertionError(f"simulator on {self.port} did not start")

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


def backend_of_truth(*logs: tuple[str, list[str]]) -> dict[str, str]:
    """request id -> the backend whose truth log holds it."""
    out = {}
    for backend, paths in logs:
        for path in paths:
            for t in read_truth(path) if os.path.exists(path) else []:
                assert t["request_id"] not in out, t["request_id"]
                out[t["request_id"]] = backend
    return out


def unlogged_on_the_killed_replica(ok, backend: str, killed: float) -> None:
    """Successes missing from the truth logs: replies the killed replica finished just before its
    SIGKILL, whose truth-log lines it had not written yet. A few, on it, ended by the kill."""
    assert len(ok) <= 6 and (ok["backend"] == backend).all(), ok[["backend", "wall_send"]]
    assert (ok["wall_send"] + ok["e2e_s"] < killed + 0.5).all(), ok[["wall_send", "e2e_s"]]


LOAD = ("--max-tokens-override", "24", "--seed", "5", "--stop-timeout", "20")


@pytest.fixture(scope="module")
def spread(tmp_path_factory):
    """least-outstanding over a fixed replica and one four times slower to its first token."""
    tmp = str(tmp_path_factory.mktemp("spread"))
    slow = os.path.join(tmp, "slow.yaml")
    with open(slow, "w") as f:
        f.write(SLOW_PROFILE)
    fast_r = Replica(free_port(), os.path.join(tmp, "fast.jsonl")).start()
    slow_r = Replica(free_port(), os.path.join(tmp, "slow.jsonl"), profile=slow).start()
    try:
        proc = run_locust(
            "--host",
            f"{fast_r.url},{slow_r.url}/",
            "--balance",
            "least-outstanding",
            "-u",
            "8",
            "-r",
            "8",
            "-t",
            "8s",
            "--results-dir",
            tmp,
            "--run-id",
            "spread",
            "--server-metrics",
            f"{fast_r.url}/metrics,{slow_r.url}/metrics",
            "--server-metrics-interval",
            "1s",
            *LOAD,
        )
    finally:
        fast_r.stop()
        slow_r.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, summary = read_results(tmp, "spread")
    truth = backend_of_truth((fast_r.url, [fast_r.truth]), (slow_r.url, [slow_r.truth]))
    return df, summary, truth, fast_r.url, slow_r.url, os.path.join(tmp, "spread")


def test_each_record_names_the_replica_that_served_it(spread):
    df, summary, truth, fast, slow, _ = spread
    assert df["request_id"].is_unique and set(df["request_id"]) == set(truth)
    assert df["ok"].all()
    assert (df["backend"] == df["request_id"].map(truth)).all()
    # the per-backend blocks hold each replica's records of the window, as the truth counts them
    w = summary["window"]
    inside = df[(df["wall_send"] >= w["start"]) & (df["wall_send"] <= w["end"])]
    for url in (fast, slow):
        assert summary["by_backend"][url]["requests"]["sent"] == int((inside["backend"] == url).sum()) > 0
    assert sum(b["requests"]["sent"] for b in summary["by_backend"].values()) == summary["overall"]["requests"]["sent"]


def test_the_slowed_replica_is_flagged_with_its_figures(spread):
    df, summary, _, fast, slow, folder = spread
    check = summary["backends"]
    assert check["source"] == "spread" and slow in check["flagged"]
    row = {b["backend"]: b for b in check["backends"]}[slow]
    assert any(f.startswith("slower: TTFT p50 4") for f in row["flags"]), row["flags"]
    # least-outstanding: the slow replica holds each request longer, so it gets fewer of them
    assert row["share"] < 0.5
    report = open(os.path.join(folder, "report.md")).read()
    assert "### By backend" in report and "slower: TTFT p50" in report and slow in report


def test_each_replica_is_scraped_and_its_own_count_stands_beside_the_clients(spread):
    df, summary, truth, fast, slow, folder = spread
    by_source = summary["server_metrics"]["by_source"]
    for url in (fast, slow):
        served = sum(1 for backend in truth.values() if backend == url)
        assert (
            by_source[f"{url}/metrics"]["counter_deltas"]["vllm:request_success_total"]
            == served
            == int((df["backend"] == url).sum())
        )
    report = open(os.path.join(folder, "report.md")).read()
    header = next(
        line
        for line in report.splitlines()
        if line.startswith("| backend | sent | server ok, whole run (its metrics) |")
    )
    assert header


def test_a_replica_killed_mid_run_fails_on_it_is_left_and_probed_back(tmp_path):
    tmp = str(tmp_path)
    a = Replica(free_port(), os.path.join(tmp, "a.jsonl")).start()
    b = Replica(free_port(), os.path.join(tmp, "b.jsonl")).start()
    log = os.path.join(tmp, "locust.log")
    try:
        proc = start_locust(
            "--headless",
            "--host",
            f"{a.url},{b.url}",
            "--balance",
            "round-robin",
            "-u",
            "6",
            "-r",
            "6",
            "-t",
            "14s",
            "--results-dir",
            tmp,
            "--run-id",
            "kill",
            *LOAD,
            log_path=log,
        )
        wait_for_lines(b.truth, 10)
        killed = time.time()
        b.kill()
        time.sleep(4)
        b.start(os.path.join(tmp, "b2.jsonl"))
        restarted = time.time()
        code = stop(proc, 90)
    finally:
        a.stop()
        b.stop()
    text = open(log).read()
    assert code == 1, text[-3000:]  # request failures: the run did not end as if nothing happened
    df, summary = read_results(tmp, "kill")
    truth = backend_of_truth((a.url, [a.truth]), (b.url, [b.truth, os.path.join(tmp, "b2.jsonl")]))
    assert df["request_id"].is_unique
    ok = df[df["ok"]]
    logged = ok["request_id"].isin(truth)
    assert (ok.loc[logged, "backend"] == ok.loc[logged, "request_id"].map(truth)).all()
    unlogged_on_the_killed_replica(ok[~logged], b.url, killed)
    failed = df[~df["ok"] & (df["error"] != "stopped")]
    assert len(failed) >= 1 and (failed["backend"] == b.url).all(), failed[["backend", "error"]]
    assert set(failed["error"]) <= {"stream_truncated", "connect_error"}, failed["error"].value_counts()
    # in flight when it died, or sent before the first refusal took it out: a few, never a flood
    assert len(failed) <= 12, failed[["wall_send", "error", "error_detail"]]
    assert (failed["wall_send"] < restarted).all()
    # nothing sent to it while it was out, except what the spread had sent before it knew
    between = df[(df["backend"] == b.url) & (df["wall_send"] > killed + 1.0) & (df["wall_send"] < restarted)]
    assert between.empty, between[["wall_send", "error"]]
    # back in the spread after the restart: served there, and logged by the new process
    assert ((ok["backend"] == b.url) & (ok["wall_send"] > restarted)).sum() >= 3
    out = re.search(r"backend (\S+) refused a connection: out of the spread", text)
    back = re.search(r"backend (\S+) answers again after ([0-9.]+) s out of the spread \((\d+) probes in all\)", text)
    assert out and back and out.group(1) == back.group(1) == b.url, text[-3000:]
    down_s, probes = float(back.group(2)), int(back.group(3))
    assert 2.0 < down_s < 10.0 and 1 <= probes <= down_s + 1, (down_s, probes)  # at most one probe a second
    outage = {o["backend"]: o for o in summary["backends"]["outages"]}
    assert set(outage) == {b.url} and outage[b.url]["failed"] == len(failed)
    assert outage[b.url]["recovery_s"] is not None and 2.0 < outage[b.url]["recovery_s"] < 12.0
    report = open(os.path.join(tmp, "kill", "report.md")).read()
    assert "Failures by backend, in time" in report and b.url in report


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)


@contextmanager
def balancer(tmp: str, replicas: list[Replica], fail_timeout_s: int = 10, pinned: bool = False):
    """nginx (targets/nginx.py) in front of the replicas, on a free port: yields its URL. `pinned`:
    every request hashed to one replica (a balancer that pins, as a session-affine one can)."""
    port = free_port()
    conf = os.path.join(tmp, "nginx.conf")
    text = nginx.config(
        tmp, f"127.0.0.1:{port}", [f"127.0.0.1:{r.port}" for r in replicas], fail_timeout_s=fail_timeout_s
    )
    if pinned:
        text = text.replace("upstream replicas {", 'upstream replicas {\n        hash "one-key";', 1)
    with open(conf, "w") as f:
        f.write(text)
    proc = subprocess.Popen(
        [nginx_binary(), "-p", tmp, "-c", conf],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(os.path.join(tmp, "nginx.pid")) and time.monotonic() < deadline:
            assert proc.poll() is None, open(os.path.join(tmp, "error.log")).read()
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)


needs_nginx = pytest.mark.skipif(
    nginx_binary() is None, reason="nginx is not installed (.ci/run installs Debian's nginx)"
)


@needs_nginx
def test_behind_nginx_each_record_names_its_replica_and_a_killed_one_shows_when_it_failed_and_recovered(tmp_path):
    tmp = str(tmp_path)
    a = Replica(free_port(), os.path.join(tmp, "a.jsonl")).start()
    b = Replica(free_port(), os.path.join(tmp, "b.jsonl")).start()
    try:
        with balancer(tmp, [a, b], fail_timeout_s=2) as url:
            proc = start_locust(
                "--headless",
                "--host",
                url,
                "--backend-header",
                "X-Upstream",
                "-u",
                "6",
                "-r",
                "6",
                "-t",
                "14s",
                "--results-dir",
                tmp,
                "--run-id",
                "lb-kill",
                *LOAD,
                log_path=os.path.join(tmp, "locust.log"),
            )
            wait_for_lines(b.truth, 10)
            killed = time.time()
            b.kill()
            time.sleep(3)
            b.start(os.path.join(tmp, "b2.jsonl"))
            code = stop(proc, 90)
    finally:
        a.stop()
        b.stop()
    assert code == 1, open(os.path.join(tmp, "locust.log")).read()[-3000:]
    df, summary = read_results(tmp, "lb-kill")
    name_b = f"127.0.0.1:{b.port}"
    assert df["request_id"].is_unique
    failed = df[~df["ok"] & (df["error"] != "stopped")]
    # the streams nginx was relaying from the killed replica, cut short, named by nginx's header
    assert len(failed) >= 1 and (failed["backend"] == name_b).all(), failed[["backend", "error"]]
    assert set(failed["error"]) <= {"stream_truncated", "http_5xx"}, failed["error"].value_counts()
    (outage,) = summary["backends"]["outages"]
    assert outage["backend"] == name_b and outage["failed"] == len(failed)
    assert killed - 1.0 < outage["first_failure"] < killed + 3.0
    assert (
        outage["recovered_at"] is not None and outage["recovered_at"] > killed + 2.0
    )  # served by b again after its restart
    ok = df[df["ok"]]
    truth = backend_of_truth((f"127.0.0.1:{a.port}", [a.truth]), (name_b, [b.truth, os.path.join(tmp, "b2.jsonl")]))
    # nginx names every replica it tried ("b, a" when b refused and a served): the record the last
    logged = ok["request_id"].isin(truth)
    assert (ok.loc[logged, "backend"] == ok.loc[logged, "request_id"].map(truth)).all()
    unlogged_on_the_killed_replica(ok[~logged], name_b, killed)
    assert set(df["backend"]) == {f"127.0.0.1:{a.port}", name_b} == set(summary["by_backend"])
    assert summary["backends"]["source"] == "header"
    report = open(os.path.join(tmp, "lb-kill", "report.md")).read()
    assert "Failures by backend, in time" in report and name_b in report


def test_a_replica_that_fails_the_start_check_is_named_before_any_load(tmp_path):
    tmp = str(tmp_path)
    up = Replica(free_port(), os.path.join(tmp, "up.jsonl")).start()
    down = f"http://127.0.0.1:{free_port()}"
    try:
        proc = run_locust(
            "--host", f"{up.url},{down}", "-u", "1", "-t", "5s", "--results-dir", tmp, "--run-id", "check", timeout=60
        )
    finally:
        up.stop()
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = f"--host: cannot connect to {down.split('//')[1]} (Connection refused, 3 attempts); check the address and that the server is up (replica 2 of 2 in --host)"
    assert line in proc.stderr, proc.stderr[-2000:]
    assert not os.path.exists(up.truth) or not read_truth(up.truth)  # no request was sent


CONVERSATIONS = """
name: conversations
templates: {templates}
classes:
  chat:
    weight: 1
    input_chars: {{min: 30, max: 120}}
    output_tokens: {{min: 3, max: 6}}
    session: {{turns: 3, think_time_s: {{min: 0.1, max: 0.2}}}}
"""


def test_sticky_keeps_every_turn_of_a_conversation_on_one_replica(tmp_path):
    tmp = str(tmp_path)
    spec = os.path.join(tmp, "conversations.yaml")
    with open(spec, "w") as f:
        f.write(CONVERSATIONS.format(templates=os.path.join(ROOT, "workloads", "templates.jsonl")))
    a = Replica(free_port(), os.path.join(tmp, "a.jsonl")).start()
    b = Replica(free_port(), os.path.join(tmp, "b.jsonl")).start()
    try:
        proc = run_locust(
            "--host",
            f"{a.url},{b.url}",
            "--balance",
            "sticky",
            "--workload",
            spec,
            "-u",
            "6",
            "-r",
            "6",
            "-t",
            "3s",
            "--results-dir",
            tmp,
            "--run-id",
            "sticky",
            "--seed",
            "2",
            "--stop-timeout",
            "20",
        )
    finally:
        a.stop()
        b.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, _ = read_results(tmp, "sticky")
    truth = backend_of_truth((a.url, [a.truth]), (b.url, [b.truth]))
    assert df["ok"].all() and (df["backend"] == df["request_id"].map(truth)).all()
    per_session = df[df["turn"] >= 1].groupby("session_id")["backend"]
    assert (per_session.nunique() == 1).all()  # every turn where the first went
    assert (per_session.size() >= 2).sum() >= 6  # conversations of several turns
    assert set(per_session.first()) == {a.url, b.url}  # the conversations spread over both


@needs_nginx
def test_a_balancer_pinned_to_one_replica_is_flagged(tmp_path):
    tmp = str(tmp_path)
    a = Replica(free_port(), os.path.join(tmp, "a.jsonl")).start()
    b = Replica(free_port(), os.path.join(tmp, "b.jsonl")).start()
    try:
        with balancer(tmp, [a, b], pinned=True) as url:
            proc = run_locust(
                "--host",
                url,
                "--backend-header",
                "X-Upstream",
                "--backend-count",
                "2",
                "-u",
                "4",
                "-r",
                "4",
                "-t",
                "3s",
                "--results-dir",
                tmp,
                "--run-id",
                "pinned",
                *LOAD,
            )
    finally:
        a.stop()
        b.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, summary = read_results(tmp, "pinned")
    served = set(df["backend"])
    assert len(served) == 1 and len(df) >= 10  # nginx sent every request to one replica
    logs = {f"127.0.0.1:{a.port}": a.truth, f"127.0.0.1:{b.port}": b.truth}
    (one,) = served
    assert len(read_truth(logs[one])) == len(df)  # its own log holds them all
    check = summary["backends"]
    assert check["unseen"] == 1 and check["backends"][0]["share"] == 1.0 and check["backends"][0]["fair_share"] == 0.5
    assert check["flagged"] == [one, "1 of the 2 replicas (--backend-count) named in no reply"]
    assert check["backends"][0]["flags"][0].startswith(
        f"share 100.0% of {check['backends'][0]['sent']} requests against a fair 50.0%"
    )
