"""TLS is verified on every connection: the chain and the host name, by the load client, the start
probe (GET /v1/models, /version, /metrics) and the server-metrics scraper alike; --tls-ca adds a
CA, --tls-insecure verifies nothing with one warning line, recorded in run.json.

A certificate authority and three server certificates are made for the test with `openssl`: one
for 127.0.0.1 signed by the CA, one for another host name signed by the same CA, and one
self-signed for 127.0.0.1. A small OpenAI-style server (below) speaks TLS with one of them on
127.0.0.1 and logs every request it read with its Authorization header: a connection whose
certificate fails must leave that log empty (the key never reaches it), a verified one fills it.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import locust  # noqa: F401  patches the standard library like a real run: the server's threads are greenlets
import pytest

from core.durations import Timeouts
from core.errors import InputError
from core.tls import TlsPolicy, read_ca
from plugin.plan import RunPlan
from plugin.server import get_with_headers
from plugin.server_metrics import ServerMetricsScraper
from tests.fake_server import QuietHandler
from tests.helpers import read_results, run_locust
from users.stream import Exchange, StreamClient

KEY = "sk-tls-test-0123456789abcdef"
SSE = (
    b"".join(
        b"data: " + json.dumps(e).encode() + b"\n\n"
        for e in [{"choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}]} for i in range(3)]
        + [
            {
                "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 3},
            }
        ]
    )
    + b"data: [DONE]\n\n"
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """ca.pem; local.pem (127.0.0.1, by the CA), other.pem (other.example, by the CA), self.pem
    (127.0.0.1, self-signed); each with its .key."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test's certificates")
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=suite test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    )
    for name, san in (("local", "IP:127.0.0.1,DNS:localhost"), ("other", "DNS:other.example")):
        (d / f"{name}.ext").write_text(
            f"subjectAltName={san}\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
            "extendedKeyUsage=serverAuth\nauthorityKeyIdentifier=keyid,issuer\nsubjectKeyIdentifier=hash\n"
        )
        run("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        run(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.pem",
            "-days",
            "2",
            "-extfile",
            f"{name}.ext",
        )
    run(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "self.key",
        "-out",
        "self.pem",
        "-days",
        "2",
        "-subj",
        "/CN=127.0.0.1",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
    )
    return d


class _Handler(QuietHandler):
    def do_GET(self):
        self.server.seen.append(("GET", self.path, self.headers.get("Authorization", "")))
        if self.path == "/v1/models":
            self._send(200, b'{"object":"list","data":[{"id":"tls-model","object":"model"}]}', "application/json")
        elif self.path == "/metrics":
            self._send(200, b"# TYPE up gauge\nup 1\n", "text/plain")
        else:
            self._send(404, b"{}", "application/json")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.seen.append(("POST", self.path, self.headers.get("Authorization", "")))
        self._send(200, SSE, "text/event-stream")


class _TlsServer(ThreadingHTTPServer):
    daemon_threads = True

    def get_request(self):
        sock, addr = self.socket.accept()
        self.connections += 1  # before the handshake: a client refusing the certificate has been here
        # the handshake in the request's own thread: one refused by the client ends that thread only
        return self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request, client_address):
        pass  # a handshake the client refused ends its request's thread, nothing else


@contextmanager
def tls_server(pki, cert: str):
    """The server on 127.0.0.1 with certificate `cert` (local, other, self); yields it and its URL."""
    server = _TlsServer(("127.0.0.1", 0), _Handler)
    server.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.context.load_cert_chain(str(pki / f"{cert}.pem"), str(pki / f"{cert}.key"))
    server.seen, server.connections = [], 0
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield server, f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _post(url: str, policy: TlsPolicy) -> Exchange:
    client = StreamClient(
        url, Timeouts(connect=5, first_token=5, idle=5, total=10), {"Authorization": f"Bearer {KEY}"}, tls=policy
    )
    ex = Exchange()
    client.post("/v1/chat/completions", b'{"x": 1}', {"Content-Type": "application/json"}, ex)
    client.close()
    return ex


def _probe(url: str, policy: TlsPolicy):
    return get_with_headers(url, "/v1/models", RunPlan(api_key=KEY, tls=policy))


def _refused(call) -> str:
    try:
        call()
    except InputError as e:
        return str(e)
    pytest.fail("the call was not refused")


@pytest.mark.process
def test_every_client_verifies_the_chain_and_the_host_name(pki, tmp_path):
    ca = TlsPolicy(str(pki / "ca.pem"), read_ca(str(pki / "ca.pem")))
    with tls_server(pki, "self") as (server, url):
        port = server.server_address[1]
        # by default: refused in the handshake, worded as a certificate failure, nothing sent
        ex = _post(url, TlsPolicy())
        assert ex.error == "connect_error" and ex.status == 0, ex
        assert ex.error_detail == (
            f"TLS: certificate of 127.0.0.1:{port} not trusted: self-signed certificate; "
            "pass --tls-ca FILE or --tls-insecure"
        ), ex.error_detail
        assert _refused(lambda: _probe(url, TlsPolicy())) == ex.error_detail
        assert server.connections >= 2 and server.seen == []  # reached, and the key never sent
    with tls_server(pki, "local") as (server, url):
        port = server.server_address[1]
        assert "not trusted: unable to get local issuer certificate" in _post(url, TlsPolicy()).error_detail
        assert server.seen == []
        # the CA added: the stream and the probes go through, the key with them
        ex = _post(url, ca)
        assert ex.error == "" and ex.complete and ex.status == 200 and b"t2 " in b"".join(ex.datas), ex
        status, _, body = _probe(url, ca)
        assert status == 200 and b"tls-model" in body
        scraper = ServerMetricsScraper([url + "/metrics"], 1.0, str(tmp_path), ca)
        assert "up 1" in scraper._fetch(url + "/metrics")
        (tmp_path / "default").mkdir()
        with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):
            ServerMetricsScraper([url], 1.0, str(tmp_path / "default"))._fetch(url + "/metrics")
        assert server.seen == [
            ("POST", "/v1/chat/completions", f"Bearer {KEY}"),
            ("GET", "/v1/models", f"Bearer {KEY}"),
            ("GET", "/metrics", ""),
        ]
        # without verification: anyone's certificate is taken
        assert _post(url, TlsPolicy(insecure=True)).complete
    with tls_server(pki, "other") as (server, url):
        port = server.server_address[1]
        # a certificate of the trusted CA, for another name: refused all the same
        ex = _post(url, ca)
        assert ex.error == "connect_error" and ex.error_detail.startswith(
            f"TLS: certificate of 127.0.0.1:{port} is not valid for the host name it was reached by (IP address mismatch"
        ), ex.error_detail
        assert ex.error_detail.endswith("give --host a name the certificate holds, or pass --tls-insecure")
        assert _refused(lambda: _probe(url, ca)) == ex.error_detail
        assert server.seen == [] and server.connections >= 2
        assert _post(url, TlsPolicy(insecure=True)).complete and len(server.seen) == 1


def test_tls_options_are_checked_before_any_load(tmp_path):
    """--tls-ca: a missing, unreadable or non-PEM file is one line naming the option."""
    (tmp_path / "notpem.pem").write_text("not a certificate\n")
    (tmp_path / "bad.pem").write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    cases = {
        str(tmp_path / "missing.pem"): "does not exist",
        str(tmp_path): "cannot be read",
        str(tmp_path / "notpem.pem"): "holds no PEM certificate",
        str(tmp_path / "bad.pem"): "is not a valid PEM certificate",
    }
    for path, problem in cases.items():
        with pytest.raises(InputError) as e:
            RunPlan.from_options(SimpleNamespace(tls_ca=path))
        assert str(e.value).startswith(f"--tls-ca: '{path}' {problem}") and "\n" not in str(e.value), str(e.value)
    with pytest.raises(InputError, match="^--tls-insecure: verifies nothing, so --tls-ca would not be used"):
        RunPlan.from_options(SimpleNamespace(tls_ca="/etc/ssl/certs/ca-certificates.crt", tls_insecure=True))


@pytest.mark.process
def test_the_ca_travels_with_the_plan(pki):
    """A worker builds its connections from the plan its master sent (plugin/run_start.py): the CA's
    text goes with it, so the worker needs no copy of the file; run.json names the file only."""
    plan = RunPlan.from_options(SimpleNamespace(tls_ca=str(pki / "ca.pem")))
    sent = RunPlan.model_validate(json.loads(json.dumps(plan.model_dump(mode="json"))))
    assert sent.tls == plan.tls and sent.tls.ca_pem == (pki / "ca.pem").read_text()
    assert plan.record()["tls"] == {"ca_file": str(pki / "ca.pem"), "insecure": False}


@pytest.mark.process
def test_headless_runs_refuse_trust_or_warn(pki, tmp_path):
    """A self-signed server: refused before any load with the certificate's line, nothing sent. The
    CA given: every record is one request the server read, with the key. --tls-insecure against a
    certificate for another name: one warning line, the run goes, run.json says so."""
    results = str(tmp_path / "results")
    common = ["--api-key", KEY, "-u", "2", "-r", "2", "-t", "3s", "--results-dir", results, "--stop-timeout", "5"]
    with tls_server(pki, "self") as (server, url):
        port = server.server_address[1]
        done = run_locust("--host", url, *common, "--run-id", "refused", timeout=120)
        assert done.returncode == 2, done.stderr[-3000:]
        assert (
            f"error: TLS: certificate of 127.0.0.1:{port} not trusted: self-signed certificate; pass --tls-ca FILE "
            "or --tls-insecure\n"
        ) in done.stderr, done.stderr[-3000:]
        assert "cannot reach" not in done.stderr and server.seen == []
    with tls_server(pki, "local") as (server, url):
        done = run_locust("--host", url, *common, "--run-id", "trusted", "--tls-ca", str(pki / "ca.pem"), timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        records, _ = read_results(results, "trusted")
        posts = [auth for method, _, auth in server.seen if method == "POST"]
        assert len(posts) == len(records) > 0 and set(posts) == {f"Bearer {KEY}"}
        assert records["ok"].sum() >= len(records) - 2  # at most one stream per user in flight at the stop
        run = json.loads(Path(results, "trusted", "run.json").read_text())
        assert run["plan"]["tls"] == {"ca_file": str(pki / "ca.pem"), "insecure": False}
    with tls_server(pki, "other") as (server, url):
        done = run_locust("--host", url, *common, "--run-id", "insecure", "--tls-insecure", timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        output = done.stdout + done.stderr
        warnings = [line for line in output.splitlines() if "--tls-insecure:" in line]
        assert len(warnings) == 1 and "is not verified (neither chain nor host name)" in warnings[0], warnings
        records, _ = read_results(results, "insecure")
        assert len(records) == len([m for m, _, _ in server.seen if m == "POST"]) > 0
        run = json.loads(Path(results, "insecure", "run.json").read_text())
        assert run["plan"]["tls"]["insecure"] is True
