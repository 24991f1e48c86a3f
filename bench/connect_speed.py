"""The CPU of a start burst's connections: N greenlets connecting to one 127.0.0.1 listener at once,
through gevent's `create_connection` (every getaddrinfo, an address's too, handed to gevent's thread
pool) and through users/connection.py `connect` (an address connected to as it is). The listener
accepts in the same process, so each figure holds its accepts too; the difference is the client's.

    .venv/bin/python bench/connect_speed.py            # 1,024 connections, 5 rounds each, alternated
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
from gevent import socket as gsocket  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from users.connection import connect  # noqa: E402


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the process: the pool's too
    return r.ru_utime + r.ru_stime


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4096)
    port = srv.getsockname()[1]
    accepted: list = []

    def accept() -> None:
        while True:
            accepted.append(srv.accept()[0])

    gevent.spawn(accept)

    def burst(open_one) -> tuple[float, float]:
        socks: list = []
        c, t = cpu(), time.perf_counter()
        gevent.joinall([gevent.spawn(lambda: socks.append(open_one())) for _ in range(args.connections)])
        c, t = cpu() - c, time.perf_counter() - t
        for s in socks + accepted:
            s.close()
        accepted.clear()
        return c, t

    ways = {
        "gevent create_connection": lambda: gsocket.create_connection(("127.0.0.1", port), timeout=5),
        "users/connection.py connect": lambda: connect("127.0.0.1", port, 5),
    }
    for way in ways.values():  # warm-up: the pool's threads, the first accepts
        burst(way)
    got: dict[str, list] = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, way in ways.items():
            got[name].append(burst(way))
    print(f"{args.connections:,} connections at once, {args.rounds} rounds alternated (median):")
    for name, runs in got.items():
        cpus, walls = sorted(r[0] for r in runs), sorted(r[1] for r in runs)
        print(f"  {name:28s} CPU {1000 * cpus[len(cpus) // 2]:6.1f} ms   wall {1000 * walls[len(walls) // 2]:6.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
