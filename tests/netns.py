"""A multi-host topology on one machine: network namespaces joined by a bridge.

Each "host" is a namespace with one veth interface and its own address in 192.0.2.0/24
(TEST-NET-1, RFC 5737: documentation addresses that are never routed); the other ends sit on a
bridge inside a namespace of their own, so nothing touches the machine's real interfaces.
Everything is removed on exit, whatever happens.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from contextlib import contextmanager

SUBNET = "192.0.2"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here (None when they can)."""
    if shutil.which("ip") is None:
        return "the 'ip' command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "namespaces need root (CAP_NET_ADMIN)"
    probe = f"llmp{secrets.token_hex(3)}"
    result = _ip("netns", "add", probe, check=False)
    if result.returncode != 0:
        return f"'ip netns add' failed: {result.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


class Topology:
    def __init__(self, names: list[str]):
        tag = secrets.token_hex(2)
        self.bridge_ns = f"llm{tag}br"
        self.hosts = {name: (f"llm{tag}{name}", f"{SUBNET}.{10 + i}") for i, name in enumerate(names)}
        self._made: list[str] = []

    def build(self) -> None:
        _ip("netns", "add", self.bridge_ns)
        self._made.append(self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
        for i, (ns, address) in enumerate(self.hosts.values()):
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            host_end, bridge_end = f"h{i}", f"b{i}"
            _ip("-n", ns, "link", "add", host_end, "type", "veth", "peer", "name", bridge_end, "netns", self.bridge_ns)
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", host_end)
            _ip("-n", ns, "link", "set", host_end, "up")
            _ip("-n", self.bridge_ns, "link", "set", bridge_end, "master", "br0")
            _ip("-n", self.bridge_ns, "link", "set", bridge_end, "up")

    def address(self, name: str) -> str:
        return self.hosts[name][1]

    def wrap(self, name: str, cmd: list[str]) -> list[str]:
        """A command line that runs `cmd` on host `name`."""
        return ["ip", "netns", "exec", self.hosts[name][0], *cmd]

    def destroy(self) -> None:
        for ns in reversed(self._made):
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                subprocess.run(["kill", "-9", pid], capture_output=True)
            _ip("netns", "del", ns, check=False)
        self._made.clear()


@contextmanager
def topology(names: list[str]):
    topo = Topology(names)
    try:
        topo.build()
        yield topo
    finally:
        topo.destroy()
