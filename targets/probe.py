"""A probe of a backend out of the spread (targets/health.py): does it answer HTTP again?

GET <prefix>/v1/models on a new connection, within `timeout_s`: any HTTP status line below 500 is an
answer (a 401 of a server that wants a key still says it is up and serving). An https backend is
probed by its TCP connect alone: the probe does not carry the run's TLS policy or key.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from gevent import socket as gsocket

MODELS = "/v1/models"


def answers(url: str, timeout_s: float = 1.0) -> bool:
    parts = urlsplit(url)
    https = parts.scheme == "https"
    address = (parts.hostname or "127.0.0.1", parts.port or (443 if https else 80))
    try:
        sock = gsocket.create_connection(address, timeout=timeout_s)
    except OSError:
        return False
    try:
        if https:
            return True
        host = f"{address[0]}:{address[1]}"
        sock.sendall(
            f"GET {parts.path.rstrip('/')}{MODELS} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode(
                "latin-1"
            )
        )
        head = b""
        while b"\r\n" not in head and len(head) < 1024:
            data = sock.recv(1024)
            if not data:
                break
            head += data
        status = head.split(b"\r\n", 1)[0].split(b" ")
        return len(status) >= 2 and status[0].startswith(b"HTTP/") and status[1].isdigit() and int(status[1]) < 500
    except OSError:
        return False
    finally:
        sock.close()
