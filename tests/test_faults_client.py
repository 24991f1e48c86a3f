"""The client's side of failures: retries (counted, never hidden), Retry-After, cancellation on
purpose, the total timeout, Ctrl-C on a headless run, and an unreachable host."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager

import numpy as np
import pytest

from core.durations import Timeouts
from metrics.record import ERROR_CLASSES
from plugin.options import RETRYABLE
from plugin.plan import RunPlan
from plugin.users import exchange_class, parse_retry_after, retry_wait
from tests.helpers import (
    LOCUST,
    ROOT,
    free_port,
    read_results,
    read_truth,
    run_locust,
    simulator,
    start_locust,
    wait_for_lines,
)
from users.stream import Exchange, StreamClient

pytestmark = pytest.mark.process

RETRY_ID = re.compile(r"^(.*)-r(\d+)$")


def slow_profile(tmp, ttft=0.05, itl=0.05):
    path = tmp / "slow.yaml"
    path.write_text(f"kind: fixed\nttft_s: {ttft}\nitl_s: {itl}\n")
    return str(path)


# -- retries -------------------------------------------------------------------------------------


def exchange(status=0, error="", retry_after=""):
    ex = Exchange()
    ex.status, ex.error, ex.retry_after = status, error, retry_after
    return ex


def settings(**kw):
    return RunPlan(
        retry=kw.get("retry", 2),
        retry_on=kw.get("retry_on", ("http_429", "http_5xx", "connect_error")),
        retry_max_wait_s=kw.get("max_wait", 30.0),
    )


def test_retry_waits():
    s = settings(max_wait=10.0)
    assert retry_wait(s, exchange(429, retry_after="3"), 1) == 3.0  # Retry-After honoured
    assert retry_wait(s, exchange(429, retry_after="120"), 1) == 10.0  # ... up to the cap
    assert retry_wait(s, exchange(429), 1) == 0.5  # no header: the backoff
    assert retry_wait(s, exchange(503), 1) == 0.5 and retry_wait(s, exchange(503), 3) == 2.0
    assert retry_wait(settings(max_wait=1.0), exchange(500), 5) == 1.0
    assert retry_wait(s, exchange(0, "connect_error"), 1) == 0.5
    assert retry_wait(s, exchange(200), 1) is None  # a success (or a failure only the body shows)
    assert retry_wait(s, exchange(400), 1) is None  # http_4xx not asked for
    assert retry_wait(s, exchange(200, "timeout"), 1) is None
    assert retry_wait(s, exchange(200, "cancelled"), 1) is None  # never: it was on purpose
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past
    assert parse_retry_after("soon") is None and parse_retry_after("") is None
    assert set(RETRYABLE) < set(ERROR_CLASSES) and exchange_class(exchange(404)) == "http_4xx"


def test_retries_are_records_of_their_own(tmp_path):
    """429 (Retry-After: 1) and 503 (backoff 0.5 s, then 1 s) answers are retried up to twice;
    each attempt is its own record, the waits are kept, and summary.json counts the retries."""
    truth_path = str(tmp_path / "truth.jsonl")
    with simulator(
        "--profile",
        "fixed",
        "--seed",
        "3",
        "--fault",
        "http_429=0.25",
        "--fault",
        "http_503=0.15",
        truth_log=truth_path,
    ) as url:
        proc = run_locust(
            "--host",
            url,
            "--model",
            "sim-model",
            "-u",
            "8",
            "-r",
            "8",
            "-t",
            "10s",
            "--max-tokens-override",
            "8",
            "--retry",
            "2",
            "--retry-max-wait",
            "5s",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "retry",
            "--stop-timeout",
            "30",
            timeout=150,
        )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    df, summary = read_results(str(tmp_path), "retry")
    truth = read_truth(truth_path)
    assert df["request_id"].is_unique
    assert set(df["request_id"]) == {t["request_id"] for t in truth}  # every attempt reached the server once
    rows = df.set_index("request_id")
    retries = [rid for rid in rows.index if RETRY_ID.match(rid)]
    assert len(retries) >= 10
    waits = {"http_429": [], "http_5xx": []}
    for rid in retries:
        base, n = RETRY_ID.match(rid).groups()
        n = int(n)
        assert 1 <= n <= 2
        prev = rows.loc[base if n == 1 else f"{base}-r{n - 1}"]
        assert prev["error"] in ("http_429", "http_5xx"), (rid, prev["error"])
        gap = rows.at[rid, "t_send"] - (prev["t_send"] + prev["e2e_s"])
        expected = 1.0 if prev["error"] == "http_429" else 0.5 * 2 ** (n - 1)
        assert expected - 0.01 <= gap < expected + 5.0, (rid, prev["error"], gap)
        waits[prev["error"]].append(gap)
        assert (
            rows.at[rid, "request_class"] == prev["request_class"]
            and rows.at[rid, "input_chars"] == prev["input_chars"]
        )
    assert waits["http_429"] and waits["http_5xx"]
    # every retryable failure of a first or second attempt sent before the end has its retry
    end = summary["window"]["end"] - 8.0
    for rid, r in rows.iterrows():
        m = RETRY_ID.match(rid)
        n = int(m.group(2)) if m else 0
        if r["error"] in ("http_429", "http_5xx") and n < 2 and r["wall_send"] < end:
            base = m.group(1) if m else rid
            assert f"{base}-r{n + 1}" in rows.index, f"{rid} ({r['error']}) was not retried"
    w = summary["window"]
    inside = df[(df["wall_send"] >= w["start"]) & (df["wall_send"] <= w["end"])]
    assert summary["overall"]["requests"]["retries"] == int(inside["request_id"].str.contains(r"-r\d+$").sum())
    assert summary["overall"]["requests"]["failed"] == int((~inside["ok"]).sum())  # failed attempts stay failures


# -- cancellation and the total timeout ----------------------------------------------------------


@pytest.mark.timing
def test_cancelled_streams_are_counted_apart(tmp_path):
    """--cancel-rate 0.4 --cancel-after 0.4s on 1 s streams: about 40 % are aborted on purpose;
    the server sees the client go, and the summary counts them apart from failures."""
    truth_path = str(tmp_path / "truth.jsonl")
    with simulator("--profile", slow_profile(tmp_path), truth_log=truth_path) as url:
        proc = run_locust(
            "--host",
            url,
            "--model",
            "sim-model",
            "-u",
            "10",
            "-r",
            "10",
            "-t",
            "8s",
            "--max-tokens-override",
            "20",
            "--cancel-rate",
            "0.4",
            "--cancel-after",
            "0.4s",
            "--seed",
            "9",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "cancel",
            "--stop-timeout",
            "30",
            timeout=150,
        )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    df, summary = read_results(str(tmp_path), "cancel")
    truth = {t["request_id"]: t for t in read_truth(truth_path)}
    assert set(df["request_id"]) == set(truth)
    cancelled = df[df["error"] == "cancelled"]
    share = len(cancelled) / len(df)
    assert 0.2 < share < 0.6, share
    assert set(df["error"]) == {"", "cancelled"}
    for _, r in cancelled.iterrows():
        t = truth[r["request_id"]]
        assert t["outcome"] == "client_disconnected" and t["output_tokens"] < 20
        assert "on purpose" in r["error_detail"] and r["e2e_s"] < 0.4 + 0.5
    req = summary["overall"]["requests"]
    w = summary["window"]
    inside = df[(df["wall_send"] >= w["start"]) & (df["wall_send"] <= w["end"])]
    assert req["cancelled"] == int((inside["error"] == "cancelled").sum()) > 0
    assert req["failed"] == 0 and "cancelled" not in req["by_error"]
    assert summary["overall"]["goodput"]["good_fraction"] == 1.0  # not a server failure


@pytest.mark.timing
def test_total_timeout_is_a_censored_timeout(tmp_path):
    with simulator("--profile", slow_profile(tmp_path, ttft=0.05, itl=0.1)) as url:
        proc = run_locust(
            "--host",
            url,
            "--model",
            "sim-model",
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "4s",
            "--max-tokens-override",
            "30",
            "--timeout-total",
            "0.6s",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "total",
            "--stop-timeout",
            "30",
            timeout=150,
        )
    df, summary = read_results(str(tmp_path), "total")
    assert len(df) >= 8 and (df["error"] == "timeout").all(), proc.stderr[-2000:]
    assert (df["error_detail"] == "total timeout 0.6s").all()
    assert (df["n_chunks"] > 2).all() and np.isfinite(df["ttft_s"]).all()  # the timings reached are kept
    assert ((df["e2e_s"] > 0.3) & (df["e2e_s"] < 0.6 + 0.5)).all()
    assert summary["overall"]["requests"]["by_error"] == {"timeout": summary["overall"]["requests"]["sent"]}


# -- Ctrl-C ------------------------------------------------------------------------------------


def test_ctrl_c_writes_partial_results_marked_incomplete(tmp_path):
    truth_path = str(tmp_path / "truth.jsonl")
    with simulator("--profile", "fixed", truth_log=truth_path) as url:
        proc = start_locust(
            "--headless",
            "--host",
            url,
            "--model",
            "sim-model",
            "-u",
            "10",
            "-r",
            "10",
            "-t",
            "120s",
            "--max-tokens-override",
            "10",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "sigint",
            log_path=str(tmp_path / "sigint.log"),
        )
        try:
            wait_for_lines(truth_path, 40)
            proc.send_signal(signal.SIGINT)
            t0 = time.monotonic()
            proc.wait(60)
            assert time.monotonic() - t0 < 60
        finally:
            if proc.poll() is None:
                proc.kill()
    log = (tmp_path / "sigint.log").read_text()
    assert proc.returncode == 130, log[-3000:]  # exit_codes.INTERRUPTED
    df, summary = read_results(str(tmp_path), "sigint")
    assert summary["complete"] is False
    assert len(df) >= 30 and summary["records"]["total"] == len(df)
    with open(tmp_path / "sigint" / "run.json") as f:
        assert json.load(f)["complete"] is False


# -- unreachable host -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra", [(), ("--model", "m"), ("--master", "--expect-workers", "1")], ids=["no-model", "model", "master"]
)
def test_unreachable_host_is_one_line_and_exit_code_2(tmp_path, extra):
    if "--master" in extra:
        extra = (*extra, "--master-bind-host", "127.0.0.1", "--master-bind-port", str(free_port()))
    port = free_port()  # nothing listens there
    t0 = time.monotonic()
    proc = run_locust(
        "--host",
        f"http://127.0.0.1:{port}",
        "-t",
        "30s",
        "--timeout-connect",
        "3s",
        "--results-dir",
        str(tmp_path),
        *extra,
        timeout=60,
    )
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    # refused three times, 0.5 s apart (one reset does not refuse a run), then one line
    assert lines[-1].startswith(
        f"error: --host: cannot connect to 127.0.0.1:{port} (Connection refused, 3 attempts); "
        "check the address and that the server is up"
    ), lines[-3:]
    assert elapsed < 45  # no hang: Locust's start-up and three refused connections
    assert not os.listdir(tmp_path)  # nothing was started


def test_unreachable_host_in_the_web_ui_is_only_a_warning(tmp_path):
    port, web = free_port(), free_port()
    proc = subprocess.Popen(
        [
            *LOCUST,
            "--host",
            f"http://127.0.0.1:{port}",
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(web),
            "--results-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read()[-2000:]
            try:
                with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                    f"http://127.0.0.1:{web}/", timeout=5
                ) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline, "the web UI did not come up"
                time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out = proc.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0]
    assert f"--host: cannot connect to 127.0.0.1:{port}" in out and "the web UI starts anyway" in out


@contextmanager
def silent_listener():
    """A 127.0.0.1 port whose accept queue is full: a new TCP connect gets no answer (the SYN is
    dropped), as with a firewalled or dead host, so a connect can time out without leaving
    this machine."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            fillers.append(s)
        time.sleep(0.2)
        probe = socket.socket()
        probe.settimeout(0.5)
        try:
            probe.connect(("127.0.0.1", port))
            pytest.skip("this kernel accepts connections beyond a full accept queue")
        except TimeoutError:
            pass
        finally:
            probe.close()
        yield port
    finally:
        for s in fillers:
            s.close()
        server.close()


def test_connect_timeout_is_a_timeout_within_the_limit():
    from gevent import spawn

    with silent_listener() as port:
        client = StreamClient(f"http://127.0.0.1:{port}", Timeouts(connect=1.0, first_token=30, idle=30, total=60), {})
        ex = Exchange()
        t0 = time.perf_counter()
        spawn(client.post, "/v1/chat/completions", b"{}", {}, ex).join(20)
        elapsed = time.perf_counter() - t0
    assert ex.error == "timeout" and ex.status == 0, (ex, ex.error_detail)
    assert 0.9 < elapsed < 5.0, elapsed


def test_host_that_does_not_answer_fails_within_the_connect_timeout(tmp_path):
    with silent_listener() as port:
        t0 = time.monotonic()
        proc = run_locust(
            "--host",
            f"http://127.0.0.1:{port}",
            "--model",
            "m",
            "-t",
            "30s",
            "--timeout-connect",
            "2s",
            "--results-dir",
            str(tmp_path),
            timeout=90,
        )
        elapsed = time.monotonic() - t0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, lines[-5:]
    assert lines[-1] == (
        f"error: --host: cannot connect to 127.0.0.1:{port} (no connection within --timeout-connect 2s); "
        "check the address and that the server is up"
    )
    assert elapsed < 60 and not os.listdir(tmp_path)


# -- a reply that was not streamed -----------------------------------------------------------------


def test_a_json_reply_to_a_streaming_request_is_not_streamed_and_paced(tmp_path):
    """A server (or a buffering gateway) that answers every streaming request with one JSON body:
    each record says it was not streamed, and users pause as after other failures that come at
    once (0.1 s doubling): a few requests per user, not thousands."""
    truth_path = str(tmp_path / "truth.jsonl")
    seconds = 6
    with simulator("--profile", "fixed", "--fault", "json_reply=1", truth_log=truth_path) as url:
        proc = run_locust(
            "--host",
            url,
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "json",
            "--model",
            "sim-model",
            "-u",
            "2",
            "-r",
            "2",
            "-t",
            f"{seconds}s",
            "--max-tokens-override",
            "8",
            timeout=120,
        )
    assert proc.returncode == 4, proc.stderr[-3000:]  # no request succeeded
    df, summary = read_results(str(tmp_path), "json")
    truth = [t for t in read_truth(truth_path) if t.get("request_id")]
    assert {t["outcome"] for t in truth} == {"json_reply"}
    assert sorted(df["request_id"]) == sorted(t["request_id"] for t in truth)  # each one recorded
    assert set(df["error"]) == {"not_streamed"}
    assert (
        df["error_detail"].str.contains("did not stream").all()
        and df["error_detail"].str.contains("application/json").all()
    )
    # paced: 0.1 + 0.2 + 0.4 + 0.8 + 1.6 + 3.2 s > 6 s, so at most 7 requests per user
    assert len(df) <= 2 * 7, len(df)
    assert summary["overall"]["requests"]["by_error"] == {"not_streamed": len(df)}
    assert "not_streamed" in ERROR_CLASSES
