"""The server's version in the setup block (plugin/setup.py server_version) and where it came from:
GET /version, else an info gauge's `version` label on GET /metrics, else the response headers;
replayed from recordings of real servers (tests/corpus/*/identity/), and from the simulator, which
names itself in a header and an info gauge."""

from __future__ import annotations

import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from core.tls import TlsPolicy
from plugin.setup import server_version, version_from_headers, version_from_metrics
from simulator import __version__ as SIMULATOR_VERSION
from tests.helpers import read_results, run_locust, simulator

IDENTITY = sorted((Path(__file__).parent / "corpus").glob("*/identity/*.json"))
PLAN = SimpleNamespace(api_key=None, timeouts=SimpleNamespace(connect=3.0), tls=TlsPolicy())
HOP_BY_HOP = {"content-length", "connection", "date"}


class _Replay(BaseHTTPRequestHandler):
    """Answers each path as the recording says (status, headers, body); 404 with no header else."""

    responses: dict = {}

    def do_GET(self):
        r = self.responses.get(self.path)
        body = (r or {}).get("body", "").encode()
        self.send_response_only(r["status"] if r else 404)
        for k, v in ((r or {}).get("headers") or {}).items():
            if k.lower() not in HOP_BY_HOP:
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _serve(responses: dict):
    handler = type("Replay", (_Replay,), {"responses": responses})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("path", IDENTITY, ids=lambda p: p.parent.parent.name)
def test_a_recorded_server_is_named_from_where_it_says_so(path):
    case = json.loads(path.read_text(encoding="utf-8"))
    server = _serve(case["responses"])
    try:
        got = server_version(f"http://127.0.0.1:{server.server_address[1]}", PLAN)
    finally:
        server.shutdown()
    assert got == (case["expect"]["version"], case["expect"]["source"]), case["server"]


def test_version_sources_in_order():
    """/version first; then an engine's info gauge, never the Prometheus client's python_info; then
    a header naming a version, then `server`."""
    metrics = (
        '# TYPE python_info gauge\npython_info{implementation="CPython",major="3",minor="12",version="3.12.1"} 1.0\n'
        '# TYPE vllm:build_info gauge\nvllm:build_info{version="0.32.0",commit="abc"} 1.0\n'
    )
    assert version_from_metrics(metrics) == ("0.32.0", "vllm:build_info")
    assert version_from_metrics(metrics.split("# TYPE vllm")[0]) == (None, None)  # Python's version is not the server's
    assert version_from_metrics("not prometheus {{{") == (None, None)
    assert version_from_headers({"server": "uvicorn", "x-engine-version": "2.4.1"}) == (
        "2.4.1",
        "response header x-engine-version",
    )
    assert version_from_headers({"server": "llama.cpp"}) == ("llama.cpp", "response header server")
    assert version_from_headers({"content-type": "text/plain"}) == (None, None)
    both = {
        "/version": {"status": 200, "headers": {"server": "uvicorn"}, "body": '{"version": "0.11.2"}'},
        "/metrics": {"status": 200, "headers": {}, "body": metrics},
    }
    server = _serve(both)
    try:
        host = f"http://127.0.0.1:{server.server_address[1]}"
        assert server_version(host, PLAN) == ("0.11.2", "GET /version")
        del both["/version"]
        assert server_version(host, PLAN) == ("0.32.0", "GET /metrics vllm:build_info{version}")
    finally:
        server.shutdown()


@pytest.mark.process
def test_the_simulator_is_named_in_the_setup_and_the_report(tmp_path):
    """The simulator has no /version: its build-info gauge names its version, and the setup block
    and the report's header say so, with where it came from."""
    with simulator("--profile", "fixed") as url:
        headers = dict(urllib.request.urlopen(url + "/v1/models", timeout=5).headers)
        proc = run_locust(
            "--host",
            url,
            "-u",
            "1",
            "-r",
            "1",
            "-t",
            "2s",
            "--max-tokens-override",
            "4",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "v",
            "--stop-timeout",
            "5",
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert headers["server"] == f"llm-simulator/{SIMULATOR_VERSION}"
    _, summary = read_results(str(tmp_path), "v")
    setup = summary["setup"]
    assert (setup["server_version"], setup["server_version_source"]) == (
        SIMULATOR_VERSION,
        "GET /metrics llm_simulator_build_info{version}",
    )
    md = (tmp_path / "v" / "report.md").read_text(encoding="utf-8")
    assert f"serving sim-model, version {SIMULATOR_VERSION} (GET /metrics llm_simulator_build_info{{version}})" in md
