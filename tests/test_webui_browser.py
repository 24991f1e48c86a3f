"""The LLM view in a real browser: a master with the web UI and one worker against the built-in
simulator; headless Chromium (Debian's `chromium`, driven over the DevTools protocol by
tests/cdp.py) fills Locust's start form, starts the run, and reads the LLM view. What the page
shows must be what /llm/stats said for the same snapshot, within the page's rounding; the LLM tab
of Locust's own page likewise; the report link appears when the run stops. A screenshot of the
view is saved in the test's tmp dir (its path is logged).

Chromium missing is a failure with the install line, never a skip (CI installs it: .ci/run).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import time
import urllib.error
import urllib.request

import pytest

from tests.helpers import free_port
from tests.test_webui import start_group, stop_group

log = logging.getLogger(__name__)

SET_VALUE_JS = """(function (name, value) {
  const el = document.querySelector('[name="' + name + '"]');
  if (!el) return false;
  const setter = Object.getOwnPropertyDescriptor(window.HTMLInputElement.prototype, 'value').set;
  setter.call(el, value);
  el.dispatchEvent(new Event('input', {bubbles: true}));
  el.dispatchEvent(new Event('change', {bubbles: true}));
  return el.value === value;
})"""

PAGE_VALUES_JS = """(() => ({
  seq: Number(document.body.dataset.seq || 0),
  values: Object.fromEntries([...document.querySelectorAll('[data-key]')].map(e => [e.dataset.key, e.textContent.trim()])),
  report: (l => l.hidden ? null : l.getAttribute('href'))(document.getElementById('report-link')),
  results: document.getElementById('results-path').textContent,
  charts: [...document.querySelectorAll('.chart svg')].map(s => s.querySelectorAll('path.mark').length),
}))()"""


def _chromium() -> str:
    from tests.cdp import find_chromium

    path = find_chromium()
    if not path:
        pytest.fail("chromium is not installed: run `apt-get update && apt-get install -y chromium` (as .ci/run does); "
                    "this test drives Debian's chromium over the DevTools protocol")  # fmt: skip
    return path


def _json(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _until(fn, timeout: float, what: str, logs=()):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError, RuntimeError) as e:
            last = e
        time.sleep(0.5)
    tails = "\n".join(f"--- {p}\n{open(p).read()[-2500:]}" for p in logs if os.path.exists(p))
    pytest.fail(f"timed out waiting for {what} (last: {last!r})\n{tails}")


class Page:
    """One Chromium tab over CDP (tests.cdp.Browser), with the few verbs this test needs."""

    def __init__(self, browser):
        self.b = browser

    def goto(self, url: str) -> None:
        self.b.events.clear()
        self.b.page("Page.navigate", {"url": url})
        self.b.wait_event("Page.loadEventFired", timeout=60)

    def js(self, expression: str):
        result = self.b.page("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def errors(self) -> list[str]:
        out = []
        for e in self.b.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(str(p.get("exceptionDetails", {}).get("exception", {}).get("description") or p))
            elif m == "Runtime.consoleAPICalled" and p.get("type") == "error":
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        return out

    def requested(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.b.events if e.get("method") == "Network.requestWillBeSent"]

    def screenshot(self, path: str, width: int = 1400) -> None:
        height = int(self.js("document.documentElement.scrollHeight"))
        self.b.page("Emulation.setDeviceMetricsOverride", {"width": width, "height": min(height, 6000), "deviceScaleFactor": 1, "mobile": False})
        time.sleep(0.5)  # charts redraw on resize
        shot = self.b.page("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        self.b.page("Emulation.setDeviceMetricsOverride", {"width": width, "height": 1000, "deviceScaleFactor": 1, "mobile": False})


def _number(text: str) -> tuple[float, int] | None:
    """A displayed number and its decimals ('1,234.5' -> (1234.5, 1)); None for '–'."""
    text = text.replace(",", "").strip()
    if not re.fullmatch(r"-?\d+(\.\d+)?", text):
        return None
    return float(text), len(text.split(".")[1]) if "." in text else 0


def _lookup(data: dict, key: str):
    cur = data
    for part in key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _check_page_against_json(values: dict, data: dict) -> int:
    """Every number the page shows equals the JSON's within the page's rounding; returns how many."""
    checked = 0
    for key, text in values.items():
        expected = _lookup(data, key)
        if key in ("state", "health.state"):
            assert text.lower() == str(expected).lower(), (key, text, expected)
            continue
        shown = _number(text)
        if expected is None:
            assert shown is None, (key, text)
            continue
        if not isinstance(expected, (int, float)):
            continue
        if key.endswith("good_fraction"):
            expected = 100 * expected
        assert shown is not None, (key, text, expected)
        value, decimals = shown
        assert abs(value - expected) <= 0.5 * 10**-decimals + 1e-9, (key, text, expected)
        checked += 1
    return checked


def test_llm_view_in_the_browser(tmp_path):
    chromium = _chromium()
    from tests.cdp import Browser

    web, master_port = free_port(), free_port()
    base = f"http://127.0.0.1:{web}"
    results = tmp_path / "results"
    mlog, wlog = str(tmp_path / "master.log"), str(tmp_path / "worker.log")
    master = start_group(
        "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(master_port),
        "--web-host", "127.0.0.1", "--web-port", str(web), "--sim-profile", "fixed", "--max-tokens-override", "24",
        "--results-dir", str(results), "--stop-timeout", "10", log_path=mlog,
    )  # fmt: skip
    worker = start_group("--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port), log_path=wlog)
    logs = (mlog, wlog)
    shot = str(tmp_path / "llm-view.png")
    try:
        _until(lambda: _json(base + "/stats/requests").get("worker_count") == 1, 90, "the worker to connect", logs)
        with Browser(chromium, timeout=60) as browser:
            page = Page(browser)
            browser.page("Emulation.setDeviceMetricsOverride", {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
            page.goto(base + "/")
            _until(lambda: page.js("!!document.querySelector('[name=userCount]')"), 30, "Locust's start form", logs)
            # the suite's options are in the form, with their defaults
            form = page.js("Object.fromEntries([...document.querySelectorAll('form input, form select')].map(e => [e.name, e.value]))")
            for name, default in (("model", ""), ("workload", ""), ("slo", ""), ("endpoint", "chat"),
                                  ("maxTokensOverride", "24"), ("warmup", "0s"), ("steps", ""), ("stepTime", "60s")):  # fmt: skip
                assert form.get(name) == default, (name, form.get(name))
            assert page.js("!!document.getElementById('llm-view-link')")  # the way to the LLM view
            for name, value in (("userCount", "6"), ("spawnRate", "6"), ("slo", "ttft.p95<2s,tpot.p95<200ms")):
                assert page.js(f"{SET_VALUE_JS}({json.dumps(name)}, {json.dumps(value)})"), name
            page.js("document.querySelector('form button[type=submit]').click()")
            _until(lambda: _json(base + "/stats/requests")["state"] in ("running", "spawning"), 60, "the run to start", logs)

            # the LLM view, live: non-zero TTFT and tokens/s, equal to the JSON of the same snapshot
            page.goto(base + "/llm")

            def live_values():
                v = page.js(PAGE_VALUES_JS)
                shown = _number(v["values"].get("overall.ttft_ms.p95", "–"))
                tokens = _number(v["values"].get("overall.throughput.output_tokens_per_s", "–"))
                users = _number(v["values"].get("users", "–"))
                ready = shown and shown[0] > 0 and tokens and tokens[0] > 0 and users and users[0] == 6 and v["seq"] >= 3
                return v if ready and min(v["charts"]) > 0 else None

            def matched_snapshot():
                v = live_values()
                if not v:
                    return None
                try:
                    data = _json(f"{base}/llm/stats?seq={v['seq']}&history=0")
                except urllib.error.HTTPError:  # that snapshot is gone already (slow machine): read again
                    return None
                data["state"] = v["values"]["state"].lower()  # the state is read at request time
                return v, data, _check_page_against_json(v["values"], data)

            v, data, checked = _until(matched_snapshot, 120, "the LLM view to show live numbers", logs)
            assert checked >= 40, checked  # cards and the per-class table
            assert data["overall"]["ttft_ms"]["p95"] > 0 and data["overall"]["throughput"]["output_tokens_per_s"] > 0
            assert data["run"]["slo"] == ["ttft.p95<2s", "tpot.p95<200ms"]  # the form's value reached the run
            assert {o["objective"] for o in data["overall"]["slo"]["objectives"]} == {"ttft.p95<2s", "tpot.p95<200ms"}
            assert data["workers"] == 1 and data["users"] == 6
            assert set(v["values"]) >= {"by_class.short.ttft_ms.p95", "by_class.long.throughput.output_tokens_per_s"}
            time.sleep(5)  # a few more chart points for the picture
            page.screenshot(shot)
            log.warning("LLM view screenshot: %s", shot)
            print(f"LLM view screenshot: {shot}")

            # the LLM tab of Locust's own page: the same numbers, from the snapshot its row names
            page.goto(base + "/?tab=llm")

            def tab_row():
                rows = page.js("[...document.querySelectorAll('table tbody tr')].map(r => [...r.querySelectorAll('td')].map(td => td.textContent.trim()))")
                heads = page.js("[...document.querySelectorAll('table thead th')].map(th => th.textContent.trim())")
                for row in rows or []:
                    if row and row[0] == "All" and "#" in row[-1]:
                        return dict(zip(heads, row))
                return None

            def tab_matches():
                row = tab_row()
                if not row:
                    return None
                seq = int(re.search(r"#(\d+)", row["Window end (#)"]).group(1))
                try:
                    snap = _json(f"{base}/llm/stats?seq={seq}&history=0")
                except urllib.error.HTTPError:
                    return None
                o = snap["overall"]
                for head, exp in (("TTFT P95 ms", o["ttft_ms"]["p95"]), ("Out tok/s", o["throughput"]["output_tokens_per_s"]),
                                  ("TPOT P50 ms", o["tpot_ms"]["p50"])):  # fmt: skip
                    shown = _number(row[head])
                    assert shown and abs(shown[0] - exp) <= 0.5 * 10 ** -shown[1] + 1e-9, (head, row[head], exp)
                return row

            row = _until(tab_matches, 60, "the LLM tab's row", logs)
            assert _number(row["TTFT P95 ms"])[0] > 0
            page.screenshot(str(tmp_path / "locust-llm-tab.png"))

            # stop from the UI; the view then links the report in the results folder
            page.js("[...document.querySelectorAll('button')].find(b => b.textContent.trim().toLowerCase() === 'stop').click()")
            page.goto(base + "/llm")
            done = _until(lambda: (lambda v: v if v["report"] else None)(page.js(PAGE_VALUES_JS)), 120,
                          "the report link after the run", logs)  # fmt: skip
            final = _json(base + "/llm/stats?history=0")
            assert final["run"]["finished"] and done["report"] == final["run"]["report_url"]
            assert done["results"] == final["run"]["results_path"] and done["results"].startswith(str(results))
            assert os.path.isfile(os.path.join(done["results"], "report.html"))
            assert os.path.isfile(os.path.join(done["results"], "summary.json"))
            with urllib.request.urlopen(base + done["report"], timeout=10) as r:
                assert r.status == 200 and b"<html" in r.read(2000).lower()
            _check_page_against_json(done["values"], {**final, "state": done["values"]["state"].lower()})
            page.screenshot(str(tmp_path / "llm-view-finished.png"))
            assert not page.errors(), page.errors()
            outside = [u for u in page.requested() if not u.startswith(base) and not u.startswith("data:")]
            assert not outside, outside  # the page works offline
    finally:
        stop_group(master)
        stop_group(worker)
    assert os.path.getsize(shot) > 10_000
