"""The first-token watch (users/first_token_watch.py): a first token that arrives while the event
loop is held keeps its own arrival time, though the loop reads it merged with the next chunk.

`refine` is checked on byte counts whose truth is set by hand; the watch on real loopback sockets,
with the loop held by a busy wait (as a full core holds it) across the first token and the second
one 25 ms later: the kernel then merges the two in the socket, and only the watch's peek, taken
between them, knows when the first came."""

from __future__ import annotations

import errno
import random
import socket
import struct
import time
from types import SimpleNamespace

import gevent
import pytest

from core.durations import Timeouts
from metrics.sse import parse_reads
from users import connection
from users.connection import CHUNKED, Connection
from users.first_token_watch import MAX_ARRIVALS, refine

pytestmark = pytest.mark.unit

TIMEOUTS = Timeouts(connect=2.0, first_token=5.0, idle=5.0, total=10.0)


def test_refine_splits_a_read_where_an_arrival_counts_to():
    # the loop read "AAAABBBB" at 5.0; the watch saw the first 4 body bytes (after a 10-byte head) at 2.0
    times, reads = refine([5.0], [b"AAAABBBB"], 10, [(2.0, 14)])
    assert (times, reads) == ([2.0, 5.0], [b"AAAA", b"BBBB"])


def test_refine_gives_each_byte_the_earliest_stamp_that_covers_it():
    times, reads = refine(
        [1.0, 9.0, 9.5],
        [b"HH", b"aabbcc", b"dd"],
        0,
        [(3.0, 4), (8.0, 6), (4.0, 5), (0.5, 1)],  # (stamp, bytes): 0.5 covers the first byte only
    )
    # bytes 0-1 (read at 1.0): 0.5 for the first; bytes 2-3 by 3.0; byte 4 by 4.0; byte 5 by 8.0;
    # the rest of that read at its own 9.0
    assert times == [0.5, 1.0, 3.0, 4.0, 8.0, 9.0, 9.5]
    assert reads == [b"H", b"H", b"aa", b"b", b"b", b"cc", b"dd"]
    assert times == sorted(times)


def test_refine_leaves_reads_alone_when_no_arrival_is_earlier_or_inside_the_body():
    assert refine([1.0, 2.0], [b"ab", b"cd"], 0, [(1.5, 2), (3.0, 4)]) == ([1.0, 2.0], [b"ab", b"cd"])
    assert refine([1.0], [b"ab"], 10, [(0.5, 8)]) == ([1.0], [b"ab"])  # the head only
    assert refine([1.0], [b"ab"], 0, []) == ([1.0], [b"ab"])


def test_refine_agrees_with_its_definition_byte_by_byte():
    """Random reads and arrivals (seeded): every byte's time is the least of its read's stamp and
    the stamps of the arrivals counting up to it or beyond, and the bytes are unchanged."""
    rng = random.Random(1)
    for _ in range(2000):
        n = rng.randint(0, 6)
        times = sorted(rng.uniform(0, 10) for _ in range(n))
        reads = [bytes([65 + i]) * rng.randint(0, 5) for i in range(n)]
        body = b"".join(reads)
        head = rng.randint(0, 3)
        arrivals = [(rng.uniform(0, 10), rng.randint(0, len(body) + head + 2)) for _ in range(rng.randint(0, 4))]
        out_t, out_d = refine(times, reads, head, arrivals)
        assert b"".join(out_d) == body
        want = [t for t, d in zip(times, reads) for _ in d]
        for x in range(len(body)):
            covering = [stamp for stamp, got in arrivals if got - head >= x + 1]
            want[x] = min([want[x], *covering])
        assert [t for t, d in zip(out_t, out_d) for _ in d] == want, (times, reads, head, arrivals)


def hold(seconds: float) -> None:
    """Keep the hub from running: a busy wait, as a full core keeps it (time.sleep would yield)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def chunk(text: str) -> bytes:
    data = text.encode()
    return b"%x\r\n%s\r\n" % (len(data), data)


@pytest.fixture
def pair():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    conn = Connection("127.0.0.1", listener.getsockname()[1], None, 2.0)
    server, _ = listener.accept()
    listener.close()
    conn.left = 1 << 20
    yield conn, server
    conn.close()
    server.close()


def read_across_a_held_loop(conn, server) -> tuple[SimpleNamespace, tuple, tuple]:
    """The first token arrives 5 ms into a 50 ms hold of the loop, the second 25 ms after it; the
    body is read afterwards. The exchange, and each send's start and end: a chunk's stamp lies
    between them (loopback stamps a segment within its send; a crowded machine may hold the test
    for several ms before the send starts)."""
    conn.watch_first_token()  # as the client does just before it writes the request
    ex = SimpleNamespace(times=[], datas=[], t_send=time.perf_counter(), complete=False, error="", error_detail="")
    deadline = time.perf_counter() + TIMEOUTS.total
    g = gevent.spawn(conn.read_body, ex, CHUNKED, 0, b"", 0.0, deadline, True, None, TIMEOUTS, True)
    gevent.sleep(0.01)
    hold(0.005)
    t_first = time.perf_counter()
    server.sendall(chunk('data: {"choices":[{"text":"first"}]}\n\n'))
    first_sent = (t_first, time.perf_counter())
    hold(0.025)
    t_second = time.perf_counter()
    server.sendall(chunk('data: {"choices":[{"text":"second"}]}\n\n'))
    second_sent = (t_second, time.perf_counter())
    hold(0.02)
    gevent.sleep(0.02)
    server.sendall(chunk("data: [DONE]\n\n") + b"0\r\n\r\n")
    g.join(5)
    conn.end_watch(ex)  # as the client does once the body has ended
    assert ex.complete and not ex.error
    return ex, first_sent, second_sent


def first_token_time(ex) -> float:
    parsed, _ = parse_reads(ex.times, ex.datas, True)
    return parsed.chunks[0].t, parsed.chunks[1].t


def test_a_first_token_read_merged_with_the_second_keeps_its_own_arrival(pair):
    conn, server = pair
    ex, (t_first, first_done), (t_second, second_done) = read_across_a_held_loop(conn, server)
    first, second = first_token_time(ex)
    # each stamp is its own chunk's arrival, within its send, and the first well before the second
    assert t_first <= first < first_done + 0.01 and first < t_second - 0.01, (first - t_first, ex.times)
    assert t_second <= second < second_done + 0.01
    assert conn.watched is None and not connection._watch._watched  # let go at the end


def test_without_the_watch_the_merged_read_carries_the_second_tokens_stamp(pair, monkeypatch):
    monkeypatch.setattr(connection._watch, "enabled", False)
    conn, server = pair
    ex, _, (t_second, second_done) = read_across_a_held_loop(conn, server)
    first, second = first_token_time(ex)
    assert first == second and t_second <= first < second_done + 0.01  # one read: the merge moved the stamp 25 ms


def test_the_watch_lets_a_socket_go_at_its_first_data_line_or_after_max_arrivals(pair):
    conn, server = pair
    conn.watch_first_token()
    fd = conn.raw.fileno()
    assert fd in connection._watch._watched
    for _ in range(MAX_ARRIVALS + 3):  # comments, each its own arrival; the loop holds so none is read
        server.sendall(b": keep-alive\n\n")
        hold(0.008)
    assert len(conn.watched.arrivals) == MAX_ARRIVALS, conn.watched.arrivals
    ex = SimpleNamespace(times=[], datas=[], t_send=time.perf_counter(), complete=False, error="", error_detail="")
    g = gevent.spawn(
        conn.read_body, ex, CHUNKED, 0, b"", 0.0, time.perf_counter() + TIMEOUTS.total, True, None, TIMEOUTS, True
    )
    gevent.sleep(0.02)
    server.sendall(chunk('data: {"choices":[{"text":"a"}]}\n\n'))
    gevent.sleep(0.02)
    assert fd not in connection._watch._watched  # its first data line read: unwatched
    server.sendall(chunk("data: [DONE]\n\n") + b"0\r\n\r\n")
    g.join(5)


def reset(server: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer gets a reset, not a FIN."""
    server.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    server.close()


def test_a_reset_is_left_to_the_loop_not_taken_by_a_peek(pair):
    """A socket's pending error goes to the first read that finds no data, a peek too: the watch
    leaves a failed socket alone, and the loop's read still finds the reset."""
    conn, server = pair
    conn.watch_first_token()
    reset(server)
    hold(0.03)  # the watch's thread runs meanwhile (the GIL's switch interval), the loop does not
    assert conn.watched.error == 0 and not conn.watched.arrivals
    with pytest.raises(ConnectionResetError):
        conn.read_head()


def test_a_reset_a_peek_took_in_the_race_is_raised_by_the_loop(pair):
    """Where a reset lands between the watch's checks and its peek, the peek takes it; the loop,
    which then finds only the end of the stream, raises the reset in its place."""
    conn, server = pair
    conn.watch_first_token()
    server.close()  # a plain close: the loop's read finds the end of the stream
    conn.watched.error = errno.ECONNRESET  # as the thread records a taken error
    with pytest.raises(ConnectionResetError):
        conn.read_head()
