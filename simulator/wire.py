"""The bytes of HTTP/1.1 and of server-sent events that every reply shares: limits on a request,
the server header, status reasons, the error body, a chunk of chunked transfer encoding and the
stream's end."""

from __future__ import annotations

import orjson

from . import __version__

MAX_HEAD = 65536
MAX_BODY = 64 * 1024 * 1024

SERVER_HEADER = b"server: llm-simulator/%s\r\n" % __version__.encode()  # names the server, as real ones do

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}
_ERR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    413: "BadRequestError",
    429: "RateLimitError",
    431: "BadRequestError",
    500: "InternalServerError",
    501: "NotImplementedError",
    503: "ServiceUnavailableError",
}

DONE = b"data: [DONE]\n\n"
TERMINATOR = b"0\r\n\r\n"


class HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def error_body(status: int, message: str) -> bytes:
    return orjson.dumps(
        {"error": {"message": message, "type": _ERR_TYPES.get(status, "Error"), "param": None, "code": status}}
    )


def frame(payload: bytes) -> bytes:
    """One chunk of chunked transfer encoding."""
    return b"%x\r\n%b\r\n" % (len(payload), payload)
