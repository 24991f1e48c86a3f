"""One HTTP/1.1 connection of the streaming hot path (users/stream.py says the whole path): the
socket, the kernel's receive stamps of its reads, the response head, and the body read by a libev
io watcher in the gevent hub with its framing (chunked, length, until close) tracked as it
arrives.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from typing import TYPE_CHECKING

import gevent
from gevent import monkey
from gevent import socket as gsocket
from gevent.event import Event

from core.clock import wall_minus_perf_ns
from users.first_token_watch import FirstTokenWatch, Watched, refine

if TYPE_CHECKING:
    from ssl import SSLContext

    from core.durations import Timeouts

READ_SIZE = 65536  # one read takes everything that has arrived; events are split afterwards
HEAD_LIMIT = 65536  # a response head longer than this is not HTTP we can use

_perf_counter = time.perf_counter
# Kernel receive timestamps (SO_TIMESTAMPNS): the time the bytes reached this machine, not the time
# the event loop got round to reading them. LLM_KERNEL_TIMESTAMPS=0 turns them off (benchmarks).
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if os.uname().sysname == "Linux" else None)
KERNEL_STAMPS = SO_TIMESTAMPNS is not None and os.environ.get("LLM_KERNEL_TIMESTAMPS", "1") != "0"
_TIMESPEC = struct.Struct("qq")
ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 64
MAX_STAMP_AGE_S = 1.0  # a stamp older than this (or from the future) means the wall clock jumped: use now
_wall_minus_perf = 0.0  # the kernel's stamps are wall-clock times; minus this, perf_counter times


def sync_clocks() -> None:
    """Measure the wall clock minus perf_counter (core/clock.py: bracketed, to within a µs). One
    offset for all stamps, not a fresh pair of clock reads per stamp: another thread may take the
    GIL between the two reads (the results writer's, for one), and each stamp would carry that gap.
    Both clocks run at the kernel's one NTP-disciplined rate; only a step of the wall clock moves
    the offset, and `kernel_stamp` measures again when a stamp shows one."""
    global _wall_minus_perf
    _wall_minus_perf = wall_minus_perf_ns()[0] * 1e-9


def kernel_stamp(anc: list, now: float) -> float:
    """The kernel's receive time of a read (its SO_TIMESTAMPNS message, if any) on perf_counter's
    clock; `now` (perf_counter right after the read) where there is none or it is implausible."""
    if anc:
        sec, nsec = _TIMESPEC.unpack_from(anc[0][2])
        t = sec + nsec * 1e-9 - _wall_minus_perf
        if 0.0 <= now - t < MAX_STAMP_AGE_S:
            return t
        sync_clocks()
    return now


sync_clocks()
_watch = FirstTokenWatch(lambda wall: wall - _wall_minus_perf)

# body framings
CHUNKED, LENGTH, UNTIL_CLOSE, NO_BODY = 0, 1, 2, 3


class Closed(Exception):
    """The connection ended before a complete response head."""

    def __init__(self, got_bytes: bool):
        self.got_bytes = got_bytes


# struct tcp_info (linux/tcp.h): 8 one-byte fields, then u32s, of which tcpi_last_data_sent (the
# 10th, at byte 44) and tcpi_last_ack_recv (the 13th, at byte 56): milliseconds ago, kernel clock
_TCP_INFO = struct.Struct("=44xI8xI")
TCP_INFO = getattr(socket, "TCP_INFO", None)


def close_after_send_s(sock) -> float | None:
    """Seconds from the last bytes this socket sent to the peer's close (its FIN), by the kernel's
    clock (TCP_INFO: the FIN is the last segment received, and the newest ACK, once it came):
    how late the event loop noticed does not enter it. None where the kernel does not say."""
    if TCP_INFO is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, _TCP_INFO.size)
    except OSError:
        return None
    if len(info) < _TCP_INFO.size:
        return None
    last_data_sent_ms, last_ack_recv_ms = _TCP_INFO.unpack_from(info)
    return max(0.0, (last_data_sent_ms - last_ack_recv_ms) / 1000.0)


class BadHead(Exception):
    pass


class HeaderTimeout(Exception):
    pass


def framing_of(status: int, head: dict[str, str]) -> tuple[int, int]:
    if status in (204, 304) or 100 <= status < 200:
        return NO_BODY, 0
    if "chunked" in head.get("transfer-encoding", "").lower():
        return CHUNKED, 0
    cl = head.get("content-length")
    if cl is not None:
        try:
            return LENGTH, int(cl)
        except ValueError:
            raise BadHead(f"content-length {cl!r}") from None
    return UNTIL_CLOSE, 0


class Connection:
    """A socket and the watcher that reads its bodies; reused for the requests of one user."""

    __slots__ = (
        "sock",
        "raw",
        "tls",
        "watcher",
        "done",
        "times",
        "datas",
        "last_t",
        "need",
        "head",
        "framing",
        "remaining",
        "left",
        "result",
        "events",
        "flowing",
        "watched",
        "head_bytes",
        "_recv",
        "_recvmsg",
        "_callback",
    )

    def __init__(self, host: str, port: int, tls: SSLContext | None, connect_timeout: float):
        """Connected to host:port; with `tls` (core/tls.py's policy), its handshake done: the
        certificate is checked before the request, and with it the key, is written."""
        sock = gsocket.create_connection((host, port), timeout=connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            try:
                sock = tls.wrap_socket(sock, server_hostname=host)
            except BaseException:
                sock.close()
                raise
        sock.settimeout(None)  # the caller bounds every wait itself (no timer per read)
        self.sock = sock
        self.tls = tls = tls is not None
        self.raw = None if tls else sock._sock  # the real non-blocking socket under gevent's
        self._recv = None if tls else self.raw.recv
        self._recvmsg = None
        self._callback = self._on_readable
        if KERNEL_STAMPS and not tls:
            try:
                self.raw.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            except OSError:
                pass
            else:
                self._recvmsg = self.raw.recvmsg
                self._callback = self._on_readable_stamped
        self.watcher = None if tls else gevent.get_hub().loop.io(sock.fileno(), 1)
        self.done = Event()
        self.result: tuple[str, str] | None = None
        self.watched: Watched | None = None  # users/first_token_watch.py, from the write to the body's end
        self.head_bytes = 0

    def watch_first_token(self) -> None:
        """Have the first-token watch stamp this socket's arrivals from now (just before the request
        is written) until its first data line is read (users/first_token_watch.py)."""
        self._unwatch()
        self.watched = _watch.watch(self.raw) if self._recvmsg is not None else None

    def _unwatch(self) -> None:
        if self.watched is not None:
            _watch.unwatch(self.raw)

    def end_watch(self, ex) -> None:
        """Once the stream no longer moves (ended, failed or killed): the watch's arrivals split the
        exchange's reads where they say the bytes came earlier (users/first_token_watch.py)."""
        w = self.watched
        if w is None:
            return
        self._unwatch()
        self.watched = None
        if w.arrivals:
            ex.times, ex.datas = refine(ex.times, ex.datas, self.head_bytes, w.arrivals)

    def _taken_error(self) -> OSError | None:
        """The socket error (a reset) that a peek of the first-token watch took in a race with it, if
        any: raised in place of the end of stream or ENOTCONN the loop's read then finds."""
        w = self.watched
        return OSError(w.error, os.strerror(w.error)) if w is not None and w.error else None

    def close(self) -> None:
        self._unwatch()
        w = self.watcher
        if w is not None:
            w.stop()
            w.close()
            self.watcher = None
        try:
            self.sock.close()
        except OSError:
            pass

    def idle_ok(self) -> bool:
        """A kept-alive connection must be silent while idle: readable means closed (or garbage)."""
        try:
            if self.tls:
                return self.sock.pending() == 0 and not readable(self.sock)
            self.raw.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return True
        except OSError:
            return False
        return False

    # -- head ---------------------------------------------------------------------------------
    def read_head(self) -> tuple[int, dict[str, str], bytes, float]:
        """Status, headers (lower-case names), the body bytes that came with them, and the arrival
        time of the last read."""
        sock = self.sock
        buf = b""
        t = 0.0
        got = 0  # bytes read, 1xx heads included
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > HEAD_LIMIT:
                    raise BadHead("response head longer than 64 KiB")
                try:
                    if self._recvmsg is None:
                        data = sock.recv(READ_SIZE)
                        t = _perf_counter()
                    else:  # stamped by the kernel like the body: the first token often comes with the head
                        data, anc, _, _ = sock.recvmsg(READ_SIZE, ANC_SIZE)
                        t = kernel_stamp(anc, _perf_counter())
                except OSError as e:
                    raise (self._taken_error() or e) from None
                if not data:
                    raise self._taken_error() or Closed(bool(buf))
                buf += data
                got += len(data)
                continue
            lines = buf[:end].decode("latin-1").split("\r\n")
            rest = buf[end + 4 :]
            parts = lines[0].split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
                raise BadHead(repr(lines[0][:80]))
            status = int(parts[1])
            head = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if sep:
                    name = name.strip().lower()
                    value = value.strip()
                    head[name] = f"{head[name]}, {value}" if name in head else value
            if 100 <= status < 200 and status != 101:  # 100 Continue and friends: the real head follows
                buf = rest
                continue
            if parts[0] == "HTTP/1.0" and head.get("connection", "").lower() != "keep-alive":
                head["connection"] = "close"
            self.head_bytes = got - len(rest)
            return status, head, rest, t

    # -- body ---------------------------------------------------------------------------------
    def read_body(
        self,
        ex,
        framing: int,
        length: int,
        rest: bytes,
        t_head: float,
        limit: float,
        is_deadline: bool,
        cancel_after: float | None,
        timeouts: Timeouts,
        events: bool = False,
    ) -> None:
        """Read the body to its end or a timeout. `events`: the body is an event stream, whose first
        token is the first read holding a data line: comments (': keep-alive') and blank lines
        before it leave the first token's limit running. Any other body flows with its first byte."""
        self.times, self.datas = ex.times, ex.datas
        self.framing = framing
        self.need, self.head, self.remaining = 0, b"", length
        self.result = None
        self.last_t = 0.0
        self.events, self.flowing = events, False
        if framing == NO_BODY or (framing == LENGTH and length <= 0):
            ex.complete = True
            return
        if rest:  # body bytes that came with the head
            self.times.append(t_head)
            self.datas.append(rest)
            self.last_t = t_head
            self.flowing = not events or b"data:" in rest
            if self.flowing and self.watched is not None:
                _watch.unwatch(self.raw)
            self.left -= len(rest)
            try:
                if self._feed(rest):
                    ex.complete = True
                    return
            except ValueError as e:
                ex.error, ex.error_detail = "stream_truncated", f"bad chunked framing: {e}"[:200]
                return
        # the first token's limit counts from the write (t_send), not from the head's arrival
        if self.tls:
            self._read_blocking(ex.t_send, limit, timeouts)
        else:
            self._read_watched(ex.t_send, limit, timeouts)
        error, detail = self.result
        if error == "timeout":
            if detail == "quiet" and self.flowing:
                detail = f"idle gap timeout {timeouts.idle:g}s"
            elif detail == "quiet":
                detail = f"first token timeout {timeouts.first_token:g}s" + (
                    " (the stream sent only comments such as keep-alives, no data)" if self.last_t else ""
                )
            elif is_deadline:
                detail = f"total timeout {timeouts.total:g}s"
            else:
                error, detail = "cancelled", f"cancelled after {cancel_after:g}s on purpose"
        ex.error, ex.error_detail = error, detail
        ex.complete = not error

    def _time_left(self, t_send: float, limit: float, timeouts: Timeouts) -> float:
        """Seconds until the next timeout fires: "quiet" (first token or idle gap) or "limit". At
        or past it, the read ends as that timeout (`result`) and 0 is returned."""
        quiet = (self.last_t + timeouts.idle) if self.flowing else (t_send + timeouts.first_token)
        until, kind = (quiet, "quiet") if quiet < limit else (limit, "limit")
        left = until - _perf_counter()
        if left <= 0:
            self.result = ("timeout", kind)
            return 0.0
        return left

    def _read_watched(self, t_send: float, limit: float, timeouts: Timeouts) -> None:
        """The user's greenlet sleeps; the watcher's callback reads in the hub until the end."""
        done = self.done
        done.clear()
        watcher = self.watcher
        watcher.start(self._callback)
        try:
            while self.result is None:
                left = self._time_left(t_send, limit, timeouts)
                if left:
                    done.wait(left)
        finally:
            watcher.stop()

    def _read_blocking(self, t_send: float, limit: float, timeouts: Timeouts) -> None:
        """TLS: read in the user's greenlet, with the same framing and timing."""
        sock = self.sock
        try:
            while self.result is None:
                left = self._time_left(t_send, limit, timeouts)
                if not left:
                    break
                sock.settimeout(left)
                try:
                    data = sock.recv(READ_SIZE)
                except TimeoutError:
                    continue
                except OSError as e:
                    self.result = ("stream_truncated", f"{type(e).__name__}: {e}"[:200])
                    break
                t = _perf_counter()
                if not data:
                    self.result = (
                        ("", "")
                        if self.framing == UNTIL_CLOSE
                        else ("stream_truncated", "the server closed the connection mid-body")
                    )
                    break
                self.times.append(t)
                self.datas.append(data)
                self.last_t = t
                if not self.flowing:
                    self.flowing = not self.events or b"data:" in data
                self.left -= len(data)
                if self.left < 0:  # --max-response-size: cut here
                    self.result = ("response_too_large", "")
                    break
                try:
                    if self._feed(data):
                        self.result = ("", "")
                except ValueError as e:
                    self.result = ("stream_truncated", f"bad chunked framing: {e}"[:200])
        finally:
            sock.settimeout(None)

    def _end(self, error: str, detail: str) -> None:
        """Hub side: the message ended (or failed); wake the user's greenlet."""
        self.watcher.stop()
        self.result = (error, detail)
        self.done.set()

    def _on_readable(self) -> None:
        """Runs in the gevent hub for every arrival on the socket: the hot path."""
        try:
            data = self._recv(READ_SIZE)
        except BlockingIOError:
            return
        except OSError as e:  # connection reset
            self._end("stream_truncated", f"{type(e).__name__}: {e}"[:200])
            return
        self._arrived(data, _perf_counter())

    def _on_readable_stamped(self) -> None:
        """`_on_readable` with the kernel's receive time of the read (SO_TIMESTAMPNS): the event
        loop's own delay no longer counts. TCP stamps a read with its last segment: bytes that
        waited for a late read are still stamped late, as they would be without."""
        try:
            data, anc, _, _ = self._recvmsg(READ_SIZE, ANC_SIZE)
        except BlockingIOError:
            return
        except OSError as e:  # connection reset
            e = self._taken_error() or e
            self._end("stream_truncated", f"{type(e).__name__}: {e}"[:200])
            return
        self._arrived(data, kernel_stamp(anc, _perf_counter()))

    def _arrived(self, data: bytes, t: float) -> None:
        """One read of the body, stamped `t`: keep it and track the framing to the message's end."""
        if not data:
            taken = self._taken_error()
            if taken is not None:
                self._end("stream_truncated", f"{type(taken).__name__}: {taken}"[:200])
            elif self.framing == UNTIL_CLOSE:
                self._end("", "")
            else:
                self._end("stream_truncated", "the server closed the connection mid-body")
            return
        self.times.append(t)
        self.datas.append(data)
        self.last_t = t
        if not self.flowing:  # until the first token: one look for a data line per read, then none
            self.flowing = flowing = not self.events or b"data:" in data
            if flowing and self.watched is not None:  # read now: the watch has done its part
                _watch.unwatch(self.raw)
        left = self.left - len(data)
        self.left = left
        if left < 0:  # --max-response-size: cut here (parsing more would stall every stream)
            self._end("response_too_large", "")
            return
        try:
            if self._feed(data):
                self._end("", "")
        except Exception as e:
            self._end("stream_truncated", f"bad chunked framing: {type(e).__name__}: {e}"[:200])

    def _feed(self, data: bytes) -> bool:
        """Track the framing of one read; True when the message is complete."""
        framing = self.framing
        if framing == CHUNKED:
            n = len(data)
            need = self.need
            if need >= n:  # inside the current chunk
                self.need = need - n
                return False
            if self.head:
                data = self.head + data[need:]
                self.head = b""
                pos, n = 0, len(data)
            else:
                pos = need
            while True:
                j = data.find(b"\r\n", pos)
                if j < 0:
                    self.head = data[pos:]
                    self.need = 0
                    if len(self.head) > 1024:
                        raise ValueError("no chunk-size line")
                    return False
                try:
                    size = int(data[pos:j], 16)
                except ValueError:  # chunk extensions (rare): "1a;name=value"
                    size = int(data[pos:j].split(b";", 1)[0], 16)
                if size == 0:  # the last chunk; the message ends after trailers and a blank line
                    if data.find(b"\r\n\r\n", pos) >= 0:
                        return True
                    self.head = data[pos:]
                    self.need = 0
                    return False
                pos = j + size + 4
                if pos >= n:
                    self.need = pos - n
                    return False
        if framing == LENGTH:
            self.remaining -= len(data)
            return self.remaining <= 0
        return False  # until close


def readable(sock) -> bool:
    """Readable now, asked without yielding to the event loop (gevent's select would)."""
    r, _, _ = monkey.get_original("select", "select")([sock.fileno()], [], [], 0.0)
    return bool(r)
