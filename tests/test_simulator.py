"""Tests of the simulator: a real process on a free port, spoken to over HTTP."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from time import perf_counter

import numpy as np
import pytest

from tests.helpers import free_port

pytestmark = pytest.mark.process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable


# ---------------------------------------------------------------- helpers
class Sim:
    def __init__(self, proc, port, truth):
        self.proc, self.port, self.truth = proc, port, truth

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def truth_lines(self):
        with open(self.truth) as f:
            return [json.loads(x) for x in f if x.strip()]


def start_sim(tmp_path, *args, profile=None, name="sim"):
    """Start ``python -m simulator`` on port 0; returns a :class:`Sim`."""
    truth = str(tmp_path / f"{name}-truth.jsonl")
    cmd = [PY, "-m", "simulator", "--port", "0", "--truth-log", truth]
    if profile is not None:
        if isinstance(profile, dict):
            path = tmp_path / f"{name}.yaml"
            import yaml

            path.write_text(yaml.safe_dump(profile))
            profile = str(path)
        cmd += ["--profile", profile]
    cmd += list(args)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("simulator listening on http://127.0.0.1:"), (
        line,
        proc.stderr.read() if proc.poll() is not None else "",
    )
    port = int(line.split(":")[2].split()[0])
    return Sim(proc, port, truth)


def write_truth_flush_wait(sim, n, timeout=3.0):
    """Wait until the truth log has at least n lines (it flushes every second)."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            lines = sim.truth_lines()
        except FileNotFoundError:
            lines = []
        if len(lines) >= n:
            return lines
        time.sleep(0.1)
    return sim.truth_lines()


class Conn:
    """A minimal keep-alive HTTP/1.1 client that stamps each SSE event."""

    def __init__(self, port, timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.f = self.sock.makefile("rb")

    def close(self):
        self.f.close()
        self.sock.close()

    def send(self, method, path, body=None, headers=None):
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        h = {"Host": "127.0.0.1", "Content-Length": str(len(data))}
        if body is not None:
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
        t = perf_counter()
        self.sock.sendall(head.encode() + data)
        return t

    def read_head(self):
        status_line = self.f.readline()
        if not status_line:
            raise ConnectionError("closed")
        status = int(status_line.split()[1])
        headers = {}
        while True:
            line = self.f.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode().partition(":")
            headers[k.strip().lower()] = v.strip()
        return status, headers

    def read_body(self, headers):
        if "content-length" in headers:
            return self.f.read(int(headers["content-length"]))
        return b"".join(c for _, c in self.iter_chunks())

    def iter_chunks(self):
        while True:
            size_line = self.f.readline()
            if not size_line:
                raise ConnectionError("closed mid-body")
            size = int(size_line.strip(), 16)
            if size == 0:
                self.f.readline()
                return
            data = self.f.read(size)
            self.f.read(2)
            yield perf_counter(), data

    def events(self, headers):
        """(arrival time, data string) for every SSE event of a chunked body."""
        out = []
        pending = b""
        for t, data in self.iter_chunks():
            pending += data
            while b"\n\n" in pending:
                ev, pending = pending.split(b"\n\n", 1)
                for line in ev.split(b"\n"):
                    if line.startswith(b"data:"):
                        out.append((t, line[5:].strip().decode()))
        return out

    def request(self, method, path, body=None, headers=None):
        t_send = self.send(method, path, body, headers)
        status, hdrs = self.read_head()
        if hdrs.get("content-type", "").startswith("text/event-stream"):
            return t_send, status, hdrs, self.events(hdrs)
        return t_send, status, hdrs, self.read_body(hdrs)


def vocabulary_pieces(text: str) -> int:
    """Tokens in simulator output: one vocabulary piece each, " word" or "." (simulator/tokens.py)."""
    return len(re.findall(r" \w+|\.", text))


def chat(max_tokens=8, stream=True, **kw):
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Hello there, how are you?"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    body.update(kw)
    return body


def content_events(events, endpoint="chat"):
    out = []
    for t, d in events:
        if d == "[DONE]":
            continue
        j = json.loads(d)
        if not j.get("choices"):
            continue
        c = j["choices"][0]
        text = c["delta"].get("content") if endpoint == "chat" else c.get("text")
        if text:
            out.append((t, j))
    return out


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.status, r.read()


def metric(text, name, **labels):
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


# ---------------------------------------------------------------- fixtures
FAST_FIXED = {"kind": "fixed", "ttft_s": 0.01, "itl_s": 0.002, "max_model_len": 100000}
BATCH = {
    "kind": "batch",
    "scheduler": "chunked",
    "max_num_seqs": 2,
    "num_gpu_blocks_override": 6250,
    "max_num_batched_tokens": 512,
    "step_base_s": 0.01,
    "per_seq_s": 0.0,
    "per_prefill_token_s": 0.0,
}


@pytest.fixture(scope="module")
def fast(tmp_path_factory):
    sim = start_sim(tmp_path_factory.mktemp("fast"), profile=FAST_FIXED, name="fast")
    yield sim
    sim.stop()


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    sim = start_sim(tmp_path_factory.mktemp("fixed"), "--model", "my-model", profile="fixed", name="fixed")
    yield sim
    sim.stop()


# ---------------------------------------------------------------- protocol shapes
def test_chat_stream_shape(fast):
    c = Conn(fast.port)
    _, status, hdrs, ev = c.request(
        "POST", "/v1/chat/completions", chat(12, stream_options={"include_usage": True}), {"X-Request-Id": "req-abc"}
    )
    c.close()
    assert status == 200 and hdrs["x-request-id"] == "req-abc"
    assert hdrs["transfer-encoding"] == "chunked"
    data = [d for _, d in ev]
    assert data[-1] == "[DONE]"
    first = json.loads(data[0])
    assert first["choices"][0]["delta"] == {"role": "assistant"}
    assert first["id"] == "req-abc" and first["object"] == "chat.completion.chunk"
    content = [json.loads(d) for d in data[1:-2]]
    assert len(content) == 12
    assert all(j["choices"][0]["delta"]["content"] for j in content)
    assert [j["choices"][0]["finish_reason"] for j in content] == [None] * 11 + ["length"]
    usage = json.loads(data[-2])
    assert usage["choices"] == [] and usage["usage"] == {
        "prompt_tokens": usage["usage"]["prompt_tokens"],
        "completion_tokens": 12,
        "total_tokens": usage["usage"]["prompt_tokens"] + 12,
    }
    # 'Hello there, how are you?' = 25 chars -> 7 tokens + 4 per message
    assert usage["usage"]["prompt_tokens"] == 11
    assert all("sim_t" not in json.loads(d) for d in data[:-1])


def test_completions_stream_shape_and_no_usage_by_default(fast):
    c = Conn(fast.port)
    _, status, _, ev = c.request(
        "POST", "/v1/completions", {"model": "m", "prompt": "你好世界 hello", "max_tokens": 5, "stream": True}
    )
    c.close()
    data = [d for _, d in ev]
    assert status == 200 and data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert len(chunks) == 5 and all(j["object"] == "text_completion" and j["choices"][0]["text"] for j in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert "usage" not in chunks[-1]


def test_non_streaming(fast):
    c = Conn(fast.port)
    _, status, hdrs, body = c.request("POST", "/v1/chat/completions", chat(7, stream=False))
    j = json.loads(body)
    assert status == 200 and j["object"] == "chat.completion"
    assert j["choices"][0]["message"]["role"] == "assistant" and j["choices"][0]["finish_reason"] == "length"
    assert j["usage"]["completion_tokens"] == 7
    _, status, _, body = c.request("POST", "/v1/completions", {"prompt": "abcdefgh", "max_tokens": 3})
    j = json.loads(body)
    assert status == 200 and j["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    assert vocabulary_pieces(j["choices"][0]["text"]) == 3
    c.close()


def test_max_completion_tokens_and_default(fast):
    c = Conn(fast.port)
    body = chat(stream=False)
    del body["max_tokens"]
    _, _, _, b = c.request("POST", "/v1/chat/completions", body)
    assert json.loads(b)["usage"]["completion_tokens"] == 256
    body["max_completion_tokens"] = 9
    _, _, _, b = c.request("POST", "/v1/chat/completions", body)
    assert json.loads(b)["usage"]["completion_tokens"] == 9
    c.close()


def test_bad_requests(fast):
    c = Conn(fast.port)
    _, status, _, body = c.request(
        "POST", "/v1/chat/completions", chat(5, stream=False, stream_options={"include_usage": True})
    )
    assert status == 400 and "error" in json.loads(body)
    _, status, _, _ = c.request("POST", "/v1/chat/completions", b"{not json")
    assert status == 400
    _, status, _, _ = c.request("POST", "/v1/completions", {"max_tokens": 3})
    assert status == 400
    _, status, _, _ = c.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 0})
    assert status == 400
    _, status, _, _ = c.request("GET", "/nope")
    assert status == 404
    # the connection is still usable
    _, status, _, _ = c.request("GET", "/health")
    assert status == 200
    c.close()


def test_continuous_usage_stats(fast):
    c = Conn(fast.port)
    _, _, _, ev = c.request(
        "POST", "/v1/chat/completions", chat(6, stream_options={"include_usage": True, "continuous_usage_stats": True})
    )
    c.close()
    chunks = [json.loads(d) for _, d in ev if d != "[DONE]"]
    assert all("usage" in j for j in chunks)
    assert [j["usage"]["completion_tokens"] for j in chunks] == [0, 1, 2, 3, 4, 5, 6, 6]


def test_models_health_metrics(fixed):
    status, body = get(fixed.port, "/v1/models")
    j = json.loads(body)
    assert status == 200 and j["data"][0]["id"] == "my-model"
    assert get(fixed.port, "/health")[0] == 200


def test_keep_alive_many_requests_one_connection(fast):
    c = Conn(fast.port)
    for i in range(20):
        stream = i % 2 == 0
        _, status, _, r = c.request("POST", "/v1/chat/completions", chat(3, stream=stream), {"X-Request-Id": f"ka-{i}"})
        assert status == 200
        if stream:
            assert r[-1][1] == "[DONE]" and len(content_events(r)) == 3
        else:
            assert json.loads(r)["id"] == f"ka-{i}"
    c.close()


def test_sim_t_only_when_asked(fast):
    c = Conn(fast.port)
    t0 = perf_counter()
    _, _, _, ev = c.request(
        "POST", "/v1/chat/completions", chat(4, stream_options={"include_usage": True}), {"X-Sim-Timestamps": "1"}
    )
    chunks = [json.loads(d) for _, d in ev if d != "[DONE]"]
    assert len(chunks) == 6 and all("sim_t" in j for j in chunks)
    for (t, _), j in zip(ev, chunks):
        assert t0 < j["sim_t"] <= t  # same clock: written before it was received
    _, _, _, ev = c.request("POST", "/v1/chat/completions", chat(4))
    assert all("sim_t" not in json.loads(d) for _, d in ev if d != "[DONE]")
    c.close()


# ---------------------------------------------------------------- truth and metrics
@pytest.mark.timing
def test_metrics_and_truth_log_match_client(tmp_path):
    sim = start_sim(tmp_path, profile=FAST_FIXED)
    try:
        seen = {}
        c = Conn(sim.port)
        for i in range(6):
            endpoint = "chat" if i % 2 == 0 else "completions"
            path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
            body = (
                chat(5 + i)
                if endpoint == "chat"
                else {"prompt": "x" * (4 * i + 1), "max_tokens": 5 + i, "stream": True}
            )
            rid = f"truth-{i}"
            t_send, status, _, ev = c.request("POST", path, body, {"X-Request-Id": rid})
            ce = content_events(ev, endpoint)
            seen[rid] = (t_send, ce[0][0], ce[-1][0], len(ce), 5 + i)
        _, _, _, body = c.request(
            "POST", "/v1/completions", {"prompt": "abcd", "max_tokens": 4}, {"X-Request-Id": "truth-ns"}
        )
        c.close()
        text = get(sim.port, "/metrics")[1].decode()
        assert (
            metric(text, "vllm:generation_tokens_total", model_name="sim-model") == sum(v[4] for v in seen.values()) + 4
        )
        assert metric(text, "vllm:request_success_total", finished_reason="length") == 7
        assert metric(text, "vllm:time_to_first_token_seconds_count") == 7
        assert metric(text, "vllm:num_requests_running") == 0
        for name in (
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
            "vllm:prompt_tokens_total",
            "vllm:e2e_request_latency_seconds_count",
            "vllm:inter_token_latency_seconds_count",
        ):
            metric(text, name)
        lines = {r["request_id"]: r for r in write_truth_flush_wait(sim, 7)}
        assert metric(text, "vllm:prompt_tokens_total") == sum(r["prompt_tokens"] for r in lines.values())
        for rid, (t_send, t_first, t_last, n_chunks, n_tok) in seen.items():
            r = lines[rid]
            assert r["outcome"] == "ok" and r["status"] == 200 and r["fault"] is None and r["stream"] is True
            assert r["output_tokens"] == n_tok and r["chunks"] == n_chunks
            assert t_send < r["arrival"] < r["first_token"] <= t_first
            assert t_first - r["first_token"] < 0.005
            assert 0 <= t_last - r["last_token"] < 0.005
        assert lines["truth-0"]["endpoint"] == "chat" and lines["truth-1"]["endpoint"] == "completions"
        assert lines["truth-ns"]["stream"] is False and lines["truth-ns"]["output_tokens"] == 4
    finally:
        sim.stop()


def test_truth_log_client_disconnect_and_sigterm_flush(tmp_path):
    sim = start_sim(tmp_path, profile={"kind": "fixed", "ttft_s": 0.01, "itl_s": 0.01})
    c = Conn(sim.port)
    c.send("POST", "/v1/chat/completions", chat(500), {"X-Request-Id": "gone"})
    c.read_head()
    it = c.iter_chunks()
    for _ in range(4):
        next(it)
    c.close()
    time.sleep(0.1)
    sim.stop()
    assert sim.proc.returncode == 0
    lines = sim.truth_lines()  # flushed on SIGTERM
    assert len(lines) == 1
    r = lines[0]
    assert r["request_id"] == "gone" and r["outcome"] == "client_disconnected"
    assert 2 <= r["output_tokens"] < 500 and r["chunks"] == r["output_tokens"]


def test_generated_request_id(fast):
    c = Conn(fast.port)
    _, _, hdrs, body = c.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1})
    c.close()
    assert hdrs["x-request-id"] == json.loads(body)["id"] and hdrs["x-request-id"].startswith("cmpl-")


# ---------------------------------------------------------------- timing
def run_queue_wait(pid: int, during) -> float:
    """Run `during()`; the mean time process `pid` then spent waiting for a CPU each time it was
    ready to run (seconds, from /proc/<pid>/schedstat: waiting time, and timeslices run), i.e. what
    the machine's load cost it meanwhile, beyond its own work."""

    def read():
        with open(f"/proc/{pid}/schedstat") as f:
            _, wait_ns, slices = (int(x) for x in f.read().split())
        return wait_ns, slices

    w0, n0 = read()
    during()
    w1, n1 = read()
    return (w1 - w0) / 1e9 / max(1, n1 - n0)


@pytest.mark.timing
def test_fixed_profile_timing(fixed):
    """ttft_s = 0.1, itl_s = 0.02 on an absolute schedule: token k of a request is due at its
    arrival + 0.1 + (k - 1) x 0.02 (rounded up to the 1 ms tick). Checked against the simulator's
    own stamps (`sim_t`, the truth log's arrival) whatever the machine's load: no token is ever
    written before it is due, and the client sees each token after it was written. How late tokens
    come is the machine's doing as much as the simulator's, so the typical token within 2 ms of
    when it is due, a median gap of 20 ms (a late token makes one gap longer and the next shorter:
    the schedule is kept) and tokens reaching the client within 15 ms are held when the simulator
    did not wait for a CPU (under 1 ms per timeslice, from its schedstat), as at low load; on a
    machine that kept it waiting they are printed, not asserted (before, a loaded machine failed
    the test on a single late token)."""
    results = []

    def one(i):
        c = Conn(fixed.port)
        t_send, _, _, ev = c.request(
            "POST", "/v1/chat/completions", chat(20), {"X-Sim-Timestamps": "1", "X-Request-Id": f"timing-{i}"}
        )
        c.close()
        results.append((f"timing-{i}", t_send, content_events(ev)))

    def requests():
        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)

    waited = run_queue_wait(fixed.proc.pid, requests)
    assert len(results) == 4
    truth = {r["request_id"]: r for r in write_truth_flush_wait(fixed, 4) if r["request_id"].startswith("timing-")}
    assert len(truth) == 4
    late, gaps, client_ttft, client_gaps, delivered = [], [], [], [], []
    for rid, t_send, ce in results:
        assert len(ce) == 20
        r = truth[rid]
        sim_t = np.array([j["sim_t"] for _, j in ce])
        got = np.array([t for t, _ in ce])
        due = r["arrival"] + 0.1 + np.arange(20) * 0.02
        assert (sim_t >= due - 0.0002).all(), (sim_t - due) * 1000  # never early (the timer's tolerance)
        assert r["first_token"] == sim_t[0] and r["last_token"] == sim_t[-1]
        assert (got >= sim_t).all() and t_send <= r["arrival"]  # one clock (CLOCK_MONOTONIC), causal
        late += list(sim_t - due)
        gaps += list(np.diff(sim_t))
        client_ttft.append(got[0] - t_send)
        client_gaps += list(np.diff(got))
        delivered += list(got - sim_t)
    assert min(client_ttft) >= 0.1
    print(
        f"median lateness {np.median(late) * 1000:.2f} ms, client TTFT {np.median(client_ttft) * 1000:.1f} ms; "
        f"the simulator waited {waited * 1000:.2f} ms for a CPU per timeslice"
    )
    if waited < 0.001:
        # the 1 ms tick, a little work, and the little it waited
        assert np.median(late) < 0.002 + waited, np.round(np.array(late) * 1000, 1)
        assert abs(np.median(gaps) - 0.02) < 0.0005, np.round(np.array(gaps) * 1000, 1)
        assert np.median(delivered) < 0.015, np.round(np.array(delivered) * 1000, 1)  # written, not held back
        assert abs(np.median(client_gaps) - 0.02) < 0.002, np.round(np.array(client_gaps) * 1000, 1)


@pytest.mark.parametrize("kind", ["fixed", "batch"])
def test_stream_interval(tmp_path, kind):
    base = FAST_FIXED if kind == "fixed" else dict(BATCH, step_base_s=0.002)
    sim = start_sim(tmp_path, profile=dict(base, stream_interval=4))
    try:
        c = Conn(sim.port)
        _, _, _, ev = c.request(
            "POST",
            "/v1/chat/completions",
            chat(10, stream_options={"include_usage": True, "continuous_usage_stats": True}),
        )
        c.close()
        ce = content_events(ev)
        assert [j["usage"]["completion_tokens"] for _, j in ce] == [1, 5, 9, 10]
        assert vocabulary_pieces("".join(j["choices"][0]["delta"]["content"] for _, j in ce)) == 10
    finally:
        sim.stop()


@pytest.mark.timing
def test_batch_engine_queueing(tmp_path):
    sim = start_sim(tmp_path, profile=BATCH)
    try:
        res = {}

        def one(i):
            c = Conn(sim.port)
            t_send, _, _, ev = c.request("POST", "/v1/chat/completions", chat(20), {"X-Request-Id": f"q{i}"})
            c.close()
            ce = content_events(ev)
            res[i] = (ce[0][0] - t_send, len(ce))

        threads = []
        for i in range(6):
            threads.append(threading.Thread(target=one, args=(i,)))
            threads[-1].start()
            time.sleep(0.005)
        time.sleep(0.05)
        text = get(sim.port, "/metrics")[1].decode()
        assert metric(text, "vllm:num_requests_running") == 2
        assert metric(text, "vllm:num_requests_waiting") >= 3
        assert metric(text, "vllm:kv_cache_usage_perc") > 0
        for t in threads:
            t.join(10)
        assert all(n == 20 for _, n in res.values())
        ttfts = sorted(t for t, _ in res.values())
        # 2 slots, 20 tokens of 10 ms each: later requests wait ~0.2 s per wave
        assert ttfts[0] < 0.05 and ttfts[-1] > 0.35
        lines = {r["request_id"]: r for r in write_truth_flush_wait(sim, 6)}
        for r in lines.values():  # one token per 10 ms step
            assert abs((r["last_token"] - r["first_token"]) / 19 - 0.01) < 0.002
    finally:
        sim.stop()


def test_batch_engine_step_arithmetic_matches_virtual_time():
    sys.path.insert(0, ROOT)
    from simulator.engine import BatchEngine, Seq, step_duration
    from simulator.profiles import profile_from_dict

    p = profile_from_dict(
        dict(BATCH, max_num_seqs=4, max_num_batched_tokens=100, per_prefill_token_s=0.001, per_seq_s=0.002)
    )
    eng = BatchEngine(p)
    a, b = Seq(150, 3), Seq(20, 2)
    eng.add(a)
    eng.add(b)
    d, em = eng.step()  # a gets 100 prompt tokens, b waits for budget
    assert em == [] and abs(d - step_duration(p, 0, 100, 0)) < 1e-12 and a.computed == 100
    d, em = eng.step()  # a finishes prefill (50) and b is admitted and prefilled (20)
    assert em == [a, b] and abs(d - (0.01 + 0.07)) < 1e-12
    d, em = eng.step()  # two decodes
    assert em == [a, b] and abs(d - (0.01 + 0.004)) < 1e-12 and b.generated == 2
    assert eng.num_running == 1 and a.computed == 151 and eng.kv.used == 10  # ceil(151 / 16) blocks


def test_reference_profile_fits_the_published_p95_ttft():
    """v100-7b-tp8 in virtual time: P95 TTFT at 80 and 120 users within 25 % of the published 4.6 s
    and 8.2 s, so that P95 < 5 s holds at 80 users and not at 120 (the published capacity: 80-100
    users).  The earlier front-end model gave 8.5 s and 10.6 s."""
    sys.path.insert(0, ROOT)
    from simulator.profiles import load_profile
    from simulator.virtual import simulate_closed_loop

    p = load_profile("v100-7b-tp8")
    for users, published in ((80, 4.6), (120, 8.2)):
        p95 = sum(simulate_closed_loop(p, users, duration_s=600, warmup_s=120, seed=s)["ttft_p95"] for s in (0, 1)) / 2
        assert abs(p95 / published - 1) <= 0.25, (users, p95)
        assert (p95 < 5) == (users == 80), (users, p95)


# ---------------------------------------------------------------- command line
def _run_bad(*args):
    r = subprocess.run(
        [PY, "-m", "simulator", "--port", "0", *args], cwd=ROOT, capture_output=True, text=True, timeout=20
    )
    return r.returncode, r.stdout, r.stderr


def test_bad_profile_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: batch\nmax_num_seqz: 3\n")
    rc, out, err = _run_bad("--profile", str(bad))
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and "max_num_seqz" in err
    bad.write_text("kind: batch\nstep_base_s: fast\n")
    rc, _, err = _run_bad("--profile", str(bad))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "step_base_s" in err
    rc, _, err = _run_bad("--profile", "no-such-profile")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "no-such-profile" in err
    rc, _, err = _run_bad("--bogus")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    rc, _, err = _run_bad("--fault", "nonsense=0.5")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "nonsense" in err


def test_default_profile_and_sigint(tmp_path):
    sim = start_sim(tmp_path)
    try:
        c = Conn(sim.port)
        _, status, _, ev = c.request("POST", "/v1/chat/completions", chat(3))
        c.close()
        assert status == 200 and len(content_events(ev)) == 3
    finally:
        sim.proc.send_signal(signal.SIGINT)
        sim.proc.wait(5)
    assert sim.proc.returncode == 0


def test_sigterm_with_open_stream(tmp_path):
    sim = start_sim(tmp_path, profile={"kind": "fixed", "ttft_s": 0.01, "itl_s": 0.01})
    c = Conn(sim.port)
    c.send("POST", "/v1/chat/completions", chat(1000), {"X-Request-Id": "open"})
    c.read_head()
    it = c.iter_chunks()
    next(it)
    next(it)
    sim.stop()
    assert sim.proc.returncode == 0
    with pytest.raises((ConnectionError, OSError, StopIteration)):
        for _ in range(2000):
            next(it)
    c.close()
    r = sim.truth_lines()[0]
    assert r["request_id"] == "open" and r["outcome"] == "server_shutdown"


def test_tokenizer_option(tmp_path):
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2, "c": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    d = tmp_path / "tok"
    d.mkdir()
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"})
    )
    sim = start_sim(tmp_path, "--tokenizer", str(d), profile=FAST_FIXED)
    try:
        c = Conn(sim.port)
        _, _, _, b = c.request("POST", "/v1/completions", {"prompt": "a b c a b zzz", "max_tokens": 1})
        assert json.loads(b)["usage"]["prompt_tokens"] == 6
        _, _, _, b = c.request(
            "POST",
            "/v1/chat/completions",
            chat(
                1, stream=False, messages=[{"role": "system", "content": "a b"}, {"role": "user", "content": "c c c"}]
            ),
        )
        assert json.loads(b)["usage"]["prompt_tokens"] == 5 + 2 * 4
        c.close()
    finally:
        sim.stop()
    rc, _, err = _run_bad("--tokenizer", str(tmp_path / "missing"))
    assert rc == 2 and len(err.strip().splitlines()) == 1


def test_reuse_port_processes_share_port_and_truth_log(tmp_path):
    """Two processes on one port (SO_REUSEPORT): the kernel gives each some connections, and both
    append whole lines to one truth log."""
    import psutil

    port = free_port()
    sims = [
        start_sim(tmp_path, "--port", str(port), "--reuse-port", profile=FAST_FIXED, name="shared") for _ in range(2)
    ]
    try:
        conns = [Conn(port) for _ in range(32)]
        for i, c in enumerate(conns):
            c.send("POST", "/v1/chat/completions", chat(3), {"X-Request-Id": f"rp-{i}"})
        for c in conns:
            status, hdrs = c.read_head()
            assert status == 200 and len(content_events(c.events(hdrs))) == 3
        # every connection is answered and still open (keep-alive): count each process's share
        served = [
            sum(1 for k in psutil.Process(s.proc.pid).net_connections("tcp") if k.status == "ESTABLISHED") for s in sims
        ]
        assert all(n > 0 for n in served) and sum(served) == 32, served
        for c in conns:
            c.close()
    finally:
        for s in sims:
            s.stop()
    lines = sims[0].truth_lines()
    assert sorted(r["request_id"] for r in lines) == sorted(f"rp-{i}" for i in range(32))
    assert all(r["outcome"] == "ok" for r in lines)
