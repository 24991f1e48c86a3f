"""The streaming hot path: send one request, stamp every socket read, nothing else.

Locust's `FastResponse.iter_lines()`/`iter_content(n)` block until n bytes are buffered, which
batches SSE events and distorts TTFT and ITL (measured: TTFT 250 ms for a true 200 ms, 12
distinct arrival times for 64 tokens). This module is a small HTTP/1.1
client of its own, built for one thing: timing a streamed body exactly and cheaply.

  request    one `sendall` of head and body on a kept-alive connection (TCP_NODELAY), right
             after `t_send` is stamped: nothing may yield to the event loop in between (a yield
             there is a TTFT bias of one loop iteration, milliseconds under load; bench/RESULTS.md
             "Client speed"). A new connection is opened (and its TLS handshake done) before
             `t_send`: its setup time is `Exchange.connect_s` (the record's `connect_s`), apart
             from TTFT and E2E, which start when the request is written on a ready connection.
             `per_request` (--connection per-request) closes the connection after every request.
  head       read in the user's greenlet (one wake-up per request), stamped like the body: a
             server may send the first token with it
  body       read by a libev io watcher whose callback runs in the gevent hub: per arrival one
             `recvmsg` of whatever has arrived, stamped with the kernel's receive time
             (SO_TIMESTAMPNS, moved onto the perf_counter clock; `perf_counter()` where the
             kernel gives none), two list appends and a check of the chunked framing for the end
             of the message. No greenlet switch, no timer, no exception and no Python object per
             read besides the bytes; the user's greenlet sleeps until the message ends (or a
             timeout, checked by its wait).
  afterwards the finisher undoes the chunked framing and splits and parses the events in one
             pass over the raw reads (metrics.sse.parse_reads; `Exchange.pieces` gives the
             decoded body for other readers).

TLS connections read the body in the user's greenlet instead (an SSL socket can hold decrypted
bytes that the io watcher would not see), with the same framing and timing. Their certificate (chain
and host name) is checked by the run's policy (core/tls.py: --tls-ca, --tls-insecure) in the
handshake, before the request and its key are written; a refused one is a connect_error worded as
a certificate failure.

The first token's limit (--timeout-first-token) runs from the write until the head and then a read
holding an event stream's data line have come: comments such as keep-alives do not stop it.

This module sends and keeps the exchange; users/connection.py holds the connection: its socket,
the kernel's stamps, the head and the body's reading and framing.
"""

from __future__ import annotations

import functools
import ssl
import time
from urllib.parse import urlsplit

import gevent
from gevent import ssl as gssl

from core.durations import Timeouts
from core.tls import VERIFIED, TlsPolicy, client_context, failure
from metrics.sse import dechunk
from users.connection import (
    CHUNKED,
    LENGTH,
    UNTIL_CLOSE,
    BadHead,
    Closed,
    Connection,
    HeaderTimeout,
    close_after_send_s,
    framing_of,
)

USER_AGENT = "llm-loadtest"

_perf_counter = time.perf_counter
# A kept-alive connection that closes this soon after the request was sent, before any response
# byte, was closed by a server that did not run the request (llama.cpp closes some kept-alive
# connections 0.2-3 ms after a request arrives on them): it is sent once more on a new
# connection, and the record says `resent`. Later, the server may have run it: a failure. The close
# is timed by the kernel (users/connection.py close_after_send_s), not by when the loop saw it.
STALE_CLOSE_S = 0.05


class Exchange:
    """What came back from one request: status, timed body pieces, and how it ended.

    While the body streams only the raw reads are kept (`times`, `datas`); `pieces` is the decoded
    body as `(arrival time, bytes)` pairs, made on first use after the stream.
    """

    __slots__ = (
        "t_send",
        "t_end",
        "status",
        "complete",
        "error",
        "error_detail",
        "retry_after",
        "times",
        "datas",
        "framing",
        "resent",
        "connect_s",
        "content_type",
        "backend",
        "_pieces",
    )

    def __init__(self) -> None:
        self.t_send = 0.0  # the request was written (after any connection setup)
        self.connect_s = float("nan")  # setup of a new connection (connect, TLS); NaN when one was reused
        self.t_end = 0.0  # when the exchange ended (last read, or the failure)
        self.status = 0
        self.complete = False  # the HTTP message ended normally
        self.error = ""  # connect_error | timeout | stream_truncated | cancelled (transport level)
        self.error_detail = ""
        self.retry_after = ""
        self.content_type = ""  # of the response (a JSON body to a streaming request: not streamed)
        self.times: list[float] = []  # arrival time of every body read
        self.datas: list[bytes] = []  # the bytes of that read, framing included
        self.framing = LENGTH
        self.resent = False  # sent again after a stale kept-alive connection (STALE_CLOSE_S)
        self.backend = ""  # the value of the client's backend header in the response (--backend-header), if any
        self._pieces: list[tuple[float, bytes]] | None = None

    @property
    def pieces(self) -> list[tuple[float, bytes]]:
        """The body (chunked framing undone), each piece with the arrival time of its read."""
        if self._pieces is None:
            if self.framing == CHUNKED:
                self._pieces = dechunk(self.times, self.datas)
            else:
                self._pieces = [(t, d) for t, d in zip(self.times, self.datas) if d]
        return self._pieces

    @pieces.setter
    def pieces(self, value: list[tuple[float, bytes]]) -> None:
        self._pieces = value

    def first_bytes(self, n: int = 64) -> bytes:
        """The body's first bytes (at most n): what kind of body it is."""
        head = b""
        for _, piece in self.pieces:
            head += piece[: n - len(head)]
            if len(head) >= n:
                break
        return head

    def __repr__(self) -> str:
        return (
            f"Exchange(status={self.status}, complete={self.complete}, error={self.error!r}, reads={len(self.times)})"
        )


@functools.lru_cache(maxsize=4)
def _context(policy: TlsPolicy) -> ssl.SSLContext:
    """One context per policy for all the process's connections (building one reads the system's
    CA store: milliseconds, not to be paid per user)."""
    return client_context(policy, gssl)


class StreamClient:
    """One keep-alive connection to the server, for one virtual user."""

    def __init__(
        self,
        base_url: str,
        timeouts: Timeouts,
        headers: dict[str, str],
        per_request: bool = False,
        max_body: int | None = None,
        tls: TlsPolicy = VERIFIED,
        backend_header: str = "",
        first_token: bool = True,
    ):
        parts = urlsplit(base_url)
        # a load balancer's response header naming the backend that served the request (--backend-header)
        self.backend_header = backend_header.lower()
        # a streamed reply's first token is watched for from the write (users/first_token_watch.py);
        # a reply in one piece has no first token to tell from a second
        self.first_token = first_token
        self.max_body = max_body or 1 << 62  # a longer body is cut: response_too_large (--max-response-size)
        self.per_request = per_request  # close the connection after every request (--connection per-request)
        self.prefix = parts.path.rstrip("/")  # e.g. https://gateway/openai -> /openai
        self.timeouts = timeouts
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.tls else 80)
        self.context = _context(tls) if self.tls else None
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.port != (443 if self.tls else 80):
            host += f":{self.port}"
        self._fixed_head = f"Host: {host}\r\nUser-Agent: {USER_AGENT}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()
        )
        self.conn: Connection | None = None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def post(
        self, path: str, body: bytes, headers: dict[str, str], ex: Exchange, cancel_after: float | None = None
    ) -> None:
        """Send and read to the end, filling `ex` as it goes (so a killed caller keeps what arrived)."""
        try:
            self._exchange(path, body, headers, ex, cancel_after)
        finally:
            ex.t_end = _perf_counter()
            if self.per_request:
                self.close()

    def _request_bytes(self, path: str, body: bytes, headers: dict[str, str]) -> bytes:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return (
            f"POST {self.prefix}{path} HTTP/1.1\r\n{self._fixed_head}{head}Content-Length: {len(body)}\r\n\r\n".encode(
                "latin-1"
            )
            + body
        )

    def _exchange(
        self, path: str, body: bytes, headers: dict[str, str], ex: Exchange, cancel_after: float | None
    ) -> None:
        timeouts = self.timeouts
        request = self._request_bytes(path, body, headers)
        conn = self.conn
        if conn is not None and not conn.idle_ok():
            conn.close()  # the server closed it (or sent something) while it was idle
            conn = self.conn = None
        reused = conn is not None
        for attempt in (1, 2):
            if conn is not None and self.first_token:  # its count starts before the write, outside TTFT's window
                conn.watch_first_token()
            ex.t_send = t_send = _perf_counter()
            ex.connect_s = float("nan")
            try:
                if conn is None:
                    try:  # within --timeout-connect (the socket's timeout, TLS handshake included)
                        conn = self.conn = Connection(self.host, self.port, self.context, timeouts.connect)
                    except TimeoutError:
                        ex.error, ex.error_detail = "timeout", f"connect timeout {timeouts.connect:g}s"
                        return
                    except ssl.SSLError as e:  # the handshake: a certificate the policy refuses, or no TLS there
                        ex.error, ex.error_detail = "connect_error", failure(e, f"{self.host}:{self.port}")[:300]
                        return
                    # connecting yields to the loop (and waits for the server's accept): TTFT and
                    # E2E start when the request is written, the setup is a number of its own
                    if self.first_token:
                        conn.watch_first_token()
                    now = _perf_counter()
                    ex.connect_s = now - t_send
                    ex.t_send = t_send = now
                # --timeout-first-token counts from the write: the head and the first data line of
                # the body must both come within it (read_body); the connect has its own limit, above
                with gevent.Timeout(min(timeouts.total, timeouts.first_token), HeaderTimeout):
                    conn.sock.sendall(request)
                    status, head, rest, t_head = conn.read_head()
            except HeaderTimeout:
                ex.error, ex.error_detail = (
                    "timeout",
                    f"first token timeout {timeouts.first_token:g}s (no response headers)",
                )
                self.close()
                return
            except TimeoutError as e:
                ex.error, ex.error_detail = "timeout", f"waiting for response headers: {e}"
                self.close()
                return
            except (Closed, ConnectionResetError, BrokenPipeError) as e:
                # A kept-alive connection closed with not a byte of an answer: if that came at
                # once, the server had closed it or dropped the request unread (STALE_CLOSE_S);
                # send once more on a new connection, timed from that send. Otherwise (later, or
                # a fresh connection) it may have run the request: a failure, never a silent resend.
                unanswered = not (isinstance(e, Closed) and e.got_bytes)
                # when the close came, by the kernel's clock where it says (a busy event loop
                # notices a close late), else when this greenlet noticed it
                after = close_after_send_s(conn.sock) if isinstance(e, Closed) and unanswered else None
                self.close()
                conn = None
                stale = unanswered and (_perf_counter() - t_send if after is None else after) < STALE_CLOSE_S
                if reused and attempt == 1 and stale:
                    ex.resent = True
                    continue
                detail = (
                    "the connection closed before the response headers"
                    if isinstance(e, Closed)
                    else f"{type(e).__name__}: {e}"
                )
                ex.error, ex.error_detail = "connect_error", detail[:200]
                return
            except OSError as e:  # refused, reset, unreachable, DNS
                self.close()
                ex.error, ex.error_detail = "connect_error", f"{type(e).__name__}: {e}"[:200]
                return
            except BadHead as e:  # not HTTP
                self.close()
                ex.error, ex.error_detail = "connect_error", f"bad response head: {e}"[:200]
                return
            except BaseException:  # killed (the run ended) while waiting: the connection is mid-request
                self.close()
                raise
            break
        deadline = t_send + timeouts.total
        ex.status = status
        ex.content_type = head.get("content-type", "")
        if status == 429:
            ex.retry_after = head.get("retry-after", "")
        if self.backend_header:
            ex.backend = head.get(self.backend_header, "")
        try:
            framing, length = framing_of(status, head)
        except BadHead as e:
            self.close()
            ex.error, ex.error_detail = "stream_truncated", f"bad response head: {e}"[:200]
            return
        ex.framing = framing
        keep = head.get("connection", "").lower() != "close" and framing != UNTIL_CLOSE
        limit = deadline if cancel_after is None else min(deadline, t_send + cancel_after)
        try:
            conn.left = self.max_body  # body bytes still allowed (--max-response-size)
            conn.read_body(
                ex,
                framing,
                length,
                rest,
                t_head,
                limit,
                limit == deadline,
                cancel_after,
                timeouts,
                "event-stream" in ex.content_type.lower(),
            )
            if ex.error == "response_too_large":
                ex.error_detail = f"the response passed --max-response-size ({self.max_body} bytes): cut there"
        finally:  # also when the run kills this greenlet mid-stream
            conn.end_watch(ex)
            if not (ex.complete and keep and not ex.error):
                self.close()
