"""users/connection.py `connect`: an address is connected to without gevent's resolver (whose
thread pool every getaddrinfo goes through), a name still resolves, and a refusal is the same
error create_connection raises."""

from __future__ import annotations

import socket

import gevent
import pytest
from gevent import socket as gsocket

from users.connection import connect

pytestmark = pytest.mark.unit


@pytest.fixture
def listener():
    srv = gsocket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    yield srv.getsockname()[1]
    srv.close()


class CountingResolver:
    def __init__(self, real):
        self.real, self.calls = real, 0

    def getaddrinfo(self, *args, **kwargs):
        self.calls += 1
        return self.real.getaddrinfo(*args, **kwargs)


@pytest.fixture
def resolver():
    hub = gevent.get_hub()
    real = hub.resolver
    hub.resolver = counting = CountingResolver(real)
    yield counting
    hub.resolver = real


def test_an_address_is_connected_to_without_the_resolver(listener, resolver):
    sock = connect("127.0.0.1", listener, 2.0)
    try:
        assert sock.getpeername() == ("127.0.0.1", listener)
        assert isinstance(sock, gsocket.socket)  # cooperative: its waits yield to the loop
    finally:
        sock.close()
    assert resolver.calls == 0


def test_a_name_is_resolved_as_gevent_resolves_it(listener, resolver):
    sock = connect("localhost", listener, 2.0)
    sock.close()
    assert resolver.calls == 1


def test_a_refused_connection_raises_as_create_connection_does(listener):
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()  # nobody listens there now
    with pytest.raises(ConnectionRefusedError):
        connect("127.0.0.1", port, 2.0)
    with pytest.raises(ConnectionRefusedError):
        gsocket.create_connection(("127.0.0.1", port), timeout=2.0)
