"""tests/helpers.py free_port: the port a test hands to a process it starts is one the kernel never
hands out meanwhile (below its ephemeral range), each test process of a run has its own ports, and
a port someone listens on is skipped."""

from __future__ import annotations

import socket

import tests.helpers as helpers


def ports_of(monkeypatch, worker: str, count: int, n: int) -> list[int]:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))
    monkeypatch.setattr(helpers, "_next_port", None)
    return [helpers.free_port() for _ in range(n)]


def test_each_test_process_takes_its_own_ports_below_the_kernels_range(monkeypatch):
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral = int(f.read().split()[0])
    first, second = ports_of(monkeypatch, "gw0", 2, 200), ports_of(monkeypatch, "gw1", 2, 200)
    assert len(set(first)) == 200 and len(set(second)) == 200
    assert max(first) < min(second) and helpers.FIRST_PORT <= min(first) and max(second) < ephemeral


def test_a_port_someone_listens_on_is_skipped(monkeypatch):
    monkeypatch.setattr(helpers.random, "randrange", lambda size: 0)  # the walk starts at the slice's first port
    start = ports_of(monkeypatch, "gw0", 1, 1)[0]  # the first port of the walk that could be bound
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", start))
        taken.listen()
        assert start not in ports_of(monkeypatch, "gw0", 1, 3)
