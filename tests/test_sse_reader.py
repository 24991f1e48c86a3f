"""The streaming reader against real byte streams over a socket.

A raw TCP server writes exactly the bytes a test gives it, in the pieces and with the pauses the
test asks for, so every SSE oddity servers produce reaches the real hot path (users/stream.py)
and the real parser (metrics/sse.py, metrics/timing.py).
"""

from __future__ import annotations

import math
import socket
import time

import gevent
import locust  # noqa: F401  patches the standard library like a real run
import pytest
from gevent import monkey

from metrics.record import RequestRecord
from metrics.sse import parse_stream
from metrics.timing import fill_record
from tests.helpers import free_port
from users.stream import Exchange, StreamClient, Timeouts

_RealSocket = monkey.get_original("socket", "socket")

pytestmark = pytest.mark.timing  # arrival and schedule timings: tests/conftest.py

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


END = b"0\r\n\r\n"


class ScriptedServer:
    """Accepts one connection per script; each script is a list of (delay_s, raw bytes | 'close' |
    'reset' | 'mark'); 'mark' sets `marked`, for a test to act at that point of the script."""

    def __init__(self, script):
        self.script = script
        self.sock = _RealSocket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        # (start, end) of each write: the server thread can wait for the GIL or a core between a
        # write and a stamp taken after it, so an arrival is bounded by both, not set against one
        self.writes: list[tuple[float, float]] = []
        self.marked = False
        _start_os_thread(self._serve, ())

    def _serve(self):
        conn, _ = self.sock.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += conn.recv(65536)
        head, _, body = buf.partition(b"\r\n\r\n")
        length = int(
            [line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")][0]
        )
        while len(body) < length:
            body += conn.recv(65536)
        for delay, item in self.script:
            if delay:
                _real_sleep(delay)
            if item == "mark":
                self.marked = True
                continue
            if item == "close":
                conn.close()
                return
            if item == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                conn.close()
                return
            began = _real_perf_counter()
            conn.sendall(item)
            self.writes.append((began, _real_perf_counter()))
        _real_sleep(0.2)
        conn.close()


# The test process runs under gevent's monkey patching (imported with locust), so the scripted
# server uses a real OS thread, real blocking sockets and real sleeps, like a separate peer.
_start_os_thread = monkey.get_original("_thread", "start_new_thread")
_real_sleep = monkey.get_original("time", "sleep")
_real_perf_counter = time.perf_counter


def run_script(script, timeouts: Timeouts | None = None, stream: bool = True, during=None):
    """Run one request against a scripted server; `during(server)`, if given, runs in a greenlet
    of its own while the request is under way."""
    server = ScriptedServer(script)
    if during is not None:
        gevent.spawn(during, server)
    client = StreamClient(
        f"http://127.0.0.1:{server.port}", timeouts or Timeouts(connect=2, first_token=3, idle=3, total=10), {}
    )
    ex = Exchange()
    rec = RequestRecord("r1", "t", "chat", "short", 10, 16)
    client.post("/v1/chat/completions", b'{"x": 1}', {"Content-Type": "application/json"}, ex)
    rec.t_send = ex.t_send
    fill_record(rec, ex.status, parse_stream(ex.pieces), None)
    if ex.error:
        rec.error, rec.ok = ex.error, False
    client.close()
    return rec, ex, server


def arrivals(rec, ex, writes):
    """Each chunk's arrival as the client stamped it, after the start and after the end of the
    server's write of it (seconds)."""
    return [(ex.t_send + t - began, ex.t_send + t - ended) for t, (began, ended) in zip(rec.chunk_times, writes)]


def sse(obj: str) -> bytes:
    return b"data: " + obj.encode() + b"\n\n"


def content(text: str, finish: str | None = None, usage: str = "") -> str:
    fin = f'"{finish}"' if finish else "null"
    extra = f', "usage": {usage}' if usage else ""
    return f'{{"choices": [{{"index": 0, "delta": {{"content": "{text}"}}, "finish_reason": {fin}}}]{extra}}}'


ROLE = '{"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": null}]}'
USAGE = '{"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}'


def test_role_only_first_chunk_does_not_count_and_usage_gives_tokens():
    rec, ex, server = run_script(
        [
            (0, HEAD + chunked(sse(ROLE))),
            (0.15, chunked(sse(content("Hel")))),
            (0.05, chunked(sse(content("lo")))),
            (0.05, chunked(sse(content("!", "stop")))),
            (0, chunked(sse(USAGE) + b"data: [DONE]\n\n") + END),
        ]
    )
    assert rec.ok, rec.error
    assert rec.n_chunks == 3
    assert rec.output_tokens == 3 and rec.tokens_source == "usage" and rec.prompt_tokens == 7
    assert 0.14 < rec.ttft_s < 0.19  # the role chunk at ~0 s must not be the first token
    assert rec.tpot_s == pytest.approx((rec.e2e_s - rec.ttft_s) / 2)
    gaps = [b - a for a, b in zip(rec.chunk_times, rec.chunk_times[1:])]
    assert all(0.04 < g < 0.09 for g in gaps), gaps


def test_each_event_is_timed_when_it_arrives_not_batched():
    script = [(0, HEAD)] + [(0.03, chunked(sse(content(f"t{i}")))) for i in range(10)]
    script.append((0, chunked(sse(content("", "length")) + b"data: [DONE]\n\n") + END))
    rec, ex, server = run_script(script)
    assert rec.ok and rec.n_chunks == 10
    gaps = [b - a for a, b in zip(rec.chunk_times, rec.chunk_times[1:])]
    assert min(gaps) > 0.02, gaps  # 10 distinct arrivals, ~30 ms apart
    # arrival vs the server's own write time: under 5 ms on loopback
    late = [since_end for _, since_end in arrivals(rec, ex, server.writes[1:])]
    assert max(late) < 0.005, late


def test_first_token_with_the_head_is_stamped_on_arrival_not_when_the_loop_gets_to_it():
    """A server sends its head with the first token while the client's event loop is held (here
    40 ms by a blocking call, as a busy process would): the head's read is stamped by the kernel
    like every later read, so TTFT is the arrival, not the moment the loop got round to it."""

    def hold_the_loop(server):
        while not server.marked:
            gevent.sleep(0.0005)
        _real_sleep(0.04)  # the head arrives 10 ms into this

    script = [(0, "mark"), (0.01, HEAD + chunked(sse(content("a"))))]
    script += [(0.05, chunked(sse(content(f"t{i}")))) for i in range(3)]
    script.append((0, chunked(sse(content("", "length")) + b"data: [DONE]\n\n") + END))
    rec, ex, server = run_script(script, during=hold_the_loop)
    assert rec.ok and rec.n_chunks == 4
    assert all(b >= a for a, b in zip(ex.times, ex.times[1:])), ex.times
    since_start, since_end = zip(*arrivals(rec, ex, server.writes))
    assert min(since_start) > -0.002, since_start  # never before the write began (clock conversion aside)
    assert max(since_end) < 0.005, since_end  # not the 30 ms the loop still held the head


def test_multi_token_chunks_continuous_usage_and_tokens_per_chunk():
    def cu(text, n, fin=None):
        return content(text, fin, usage=f'{{"prompt_tokens": 5, "completion_tokens": {n}, "total_tokens": {n + 5}}}')

    rec, ex, _ = run_script(
        [
            (0, HEAD + chunked(sse(cu("a b", 2)))),
            (0.02, chunked(sse(cu(" c d e", 5)))),
            (
                0.02,
                chunked(
                    sse(cu(" f", 6, "length"))
                    + sse('{"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}}')
                ),
            ),
            (0, chunked(b"data: [DONE]\n\n") + END),
        ]
    )
    assert rec.ok
    assert rec.n_chunks == 3 and rec.output_tokens == 6
    assert rec.chunk_tokens == [2, 3, 1]
    assert rec.tpot_s == pytest.approx((rec.e2e_s - rec.ttft_s) / 5)


def test_keepalive_comments_crlf_no_space_and_event_lines():
    body = (
        b": keep-alive\r\n\r\n"
        b"event: message\r\n"
        b"data:" + content("x").encode() + b"\r\n\r\n"
        b"id: 3\r\nretry: 100\r\n"
        b"data:" + content("y", "stop").encode() + b"\r\n\r\n"
        b"data:[DONE]\r\n\r\n"
    )
    rec, *_ = run_script([(0, HEAD + chunked(body) + END)])
    assert rec.ok, rec.error
    assert rec.n_chunks == 2 and rec.tokens_source == "chunks" and rec.output_tokens == 2


def test_event_split_across_reads_is_timed_at_its_completion():
    event = sse(content("abc", "stop"))
    rec, *_ = run_script(
        [
            (0, HEAD + chunked(event[:10])),
            (0.1, chunked(event[10:]) + chunked(b"data: [DONE]\n\n") + END),
        ]
    )
    assert rec.ok
    assert rec.ttft_s > 0.09  # not at the first half's arrival


def test_in_stream_error_event():
    rec, *_ = run_script(
        [
            (0, HEAD + chunked(sse(content("a")))),
            (
                0.01,
                chunked(
                    sse('{"error": {"message": "engine died", "type": "InternalError", "code": 500}}')
                    + b"data: [DONE]\n\n"
                )
                + END,
            ),
        ]
    )
    assert not rec.ok and rec.error == "mid_stream_error"
    assert "engine died" in rec.error_detail
    assert rec.ttft_s == rec.ttft_s  # timings kept


def test_truncated_stream_closed_mid_body():
    rec, ex, _ = run_script(
        [(0, HEAD + chunked(sse(content("a")))), (0.02, chunked(sse(content("b")))), (0.01, "close")]
    )
    assert not rec.ok and rec.error == "stream_truncated"
    assert rec.n_chunks == 2 and not math.isnan(rec.ttft_s)


def test_truncated_stream_reset():
    rec, ex, _ = run_script([(0, HEAD + chunked(sse(content("a")))), (0.02, "reset")])
    assert not rec.ok and rec.error == "stream_truncated"


def test_ended_without_done_or_finish_reason_is_truncated():
    rec, *_ = run_script([(0, HEAD + chunked(sse(content("a"))) + END)])
    assert rec.error == "stream_truncated"


def test_finish_reason_without_done_is_success():
    """transformers serve never sends [DONE]; a finish_reason ends the stream properly."""
    rec, *_ = run_script([(0, HEAD + chunked(sse(content("a", "length"))) + END)])
    assert rec.ok


def test_no_tokens():
    rec, *_ = run_script([(0, HEAD + chunked(sse(ROLE) + sse(content("", "stop")) + b"data: [DONE]\n\n") + END)])
    assert rec.error == "no_tokens"


def test_malformed_chunk():
    rec, *_ = run_script(
        [
            (
                0,
                HEAD
                + chunked(sse(content("a")) + b"data: {not json\n\n" + sse(content("b", "stop")) + b"data: [DONE]\n\n")
                + END,
            )
        ]
    )
    assert rec.error == "malformed_chunk"


def test_http_429_and_500():
    for status, expected in ((429, "http_429"), (500, "http_5xx"), (404, "http_4xx")):
        body = b'{"error": {"message": "no"}}'
        resp = b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
            status,
            len(body),
            body,
        )
        rec, *_ = run_script([(0, resp)])
        assert rec.error == expected and rec.status == status


def test_idle_timeout_is_a_classified_failure_with_timings():
    rec, ex, _ = run_script(
        [(0, HEAD + chunked(sse(content("a")))), (1.0, chunked(sse(content("b", "stop"))))],
        timeouts=Timeouts(connect=1, first_token=2, idle=0.3, total=5),
    )
    assert rec.error == "timeout" and "idle" in ex.error_detail
    assert rec.n_chunks == 1


def test_connect_refused():
    port = free_port()  # nobody listens there
    client = StreamClient(f"http://127.0.0.1:{port}", Timeouts(connect=1, first_token=1, idle=1, total=2), {})
    ex = Exchange()
    client.post("/v1/completions", b"{}", {}, ex)
    assert ex.error == "connect_error"


class KeepAliveServer:
    """Answers requests on kept-alive connections, except the second request it reads, which it
    drops (closes its connection without a byte) `drop_after` seconds after reading it."""

    ANSWER = b'{"choices": [{"index": 0, "text": "hi", "finish_reason": "length"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}'

    def __init__(self, drop_after: float):
        self.drop_after = drop_after
        self.requests: list[int] = []  # the connection number of every request read
        self.sock = _RealSocket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        _start_os_thread(self._serve, ())

    def _serve(self):
        for conn_no in range(2):
            conn, _ = self.sock.accept()
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        conn.close()
                        break
                    buf += data
                else:
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    length = int(
                        [x.split(b":")[1] for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")][0]
                    )
                    while len(buf) < length:
                        buf += conn.recv(65536)
                    buf = buf[length:]
                    self.requests.append(conn_no)
                    if len(self.requests) == 2:
                        _real_sleep(self.drop_after)
                        conn.close()
                        break
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                        % (len(self.ANSWER), self.ANSWER)
                    )
                    continue
                break


@pytest.mark.parametrize("drop_after", [0.0, 0.3])
def test_kept_alive_connection_dropped_is_resent_only_when_unread(drop_after):
    """A server that closes a kept-alive connection the instant a request arrives (llama.cpp does)
    did not run it: sent again once on a new connection, and the record says so. One that closes it
    later may have run it: a connect_error, and the server sees the request once."""
    server = KeepAliveServer(drop_after)
    client = StreamClient(f"http://127.0.0.1:{server.port}", Timeouts(connect=2, first_token=3, idle=3, total=10), {})
    first, second = Exchange(), Exchange()
    client.post("/v1/completions", b'{"x": 1}', {"Content-Type": "application/json"}, first)
    client.post("/v1/completions", b'{"x": 2}', {"Content-Type": "application/json"}, second)
    client.close()
    assert first.status == 200 and not first.error
    if drop_after == 0.0:
        assert second.resent and second.status == 200 and not second.error
        assert server.requests == [0, 0, 1]  # dropped on the kept-alive connection, answered on a new one
    else:
        assert not second.resent and second.error == "connect_error" and second.status == 0
        time.sleep(0.2)
        assert server.requests == [0, 0]  # never sent twice


def test_kernel_stamps_move_onto_the_perf_counter_clock_and_a_wall_clock_step_is_caught():
    import struct

    from users import connection

    def anc(wall: float):
        sec = int(wall)
        return [(socket.SOL_SOCKET, connection.SO_TIMESTAMPNS, struct.pack("qq", sec, int((wall - sec) * 1e9)))]

    now = time.perf_counter()
    wall_now = time.time()
    assert connection.kernel_stamp(anc(wall_now - 0.25), now) == pytest.approx(now - 0.25, abs=1e-4)
    assert connection.kernel_stamp([], now) == now  # no stamp: the read's own time
    offset = connection._wall_minus_perf
    connection._wall_minus_perf += 3600  # as if the wall clock had stepped an hour since the offset was measured
    try:
        assert connection.kernel_stamp(anc(wall_now - 0.25), now) == now  # implausible: the read's own time ...
        assert connection._wall_minus_perf == pytest.approx(offset, abs=1e-3)  # ... and the offset measured again
    finally:
        connection.sync_clocks()
