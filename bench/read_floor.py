"""The least CPU a Python client spends per token when it times a stream as the suite does: the floor
under the suite's own client, measured beside it and vllm-rs by bench/vllm_rs.py (clients `floor`,
`floor-nostamp`).

It keeps only what timing a stream exactly needs and drops everything else the suite does:

  kept     gevent's hub; one kept-alive connection per stream (TCP_NODELAY); the request written in
           one `sendall` right after its send time; the head read in the stream's greenlet; the body
           read by a libev io watcher whose callback does one `recvmsg` per arrival, stamped with
           the kernel's receive time (SO_TIMESTAMPNS; `--no-stamp`: `recv` and perf_counter), two
           list appends and a look for the message's end; the greenlet woken once at the end
  dropped  Locust and its imports, the users' plan and pacing, the parse of the events (the first
           token is the first read holding `data:`; the count is the simulator's), the records,
           the first-token watch, the results, the report, every timeout but one bound per stream

So the distance from the floor to vllm-rs is what Python and gevent cost at this timing method, and
the distance from the suite to the floor is what the suite's own work costs. It talks to the
simulator only: its end-of-message check knows that server's chunked framing, nothing more.

    python bench/read_floor.py --url http://127.0.0.1:PORT --streams 1024 --out rows.json

`--out` gets one row per request: [request id, TTFT s, E2E s, output tokens, send time
(perf_counter, the truth log's CLOCK_MONOTONIC)], joined to the truth log by the caller.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import sys
import time
from urllib.parse import urlsplit

import gevent
from gevent import socket as gsocket
from gevent.event import Event

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from core.clock import wall_minus_perf_ns  # the suite's own offset of the two clocks, bracketed

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
TIMESPEC = struct.Struct("qq")
ANC_SIZE = socket.CMSG_SPACE(TIMESPEC.size)
READ_SIZE = 65536
END = b"0\r\n\r\n"  # the last chunk of a chunked body (the simulator sends no trailers)
_perf_counter = time.perf_counter


class Stream:
    """One connection and its body's reads, made by the io watcher's callback in the hub."""

    __slots__ = ("sock", "raw", "watcher", "done", "times", "datas", "offset", "_read")

    def __init__(self, host: str, port: int, stamp: bool, offset: float):
        self.sock = sock = gsocket.create_connection((host, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.raw = sock._sock
        self.offset = offset
        if stamp:
            self.raw.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self._read = self._read_stamped if stamp else self._read_plain
        self.watcher = gevent.get_hub().loop.io(sock.fileno(), 1)
        self.done = Event()
        self.times: list[float] = []
        self.datas: list[bytes] = []

    def _keep(self, data: bytes, t: float) -> None:
        if not data:
            self.watcher.stop()
            self.done.set()
            return
        self.times.append(t)
        self.datas.append(data)
        if data.endswith(END):
            self.watcher.stop()
            self.done.set()

    def _read_stamped(self) -> None:
        try:
            data, anc, _, _ = self.raw.recvmsg(READ_SIZE, ANC_SIZE)
        except BlockingIOError:
            return
        if anc:
            sec, nsec = TIMESPEC.unpack_from(anc[0][2])
            t = sec + nsec * 1e-9 - self.offset
        else:
            t = _perf_counter()
        self._keep(data, t)

    def _read_plain(self) -> None:
        try:
            data = self.raw.recv(READ_SIZE)
        except BlockingIOError:
            return
        self._keep(data, _perf_counter())

    def exchange(self, request: bytes) -> tuple[float, float, float]:
        """Send, read the head in this greenlet and the body in the hub: (send time, first `data:`
        read, last read)."""
        self.times, self.datas = times, datas = [], []
        t_send = _perf_counter()
        self.sock.sendall(request)
        buf = b""
        while b"\r\n\r\n" not in buf:
            data = self.sock.recv(READ_SIZE)
            if not data:
                raise ConnectionError("closed before the head")
            buf += data
        t_head = _perf_counter()
        rest = buf.split(b"\r\n\r\n", 1)[1]
        if rest:
            times.append(t_head)
            datas.append(rest)
        if not rest.endswith(END):
            self.done.clear()
            self.watcher.start(self._read)
            if not self.done.wait(120):
                self.watcher.stop()
                raise TimeoutError("no end of the body in 120 s")
        first = next((t for t, d in zip(times, datas) if b"data:" in d), float("nan"))
        return t_send, first, times[-1] if times else float("nan")


def request_bytes(host: str, port: int, rid: str, max_tokens: int) -> bytes:
    body = json.dumps(
        {
            "model": "sim-model",
            "prompt": " ".join(f"w{i}" for i in range(32)),
            "max_tokens": max_tokens,
            "stream": True,
            "ignore_eos": True,
        }
    ).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"X-Request-Id: {rid}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--streams", type=int, required=True)
    ap.add_argument("--per-stream", type=int, default=3, help="requests per stream, one after another")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--no-stamp", action="store_true", help="recv and perf_counter, no kernel receive stamps")
    ap.add_argument("--prefix", default="floor", help="request ids are PREFIX-STREAM-K")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    u = urlsplit(args.url)
    host, port = u.hostname or "127.0.0.1", u.port or 80
    offset = wall_minus_perf_ns()[0] * 1e-9
    rows: list[list] = []
    failed: list[str] = []

    def one_stream(i: int) -> None:
        try:
            s = Stream(host, port, not args.no_stamp, offset)
            for k in range(args.per_stream):
                rid = f"{args.prefix}-{i}-{k}"
                t_send, first, last = s.exchange(request_bytes(host, port, rid, args.max_tokens))
                rows.append([rid, first - t_send, last - t_send, args.max_tokens, t_send])
        except (OSError, TimeoutError) as e:
            failed.append(f"stream {i}: {type(e).__name__}: {e}")

    gevent.joinall([gevent.spawn(one_stream, i) for i in range(args.streams)], timeout=600)
    with open(args.out, "w") as f:
        json.dump(rows, f)
    for line in failed[:5]:
        print(line, file=sys.stderr)
    return 1 if failed or len(rows) < args.streams * args.per_stream else 0


if __name__ == "__main__":
    sys.exit(main())
