"""The web UI in a real browser: one master with the web UI and one worker against the built-in
simulator, one headless Chromium (Debian's `chromium`, driven over the DevTools protocol by
tests/cdp.py), one UI session through the tests of this module, in order:

  1. bad input is refused in Locust's page before anything starts: the page shows the one line a
     headless run prints, and the simulator's counters (its /metrics) do not move;
  2. two runs in a row from the form with different steps and simulator profiles: each
     summary.json has its own `by_step`, run.json's plan says what ran, the profile switch shows
     in TTFT (fixed: ~100 ms; the V100 profile's ~400 ms);
  3. a capacity search from the form yields summary.json's `capacity`;
  4. a ramp, read in the LLM view while it runs: the 5 s window's tokens/s inside each step is the
     step's own figure (summary.json's by_step) within 15 %, every number the page shows equals
     /llm/stats for the same snapshot, step markers and the per-step table, the LLM tab, and after
     Stop the run's summary.json in the cards.

Screenshots (`form.png`, `refused.png`, `llm-view-ramp.png`, `llm-view-finished.png`,
`locust-llm-tab.png`, `locust-charts.png`) are left in the module's tmp dir (the log says where).
Chromium missing is a failure with the install line, never a skip (CI installs it: .ci/run).
"""

from __future__ import annotations

import base64
import glob
import json
import logging
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from metrics.schema.verdicts import SloVerdict
from metrics.verdict import judged_on
from tests.helpers import LOCUST, ROOT, free_port
from tests.test_webui import start_group, stop_group
from webui.live_steps import search_text

pytestmark = pytest.mark.browser

log = logging.getLogger(__name__)

SET_VALUE_JS = """(function (name, value) {
  const el = document.querySelector('form [name="' + name + '"]');
  if (!el) return false;
  if (el.type === 'checkbox') {
    if (el.checked !== (value === 'true')) el.click();
    return el.checked === (value === 'true');
  }
  const proto = el.tagName === 'SELECT' ? window.HTMLSelectElement.prototype : window.HTMLInputElement.prototype;
  const setter = Object.getOwnPropertyDescriptor(proto, 'value').set;
  setter.call(el, value);
  el.dispatchEvent(new Event('input', {bubbles: true}));
  el.dispatchEvent(new Event('change', {bubbles: true}));
  return el.value === value;
})"""

PAGE_VALUES_JS = """(() => ({
  seq: Number(document.body.dataset.seq || 0),
  mode: document.body.dataset.mode,
  window: document.body.dataset.window,
  values: Object.fromEntries([...document.querySelectorAll('[data-key]')].map(e => [e.dataset.key, e.textContent.trim()])),
  report: (l => l.hidden ? null : l.getAttribute('href'))(document.getElementById('report-link')),
  results: document.getElementById('results-path').textContent,
  charts: [...document.querySelectorAll('.chart svg')].map(s => s.querySelectorAll('path.mark').length),
  markers: [...document.querySelectorAll('.chart svg')].map(s => s.querySelectorAll('line.step-marker').length),
  steps: [...document.querySelectorAll('#steps tbody tr')].map(r => [r.dataset.step, r.dataset.status]),
  health: document.getElementById('health-sub').textContent,
}))()"""


def _chromium() -> str:
    from tests.cdp import find_chromium

    path = find_chromium()
    if not path:
        pytest.fail(
            "chromium is not installed: run `apt-get update && apt-get install -y chromium` (as .ci/run does); "
            "this test drives Debian's chromium over the DevTools protocol"
        )
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
    """One Chromium tab over CDP (tests.cdp.Browser), with the few verbs these tests need."""

    def __init__(self, browser):
        self.b = browser

    def goto(self, url: str) -> None:
        self.b.events.clear()
        self.b.page("Page.navigate", {"url": url})
        self.b.wait_event("Page.loadEventFired", timeout=60)

    def js(self, expression: str):
        result = self.b.page(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
        )
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

    def posted(self, path: str) -> list[dict]:
        """The forms this page POSTed to `path`, as dicts."""
        out = []
        for e in self.b.events:
            req = e.get("params", {}).get("request", {}) if e.get("method") == "Network.requestWillBeSent" else {}
            if req.get("method") == "POST" and urllib.parse.urlsplit(req.get("url", "")).path == path:
                out.append(dict(urllib.parse.parse_qsl(req.get("postData", ""), keep_blank_values=True)))
        return out

    def screenshot(self, path: str, width: int = 1400) -> None:
        height = int(self.js("document.documentElement.scrollHeight"))
        self.b.page(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": min(height, 6000), "deviceScaleFactor": 1, "mobile": False},
        )
        time.sleep(0.5)  # charts redraw on resize
        shot = self.b.page("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        self.b.page(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 1000, "deviceScaleFactor": 1, "mobile": False},
        )
        log.warning("screenshot: %s", path)


def _number(text: str) -> tuple[float, int] | None:
    """A displayed number and its decimals ('1,234.5' -> (1234.5, 1)); None for '–'."""
    text = text.replace(",", "").strip()
    if not re.fullmatch(r"-?\d+(\.\d+)?", text):
        return None
    return float(text), len(text.split(".")[1]) if "." in text else 0


def _lookup(data: dict, key: str):
    cur = data
    for part in key.split("."):
        if isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        elif isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            return None
    return cur


# the digits the report prints (reports/rows.py), and so the page
REPORT_DIGITS = [
    (r"(ttft|ttfa|e2e)[a-z_]*_ms\.", 0),
    (r"(tpot|itl)_ms\.", 1),
    (r"requests_per_s$", 2),
    (r"tokens_per_s$", 0),
]


def _check_page_against_json(values: dict, data: dict) -> int:
    """Every number the page shows equals the JSON's within the page's rounding, with the report's
    digits; returns how many."""
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
        for pattern, digits in REPORT_DIGITS:
            if re.search(pattern, key):
                assert decimals == digits, (key, text, f"the report prints {digits} decimals")
                break
        checked += 1
    return checked


def _sim_counters(sim_url: str) -> dict:
    """The simulator's request counters: requests finished, prompt tokens seen, requests running."""
    with urllib.request.urlopen(sim_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {"finished": 0.0, "prompt_tokens": 0.0, "running": 0.0}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        value = float(line.rsplit(" ", 1)[1]) if line and not line.startswith("#") else 0.0
        if name == "vllm:request_success_total":
            out["finished"] += value
        elif name == "vllm:prompt_tokens_total":
            out["prompt_tokens"] += value
        elif name == "vllm:num_requests_running":
            out["running"] += value
    return out


def _headless_error(*args: str) -> str:
    """The one line a headless run prints for these options (stderr's `error: ...`)."""
    proc = subprocess.run(
        [*LOCUST, "--headless", "-u", "1", "-t", "2s", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode != 0 and lines, proc.stderr[-2000:]
    return lines[-1][len("error: ") :]


class UI:
    """The module's Locust (master + worker, web UI) and its browser tab."""

    def __init__(self, tmp, base, results, sim, logs, page):
        self.tmp, self.base, self.results, self.sim, self.logs, self.page = tmp, base, results, sim, logs, page
        self.runs: list[str] = []  # results folders of the runs started so far

    def state(self) -> str:
        return _json(self.base + "/stats/requests")["state"]

    def form(self) -> None:
        """Locust's start form on screen (after a run: its New button), once the worker is back:
        after a run Locust's master forgets its worker for a few seconds, and its page does not
        start a distributed run without one."""
        page = self.page
        _until(lambda: _json(self.base + "/stats/requests").get("worker_count") == 1, 60, "the worker", self.logs)
        page.goto(self.base + "/")
        _until(
            lambda: page.js(
                "!!document.querySelector('form [name=userCount]') || "
                "!![...document.querySelectorAll('button')].find(b => b.textContent.trim().toLowerCase() === 'new')"
            ),
            30,
            "Locust's page",
            self.logs,
        )
        if not page.js("!!document.querySelector('form [name=userCount]')"):
            page.js(
                "[...document.querySelectorAll('button')].find(b => b.textContent.trim().toLowerCase() === 'new').click()"
            )
        _until(lambda: page.js("!!document.querySelector('form [name=userCount]')"), 30, "the start form", self.logs)

    def submit(self, fields: dict) -> str | None:
        """Fill the start form and press Start; the message Locust's page shows when refused, else None."""
        self.form()
        page = self.page
        for name, value in fields.items():
            assert page.js(f"{SET_VALUE_JS}({json.dumps(name)}, {json.dumps(value)})"), (name, value)
        before = len(page.posted("/swarm"))
        page.js("document.querySelector('form button[type=submit]').click()")
        _until(lambda: len(page.posted("/swarm")) > before, 15, "the form's POST", self.logs)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            alert = page.js("(a => a ? a.innerText.trim() : null)(document.querySelector('form [role=alert]'))")
            if alert:
                return alert
            if self.state() in ("spawning", "running"):
                return None
            time.sleep(0.3)
        pytest.fail(f"the form neither started a run nor showed a message (state {self.state()})")

    def type_into(self, name: str, text: str) -> str:
        """Empty a field, type `text` into it key by key as a person does; what the field then shows."""
        assert self.page.js(f"{SET_VALUE_JS}({json.dumps(name)}, '')"), name
        self.page.js(f"document.querySelector('form [name={name}]').focus()")
        for char in text:
            self.page.b.page("Input.insertText", {"text": char})
        return self.page.js(f"document.querySelector('form [name={name}]').value")

    def press_start(self) -> str | None:
        """Press Start with the form as it is: the message Locust's page shows (None: none in 15 s)."""
        before = len(self.page.posted("/swarm"))
        self.page.js("document.querySelector('form button[type=submit]').click()")
        _until(lambda: len(self.page.posted("/swarm")) > before, 15, "the form's POST", self.logs)
        return _until(
            lambda: self.page.js("(a => a ? a.innerText.trim() : null)(document.querySelector('form [role=alert]'))"),
            15,
            "the page's message",
            self.logs,
        )

    def run(self, fields: dict, timeout: float = 150) -> tuple[dict, dict, str]:
        """A run from the form, to its end: (summary.json, run.json, its results folder)."""
        previous = set(glob.glob(str(self.results / "*")))
        message = self.submit(fields)
        assert message is None, message
        posted = self.page.posted("/swarm")[-1]
        for camel, value in fields.items():  # the browser sent what was typed (the names in snake case)
            snake = re.sub(r"(?<!^)([A-Z])", r"_\1", camel).lower()
            assert posted.get(snake) == value, (snake, posted.get(snake), value)
        folder = _until(
            lambda: set(glob.glob(str(self.results / "*"))) - previous, 60, "the run's results folder", self.logs
        )
        (path,) = folder
        _until(
            lambda: os.path.exists(os.path.join(path, "summary.json")) and self.state() == "stopped",
            timeout,
            "the run's end",
            self.logs,
        )
        self.runs.append(path)
        with open(os.path.join(path, "summary.json")) as f:
            summary = json.load(f)
        with open(os.path.join(path, "run.json")) as f:
            run = json.load(f)
        return summary, run, path


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    chromium = _chromium()
    from tests.cdp import Browser

    tmp = tmp_path_factory.mktemp("webui-browser")
    web, master_port = free_port(), free_port()
    base = f"http://127.0.0.1:{web}"
    results = tmp / "results"
    mlog, wlog = str(tmp / "master.log"), str(tmp / "worker.log")
    # --steps on the command line: every run below takes the form's load model instead (an old bug
    # ran the command line's, or the previous form's). --stop-timeout 4: after a run Locust's worker
    # waits --stop-timeout before it is ready again, and each run below waits for it; the drains of
    # these runs take under 2 s (the ramp's 8 s replies are cut at 4 s and recorded as stopped)
    master = start_group(
        "--master",
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        str(master_port),
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(web),
        "--results-dir",
        str(results),
        "--stop-timeout",
        "4",
        "--steps",
        "1,9",
        "--step-time",
        "30s",
        log_path=mlog,
    )
    worker = start_group("--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port), log_path=wlog)
    logs = (mlog, wlog)
    try:
        _until(lambda: _json(base + "/stats/requests").get("worker_count") == 1, 90, "the worker to connect", logs)
        sim = _until(
            lambda: re.search(r"built-in simulator at (http://\S+)", open(mlog).read()).group(1),
            30,
            "the built-in simulator",
            logs,
        )
        with Browser(chromium, timeout=60) as browser:
            page = Page(browser)
            browser.page(
                "Emulation.setDeviceMetricsOverride",
                {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False},
            )
            print(f"screenshots in {tmp}")
            yield UI(tmp, base, results, sim, logs, page)
            assert not page.errors(), page.errors()
    finally:
        stop_group(master)
        stop_group(worker)


def test_form_is_grouped_for_a_ramp_tester(ui):
    ui.form()
    page = ui.page
    names = page.js("[...document.querySelectorAll('form input, form select')].map(e => e.name).filter(n => n)")
    custom = names[names.index("model") :]
    # target and model, workload, load model, SLO, then the expert settings
    order = [
        "model",
        "simProfile",
        "workload",
        "maxTokensOverride",
        "steps",
        "stepTime",
        "stepWarmup",
        "findCapacity",
        "requestRate",
        "slo",
        "warmup",
        "resultsDir",
        "runId",
        "timeoutConnect",
        "retry",
    ]
    assert [n for n in custom if n in order] == order, custom
    headings = page.js("""[...document.querySelectorAll('form div')].map(d => getComputedStyle(d, '::before').content)
                          .filter(c => c && !['none', 'normal', '""'].includes(c))""")
    assert headings == [
        '"Target and model"',
        '"Workload"',
        '"Load model: steps, capacity search, open loop, replay"',
        '"SLO"',
        '"Expert settings"',
    ], headings
    page.js(
        "[...document.querySelectorAll('button, [role=button]')].filter(b => /custom parameters/i.test(b.textContent)).forEach(b => b.click())"
    )
    time.sleep(1)
    page.screenshot(str(ui.tmp / "form.png"))
    # the form says that steps and a capacity search set the users themselves (in the Steps field's
    # label: Locust shows no help beside a checkbox)
    text = page.js("document.querySelector('form').innerText")
    assert "steps and a capacity search set the users themselves (Number of users, -u, is not used)" in text, text


def test_bad_input_is_refused_in_the_page_before_anything_is_sent(ui):
    before, folders = _sim_counters(ui.sim), set(os.listdir(ui.results)) if ui.results.exists() else set()
    base = {"userCount": "2", "spawnRate": "2", "host": ui.sim, "steps": "", "findCapacity": "false", "slo": ""}
    message = ui.submit({**base, "slo": "ttft<5s"})
    assert message == _headless_error("--slo", "ttft<5s"), message
    assert message.startswith("--slo: cannot read 'ttft<5s'")
    ui.page.screenshot(str(ui.tmp / "refused.png"))
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    message = ui.submit({**base, "host": dead, "model": "some-model"})
    assert message == _headless_error("--host", dead, "--model", "some-model"), message
    assert message.startswith("--host: ")
    message = ui.submit({**base, "model": "no-such-model"})
    assert message == _headless_error("--host", ui.sim, "--model", "no-such-model"), message
    assert message.startswith("--model: 'no-such-model' is not served by")
    message = ui.submit({**base, "model": "", "steps": "1,2", "stepTime": "5s", "stepWarmup": "6s"})
    assert message == "--step-warmup: 6s must be shorter than --step-time 5s", message
    # no users
    message = ui.submit({**base, "userCount": "0"})
    assert message == _headless_error("--host", ui.sim, "-u", "0"), message
    assert message.startswith("Number of users (-u): 0 would send nothing"), message
    # -5 typed into Number of users: Locust's field drops the minus as it is typed (it shows 5, and
    # sent 5: a run of 5 users started), the page sends -5, refused with the command line's line
    ui.form()
    assert ui.type_into("userCount", "-5") == "5"
    message = ui.press_start()
    assert ui.page.posted("/swarm")[-1]["user_count"] == "-5"
    assert message == _headless_error("--host", ui.sim, "-u", "-5"), message
    assert message == "Number of users (-u): -5 is below 0; give 1 or more, e.g. 10", message
    # typed over, the minus is gone: 2 is sent (refused here for the SLO typed with it)
    assert ui.type_into("userCount", "2") == "2" and ui.page.js(f"{SET_VALUE_JS}('slo', 'ttft<5s')")
    message = ui.press_start()
    assert ui.page.posted("/swarm")[-1]["user_count"] == "2" and message.startswith("--slo: "), message
    # another client of /swarm: refused alike
    form = urllib.parse.urlencode({"user_count": "-5", "spawn_rate": "2", "host": ui.sim}).encode()
    with urllib.request.urlopen(urllib.request.Request(ui.base + "/swarm", data=form), timeout=30) as r:
        answer = json.loads(r.read())
    assert not answer["success"] and answer["message"] == _headless_error("--host", ui.sim, "-u", "-5"), answer
    message = ui.submit({**base, "spawnRate": "0"})  # (Locust refuses -r 0 on the command line itself)
    assert message == "Ramp up (-r): 0 users per second starts nobody; give more than 0, e.g. 10", message
    message = ui.submit({**base, "maxTokensOverride": "-5"})
    assert (
        message
        == _headless_error("--host", ui.sim, "--max-tokens-override=-5")
        == "--max-tokens-override: -5 is below the minimum 1"
    )
    time.sleep(3)  # anything started would have sent its first requests by now
    assert ui.state() == "ready"
    assert _sim_counters(ui.sim) == before  # nothing was sent to the simulator
    assert (set(os.listdir(ui.results)) if ui.results.exists() else set()) == folders  # no run began


def _steps(summary: dict) -> list[tuple[int, int]]:
    return [(s["step"], s["users"]) for s in summary["by_step"]]


def test_two_runs_in_a_row_take_their_own_steps_and_profile(ui):
    common = {
        "userCount": "3",
        "spawnRate": "3",
        "host": ui.sim,
        "model": "",
        "slo": "",
        "findCapacity": "false",
        "maxTokensOverride": "40",
        "stepWarmup": "1s",
    }
    a, run_a, _ = ui.run({**common, "steps": "1,3", "stepTime": "5s", "simProfile": "v100-7b-tp8"})
    b, run_b, _ = ui.run({**common, "steps": "2,4,5", "stepTime": "4s", "simProfile": "fixed"})
    assert _steps(a) == [(0, 1), (1, 3)], _steps(a)
    assert _steps(b) == [(0, 2), (1, 4), (2, 5)], _steps(b)
    for summary, run, levels, step_s in ((a, run_a, [1, 3], 5.0), (b, run_b, [2, 4, 5], 4.0)):
        assert run["plan"]["load"] == {"kind": "steps", "levels": levels, "step_s": step_s, "warmup_s": 1.0}
        start = run["started_at"]
        for s in summary["by_step"]:  # each step's window is its own: warm-up excluded, step_s long
            assert abs(s["window"]["end"] - s["window"]["start"] - (step_s - 1.0)) < 1e-6
            assert s["requests"]["sent"] > 0 and s["ttft_ms"]["count"] > 0
        assert abs(summary["by_step"][0]["window"]["start"] - start - 1.0) < 1.0
    # the simulator profile switched with the form: fixed answers in 100 ms, the V100 profile in ~400
    assert run_a["plan"]["sim_profile"] == "v100-7b-tp8" and run_b["plan"]["sim_profile"] == "fixed"
    assert 90 <= b["overall"]["ttft_ms"]["p50"] <= 150, b["overall"]["ttft_ms"]
    assert a["overall"]["ttft_ms"]["p50"] >= 250, a["overall"]["ttft_ms"]


def test_open_loop_workload_model_and_slo_from_the_form(ui):
    workload = ui.tmp / "tiny.yaml"
    workload.write_text(f"name: tiny\ntemplates: {os.path.join(ROOT, 'workloads', 'templates.jsonl')}\nclasses:\n"
                        "  tiny:\n    weight: 1\n    input_chars: {min: 20, max: 40, dist: uniform}\n"
                        "    output_tokens: {min: 8, max: 12, dist: uniform}\n")  # fmt: skip
    summary, run, _ = ui.run(
        {
            "userCount": "4",
            "spawnRate": "4",
            "host": ui.sim,
            "simProfile": "fixed",
            "model": "sim-model",
            "maxTokensOverride": "",
            "workload": str(workload),
            "steps": "",
            "findCapacity": "false",
            "requestRate": "5",
            "arrival": "constant",
            "slo": "ttft.p95<1s",
            "runTime": "8s",
        }
    )
    plan = run["plan"]
    assert plan["load"] == {
        "kind": "open",
        "rate": 5.0,
        "arrival": "constant",
        "burstiness": 1.0,
        "max_concurrency": None,
    }
    assert plan["model"] == "sim-model" and plan["workload"] == str(workload) and plan["slo"] == ["ttft.p95<1s"]
    assert set(summary["by_class"]) == {"tiny"} and summary["by_step"] in (None, [])
    assert summary["open_loop"]["target_rate"] == 5.0 and summary["slo"]["objectives"][0]["objective"] == "ttft.p95<1s"
    assert 4.5 <= summary["open_loop"]["sent_per_s"] <= 5.5, summary["open_loop"]  # one every 200 ms


def test_capacity_search_from_the_form(ui):
    # the form shows the last run's values (the open loop's rate and workload): cleared here
    summary, run, _ = ui.run(
        {
            "userCount": "20",
            "spawnRate": "20",
            "host": ui.sim,
            "simProfile": "fixed",
            "model": "",
            "maxTokensOverride": "30",
            "steps": "10,20",
            "stepTime": "9s",
            "stepWarmup": "1s",
            "requestRate": "",
            "workload": "",
            "findCapacity": "true",
            "slo": "ttft.p95<400ms",
            "runTime": "27s",
        }
    )
    # (with workers a level is judged on its window less the last report interval: 9 - 1 - 4 s, the
    # shortest a level may be judged on; 10 users send ~50 requests in it, enough to bound a P95. The
    # search ends by itself after its last candidate, at about 18 s; -t leaves a loaded machine a
    # level's slack, where 18 s let the first level's late start crowd the second out)
    load = run["plan"]["load"]
    assert {k: load.get(k) for k in ("kind", "unit", "candidates", "step_s", "warmup_s", "policy", "precision")} == {
        "kind": "capacity",
        "unit": "users",
        "candidates": [10, 20],
        "step_s": 9.0,
        "warmup_s": 1.0,
        "policy": "adaptive",
        "precision": 0.05,
    }  # the default policy, in users
    assert load["max_users"] is None and load["max_rate"] is None
    assert run["plan"]["slo"] == ["ttft.p95<400ms"] and run["plan"]["run_time_s"] == 27.0
    cap = summary["capacity"]
    assert cap is not None and cap["users"] == 20, (
        cap,
        [(s["users"], s["verdict"], s["requests"]) for s in summary["by_step"]],
    )  # fixed: 100 ms at any load, every level passes
    assert cap["samples"] == summary["by_step"][1]["verdict"]["requests"] >= 45
    # one level each, in order; a level left undecided on a loaded machine is held a step longer
    # (the search extends it), and the next level starts after the steps it held
    first, second = summary["by_step"]
    assert (first["step"], first["users"], second["users"]) == (0, 10, 20)
    assert second["step"] == first["step"] + first["steps"], _steps(summary)


STEP_CELLS_JS = (
    "[...document.querySelectorAll('#steps tbody tr')].map(r => [r.dataset.step, "
    "r.querySelector('td.status').textContent, r.querySelector('td.verdict').textContent])"
)


def test_a_held_level_is_marked_in_the_live_steps_table_as_after_the_run(ui):
    """A capacity search of one candidate walked with fixed holds (the walk policy), 2 users: ~0.7 s
    replies give too few values in a level's 4 judged seconds to bound a P95, so the search holds the
    level for more steps. While it runs, the page's per-step row shows the level running (the old
    page showed step 0 and nothing more); after the run the row says what the report's per-step
    table says (metrics/verdict.py judged_on)."""
    page = ui.page
    message = ui.submit(
        {
            "userCount": "2",
            "spawnRate": "2",
            "host": ui.sim,
            "simProfile": "fixed",
            "model": "",
            "maxTokensOverride": "30",
            "steps": "2",
            "stepTime": "9s",
            "stepWarmup": "1s",
            "findCapacity": "true",
            "capacityPolicy": "walk",
            "slo": "ttft.p95<400ms",
            "runTime": "40s",
        }
    )
    assert message is None, message
    page.goto(ui.base + "/llm")
    live = []  # the step rows the page showed while the run was on
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        v = page.js(PAGE_VALUES_JS)
        if v.get("mode") == "summary":
            break
        if v.get("mode") == "live":
            live.append(page.js(STEP_CELLS_JS))
        time.sleep(1.0)
    done = _until(
        lambda: (lambda d: d if d["summary"] else None)(_json(ui.base + "/llm/stats?history=0&window=5")),
        60,
        "the run's summary in the view",
        ui.logs,
    )
    ui.runs.append(done["run"]["results_path"])
    summary = json.load(open(os.path.join(done["run"]["results_path"], "summary.json")))
    (step,) = summary["by_step"]
    assert step["steps"] >= 2, step  # held
    # while it runs, the level's row is there and running, with how long so far (its looks are told
    # once it is decided, which may come after the page's last live reading)
    assert any(row[0] == "0" and re.fullmatch(r"running… \d+ s so far", row[1]) for rows in live for row in rows), live[
        -5:
    ]
    final = _until(
        lambda: (lambda v: page.js(STEP_CELLS_JS) if v.get("mode") == "summary" else None)(page.js(PAGE_VALUES_JS)),
        30,
        "the page's final steps table",
        ui.logs,
    )
    v = step["verdict"]
    seconds = step["window"]["end"] - step["window"]["start"]
    said = judged_on(SloVerdict.model_validate(v), step["steps"], seconds)  # "..., 16 s measured"
    # after the run the row still says why the search ended the level (it had said "held 2 steps")
    assert final == [["0", f"final, {search_text(summary['capacity'], 0)}", f"{v['state']} ({said})"]], final
    md = open(os.path.join(done["run"]["results_path"], "report.md")).read()
    assert f"| {said} |" in md  # the report's "judged on" cell


def test_live_view_follows_a_ramp(ui):
    """Steps of 12 s, replies of ~8 s: a view built on ended requests alone would still be in the
    previous step; counted where tokens arrive, the 5 s window inside each step is the step's
    own tokens/s."""
    page = ui.page
    message = ui.submit(
        {
            "userCount": "6",
            "spawnRate": "6",
            "host": ui.sim,
            "simProfile": "fixed",
            "model": "",
            "maxTokensOverride": "400",
            "steps": "2,6",
            "stepTime": "12s",
            "stepWarmup": "2s",
            "findCapacity": "false",
            "slo": "ttft.p95<2s,tpot.p95<200ms",
            "runTime": "",
            "serverMetrics": f"{ui.sim}/metrics",
            "serverMetricsInterval": "1s",
        }
    )
    assert message is None, message
    page.goto(ui.base + "/llm")
    readings = []  # what the page showed, read every second while the run was on

    def read():
        v = page.js(PAGE_VALUES_JS)
        if v.get("mode") == "live" and v["seq"]:
            readings.append(v)
        return v.get("mode") == "summary"

    matched = None
    deadline = time.monotonic() + 120
    while not read() and time.monotonic() < deadline:
        v = readings[-1] if readings else None
        if matched is None and v and v["values"].get("users") == "6" and min(v["charts"]) > 0:
            try:  # the page's numbers are the JSON's of the same snapshot
                data = _json(f"{ui.base}/llm/stats?seq={v['seq']}&history=0&window={v['window']}")
                data["state"] = v["values"]["state"].lower()
                matched = (v, data, _check_page_against_json(v["values"], data))
                # the 5 s window's verdict by the levels' rule (metrics/verdict.py): met or missed only
                # on confidence bounds (a window of 2 requests is undecided, as its level would be)
                chips = page.js("[...document.querySelectorAll('#slo .obj .pill')].map(e => e.textContent)")
                slo = data["overall"]["slo"]["objectives"]
                assert chips == [e["state"] if e["value_ms"] is not None else "no data" for e in slo], (chips, slo)
                page.screenshot(str(ui.tmp / "llm-view-ramp.png"))
            except urllib.error.HTTPError:  # that snapshot is gone already: read again
                pass
        time.sleep(1.0)
    assert matched, f"the page never showed 6 users with charts; last reading {readings[-1] if readings else None}"
    v, data, checked = matched
    assert checked >= 40, checked  # the cards and the per-class table
    assert data["overall"]["ttft_ms"]["p95"] > 0 and data["run"]["slo"] == ["ttft.p95<2s", "tpot.p95<200ms"]
    assert data["workers"] == 1 and data["window_s"] == 5.0
    assert data["server"]["available"] and data["server"]["running"] >= 1, data[
        "server"
    ]  # --server-metrics from the form
    assert max(min(r["markers"]) for r in readings) == 2  # a marker at each step's start, on every chart

    final = _until(
        lambda: (lambda d: d if d["summary"] else None)(_json(ui.base + "/llm/stats?history=1&window=5")),
        60,
        "the run's summary in the view",
        ui.logs,
    )
    summary = json.load(open(os.path.join(final["run"]["results_path"], "summary.json")))
    ui.runs.append(final["run"]["results_path"])
    steps = summary["by_step"]
    assert _steps(summary) == [(0, 2), (1, 6)]
    # the live 5 s window, read inside each step's measured window, is that step's tokens/s
    for s in steps:
        inside = [p for p in final["history"] if p["t"] - 5.0 >= s["window"]["start"] and p["t"] <= s["window"]["end"]]
        assert inside, (s["window"], [p["t"] for p in final["history"]])
        want = s["throughput"]["output_tokens_per_s"]
        for p in inside:
            assert abs(p["output_tokens_per_s"] - want) <= 0.15 * want, (s["step"], p["output_tokens_per_s"], want)
    # the step table filled during the run, and its final rows are summary.json's
    assert any(("0", "final") in [tuple(x) for x in r["steps"]] for r in readings), [r["steps"] for r in readings[-5:]]

    # after the run: the cards and tables are the run's summary.json
    done = _until(
        lambda: (lambda v: v if v.get("mode") == "summary" and v["report"] else None)(page.js(PAGE_VALUES_JS)),
        60,
        "the summary and the report link in the page",
        ui.logs,
    )
    shown = _check_page_against_json(done["values"], {**final, "state": done["values"]["state"].lower()})
    assert shown >= 60, shown
    assert (
        "summary.overall.ttft_ms.p95" in done["values"]
        and "summary.by_step.1.throughput.output_tokens_per_s" in done["values"]
    )
    assert done["steps"] == [["0", "final"], ["1", "final"]]
    # each level's verdict in the table is summary.json's, and only a missed level has the colour of
    # a failure, as in the report (the page showed "undecided" as a miss): 2 users sending ~8 s
    # replies for 10 s end too few requests to bound a P95
    verdicts = [(s["verdict"]["state"], s["verdict"]["requests"]) for s in steps]
    assert verdicts[0][0] == "undecided", verdicts
    cells = page.js(
        "[...document.querySelectorAll('#steps tbody td.verdict')].map(td => [td.textContent, td.className])"
    )
    said = [
        f"{s['verdict']['state']} ({judged_on(SloVerdict.model_validate(s['verdict']), s['steps'], s['window']['end'] - s['window']['start'])})"
        for s in steps
    ]  # as the report says
    assert [text for text, _ in cells] == said, cells
    assert [("some" in cls) for _, cls in cells] == [state == "missed" for state, _ in verdicts], cells
    # at 1400 px the verdict is in view without scrolling the table sideways (it was past 1,358 px),
    # each row numbered by its level, not its first step's index
    assert page.js(
        "(p => [...document.querySelectorAll('#steps td.verdict')].every(td => td.getBoundingClientRect().right <= "
        "p.getBoundingClientRect().right))(document.getElementById('steps-panel'))"
    )
    assert page.js("[...document.querySelectorAll('#steps tbody tr')].map(r => r.firstChild.textContent)") == ["1", "2"]
    # the legends give the run's figures, as the cards do (they gave the last point's 5 s window)
    legend = page.js("document.querySelector('#chart-ttft .legend').textContent")
    p95 = summary["overall"]["ttft_ms"]["p95"]
    digits = 0 if float(p95).is_integer() or abs(p95) >= 100 else 1 if abs(p95) >= 10 else 2
    assert legend.startswith("the run:") and f"P95 {p95:,.{digits}f}" in legend, (legend, p95)
    page.screenshot(str(ui.tmp / "llm-view-finished.png"))
    # another window length, picked in the page: its charts from the start
    page.js(
        "(s => { s.value = '30'; s.dispatchEvent(new Event('change', {bubbles: true})); })(document.getElementById('window'))"
    )
    picked = _until(
        lambda: (lambda v: v if v["window"] == "30" and min(v["charts"]) > 0 else None)(page.js(PAGE_VALUES_JS)),
        20,
        "the 30 s window's charts",
        ui.logs,
    )
    assert picked["mode"] == "summary" and page.js("localStorage.getItem('llm-window')") == "30"
    assert "last 30 s" in page.js("document.querySelector('#chart-tokens .note').textContent")
    with urllib.request.urlopen(ui.base + done["report"], timeout=10) as r:
        assert r.status == 200 and b"<html" in r.read(2000).lower()
    outside = [u for u in page.requested() if not u.startswith(ui.base) and not u.startswith("data:")]
    assert not outside, outside  # the page works offline
    assert not [u for u in page.requested() if urllib.parse.urlsplit(u).path.endswith("/favicon.ico")]  # no 404

    # Locust's own page: the LLM tab (the run's summary now) and a note on the Charts tab
    page.goto(ui.base + "/?tab=llm")
    row = _until(
        lambda: next(
            (
                dict(zip(page.js("[...document.querySelectorAll('table thead th')].map(t => t.textContent.trim())"), r))
                for r in page.js(
                    "[...document.querySelectorAll('table tbody tr')].map(r => [...r.querySelectorAll('td')]"
                    ".map(td => td.textContent.trim()))"
                )
                or []
                if r and r[0] == "All"
            ),
            None,
        ),
        30,
        "the LLM tab's row",
        ui.logs,
    )
    assert {"TPOT P95 ms", "Users", "In flight"} <= set(row), row
    # as the report writes them: whole ms for TTFT, 0.1 ms for TPOT, thousands separated
    assert row["TTFT P95 ms"] == f"{summary['overall']['ttft_ms']['p95']:,.0f}", row
    assert row["TPOT P95 ms"] == f"{summary['overall']['tpot_ms']['p95']:,.1f}", row
    assert "run summary" in row["Window end (#)"]
    page.screenshot(str(ui.tmp / "locust-llm-tab.png"))
    page.js("[...document.querySelectorAll('[role=tab]')].find(t => /^charts$/i.test(t.textContent.trim())).click()")
    note = _until(
        lambda: page.js("(n => n && !n.hidden ? n.innerText : null)(document.getElementById('llm-charts-note'))"),
        10,
        "the note on the Charts tab",
        ui.logs,
    )
    assert "end-to-end" in note and "TTFT" in note and "LLM view" in note
    page.screenshot(str(ui.tmp / "locust-charts.png"))
