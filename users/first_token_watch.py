"""The arrival of a stream's first bytes, stamped by a thread of its own, whatever the event loop is
doing.

The reads of a stream are stamped by the kernel (users/connection.py, SO_TIMESTAMPNS), so a late
read is still stamped when its bytes arrived, unless the next chunk arrived before the read: TCP
merges segments that wait in one socket into one buffer that keeps the newest segment's stamp, and
the first token is then stamped one ITL (or more) late. When the event loop's core is full (2,048
streams on one core), one turn of the loop outlasts an ITL and that is the rule, not the exception.

So, from the request's write until the event loop has read its first data line, the socket is also
in an epoll set of this module's thread (edge-triggered: one wake-up per arrival). On each arrival
the thread asks the kernel how many bytes the connection has received (TCP_INFO
`tcpi_bytes_received`), then peeks at what is waiting (MSG_PEEK with MSG_TRUNC: nothing is copied
or consumed, the loop still reads every byte) with the kernel's stamp of the newest segment there.
That gives an **arrival**: by that stamp, the response's first R bytes had all arrived (the count is
taken before the peek, so every byte it counts is older than the newest segment the peek sees).

The stamp is the kernel's, so the thread's own delay does not count as long as it is shorter than
the gap to the stream's next chunk. What delays it is the GIL: on a full core the loop gives it up
to a waiting thread only when the interpreter's switch interval runs out, and Python's socket
methods give it up around every system call, so a batch of a few hundred arrivals (streams started
together get their first tokens together) could wait for the loop once per socket. The peek is
therefore made through ctypes' `PyDLL`, which keeps the GIL: one wait per batch, then the whole
batch at a few microseconds a socket (bench/RESULTS.md, "The first-token watch").

After the stream, `refine` splits the loop's reads at those byte counts: every byte's time is the
earliest stamp known to cover it. A first token the loop read merged with its second one gets its
own arrival back, and the records' `chunk_times` (and with them TTFT, the ITL and the self-health's
merged-read check, plugin/health_stalls.py) see the split.

A peek must not take what the loop has to see: a socket's pending error (a reset) goes to the first
read that finds no data, peek or not. So the thread leaves alone a socket whose event or TCP state
says it failed or closed, and an error that a reset landing between those checks and the peek
still gives it is kept (`Watched.error`) for the connection to raise in its place
(users/connection.py).

Plain-text HTTP only: a TLS stream's bytes on the wire are not the body's bytes.
LLM_FIRST_TOKEN_WATCH=0 turns the thread off (benchmarks).
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import socket
import struct
import sys

from gevent import monkey

WATCH = os.environ.get("LLM_FIRST_TOKEN_WATCH", "1") != "0"
MAX_ARRIVALS = 8  # per request: a stream that sends comments before its first token costs no more
POLL_S = 1.0  # the thread's longest sleep (it is a daemon; this only bounds its reaction to a fork)

TCP_INFO = getattr(socket, "TCP_INFO", None)
# struct tcp_info (linux/tcp.h): tcpi_state, the first byte; tcpi_bytes_received, a u64 at byte 128
# (Linux 4.1 and later)
_INFO = struct.Struct("=B127xQ")
TCP_ESTABLISHED, TCP_CLOSE_WAIT = 1, 8  # states whose reads hold no error (linux/tcp_states.h)
_FAILED = getattr(select, "EPOLLERR", 8) | getattr(select, "EPOLLHUP", 16)
_TIMESPEC = struct.Struct("qq")
_ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 64
# MSG_TRUNC on a TCP socket: the bytes are counted, not copied (with MSG_PEEK, nothing is consumed)
_PEEK = getattr(socket, "MSG_PEEK", 2) | getattr(socket, "MSG_DONTWAIT", 0x40) | getattr(socket, "MSG_TRUNC", 0x20)
PEEK_SIZE = 65536  # a peek that fills this may not reach the newest segment: not an arrival
SWITCH_INTERVAL_S = 0.001  # the longest the loop keeps the GIL from a waiting thread (Python's default: 5 ms)


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _MsgHdr(ctypes.Structure):  # struct msghdr (Linux, glibc and musl alike on 64-bit)
    _fields_ = [
        ("name", ctypes.c_void_p),
        ("namelen", ctypes.c_uint32),
        ("iov", ctypes.POINTER(_IoVec)),
        ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p),
        ("controllen", ctypes.c_size_t),
        ("flags", ctypes.c_int),
    ]


class _Peek:
    """recvmsg(fd, MSG_PEEK | MSG_TRUNC) with its SO_TIMESTAMPNS message, the GIL kept throughout."""

    def __init__(self) -> None:
        libc = ctypes.PyDLL(None, use_errno=True)  # PyDLL: calls keep the GIL
        self._recvmsg = recvmsg = libc.recvmsg
        recvmsg.argtypes = [ctypes.c_int, ctypes.POINTER(_MsgHdr), ctypes.c_int]
        recvmsg.restype = ctypes.c_ssize_t
        # the length bounds what the peek walks: it must reach the newest segment (MSG_TRUNC copies
        # nothing, but a kernel that did would find the room)
        self._data = ctypes.create_string_buffer(PEEK_SIZE)
        self._control = ctypes.create_string_buffer(_ANC_SIZE)
        self._iov = _IoVec(ctypes.cast(self._data, ctypes.c_void_p), PEEK_SIZE)
        self._msg = _MsgHdr(None, 0, ctypes.pointer(self._iov), 1, ctypes.cast(self._control, ctypes.c_void_p), 0, 0)
        self._ref = ctypes.byref(self._msg)
        # where the timespec starts in the control buffer: after the cmsghdr, aligned to size_t
        self._at = socket.CMSG_LEN(0) if hasattr(socket, "CMSG_LEN") else 16

    def __call__(self, fd: int) -> tuple[int, float | None]:
        """Bytes waiting and the kernel's stamp of the newest (wall-clock seconds), or (n, None);
        n is -errno when the peek failed."""
        msg = self._msg
        msg.controllen = _ANC_SIZE
        n = self._recvmsg(fd, self._ref, _PEEK)
        if n < 0:
            return -ctypes.get_errno(), None
        if not 0 < n < PEEK_SIZE or msg.controllen < self._at + _TIMESPEC.size:
            return n, None
        sec, nsec = _TIMESPEC.unpack_from(self._control.raw, self._at)
        return n, sec + nsec * 1e-9


def tcp_state(sock) -> tuple[int, int] | None:
    """The TCP state and the bytes this connection has received in order since it opened (None
    where not known)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, _INFO.size)
    except OSError:
        return None
    if len(info) < _INFO.size:
        return None
    return _INFO.unpack_from(info)


class Watched:
    """One watched request: its arrivals (stamp, response bytes), and an error the thread took."""

    __slots__ = ("sock", "base", "arrivals", "error")

    def __init__(self, sock, base: int):
        self.sock = sock
        self.base = base  # bytes received before the request was written
        self.arrivals: list[tuple[float, int]] = []
        self.error = 0  # errno of a pending socket error a peek took (a reset in the race, see above)


class FirstTokenWatch:
    """The sockets whose first token is awaited, and the thread that stamps their arrivals."""

    def __init__(self, to_perf) -> None:
        self.to_perf = to_perf  # a kernel stamp (wall-clock seconds) on perf_counter's clock
        self.enabled = WATCH and TCP_INFO is not None and hasattr(select, "EPOLLET")
        self._watched: dict[int, Watched] = {}
        self._epoll = None
        self._pid = 0

    def watch(self, sock) -> Watched | None:
        """Stamp the arrivals on `sock` (a real, non-blocking socket with SO_TIMESTAMPNS on) until
        `unwatch`. Call it before the request is written: the count starts there."""
        if not self.enabled:
            return None
        info = tcp_state(sock)
        if info is None:
            return None
        if self._pid != os.getpid():  # first use, or a forked process (Locust's --processes)
            self._start()
        fd = sock.fileno()
        self._watched[fd] = watched = Watched(sock, info[1])
        try:
            self._epoll.register(fd, select.EPOLLIN | select.EPOLLET)
        except FileExistsError:
            self._epoll.modify(fd, select.EPOLLIN | select.EPOLLET)
        return watched

    def unwatch(self, sock) -> None:
        fd = sock.fileno()
        if self._watched.pop(fd, None) is not None:
            try:
                self._epoll.unregister(fd)
            except OSError:  # the thread let it go already (MAX_ARRIVALS)
                pass

    def _start(self) -> None:
        # gevent's monkey-patching (Locust's) swaps epoll and threads for its own: this thread must
        # be a real one, sleeping in a real epoll (it then holds no GIL while it waits)
        self._epoll = monkey.get_original("select", ["epoll"])[0]()
        self._watched = {}
        self._pid = os.getpid()
        if sys.getswitchinterval() > SWITCH_INTERVAL_S:
            sys.setswitchinterval(SWITCH_INTERVAL_S)
        start = monkey.get_original("_thread", ["start_new_thread"])[0]
        start(self._run, (self._epoll,))

    def _run(self, epoll) -> None:
        watched = self._watched
        peek = _Peek()
        to_perf = self.to_perf
        while self._epoll is epoll:
            try:
                ready = epoll.poll(POLL_S)
            except OSError:
                return
            for fd, events in ready:
                w = watched.get(fd)
                if w is None or events & _FAILED:  # a reset or a hang-up: the loop's to read
                    continue
                info = tcp_state(w.sock)  # first: every byte it counts is older than the peek's stamp
                if info is None or info[0] not in (TCP_ESTABLISHED, TCP_CLOSE_WAIT):
                    continue
                # nothing waiting (the loop read it first): n = -EAGAIN, no stamp
                n, stamp = peek(fd)
                if stamp is None:
                    if n < 0 and -n not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EBADF):
                        w.error = -n  # taken from the loop in the race: handed back (module docstring)
                    continue
                w.arrivals.append((to_perf(stamp), info[1] - w.base))
                if len(w.arrivals) >= MAX_ARRIVALS and watched.get(fd) is w:
                    try:
                        epoll.unregister(fd)
                    except OSError:
                        pass


def refine(
    times: list[float], reads: list[bytes], head_bytes: int, arrivals: list[tuple[float, int]]
) -> tuple[list[float], list[bytes]]:
    """The body's reads split where an arrival says that their first bytes came earlier than the
    read's own stamp: each byte keeps the earliest stamp that covers it (its read's, or that of an
    arrival counting at least up to it). `head_bytes`: the response's bytes before the body (the
    head, and any 1xx before it); arrivals count from the response's first byte."""
    bounds = sorted((r - head_bytes, t) for t, r in arrivals if r > head_bytes)
    if not bounds:
        return times, reads
    # the earliest stamp covering body offset b: the least stamp of the arrivals reaching b or more
    ends, stamps = [], []
    least = float("inf")
    for end, t in reversed(bounds):
        if t < least:
            least = t
            ends.append(end)
            stamps.append(t)
    ends.reverse()
    stamps.reverse()  # ends ascending, stamps ascending: stamps[k] covers bytes up to ends[k]
    out_t: list[float] = []
    out_d: list[bytes] = []
    k = 0
    start = 0
    last = ends[-1]
    for i, (t, d) in enumerate(zip(times, reads)):
        if start >= last:  # past every arrival (most of a stream): the reads as they are
            out_t += times[i:]
            out_d += reads[i:]
            break
        stop = start + len(d)
        while k < len(ends) and ends[k] <= start:
            k += 1
        pos = 0
        j = k
        while j < len(ends) and ends[j] < stop and stamps[j] < t:  # a split inside this read
            cut = ends[j] - start
            if cut > pos:
                out_t.append(stamps[j])
                out_d.append(d[pos:cut])
                pos = cut
            j += 1
        if pos < len(d) or not d:
            out_t.append(min(t, stamps[j]) if j < len(ends) else t)
            out_d.append(d[pos:])
        start = stop
    return out_t, out_d
