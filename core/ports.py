"""Picking a free 127.0.0.1 port for a server this process starts (a sweep's point, a test's
simulator or Locust master).

The picks come from below the kernel's ephemeral range: every outgoing connection on the machine
draws its local port from that range, so a port picked there could be taken by some connection
between the pick and the server's bind ("Address already in use"). Below it the kernel hands out
nothing of its own.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable

FIRST_PORT = 10000  # the picks start here (below: well-known and registered services' usual ports)


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux's default 32768 where it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def first_free(candidates: Iterable[int]) -> int | None:
    """The first of `candidates` that 127.0.0.1 can bind now (none listens on it, none holds it in
    TIME_WAIT), or None when none can."""
    for port in candidates:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    return None
