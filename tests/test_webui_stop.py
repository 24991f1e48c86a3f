"""STOP in Locust's own page, in a real browser (Debian's `chromium` over the DevTools protocol,
tests/cdp.py): one local process with the web UI against the built-in simulator.

A run started from the page's form (simulator profile `fixed`, replies of 18 s, --stop-timeout
8) is stopped from the page's Stop button while every stream is in flight: the drain takes the
stop timeout, and the page must follow it to STOPPED without a reload (Locust's page stopped
asking for the state once it read `cleanup`, and kept that badge until reloaded), then offer NEW.
While it runs, the LLM view's header says how much has been measured so far (it said "measured
0.0 s"), and its GOOD card names the objective as an objective with the snapshot's verdict beside
it (it read "met ttft.p95<5s" under a run that missed it). When the page reads STOPPED, its LLM
tab has the run's summary (the runner read `stopped` before the summary was computed, and the tab
kept the last live window). NEW's form keeps the profile the run used (Locust's form went back to the command line's), and
labels the options as the suite names them ("SLO", not Locust's "Slo").
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from plugin.options import DECLARED
from tests.helpers import free_port
from tests.test_webui import start_group, stop_group
from tests.test_webui_browser import SET_VALUE_JS, Page, _chromium, _json, _until
from webui.form import _locust_title, field_label

pytestmark = pytest.mark.browser

STOP_TIMEOUT_S = 8
BADGE_JS = """(() => {
  const text = document.body.innerText.toUpperCase();
  return ['STOPPED', 'CLEANUP', 'STOPPING', 'RUNNING', 'SPAWNING', 'READY'].find(s => new RegExp('\\\\b' + s + '\\\\b').test(text)) || null;
})()"""
BUTTON_JS = "(t => !![...document.querySelectorAll('button')].find(b => b.textContent.trim().toLowerCase() === t))"


def test_stop_reaches_stopped_in_the_page_without_a_reload(tmp_path):
    chromium = _chromium()
    from tests.cdp import Browser

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = str(tmp_path / "locust.log")
    results = tmp_path / "results"
    proc = start_group(
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(port),
        "--results-dir",
        str(results),
        "--stop-timeout",
        str(STOP_TIMEOUT_S),
        log_path=log,
    )
    try:
        _until(lambda: _json(base + "/stats/requests")["state"] == "ready", 90, "the web UI", [log])
        with Browser(chromium, timeout=60) as browser:
            page = Page(browser)
            browser.page(
                "Emulation.setDeviceMetricsOverride",
                {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False},
            )
            page.goto(base + "/")
            _until(lambda: page.js("!!document.querySelector('form [name=userCount]')"), 30, "the start form", [log])
            fields = {
                "userCount": "4",
                "spawnRate": "4",
                "runTime": "60s",
                "simProfile": "fixed",
                "maxTokensOverride": "900",
                "slo": "ttft.p95<5s",
            }
            for name, value in fields.items():
                assert page.js(f"{SET_VALUE_JS}({json.dumps(name)}, {json.dumps(value)})"), (name, value)
            page.js("document.querySelector('form button[type=submit]').click()")
            # every stream in flight (18 s replies at 50 tokens/s), none ended
            _until(
                lambda: (lambda d: d if d["in_flight"]["streams"] == 4 and d["state"] == "running" else None)(
                    _json(base + "/llm/stats?history=0")
                ),
                60,
                "4 streams in flight",
                [log],
            )
            # the LLM view while it runs: the time measured so far (not "measured 0.0 s"); the GOOD card
            # names its objective as an objective, and its verdict is the snapshot's one verdict
            page.goto(base + "/llm")
            _until(
                lambda: page.js("Number(document.body.dataset.seq || 0)"), 20, "the LLM view's first snapshot", [log]
            )
            shown = page.js(
                "({setup: document.getElementById('setup').innerText, good: document.getElementById('good-sub').textContent, "
                "verdict: (v => v.hidden ? null : v.textContent)(document.getElementById('good-verdict')), "
                "seq: Number(document.body.dataset.seq)})"
            )
            snap = _json(f"{base}/llm/stats?seq={shown['seq']}&history=0")
            assert re.search(r"-t 60 s; running, \d+\.\d s measured so far", shown["setup"]), shown["setup"]
            assert "measured 0.0 s" not in shown["setup"]
            assert shown["good"] == "good = TTFT under 5s (each request)", shown
            assert shown["verdict"] == snap["overall"]["slo"]["state"], (shown, snap["overall"]["slo"])
            page.goto(base + "/")
            _until(lambda: page.js(f"{BUTTON_JS}('stop')"), 20, "Locust's page with its Stop button", [log])
            assert page.js(BADGE_JS) == "RUNNING"
            page.js("[...document.querySelectorAll('button')].find(b => b.textContent.trim() === 'Stop').click()")
            t_stop = time.monotonic()
            seen = []
            while time.monotonic() - t_stop < STOP_TIMEOUT_S + 20:
                badge = page.js(BADGE_JS)
                if not seen or seen[-1] != badge:
                    seen.append(badge)
                if badge == "STOPPED":
                    break
                time.sleep(0.25)
            stopped_s = time.monotonic() - t_stop
            server = _json(base + "/stats/requests")["state"]
            assert seen[-1] == "STOPPED", (
                f"the page's badge went {seen} (Locust's state: {server}) in {stopped_s:.1f} s"
            )
            # the page stops asking at `stopped`: the answer that says so carries the run's summary in the
            # LLM tab, not the last live window (the runner reads `stopped` before the summary is computed)
            answer = _json(base + "/stats/requests")
            (tab,) = [e["data"] for e in answer["extended_stats"] if e["key"] == "llm"]
            assert answer["state"] == "stopped" and tab[-1]["updated"].startswith("run summary"), tab[-1]
            # the drain took the stop timeout (the streams were cut at it), and the page followed it
            assert "CLEANUP" in seen and stopped_s >= STOP_TIMEOUT_S - 1, (seen, stopped_s)
            assert page.js(f"{BUTTON_JS}('new')"), "no NEW button after the stop"
            page.js(
                "[...document.querySelectorAll('button')].find(b => b.textContent.trim().toLowerCase() === 'new').click()"
            )
            _until(lambda: page.js("!!document.querySelector('form [name=userCount]')"), 15, "NEW's form", [log])
            # NEW's form: the profile the run used; the options labelled by the suite
            assert page.js("document.querySelector('form [name=simProfile]').value") == "fixed"
            assert page.js("document.querySelector('form [name=slo]').value") == "ttft.p95<5s"
            labels = page.js("[...document.querySelectorAll('form label')].map(l => l.textContent.trim())")
            assert any(re.match(r"SLO \(", t) for t in labels) and not any(t.startswith("Slo") for t in labels), labels
            assert any(t.startswith("Simulator profile") for t in labels), labels
            stale = [
                t
                for t in labels
                for d in DECLARED
                if d.web and _locust_title(d.name) != field_label(d.name) and t.startswith(_locust_title(d.name) + " (")
            ]
            assert not stale, stale  # every field, select and checkbox too, in the suite's words
            page.screenshot(str(tmp_path / "new-form.png"))
            # a page opened afterwards shows the same
            page.goto(base + "/")
            _until(lambda: page.js(f"{BUTTON_JS}('new')"), 30, "Locust's page", [log])
            page.js(
                "[...document.querySelectorAll('button')].find(b => b.textContent.trim().toLowerCase() === 'new').click()"
            )
            _until(lambda: page.js("!!document.querySelector('form [name=simProfile]')"), 15, "NEW's form", [log])
            assert page.js("document.querySelector('form [name=simProfile]').value") == "fixed"
            assert not page.errors(), page.errors()
    finally:
        stop_group(proc)
    (folder,) = [os.path.join(results, d) for d in os.listdir(results)]
    with open(os.path.join(folder, "run.json")) as f:
        assert json.load(f)["plan"]["sim_profile"] == "fixed"
