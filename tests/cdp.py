"""Open a report in headless Chromium over the DevTools protocol and check it rendered.

    python -m tests.cdp results/<run-id>/report.html [--screenshot out.png]

Starts `chromium --headless --remote-debugging-port=0` with no network features, opens the file
(file://), and returns what the page did: every chart's count of drawn marks and its size, console
errors, uncaught exceptions, and every URL the page requested. The test suite (tests/
test_reports_browser.py, tests/test_webui_browser.py) asserts on it; CI installs Debian's
`chromium` package. The WebSocket under the DevTools protocol is the maintained
`websocket-client` library (requirements-dev.txt).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import websocket

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--mute-audio",
    "--hide-scrollbars",
]

CHECK_JS = """(() => {
  const charts = [...document.querySelectorAll('svg.chart')].map(svg => {
    const r = svg.getBoundingClientRect();
    const marks = [...svg.querySelectorAll('.mark')].filter(m => {
      const b = m.getBBox(); return (b.width > 0 || b.height > 0);
    });
    return {id: svg.dataset.chart, marks: marks.length, width: r.width, height: r.height,
            title: (svg.querySelector('text.title') || {}).textContent || '',
            axis_titles: [...svg.querySelectorAll('text.axis-title')].map(t => t.textContent)};
  });
  return {title: document.title, charts, tables: document.querySelectorAll('table').length,
          height: document.documentElement.scrollHeight, width: document.documentElement.scrollWidth,
          scripts: document.querySelectorAll('script').length,
          external: [...document.querySelectorAll('[src],link[href]')].map(e => e.src || e.href)};
})()"""


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


CAP_SYS_NICE = 23  # linux/capability.h
PR_CAPBSET_DROP = 24  # linux/prctl.h


def _keep_its_nice() -> None:
    """Before exec: Chromium may not raise its priority. Run as root, it moves its browser and GPU
    processes to nice -8 and the others to 0, whatever nice it was started at, and would take the
    CPU from the tests that time the suite (tests/conftest.py runs every other test at nice 19).
    Without CAP_SYS_NICE in its bounding set it keeps the nice it inherits (or raises it)."""
    if os.geteuid() != 0:
        return  # not root: RLIMIT_NICE (0 by default) already keeps it from lowering its nice
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_CAPBSET_DROP, CAP_SYS_NICE, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP, CAP_SYS_NICE)")


class Browser:
    """Headless Chromium with one page, driven over CDP; use as a context manager."""

    def __init__(self, binary: str | None = None, user_data_dir: str | None = None, timeout: float = 30.0):
        self.binary = binary or find_chromium()
        if not self.binary:
            raise FileNotFoundError("chromium is not installed: apt-get install -y chromium (CI does this in .ci/run)")
        self.timeout = timeout
        self._own_dir = user_data_dir is None
        self.user_data_dir = user_data_dir or tempfile.mkdtemp(prefix="chromium-")
        self.proc = None
        self.ws = None
        self.session = None
        self._id = 0
        self.events: list[dict] = []

    def __enter__(self) -> Browser:
        self.proc = subprocess.Popen(
            [
                self.binary,
                *FLAGS,
                f"--user-data-dir={self.user_data_dir}",
                "--remote-debugging-port=0",
                "--remote-debugging-address=127.0.0.1",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_keep_its_nice,
        )
        url, deadline, seen = None, time.monotonic() + self.timeout, []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                url = m.group(1)
                break
        if url is None:
            self.__exit__(None, None, None)
            raise RuntimeError("chromium did not start its DevTools endpoint: " + "".join(seen[-5:]).strip())
        self._drain_stderr()
        # no Origin header: Chromium refuses DevTools connections from an origin it was not told to allow
        self.ws = websocket.create_connection(url, timeout=self.timeout, suppress_origin=True)
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=True)
        return self

    def _drain_stderr(self) -> None:
        import threading

        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def call(self, method: str, params: dict | None = None, session: bool = False) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        try:
            while True:
                reply = json.loads(self.ws.recv())
                if reply.get("id") == self._id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error'].get('message')}")
                    return reply.get("result", {})
                self.events.append(reply)
        except websocket.WebSocketTimeoutException:
            raise TimeoutError(f"{method}: no reply from Chromium within {self.timeout:g} s") from None

    def wait_event(self, method: str, timeout: float | None = None) -> dict:
        """The first event `method` received so far, or the next one; TimeoutError after `timeout`."""
        for e in self.events:
            if e.get("method") == method:
                return e
        deadline = time.monotonic() + (timeout or self.timeout)
        try:
            while True:
                self.ws.settimeout(max(0.01, deadline - time.monotonic()))
                e = json.loads(self.ws.recv())
                self.events.append(e)
                if e.get("method") == method:
                    return e
        except websocket.WebSocketTimeoutException:
            raise TimeoutError(f"no {method} event from Chromium within {timeout or self.timeout:g} s") from None
        finally:
            self.ws.settimeout(self.timeout)

    def page(self, method: str, params: dict | None = None) -> dict:
        return self.call(method, params, session=True)

    def __exit__(self, *exc) -> None:
        if self.ws is not None:
            try:
                self.ws.close(timeout=2)
            except (OSError, websocket.WebSocketException):
                pass
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._own_dir:
            shutil.rmtree(self.user_data_dir, ignore_errors=True)


def check_report(
    html_path: str,
    screenshot: str | None = None,
    binary: str | None = None,
    user_data_dir: str | None = None,
    width: int = 1280,
) -> dict:
    """Open the report from disk; return the page's checks, console errors and requested URLs."""
    url = "file://" + os.path.abspath(html_path)
    with Browser(binary, user_data_dir) as b:
        b.page(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
        )
        b.page("Page.navigate", {"url": url})
        b.wait_event("Page.loadEventFired")
        result = b.page("Runtime.evaluate", {"expression": CHECK_JS, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"the check script failed: {result['exceptionDetails'].get('text')}")
        page = result["result"]["value"]
        if screenshot:
            b.page(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": min(int(page["height"]), 16000), "deviceScaleFactor": 1, "mobile": False},
            )
            shot = b.page("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
            with open(screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
        time.sleep(0.2)  # late console messages
        b.page("Runtime.evaluate", {"expression": "1", "returnByValue": True})  # flush pending events
        events = b.events
    errors = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append(
                "console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            )
        elif m == "Runtime.exceptionThrown":
            errors.append("exception: " + str(p.get("exceptionDetails", {}).get("text")))
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            errors.append("log: " + str(p["entry"].get("text")) + " " + str(p["entry"].get("url", "")))
    requests = [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"]
    return {**page, "console_errors": errors, "requests": requests, "url": url}


TABLES_JS = """(() => [...document.querySelectorAll('.table-scroll')].map(box => {
  let h = box.previousElementSibling;
  while (h && h.tagName !== 'H2') h = h.previousElementSibling;
  return {heading: h ? h.textContent : '', scroll: box.scrollWidth, client: box.clientWidth};
}))()"""


def table_boxes(html_path: str, width: int, user_data_dir: str | None = None) -> list[dict]:
    """Every table's scrolling box in the report at a window `width` px wide: the heading above it,
    its content's width (scrollWidth) and its own (clientWidth); wider content scrolls sideways."""
    with Browser(None, user_data_dir) as b:
        b.page(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
        )
        b.page("Page.navigate", {"url": "file://" + os.path.abspath(html_path)})
        b.wait_event("Page.loadEventFired")
        result = b.page("Runtime.evaluate", {"expression": TABLES_JS, "returnByValue": True})
    if "exceptionDetails" in result:
        raise RuntimeError(f"the table script failed: {result['exceptionDetails'].get('text')}")
    return result["result"]["value"]


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Check that a report renders in headless Chromium")
    ap.add_argument("html")
    ap.add_argument("--screenshot", default="")
    args = ap.parse_args(argv)
    out = check_report(args.html, args.screenshot or None)
    for c in out["charts"]:
        print(f"{c['id']:<28}{c['marks']:>6} marks  {c['width']:.0f}x{c['height']:.0f}  {c['title']}")
    print(f"console errors: {out['console_errors'] or 'none'}")
    print(f"requests: {out['requests']}")
    bad = [c["id"] for c in out["charts"] if c["marks"] == 0]
    return 1 if bad or out["console_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
