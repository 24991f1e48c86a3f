"""What the suite asks of a server besides the load, against a server that misbehaves on purpose
(tests/fake_server.py, with its own log of what it served): a silent GET /version or /metrics
takes nothing from the load's time, the start check survives one refused connection and tells a
silent /v1/models from an unreachable host, and replies longer than their max_tokens are counted."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from core.errors import InputError
from plugin.server import check_reachable
from tests.fake_server import MODEL, fake_server
from tests.helpers import free_port, read_results, run_locust


@pytest.mark.process
@pytest.mark.timing  # the load's span against -t: a starved client would stretch it
def test_a_silent_version_probe_takes_nothing_from_the_load(tmp_path):
    """A gateway that routes only /v1/*: GET /version and GET /metrics (the server's version, and
    --server-metrics) are accepted and never answered. The load still runs the whole -t, and the
    window starts when the load does, so the rate summary.json states is the rate the server saw."""
    with fake_server(hold={"/version", "/metrics"}, tokens=10, gap_s=0.02) as srv:
        done = run_locust(
            "--host",
            srv.url,
            "-u",
            "2",
            "-r",
            "2",
            "-t",
            "6s",
            "--timeout-connect",
            "2s",
            "--server-metrics",
            f"{srv.url}/metrics",
            "--server-metrics-interval",
            "1s",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "silent",
            timeout=90,
        )
        served = list(srv.served)
    assert done.returncode == 0, done.stderr[-3000:]
    df, summary = read_results(str(tmp_path), "silent")
    assert sorted(df["request_id"]) == sorted(s["request_id"] for s in served)  # one record per served request
    first, last = min(s["begun"] for s in served), max(s["ended"] for s in served)
    assert last - first >= 5.0, f"the load ran {last - first:.1f} s of -t 6s"
    window = summary["window"]
    assert abs(window["start"] - first) < 0.5, "the measured window starts when the load does"
    in_window = sum(window["start"] <= s["ended"] <= window["end"] for s in served)
    assert summary["overall"]["throughput"]["requests_per_s"] == pytest.approx(in_window / window["seconds"], rel=0.05)
    assert summary["overall"]["throughput"]["requests_per_s"] == pytest.approx(len(served) / (last - first), rel=0.15)
    assert summary["setup"]["server_version"] is None
    said = [line for line in done.stderr.splitlines() if "server version: GET /version and GET /metrics took" in line]
    assert len(said) == 1 and "had no answer" in said[0], done.stderr[-3000:]
    said = [
        line
        for line in done.stderr.splitlines()
        if "--server-metrics: " in line and "when asked before the run" in line
    ]
    assert len(said) == 1 and "timed out" in said[0], done.stderr[-3000:]
    assert summary["server_metrics"]["scrapes"] == 0 and summary["server_metrics"]["failed_scrapes"] >= 1


@pytest.mark.unit
def test_the_start_checks_connection_is_tried_again_when_refused():
    """A server that refuses the first connection (not listening yet, or a proxy's reset) and
    listens 0.3 s later: the start check's TCP connection is tried again (0.5 s apart) and passes."""
    port = free_port()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_late():
        time.sleep(0.3)
        listener.bind(("127.0.0.1", port))
        listener.listen()

    late = threading.Thread(target=listen_late)
    late.start()
    try:
        check_reachable(f"http://127.0.0.1:{port}", 2.0)
    finally:
        late.join()
        listener.close()
    with pytest.raises(InputError, match=r"Connection refused, 3 attempts"):  # nobody listens: refused three times
        check_reachable(f"http://127.0.0.1:{port}", 2.0)


@pytest.mark.process
def test_a_server_that_never_answers_its_model_list_is_told_from_an_unreachable_one(tmp_path):
    with fake_server(hold={"/v1/models"}) as srv:
        done = run_locust(
            "--host",
            srv.url,
            "-u",
            "1",
            "-t",
            "2s",
            "--timeout-connect",
            "1s",
            "--results-dir",
            str(tmp_path),
            timeout=60,
        )
        served = list(srv.served)
    assert done.returncode == 2 and not served
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert lines == [
        f"error: --host: {srv.url} accepted a connection, but GET /v1/models got no answer in 1 s "
        "(--timeout-connect); check that the server is ready (one still loading its model may accept "
        "connections) and serves the OpenAI API there"
    ], done.stderr[-2000:]


@pytest.mark.process
def test_replies_longer_than_their_max_tokens_are_counted(tmp_path):
    """Every third request the server streams 20 tokens whatever the max_tokens (8) it was asked
    for: summary.json counts exactly those its own log says it sent too many tokens for, and one
    console line says so."""
    with fake_server(tokens=20, gap_s=0.005, ignore_every=3) as srv:
        done = run_locust(
            "--host",
            srv.url,
            "-u",
            "2",
            "-r",
            "2",
            "-t",
            "3s",
            "--max-tokens-override",
            "8",
            "--model",
            MODEL,
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "long",
            timeout=60,
        )
        served = list(srv.served)
    assert done.returncode == 0, done.stderr[-3000:]
    df, summary = read_results(str(tmp_path), "long")
    assert sorted(df["request_id"]) == sorted(s["request_id"] for s in served)
    over = {s["request_id"] for s in served if s["tokens"] > s["max_tokens"]}
    assert over and len(over) < len(served)
    assert summary["records"]["over_max_tokens"] == len(over)
    assert set(df.loc[df["output_tokens"] > df["max_tokens"], "request_id"]) == over
    said = [line for line in done.stderr.splitlines() if "max_tokens ignored" in line]
    assert len(said) == 1 and f"{len(over)} of {len(served)} replies" in said[0], done.stderr[-2000:]
