"""Edges of traffic: failures that would flood the server, responses too large to parse quickly,
mistakes that would otherwise pass in silence, and what the console says during and after a run.

Real processes where it matters (the simulator, Locust); every run is short and bounded in time,
and all traffic stays on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from argparse import Namespace
from contextlib import contextmanager

import gevent
import locust  # noqa: F401  gevent's patching, as in a run
import orjson
import pytest
from gevent import monkey

from core.durations import Timeouts
from core.errors import InputError
from metrics.record import ERROR_CLASSES
from metrics.slo import parse_slo
from metrics.sse import parse_reads
from plugin.health_monitor import HealthMonitor, Limits
from plugin.plan import RunPlan
from plugin.run import check_target
from tests.helpers import ROOT, free_port, read_results, run_locust, simulator, start_locust, stop
from tests.test_sse_reader import HEAD, ScriptedServer, chunked, content, sse
from users.stream import Exchange, StreamClient

pytestmark = pytest.mark.process

READ = 65536


def one_big_event(size: int) -> bytes:
    text = "x" * size
    event = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}
    return b"data: " + orjson.dumps(event) + b"\n\ndata: [DONE]\n\n"


def as_reads(body: bytes, framed: bool) -> list[bytes]:
    if framed:  # the server's chunks of 8 KiB, the client's reads of 64 KiB across them
        framed = b"".join(
            b"%x\r\n%s\r\n" % (len(body[i : i + 8192]), body[i : i + 8192]) for i in range(0, len(body), 8192)
        )
        body = framed + b"0\r\n\r\n"
    return [body[i : i + READ] for i in range(0, len(body), READ)]


def parse_time(size: int, framed: bool) -> float:
    reads = as_reads(one_big_event(size), framed)
    times = [float(i) for i in range(len(reads))]
    t = time.thread_time()  # CPU time: a loaded machine's other processes do not make it look slower
    parsed, length = parse_reads(times, reads, framed)
    elapsed = time.thread_time() - t
    assert len(parsed.chunks) == 1 and len(parsed.chunks[0].text) == size and parsed.done
    assert parsed.chunks[0].t == times[-1] or framed  # the event's time: the read that completed its line
    return elapsed


def test_one_large_event_parses_in_linear_time():
    """A single event of many megabytes (one JSON line over hundreds of reads) parses in time
    proportional to its size: 4x the bytes take about 4x the time, never 16x, and 50 MB well
    under a second or two (it runs on the event loop every stream shares)."""
    for framed in (False, True):  # plain, and HTTP chunked framing
        small = min(parse_time(5_000_000, framed) for _ in range(2))
        large = min(parse_time(20_000_000, framed) for _ in range(2))
        assert large < 8 * small + 0.15, f"chunked={framed}: 5 MB {small:.3f}s, 20 MB {large:.3f}s: not linear"
        assert parse_time(50_000_000, framed) < 1.5


# -- self-health: a loop blocked for seconds is late for every second it was blocked ----------------


def test_a_loop_blocked_for_seconds_counts_as_lag_for_every_second_it_missed():
    """The event loop busy for 3.5 s (one huge parse, say): the monitor's sampler could not run
    during it. Each second it missed is a sample of its own, late by as much as the loop was at
    that moment, so the sustained limits see the stall (before: one sample for the whole stall,
    and a run that took 2 samples in 53 s was "within limits")."""

    monitor = HealthMonitor(Limits(sustain_s=2.0), token_lag=False, name="local", index=0)
    monitor.start()
    try:
        gevent.sleep(1.3)
        before = len(monitor.samples)
        t = time.perf_counter()
        while time.perf_counter() - t < 3.5:  # the loop blocked, the CPU busy
            pass
        gevent.sleep(0.3)
        stalled = list(monitor.samples)[before:]
    finally:
        monitor.stop()
    assert len(stalled) >= 3, f"{len(stalled)} samples for a 3.5 s stall"
    late = [s["loop_lag_p99_ms"] for s in stalled]
    assert sum(1 for v in late if v and v > 500) >= 3, late
    # busy: the CPU it used plus the CPU it waited for (2 shared cores: others take some)
    assert all(s["demand"] > 50 for s in stalled[:3]), stalled
    state = monitor.state()
    assert state["bound"] and "loop_lag" in state["reasons"], state
    assert state["loop_lag_p99_ms"] > 1000  # the run-wide figure counts the probes it missed


# -- mistakes told at the start, before any load ---------------------------------------------------


@pytest.fixture(scope="module")
def sim():
    with simulator("--profile", "fixed") as url:
        yield url


def test_host_ending_in_v1_is_told_apart(sim):
    """`--host http://...:8000/v1` sends every request to /v1/v1/...: the start says to drop /v1
    (before: with --model, a run of 404s; without, the hint was "pass --model")."""
    for model in (["--model", "sim-model"], []):
        proc = run_locust("--host", sim + "/v1", *model, "-u", "1", "-t", "3s", timeout=60)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert f"--host: drop /v1 from {sim}/v1 (the suite adds /v1/...)" in proc.stderr


def test_model_not_served_is_refused_at_the_start(sim):
    proc = run_locust("--host", sim, "--model", "no-such-model", "-u", "1", "-t", "3s", timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"--model: 'no-such-model' is not served by {sim}; it serves: sim-model" in proc.stderr


MODELS_AT_ROOT = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == "/api/models"
        body = b'{"data": [{"id": "m"}]}' if ok else b"not found"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print("ready", flush=True)
s.serve_forever()
"""


@contextmanager
def models_at_root():
    """A server whose API is at /api/models, not /api/v1/models."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", MODELS_AT_ROOT, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield f"http://127.0.0.1:{port}/api"
    finally:
        proc.kill()
        proc.wait(5)


def test_the_web_forms_check_tells_the_same(sim):
    """The web UI's start check (webui/start_check.py) goes through plugin.run.check_target,
    like a headless start: the same lines, and /v1/models missing where /models answers."""

    with pytest.raises(InputError, match="is not served by"):
        check_target(None, RunPlan(model="no-such-model"), sim)
    with pytest.raises(InputError, match=r"drop /v1 from"):
        check_target(None, RunPlan(model="sim-model"), sim + "/v1")
    assert check_target(None, RunPlan(model="sim-model"), sim).model == "sim-model"
    assert check_target(None, RunPlan(), sim).model == "sim-model"
    with models_at_root() as host:
        with pytest.raises(InputError, match=r"--host: .*/api/v1/models is not found but .*/api/models answers"):
            check_target(None, RunPlan(model="m"), host)


# -- --timeout-first-token counts from the request's write ----------------------------------------


def _timed_request(script, timeouts):

    server = ScriptedServer(script)
    client = StreamClient(f"http://127.0.0.1:{server.port}", timeouts, {})
    ex = Exchange()
    t0 = time.perf_counter()
    gevent.spawn(client.post, "/v1/chat/completions", b'{"x": 1}', {"Content-Type": "application/json"}, ex).join(30)
    client.close()
    return ex, time.perf_counter() - t0


@pytest.mark.timing
def test_first_token_timeout_counts_from_the_write_not_from_connect_or_headers():
    """--timeout-first-token 1s against a server that says nothing: a timeout after 1 s (before:
    connect + first token, 11 s, and here the answer at 3 s was taken). Headers at 0.6 s and the
    first token 0.6 s after them: 1.2 s after the write, past the limit (before: the limit began
    again at the headers)."""

    body = chunked(sse(content("a", "stop")) + b"data: [DONE]\n\n") + b"0\r\n\r\n"
    limits = Timeouts(connect=10, first_token=1.0, idle=30, total=60)
    ex, elapsed = _timed_request([(3.0, HEAD + body)], limits)
    assert (
        ex.error == "timeout"
        and "first token timeout 1s (no response headers)" in ex.error_detail
        and 0.9 < elapsed < 2.0
    ), (ex.error_detail, elapsed)
    ex, elapsed = _timed_request([(0.6, HEAD), (0.6, body)], limits)
    assert ex.error == "timeout" and "first token timeout 1s" in ex.error_detail and elapsed < 1.15, (
        ex.error_detail,
        elapsed,
    )
    ex, _ = _timed_request([(0.3, HEAD), (0.3, body)], limits)
    assert ex.error == "" and ex.complete


@pytest.mark.timing
def test_first_token_timeout_is_not_satisfied_by_keep_alive_comments():
    """A server that sends only SSE comments (': keep-alive' every 0.25 s, as gateways hold a
    stream open) gets a first-token timeout 1 s after the write (before: the first comment ended
    that limit and every next one reset the idle gap, so the request ran to the total timeout).
    Comments before a token that comes in time leave it a success, timed from the token."""

    keep = chunked(b": keep-alive\n\n")
    body = chunked(sse(content("a", "stop")) + b"data: [DONE]\n\n") + b"0\r\n\r\n"
    limits = Timeouts(connect=10, first_token=1.0, idle=30, total=60)
    ex, elapsed = _timed_request([(0, HEAD + keep)] + [(0.25, keep)] * 5, limits)
    assert ex.error == "timeout" and ex.error_detail.startswith(
        "first token timeout 1s (the stream sent only comments"
    ), ex.error_detail
    assert 0.9 < elapsed < 1.3 and len(ex.times) >= 3, (elapsed, len(ex.times))
    ex, _ = _timed_request([(0, HEAD + keep), (0.25, keep), (0.25, keep), (0.2, body)], limits)
    assert ex.error == "" and ex.complete
    parsed, _ = parse_reads(ex.times, ex.datas, True)
    assert (
        len(parsed.chunks) == 1 and parsed.chunks[0].t - ex.t_send > 0.6
    )  # the token's arrival, not the first comment's


# -- failures do not flood the server; a run that can only fail stops ------------------------------


@pytest.fixture(scope="module")
def failing_run(tmp_path_factory):
    """Every request answered HTTP 500 at once, 2 users, -t 60s: the run stops itself."""
    out = tmp_path_factory.mktemp("failing")
    with simulator("--profile", "fixed", "--fault", "http_500=1.0") as url:
        t0 = time.monotonic()
        proc = run_locust(
            "--host",
            url,
            "--model",
            "sim-model",
            "-u",
            "2",
            "-r",
            "2",
            "-t",
            "60s",
            "--results-dir",
            str(out),
            "--run-id",
            "f",
            "--stop-timeout",
            "2",
            timeout=45,
        )
        elapsed = time.monotonic() - t0
    df, summary = read_results(str(out), "f")
    return proc, elapsed, df, summary, url


def test_http_failures_keep_status_path_and_the_start_of_the_body(failing_run):
    proc, _, df, _, _ = failing_run
    assert len(df) and (df["error"] == "http_5xx").all()
    detail = df["error_detail"].iloc[0]
    assert detail.startswith("HTTP 500 on POST /v1/chat/completions: {"), detail
    assert "injected" in detail or "error" in detail
    assert df["error_detail"].str.len().max() <= 260


def test_immediate_failures_are_paced_per_user(failing_run):
    """Before: 2 users sent thousands of requests a second, each answered 500 at once. Now each
    user waits 0.1 s after a failure, doubling while failures repeat (to 5 s): about 7 requests a
    user in the 10 s before the run stops."""
    _, _, df, _, _ = failing_run
    assert 4 <= len(df) <= 40, len(df)
    sends = df["wall_send"].sort_values().to_numpy()
    assert sends[-1] - sends[0] > 3  # spread over the run, not a burst


def test_a_run_whose_requests_all_fail_from_the_start_stops_with_one_line(failing_run):
    proc, elapsed, _, summary, url = failing_run
    assert proc.returncode == 4, proc.stderr[-3000:]
    assert elapsed < 35, elapsed
    lines = [line for line in proc.stderr.splitlines() if "every request failed" in line]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "http_5xx" in lines[0] and "HTTP 500 on POST /v1/chat/completions" in lines[0], lines[0]


# -- a response too large to parse on the event loop is cut ----------------------------------------


def _send_once(parts: list[bytes]) -> int:
    """A peer in an OS thread that answers one request with `parts` and shrugs off the client's
    reset (a cut response is the point); returns its port."""
    real_socket = monkey.get_original("socket", "socket")
    sock = real_socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)

    def serve():
        conn, _ = sock.accept()
        try:
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += conn.recv(65536)
            for part in parts:
                conn.sendall(part)
        except OSError:
            pass
        finally:
            conn.close()
            sock.close()

    monkey.get_original("_thread", "start_new_thread")(serve, ())
    return sock.getsockname()[1]


def test_a_response_larger_than_max_response_size_is_cut_and_classified():

    big = one_big_event(3_000_000)
    port = _send_once([HEAD + chunked(big[: len(big) // 2]), chunked(big[len(big) // 2 :]) + b"0\r\n\r\n"])
    client = StreamClient(
        f"http://127.0.0.1:{port}", Timeouts(connect=2, first_token=5, idle=5, total=10), {}, max_body=1 << 20
    )
    ex = Exchange()
    gevent.spawn(client.post, "/v1/chat/completions", b"{}", {}, ex).join(15)
    client.close()
    kept = sum(len(d) for d in ex.datas)
    assert ex.error == "response_too_large" and "--max-response-size (1048576 bytes)" in ex.error_detail, (
        ex,
        ex.error_detail,
    )
    assert (1 << 20) < kept <= (1 << 20) + 65536 + 100
    assert "response_too_large" in ERROR_CLASSES
    assert RunPlan.from_options(Namespace()).max_response_bytes == 64 << 20  # the documented default
    assert RunPlan.from_options(Namespace(max_response_size="1.5GB")).max_response_bytes == 3 << 29
    with pytest.raises(InputError, match=r"^--max-response-size: 'lots' is not a size; give e.g. 64MB"):
        RunPlan.from_options(Namespace(max_response_size="lots"))


# -- a threshold without a unit, a hub tokenizer with no hub ---------------------------------------


def test_an_slo_threshold_needs_a_unit():
    """'ttft.p95<5' read as 5 seconds in silence; someone meaning 5 ms (or 500) got a pass."""

    for text in ("ttft.p95<5", "tpot.p95<80ms,ttft.p95<0.5"):
        bad = [p for p in text.split(",") if not p.endswith(("s", "m", "h"))][0]
        with pytest.raises(InputError, match=f"^--slo: '{bad}': give a unit, e.g. 5s or 500ms$"):
            parse_slo(text)
        with pytest.raises(InputError, match="give a unit"):
            RunPlan.from_options(Namespace(slo=text))
    assert [o.threshold_s for o in parse_slo("ttft.p95<5s,tpot.p95<80ms,e2e.p99<1m")] == [5.0, 0.08, 60.0]


def test_a_hub_tokenizer_name_without_a_hub_fails_fast(tmp_path):
    """--tokenizer org/name where the model hub cannot be reached: one line at once, not a minute
    of retries (the hub is pointed at a closed port on 127.0.0.1; the cache is empty)."""
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{free_port()}", "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": ROOT}
    code = (
        "from core.errors import InputError\nfrom workloads.tokenizer import read_tokenizer\n"
        "try:\n    read_tokenizer('some-org/some-tokenizer')\nexcept InputError as e:\n    print(e)\n"
    )
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )
    elapsed = time.monotonic() - t0
    assert out.stdout.strip() == (
        "--tokenizer: 'some-org/some-tokenizer' is not a local folder and the model hub cannot be "
        "reached; give a local tokenizer folder"
    ), (out.stdout, out.stderr[-2000:])
    assert elapsed < 30, elapsed


def test_a_server_that_goes_down_mid_run_is_not_flooded(tmp_path):
    """The server stops 3 s into a 9 s run of 4 users: before, about 19,000 connect_error records
    (the good fraction measured the client's spin rate); now each user pauses between them."""

    with simulator("--profile", "fixed") as url:
        proc = start_locust(
            "--headless",
            "--host",
            url,
            "--model",
            "sim-model",
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "9s",
            "--max-tokens-override",
            "8",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "down",
            "--stop-timeout",
            "2",
            log_path=str(tmp_path / "log"),
        )
        deadline = time.monotonic() + 60
        while "run down:" not in (tmp_path / "log").read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)
    stop(proc, 60)
    df, _ = read_results(str(tmp_path), "down")
    refused = int((df["error"] == "connect_error").sum())
    assert df["ok"].sum() > 10  # it ran before the server went
    assert 4 <= refused <= 80, refused
