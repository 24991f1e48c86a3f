"""The API key reaches the server and nothing else: not run.json, summary.json, the records, the
report, the logs of master and workers, Prometheus' /metrics, or any page or JSON of the web UI.

The target is a small recording server (below) that answers like an OpenAI-compatible one and
keeps the Authorization headers it received, so each test also proves the key was really sent.
Workers prefer their own LOCUST_API_KEY over the master's (which travels in clear text).
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import secrets
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from http.server import ThreadingHTTPServer

import pytest

from tests.fake_server import QuietHandler
from tests.helpers import LOCUST, ROOT, free_port, load_options, master_and_workers

pytestmark = pytest.mark.process

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def new_key() -> str:
    return f"sk-test-{secrets.token_hex(16)}"


class _Handler(QuietHandler):
    def do_GET(self):
        self.server.seen.append(("GET", self.path, self.headers.get("Authorization", "")))
        if self.path.endswith("/v1/models"):
            self._send(200, b'{"object":"list","data":[{"id":"rec-model","object":"model"}]}', "application/json")
        else:
            self._send(404, b"{}", "application/json")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.seen.append(("POST", self.path, self.headers.get("Authorization", "")))
        json.loads(body)
        time.sleep(0.05)  # a little time in flight
        events = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
        events += [{"choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}]} for i in range(3)]
        events += [
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
            {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}},
        ]
        sse = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        self._send(200, sse, "text/event-stream")


@contextmanager
def recording_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def posted_keys(server) -> set[str]:
    return {auth for method, _, auth in list(server.seen) if method == "POST"}


def start(args, log_path, env=None):
    env = {k: v for k, v in os.environ.items() if k != "LOCUST_API_KEY"} | {"PYTHONUNBUFFERED": "1"} | (env or {})
    out = open(log_path, "w")
    return subprocess.Popen(
        [*LOCUST, *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
    )


def kill_group(proc) -> None:
    """The process and the rest of its process group (`start` gives each process a session of its own)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def finish(proc, timeout=120):
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        raise


def wait_until(predicate, timeout, what, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except OSError:
            pass
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}")


def get(url: str) -> bytes:
    with NO_PROXY.open(url, timeout=10) as r:
        return r.read()


def assert_nowhere(keys, folder, texts: dict[str, bytes | str]):
    """No key in any file under `folder` (bytes, so Parquet and HTML too) nor in any of `texts`."""
    files = [os.path.join(d, f) for d, _, names in os.walk(folder) for f in names]
    assert any(f.endswith("summary.json") for f in files) and any(f.endswith("report.html") for f in files), files
    for key in keys:
        raw = key.encode()
        for path in files:
            with open(path, "rb") as f:
                assert raw not in f.read(), f"the API key is in {path}"
        for name, text in texts.items():
            assert raw not in (text if isinstance(text, bytes) else text.encode()), f"the API key is in {name}"


def test_headless_run_keeps_the_key_out_of_results_logs_and_prometheus(tmp_path):
    key = new_key()
    prom = free_port()
    log = tmp_path / "run.log"
    with recording_server() as (server, url):
        proc = start(
            [
                "--headless",
                "--host",
                url,
                "-u",
                "3",
                "-r",
                "3",
                "-t",
                "6s",
                "--api-key",
                key,
                "--prometheus-port",
                str(prom),
                "--prometheus-linger",
                "3s",
                "--results-dir",
                str(tmp_path / "results"),
                "--run-id",
                "secret",
                "--stop-timeout",
                "10",
            ],
            log,
        )
        try:
            wait_until(lambda: len(posted_keys(server)) and len(server.seen) > 10, 60, "requests", proc)
            during = get(f"http://127.0.0.1:{prom}/metrics")
            after = wait_until(
                lambda: (lambda t: t if b"llm_requests_total" in t else None)(get(f"http://127.0.0.1:{prom}/metrics")),
                30,
                "metrics",
                proc,
            )
            finish(proc)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        assert posted_keys(server) == {f"Bearer {key}"}  # the key was sent, to the server only
        assert all(auth == f"Bearer {key}" for _, _, auth in server.seen)  # GET /v1/models too
    assert b"llm_" in during
    run = json.loads((tmp_path / "results" / "secret" / "run.json").read_text())
    assert run["options"]["api_key_set"] is True and "api_key" not in run["options"]
    assert "--api-key" in run["argv"] and "***" in run["argv"]
    assert_nowhere(
        [key], tmp_path / "results", {"log": log.read_text(), "/metrics during": during, "/metrics after": after}
    )


def test_workers_prefer_their_own_key_and_no_process_logs_any(tmp_path):
    """The master's key comes from LOCUST_API_KEY; worker 0 has its own LOCUST_API_KEY (used),
    worker 1 none (it uses the master's, received in the spawn message)."""
    master_key, worker_key = new_key(), new_key()
    logs = [tmp_path / "master.log", tmp_path / "w0.log", tmp_path / "w1.log"]
    with recording_server() as (server, url):
        with master_and_workers(
            *load_options(url, tmp_path / "results", "dist", 4, 8, 10),
            expect_workers=2,
            log_path=logs[0],
            env={"LOCUST_API_KEY": master_key},
            start=lambda *args, log_path, env=None: start(args, log_path, env=env),
            kill=kill_group,
        ) as run:
            run.start_worker(log_path=logs[1], env={"LOCUST_API_KEY": worker_key})
            run.start_worker(log_path=logs[2])
            assert finish(run.master) == 0, logs[0].read_text()[-3000:]
        assert posted_keys(server) == {f"Bearer {worker_key}", f"Bearer {master_key}"}
    summary = json.loads((tmp_path / "results" / "dist" / "summary.json").read_text())
    assert summary["overall"]["requests"]["ok"] > 10 and len(summary["workers"]) == 2
    assert_nowhere([master_key, worker_key], tmp_path / "results", {p.name: p.read_text() for p in logs})


def test_web_ui_never_shows_the_key(tmp_path):
    """Nothing the web UI serves carries the key: the start page (Locust renders the form
    fields' values into it, so the key is not a field), the LLM view and its JSON, Locust's
    statistics, report and CSV. A run started from the form still sends it."""
    key = new_key()
    web = free_port()
    base = f"http://127.0.0.1:{web}"
    log = tmp_path / "ui.log"
    pages = {}
    with recording_server() as (server, url):
        proc = start(
            [
                "--host",
                url,
                "--web-host",
                "127.0.0.1",
                "--web-port",
                str(web),
                "--api-key",
                key,
                "--results-dir",
                str(tmp_path / "results"),
                "--stop-timeout",
                "5",
            ],
            log,
        )
        try:
            pages["/"] = wait_until(lambda: get(base + "/"), 60, "the web UI", proc)
            args = json.loads(re.search(rb"window.templateArgs = (\{.*\})", pages["/"]).group(1))
            assert "api_key" not in args["extra_options"] and "model" in args["extra_options"]
            form = urllib.parse.urlencode({"user_count": 2, "spawn_rate": 2, "host": url, "run_time": "30s"}).encode()
            with NO_PROXY.open(urllib.request.Request(base + "/swarm", data=form), timeout=10) as r:
                assert json.loads(r.read())["success"] is True
            wait_until(lambda: len(server.seen) > 10, 60, "requests from the form's run", proc)
            wait_until(
                lambda: ((json.loads(get(base + "/llm/stats")).get("overall") or {}).get("requests") or {}).get("ok"),
                30,
                "live statistics",
                proc,
            )  # "overall" is null until the window's first record
            for path in (
                "/",
                "/llm",
                "/llm/stats",
                "/stats/requests",
                "/stats/report",
                "/stats/requests/csv",
                "/stats/failures/csv",
                "/exceptions",
                "/exceptions/csv",
                "/tasks",
                "/logs",
                "/worker-count",
            ):
                pages[path] = get(base + path)
            with NO_PROXY.open(urllib.request.Request(base + "/stop", data=b""), timeout=10) as r:
                assert r.status == 200
            stats = wait_until(
                lambda: (lambda d: d if d["run"]["finished"] and d["run"]["report_url"] else None)(
                    json.loads(get(base + "/llm/stats"))
                ),
                90,
                "the end of the run",
                proc,
            )
            pages["/llm/stats (final)"] = json.dumps(stats)
            pages["report"] = get(base + stats["run"]["report_url"])
            pages["summary"] = get(base + stats["run"]["summary_url"])
            pages["/ (after)"] = get(base + "/")
            pages["/logs (after)"] = get(base + "/logs")
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        assert posted_keys(server) == {f"Bearer {key}"}  # the form's run kept the command line's key
    assert_nowhere([key], tmp_path / "results", {**pages, "log": log.read_text()})


def readme_login_locustfile() -> str:
    with open(os.path.join(ROOT, "docs", "security.md"), encoding="utf-8") as f:
        text = f.read().split("## The web UI", 1)[1]
    return re.search(r"```python\n(# login_locustfile\.py.*?)```", text, re.S).group(1)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def test_readme_login_locustfile_protects_the_web_ui(tmp_path):
    """docs/security.md's --web-login locustfile: without a session every page, the LLM view included,
    sends to the login page; wrong credentials are refused; right ones open it."""
    path = tmp_path / "login_locustfile.py"
    path.write_text(readme_login_locustfile())
    web = free_port()
    base = f"http://127.0.0.1:{web}"
    env = {
        "LOCUST_UI_USER": "ops",
        "LOCUST_UI_PASSWORD": secrets.token_hex(8),
        "LOCUST_UI_SECRET": secrets.token_hex(16),
    }
    log = tmp_path / "login.log"
    jar = http.cookiejar.CookieJar()
    plain = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
    session = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), _NoRedirect(), urllib.request.HTTPCookieProcessor(jar)
    )

    def status(opener, path, data=None):
        try:
            with opener.open(urllib.request.Request(base + path, data=data), timeout=10) as r:
                return r.status, r.headers.get("Location", ""), r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Location", ""), b""

    with recording_server() as (_, url):
        proc = start(
            [
                "-f",
                str(path),
                "--web-login",
                "--host",
                url,
                "--model",
                "m",
                "--web-host",
                "127.0.0.1",
                "--web-port",
                str(web),
                "--results-dir",
                str(tmp_path / "results"),
            ],
            log,
            env=env,
        )
        try:
            wait_until(lambda: status(plain, "/login")[0] == 200, 60, "the login page", proc)
            for page in ("/", "/llm", "/llm/stats", "/stats/requests"):
                code, location, _ = status(plain, page)
                assert code == 302 and "/login" in location, (page, code, location)
            wrong = urllib.parse.urlencode({"username": "ops", "password": "nope"}).encode()
            code, location, _ = status(session, "/login_submit", wrong)
            assert code == 302 and "/login" in location and status(session, "/llm/stats")[0] == 302
            right = urllib.parse.urlencode({"username": "ops", "password": env["LOCUST_UI_PASSWORD"]}).encode()
            assert status(session, "/login_submit", right)[0] == 302
            code, _, body = status(session, "/llm/stats")
            assert code == 200 and "overall" in json.loads(body)
            code, _, body = status(session, "/")
            assert code == 200 and b"templateArgs" in body
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
