"""An API key the server echoes is kept nowhere: masked (core/redact.py) where a record's text from
the server is finished, so the records, the reports, summary.json and the console never see it.

The run's target is a small OpenAI-style server whose model list is open and which answers every
completion HTTP 401, echoing the key it got the ways gateways do: whole in a message, as the
Authorization header it read, and cut by the 200 bytes of a body the record keeps. A run of such
failures only stops itself after 10 s and prints an example of them (plugin/failfast.py): the
console line the key once reached. The server's count of its answers is the truth the records are
joined to.
"""

from __future__ import annotations

import json
import os
import threading
from contextlib import contextmanager
from http.server import ThreadingHTTPServer

import pandas as pd
import pytest

from core.redact import MASK, redact
from tests.fake_server import QuietHandler
from tests.helpers import read_results, run_locust

KEY = "sk-echo-5f0c2a9e8b7d41c3a6e2f9d8c7b6a5e4"


def echoes(auth: str) -> list[bytes]:
    """Three 401 bodies that give the key back: whole, as the header, and cut inside it by the
    record's 200 bytes (the text there ends with the key's first 23 characters)."""
    key = auth.removeprefix("Bearer ")
    whole = {
        "error": {
            "message": f"Incorrect API key provided: {key}. You can find your API key at the console.",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    header = {"detail": f"rejected header 'Authorization: {auth}'"}
    cut = json.dumps({"error": "x" * 161 + " key " + key})
    assert cut[:200].endswith(key[:23])
    return [json.dumps(whole).encode(), json.dumps(header).encode(), cut.encode()]


class _Handler(QuietHandler):
    def do_GET(self):
        if self.path == "/v1/models":  # the model list is open; the completions route checks the key
            self._send(200, b'{"object":"list","data":[{"id":"echo-model","object":"model"}]}', "application/json")
        else:
            self._send(404, b"{}", "application/json")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with self.server.lock:
            n = len(self.server.answered)
            self.server.answered.append(401)
        self._send(401, echoes(self.headers.get("Authorization", ""))[n % 3], "application/json")


@contextmanager
def echoing_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.lock, server.answered = threading.Lock(), []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_redact_masks_the_key_its_pieces_and_any_bearer_token():
    key = KEY
    assert redact(f"Incorrect API key provided: {key}.", key) == f"Incorrect API key provided: {MASK}."
    assert redact(f"got Authorization: Bearer {key}", key) == f"got Authorization: Bearer {MASK}"
    assert redact("Authorization: Bearer some-other-token, rejected", key) == f"Authorization: Bearer {MASK}, rejected"
    assert redact(f'{{"error": "bad key {key[:17]}', key) == f'{{"error": "bad key {MASK}'  # cut inside the key
    assert (
        redact(f"key {key[:6]}...{key[-4:]} is wrong", key) == f"key {MASK}...{key[-4:]} is wrong"
    )  # a shortened echo
    assert (
        redact("worker key sk-" + "a1" * 12 + " refused", "") == f"worker key {MASK} refused"
    )  # a key of OpenAI's shape
    assert (
        redact("HTTP 500 on POST /v1/chat/completions: overloaded", key)
        == "HTTP 500 on POST /v1/chat/completions: overloaded"
    )
    assert redact("the model said EMPTY", "EMPTY") == f"the model said {MASK}"
    assert redact("a b c", "a") == "a b c"  # a key too short to be told from text


@pytest.mark.process
def test_an_echoed_key_is_in_no_result_and_no_console_line(tmp_path):
    results = str(tmp_path / "results")
    with echoing_server() as (server, url):
        done = run_locust(
            "--host",
            url,
            "--api-key",
            KEY,
            "-u",
            "2",
            "-r",
            "2",
            "-t",
            "40s",
            "--results-dir",
            results,
            "--run-id",
            "echo",
            "--stop-timeout",
            "5",
            timeout=120,
        )
        answered = list(server.answered)
    console = done.stdout + done.stderr
    assert done.returncode == 4, console[-3000:]  # stopped by the all-failed check
    example = [line for line in console.splitlines() if "the run is stopped" in line]
    assert len(example) == 1 and "HTTP 401 on POST /v1/chat/completions: " in example[0] and MASK in example[0], example
    records, _ = read_results(results, "echo")
    # every answer is a record
    assert records["status"].tolist() == [401] * len(answered) and len(answered) >= 5, (
        records["status"].tolist(),
        answered,
    )
    details = records["error_detail"].tolist()
    assert all(d.startswith("HTTP 401 on POST /v1/chat/completions: ") and MASK in d for d in details), details
    assert any("Incorrect API key provided: " + MASK in d for d in details) and any(
        "Bearer " + MASK in d for d in details
    )
    texts = [records[c].astype(str) for c in records.columns if pd.api.types.is_string_dtype(records[c])]
    assert any(column.name == "error_detail" for column in texts)
    for piece in (KEY[:12], KEY[-12:]):  # the records' text (the file itself is compressed: grep reads nothing there)
        assert not any(column.str.contains(piece, regex=False).any() for column in texts), piece
    files = [os.path.join(d, f) for d, _, names in os.walk(results) for f in names]
    assert {"requests.parquet", "summary.json", "report.html", "report.md"} <= {os.path.basename(f) for f in files}, (
        files
    )
    for piece in (KEY, KEY[:12], KEY[-12:]):
        for path in files:
            with open(path, "rb") as f:
                assert piece.encode() not in f.read(), f"{piece} is in {path}"
        assert piece not in console, f"{piece} is on the console"
