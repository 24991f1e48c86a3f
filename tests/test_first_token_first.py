"""A stream waiting for its first token is read ahead of the streams already flowing in the same
turn of the event loop (users/connection.py FIRST_TOKEN_FIRST): a real connection over loopback,
its watcher's priority checked before and after its first data line, and the order of reads in one
turn where a flowing stream's chunk arrived before a new stream's first token, and a first token that
arrives in the middle of a long turn (FirstTokenLane): read alone, with its own stamp."""

from __future__ import annotations

import socket
import time
from types import SimpleNamespace

import gevent
import pytest

from core.durations import Timeouts
from users import connection
from users.connection import CHUNKED, PRIORITY_FIRST, PRIORITY_FLOWING, Connection

pytestmark = pytest.mark.unit

TIMEOUTS = Timeouts(connect=2.0, first_token=5.0, idle=5.0, total=10.0)


def hold(seconds: float) -> None:
    """Keep the hub from running: a busy wait (time.sleep yields where gevent has patched it)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def chunk(text: str) -> bytes:
    data = text.encode()
    return b"%x\r\n%s\r\n" % (len(data), data)


class Logged(Connection):
    """A connection that notes, in a list shared by the test, each read the hub made of it."""

    def _arrived(self, data: bytes, t: float) -> None:
        self.order.append((self, data))
        super()._arrived(data, t)


def open_pair(listener: socket.socket, order: list) -> tuple[Logged, socket.socket]:
    conn = Logged("127.0.0.1", listener.getsockname()[1], None, 2.0)
    conn.order = order
    server, _ = listener.accept()
    conn.left = 1 << 20
    return conn, server


def reading(conn: Connection) -> tuple[SimpleNamespace, gevent.Greenlet]:
    """The body read in a greenlet, as the client reads it: chunked, an event stream."""
    ex = SimpleNamespace(times=[], datas=[], t_send=time.perf_counter(), complete=False, error="", error_detail="")
    deadline = time.perf_counter() + TIMEOUTS.total
    g = gevent.spawn(conn.read_body, ex, CHUNKED, 0, b"", 0.0, deadline, True, None, TIMEOUTS, True)
    return ex, g


@pytest.fixture
def listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield s
    s.close()


def test_a_stream_is_read_first_until_its_first_token_then_in_line(listener, monkeypatch):
    monkeypatch.setattr(connection, "FIRST_TOKEN_FIRST", True)
    order: list = []
    conn, server = open_pair(listener, order)
    ex, g = reading(conn)
    gevent.sleep(0.01)
    assert conn.watcher.priority == PRIORITY_FIRST  # waiting for its first token
    server.sendall(chunk(": keep-alive\n\n"))
    gevent.sleep(0.02)
    assert conn.watcher.priority == PRIORITY_FIRST  # a comment is not a token
    server.sendall(chunk('data: {"choices":[{"text":"a"}]}\n\n'))
    gevent.sleep(0.02)
    assert conn.watcher.priority == PRIORITY_FLOWING and conn.watcher.active
    server.sendall(chunk("data: [DONE]\n\n") + b"0\r\n\r\n")
    g.join(5)
    assert ex.complete and not ex.error and len(order) == 3
    server.close()
    conn.close()


@pytest.mark.parametrize("first_token_first", [True, False])
def test_in_one_turn_a_first_token_is_read_before_a_flowing_streams_chunk(listener, monkeypatch, first_token_first):
    monkeypatch.setattr(connection, "FIRST_TOKEN_FIRST", first_token_first)
    order: list = []
    flowing, s_flowing = open_pair(listener, order)
    fresh, s_fresh = open_pair(listener, order)
    ex_flowing, g_flowing = reading(flowing)
    gevent.sleep(0.01)
    s_flowing.sendall(chunk('data: {"choices":[{"text":"a"}]}\n\n'))
    gevent.sleep(0.02)  # now flowing
    ex_fresh, g_fresh = reading(fresh)
    gevent.sleep(0.01)
    del order[:]
    # both arrive while the loop is held (as in a long turn). libev runs a turn's ready watchers of
    # one priority last-ready first: the first token arrives first, so that in arrival order alone
    # it would be read after the flowing stream's chunk
    s_fresh.sendall(chunk('data: {"choices":[{"text":"x"}]}\n\n'))
    hold(0.002)
    s_flowing.sendall(chunk('data: {"choices":[{"text":"b"}]}\n\n'))
    hold(0.05)  # both sockets are ready at the hub's next poll
    gevent.sleep(0.02)
    assert {c for c, _ in order} == {flowing, fresh}
    assert (order[0][0] is fresh) == first_token_first
    for s in (s_flowing, s_fresh):
        s.sendall(chunk("data: [DONE]\n\n") + b"0\r\n\r\n")
    gevent.joinall([g_flowing, g_fresh], timeout=5)
    assert ex_flowing.complete and ex_fresh.complete
    for c in (flowing, fresh):
        c.close()
    s_flowing.close()
    s_fresh.close()


class Slow(Logged):
    """A flowing stream whose every read costs a millisecond of the hub, as thousands of reads in
    one turn do; `on_read` runs in the middle of the turn."""

    def _arrived(self, data: bytes, t: float) -> None:
        hold(0.001)
        self.on_read()
        super()._arrived(data, t)


@pytest.mark.parametrize("lane", [True, False])
def test_a_first_token_that_arrives_during_a_long_turn_keeps_its_own_stamp(listener, monkeypatch, lane):
    monkeypatch.setattr(connection, "FIRST_TOKEN_FIRST", lane)
    monkeypatch.setattr(connection, "_lane", connection.FirstTokenLane())
    order: list = []
    busy = []
    for _ in range(40):
        c = Slow("127.0.0.1", listener.getsockname()[1], None, 2.0)
        c.order, c.left, c.on_read = order, 1 << 20, lambda: None
        busy.append((c, listener.accept()[0]))
    fresh, s_fresh = open_pair(listener, order)
    readers = [reading(c) for c, _ in busy]
    for _, s in busy:
        s.sendall(chunk('data: {"choices":[{"text":"a"}]}\n\n'))
    gevent.sleep(0.1)  # every busy stream flowing
    ex_fresh, g_fresh = reading(fresh)
    gevent.sleep(0.01)
    sent = {}
    reads = 0

    def on_read():  # the new stream's first token 5 reads into the turn, its second 25 ms later
        nonlocal reads
        reads += 1
        if reads == 5:
            sent["first"] = time.perf_counter()
            s_fresh.sendall(chunk('data: {"choices":[{"text":"first"}]}\n\n'))
        elif reads == 30:
            sent["second"] = time.perf_counter()
            s_fresh.sendall(chunk('data: {"choices":[{"text":"second"}]}\n\n'))

    for c, _ in busy:
        c.on_read = on_read
    for _, s in busy:
        s.sendall(chunk('data: {"choices":[{"text":"b"}]}\n\n'))
    hold(0.005)  # all 40 ready at the hub's next poll: one turn of 40 ms
    for _ in range(500):  # until the new stream has been read (the turn, and the one after it)
        gevent.sleep(0.01)
        if reads >= 40 and ex_fresh.datas:
            break
    assert reads >= 30 and sent["second"] - sent["first"] > 0.02
    first_read = ex_fresh.datas[0]
    late_ms = (ex_fresh.times[0] - sent["first"]) * 1000
    if lane:  # read alone, stamped on arrival
        assert b"first" in first_read and b"second" not in first_read and late_ms < 15, (first_read, late_ms)
    else:  # read after the turn, merged with the second: the second's stamp
        assert b"second" in first_read and late_ms > 20, (first_read, late_ms)
    for _, s in [*busy, (fresh, s_fresh)]:
        s.sendall(chunk("data: [DONE]\n\n") + b"0\r\n\r\n")
    gevent.joinall([g for _, g in readers] + [g_fresh], timeout=5)
    assert ex_fresh.complete and all(ex.complete for ex, _ in readers)
    for c, s in [*busy, (fresh, s_fresh)]:
        c.close()
        s.close()
