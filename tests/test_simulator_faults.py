"""Fault injection: each fault, forced with rate 1, seen from the client and in the truth log."""

from __future__ import annotations

import json
import socket
import time
from time import perf_counter

import pytest

from tests.test_simulator import Conn, chat, content_events, start_sim, write_truth_flush_wait

pytestmark = [pytest.mark.process, pytest.mark.timing]  # stall and gap timings: tests/conftest.py

FAST = {"kind": "fixed", "ttft_s": 0.01, "itl_s": 0.002, "max_model_len": 100000}
BATCH = {
    "kind": "batch",
    "scheduler": "chunked",
    "max_num_seqs": 8,
    "max_num_batched_tokens": 512,
    "step_base_s": 0.003,
    "per_seq_s": 0.0,
    "per_prefill_token_s": 0.0,
}


def sim_with(tmp_path, fault, profile=FAST, name="f"):
    return start_sim(tmp_path, "--fault", fault, profile=profile, name=name)


@pytest.mark.parametrize("name,status", [("http_429", 429), ("http_500", 500), ("http_503", 503)])
def test_http_error_faults(tmp_path, name, status):
    sim = sim_with(tmp_path, f"{name}=1")
    try:
        c = Conn(sim.port)
        _, st, hdrs, body = c.request("POST", "/v1/chat/completions", chat(5), {"X-Request-Id": "e1"})
        assert st == status and json.loads(body)["error"]["code"] == status
        if status == 429:
            assert hdrs["retry-after"] == "1"
        # the connection stays usable
        _, st, _, _ = c.request("GET", "/health")
        assert st == 200
        c.close()
        r = write_truth_flush_wait(sim, 1)[0]
        assert r["request_id"] == "e1" and r["status"] == status and r["fault"] == name and r["outcome"] == name
        assert r["output_tokens"] == 0
    finally:
        sim.stop()


@pytest.mark.parametrize("profile", [FAST, BATCH], ids=["fixed", "batch"])
def test_mid_stream_error(tmp_path, profile):
    sim = sim_with(tmp_path, "mid_stream_error=1:3", profile)
    try:
        c = Conn(sim.port)
        _, st, _, ev = c.request("POST", "/v1/chat/completions", chat(10), {"X-Request-Id": "m1"})
        assert st == 200
        data = [d for _, d in ev]
        assert data[-1] == "[DONE]"
        err = json.loads(data[-2])
        assert err["error"]["code"] == 500 and err["error"]["message"]
        assert len(content_events(ev)) == 3
        c.close()
        r = write_truth_flush_wait(sim, 1)[0]
        assert r["fault"] == "mid_stream_error" and r["output_tokens"] == 3 and r["status"] == 200
    finally:
        sim.stop()


@pytest.mark.parametrize("name", ["cut_close", "cut_reset"])
def test_cut_faults(tmp_path, name):
    sim = sim_with(tmp_path, f"{name}=1:4", BATCH)
    try:
        c = Conn(sim.port)
        c.send("POST", "/v1/chat/completions", chat(10), {"X-Request-Id": "c1"})
        st, _ = c.read_head()
        assert st == 200
        got = 0
        with pytest.raises((ConnectionError, OSError)):
            for _, data in c.iter_chunks():
                got += data.count(b'"content"')
        assert got == 4
        if name == "cut_close":  # a clean FIN: reading gives EOF, not an error
            s = socket.create_connection(("127.0.0.1", sim.port))
            body = json.dumps(chat(10)).encode()
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
            buf = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                buf += d
            assert buf.count(b'"content"') == 4 and not buf.endswith(b"0\r\n\r\n")
            s.close()
        c.close()
        r = write_truth_flush_wait(sim, 1)[0]
        assert r["fault"] == name and r["outcome"] == name and r["output_tokens"] == 4
    finally:
        sim.stop()


def test_cut_reset_is_a_reset(tmp_path):
    sim = sim_with(tmp_path, "cut_reset=1:2")
    try:
        s = socket.create_connection(("127.0.0.1", sim.port))
        body = json.dumps(chat(50)).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
        with pytest.raises(ConnectionResetError):
            for _ in range(100):
                if not s.recv(65536):
                    break
                time.sleep(0.01)
        s.close()
    finally:
        sim.stop()


@pytest.mark.parametrize("profile", [FAST, BATCH], ids=["fixed", "batch"])
def test_stall_first(tmp_path, profile):
    sim = sim_with(tmp_path, "stall_first=1:0.3", profile)
    try:
        c = Conn(sim.port)
        t_send, st, _, ev = c.request("POST", "/v1/chat/completions", chat(5))
        c.close()
        ce = content_events(ev)
        assert st == 200 and len(ce) == 5
        assert 0.3 <= ce[0][0] - t_send < 0.4
        assert write_truth_flush_wait(sim, 1)[0]["fault"] == "stall_first"
    finally:
        sim.stop()


@pytest.mark.parametrize("profile", [FAST, BATCH], ids=["fixed", "batch"])
def test_stall_between(tmp_path, profile):
    sim = sim_with(tmp_path, "stall_between=1:0.3", profile)
    try:
        c = Conn(sim.port)
        _, st, _, ev = c.request(
            "POST",
            "/v1/chat/completions",
            chat(10, stream_options={"include_usage": True, "continuous_usage_stats": True}),
        )
        c.close()
        ce = content_events(ev)
        assert ce[-1][1]["usage"]["completion_tokens"] == 10
        gaps = [b[0] - a[0] for a, b in zip(ce, ce[1:])]
        assert max(gaps) >= 0.28 and sorted(gaps)[-2] < 0.1
        assert write_truth_flush_wait(sim, 1)[0]["fault"] == "stall_between"
    finally:
        sim.stop()


def test_malformed_chunk(tmp_path):
    sim = sim_with(tmp_path, "malformed_chunk=1:2")
    try:
        c = Conn(sim.port)
        _, st, _, ev = c.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 5, "stream": True})
        c.close()
        bad = 0
        good = 0
        for _, d in ev:
            if d == "[DONE]":
                continue
            try:
                json.loads(d)
                good += 1
            except json.JSONDecodeError:
                bad += 1
        assert st == 200 and bad == 1 and good == 5 and ev[-1][1] == "[DONE]"
        r = write_truth_flush_wait(sim, 1)[0]
        assert r["fault"] == "malformed_chunk" and r["output_tokens"] == 5
    finally:
        sim.stop()


def test_slow_headers(tmp_path):
    sim = sim_with(tmp_path, "slow_headers=1:0.3")
    try:
        c = Conn(sim.port)
        t = c.send("POST", "/v1/chat/completions", chat(3))
        st, _ = c.read_head()
        t_head = perf_counter() - t
        ev = c.events({})
        c.close()
        assert st == 200 and 0.3 <= t_head < 0.4 and len(content_events(ev)) == 3
        assert write_truth_flush_wait(sim, 1)[0]["fault"] == "slow_headers"
    finally:
        sim.stop()


def test_refuse(tmp_path):
    sim = sim_with(tmp_path, "refuse=1")
    try:
        s = None
        with pytest.raises((ConnectionResetError, BrokenPipeError, ConnectionError)):
            # the reset can come before gevent's connect has returned (a busy machine): it counts too
            s = socket.create_connection(("127.0.0.1", sim.port))
            body = json.dumps(chat(3)).encode()
            time.sleep(0.05)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
            if not s.recv(100):
                raise ConnectionError("eof")
        if s is not None:
            s.close()
        r = write_truth_flush_wait(sim, 1)[0]
        assert r["fault"] == "refuse" and r["request_id"] is None
    finally:
        sim.stop()


def test_fault_rate_is_seeded_and_partial(tmp_path):
    """rate 0.5: about half the requests fail, the same ones for the same seed."""
    outcomes = []
    for run in range(2):
        sim = start_sim(tmp_path, "--fault", "http_500=0.5", "--seed", "7", profile=FAST, name=f"r{run}")
        try:
            c = Conn(sim.port)
            outcomes.append(
                [c.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1})[1] for _ in range(40)]
            )
            c.close()
        finally:
            sim.stop()
    assert outcomes[0] == outcomes[1]
    assert 8 <= outcomes[0].count(500) <= 32 and set(outcomes[0]) == {200, 500}


def test_profile_faults_field(tmp_path):
    sim = start_sim(tmp_path, profile=dict(FAST, faults={"http_503": {"rate": 1.0}}))
    try:
        c = Conn(sim.port)
        assert c.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1})[1] == 503
        c.close()
    finally:
        sim.stop()
