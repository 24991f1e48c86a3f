"""A small OpenAI-compatible server on 127.0.0.1 that misbehaves on purpose, with its own log of
what it served: it lists one model, streams chat completions token by token, and can hold paths
unanswered (a gateway that routes only /v1/*: GET /version and /metrics accepted and never
answered), or ignore `max_tokens` (in every n-th request).

Every chat completion it answered is one entry of `served` (request id, when it began and ended,
the max_tokens asked for and the tokens sent): what a test joins the suite's records to."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "fake-model"
HOLD_S = 120.0  # a held request is answered never, within any test's time


class QuietHandler(BaseHTTPRequestHandler):
    """The base of the tests' small servers: keep-alive (as the suite's client expects), no access
    log on the test's output, and a whole body sent with its length."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Handler(QuietHandler):
    def _hold(self) -> bool:
        if self.path in self.server.hold:
            self.server.released.wait(HOLD_S)  # accepted and read, never answered
            return True
        return False

    def do_GET(self):
        if self._hold():
            return
        if self.path == "/v1/models":
            body = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        else:
            body = b"{}"
            self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        begun = time.time()
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        if self._hold():
            return
        asked = request.get("max_tokens") or request.get("max_completion_tokens")
        srv = self.server
        with srv.lock:
            srv.posts += 1
            ignore = bool(srv.ignore_every) and srv.posts % srv.ignore_every == 0
        tokens = srv.tokens if ignore or not asked else min(srv.tokens, int(asked))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(data: dict | str) -> None:
            line = b"data: " + (data if isinstance(data, str) else json.dumps(data)).encode() + b"\n\n"
            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            self.wfile.flush()

        event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        for i in range(tokens):
            time.sleep(srv.gap_s)
            event({"choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}]})
        event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        event({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens}})
        event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        with srv.lock:
            srv.served.append(
                {
                    "request_id": self.headers.get("X-Request-Id"),
                    "begun": begun,
                    "ended": time.time(),
                    "max_tokens": asked,
                    "tokens": tokens,
                }
            )


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, hold=(), tokens: int = 10, gap_s: float = 0.02, ignore_every: int = 0):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hold, self.tokens, self.gap_s = set(hold), tokens, gap_s
        self.ignore_every = (
            ignore_every  # every n-th chat completion streams `tokens` whatever its max_tokens (0: none)
        )
        self.posts = 0
        self.served: list[dict] = []
        self.lock = threading.Lock()
        self.released = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextmanager
def fake_server(**behaviour):
    server = FakeServer(**behaviour)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.released.set()
        server.shutdown()
        server.server_close()
