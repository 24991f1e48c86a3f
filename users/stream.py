"""The streaming hot path: send one request, stamp every socket read, nothing else.

Locust's `FastResponse.iter_lines()`/`iter_content(n)` block until n bytes are buffered, which
batches SSE events and distorts TTFT and ITL (FIELD_NOTES 1). This reader drives
geventhttpclient's response object itself: one `recv` of whatever has arrived, one
`perf_counter()`, feed the C HTTP parser (which undoes chunked encoding), keep the decoded bytes
with their arrival time. Splitting events, JSON and token counting happen after the stream ends
(metrics/sse.py), so the per-read cost stays a few microseconds.

geventhttpclient is pinned in requirements.txt because this module uses two attributes of its
response object that are not public API (`_sock`, `_body_buffer`).
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import gevent
from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPConnectionClosed

from suite.options import Timeouts

READ_SIZE = 65536  # one read takes everything that has arrived; events are split afterwards


@dataclass(slots=True)
class Exchange:
    """What came back from one request: status, timed body pieces, and how it ended."""

    t_send: float = 0.0
    t_end: float = 0.0  # when the exchange ended (last read, or the failure)
    status: int = 0
    pieces: list[tuple[float, bytes]] = field(default_factory=list)
    complete: bool = False  # the HTTP message ended normally
    error: str = ""  # connect_error | timeout | stream_truncated | cancelled (transport level)
    error_detail: str = ""
    retry_after: str = ""


class StreamClient:
    """One keep-alive connection to the server, for one virtual user."""

    def __init__(self, base_url: str, timeouts: Timeouts, headers: dict[str, str]):
        parts = urlsplit(base_url)
        self.prefix = parts.path.rstrip("/")  # e.g. https://gateway/openai -> /openai
        self.timeouts = timeouts
        self.http = HTTPClient(
            parts.hostname,
            port=parts.port,
            ssl=parts.scheme == "https",
            insecure=True,
            concurrency=1,
            connection_timeout=timeouts.connect,
            network_timeout=timeouts.first_token,
            headers=headers,
        )
        self._kept_alive = False  # the last exchange ended cleanly, so its connection was kept

    def close(self) -> None:
        self.http.close()

    def post(self, path: str, body: bytes, headers: dict[str, str], ex: Exchange, cancel_after: float | None = None) -> None:
        """Send and read to the end, filling `ex` as it goes (so a killed caller keeps what arrived)."""
        try:
            self._exchange(path, body, headers, ex, cancel_after)
        finally:
            ex.t_end = time.perf_counter()

    def _exchange(self, path: str, body: bytes, headers: dict[str, str], ex: Exchange, cancel_after: float | None) -> None:
        timeouts = self.timeouts
        reused, self._kept_alive = self._kept_alive, False
        for attempt in (1, 2):
            ex.t_send = t_send = time.perf_counter()
            deadline = t_send + timeouts.total
            try:
                with gevent.Timeout(min(timeouts.total, timeouts.connect + timeouts.first_token), _HeaderTimeout):
                    resp = self.http.request("POST", self.prefix + path, body=body, headers=headers)
            except _HeaderTimeout:
                ex.error, ex.error_detail = "timeout", "no response headers within the connect + first-token timeout"
                return
            except (socket.timeout, TimeoutError) as e:
                ex.error, ex.error_detail = "timeout", f"waiting for response headers: {e}"
                return
            except (HTTPConnectionClosed, ConnectionResetError, BrokenPipeError) as e:
                # A kept-alive connection that the server had already closed (idle timeout, or a
                # server that drops some keep-alive connections silently, like llama.cpp's):
                # not a byte of an answer came back. Send once more on a new connection, and time
                # the request from that send. A fresh connection closed like this is a failure.
                if reused and attempt == 1:
                    continue
                ex.error, ex.error_detail = "connect_error", f"{type(e).__name__}: {e}"[:200]
                return
            except OSError as e:  # refused, reset, unreachable, DNS
                ex.error, ex.error_detail = "connect_error", f"{type(e).__name__}: {e}"[:200]
                return
            except Exception as e:  # the HTTP parser: connection closed inside the headers
                ex.error, ex.error_detail = "connect_error", f"{type(e).__name__}: {e}"[:200]
                return
            break
        ex.status = resp.status_code
        if ex.status == 429:
            ex.retry_after = str(resp.get("retry-after") or "")
        self._read_body(resp, ex, deadline, cancel_after)
        self._kept_alive = ex.complete and not ex.error

    def _read_body(self, resp, ex: Exchange, deadline: float, cancel_after: float | None) -> None:
        pieces = ex.pieces
        t = time.perf_counter()
        if resp._body_buffer:
            pieces.append((t, bytes(resp._body_buffer)))
            del resp._body_buffer[:]
        sock = resp._sock
        if sock is None:  # the whole message came with the headers
            ex.complete = resp.message_complete
            return
        timeouts = self.timeouts
        sock.settimeout(timeouts.first_token if not pieces else timeouts.idle)
        limit = deadline if cancel_after is None else min(deadline, ex.t_send + cancel_after)
        try:
            while not resp.message_complete:
                data = sock.recv(READ_SIZE)
                t = time.perf_counter()
                if not data:
                    ex.error, ex.error_detail = "stream_truncated", "the server closed the connection mid-body"
                    break
                resp.feed(data)
                buf = resp._body_buffer
                if buf:
                    if not pieces:
                        sock.settimeout(timeouts.idle)
                    pieces.append((t, bytes(buf)))
                    del buf[:]
                if t > limit and not resp.message_complete:
                    if limit == deadline:
                        ex.error, ex.error_detail = "timeout", f"total timeout {timeouts.total:g}s"
                    else:
                        ex.error, ex.error_detail = "cancelled", f"cancelled after {cancel_after:g}s on purpose"
                    break
        except (socket.timeout, TimeoutError):
            phase = "first token" if not pieces else "idle gap"
            limit_s = timeouts.first_token if not pieces else timeouts.idle
            ex.error, ex.error_detail = "timeout", f"{phase} timeout {limit_s:g}s"
        except OSError as e:  # connection reset
            ex.error, ex.error_detail = "stream_truncated", f"{type(e).__name__}: {e}"[:200]
        except Exception as e:  # the HTTP parser rejected the bytes
            ex.error, ex.error_detail = "stream_truncated", f"{type(e).__name__}: {e}"[:200]
        ex.complete = resp.message_complete
        if not ex.complete:
            _discard(resp, sock)


class _HeaderTimeout(Exception):
    pass


def _discard(resp, sock) -> None:
    """Close a connection left mid-message: it cannot carry another request."""
    pool = resp._pool
    resp._sock = resp._pool = None
    if pool is not None:
        pool.release_socket(sock)
    else:
        sock.close()
