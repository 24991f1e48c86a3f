"""The LLM view in Locust's web UI: routes, the LLM tab, the sampler. Installed by locustfile.py.

Active only on the process that serves the web UI (the master, or a local run started without
--headless); workers and headless runs do nothing here.

Routes (under --web-base-path when given):

  GET /llm                         the LLM view: cards, per-class table, charts over time (one
                                   HTML page, inline CSS/JS/SVG, no network beyond this server)
  GET /llm/stats                   the view's data as JSON (schema in webui/README.md); query:
                                     since=N    only history points with seq > N
                                     history=0  no history at all
                                     seq=N      the retained snapshot number N (the last few are
                                                kept; 404 when it is gone)
  GET /llm/report/<run_id>         report.html of a run of this process (404 until it is built);
                                   run_id `latest` redirects to the latest run
  GET /llm/report/<run_id>/<file>  report.md, summary.json or run.json of that run

Locust's own page gets an "LLM" tab (extended_tabs / extended_tables, rows added to
/stats/requests as `extended_stats`), two links in its "Download Data" tab, and a small link box
(LLM view, and the report once a run has finished) injected into its index page.

Every 2 s while a run is on (longer when a computation takes long), a greenlet takes the
records that arrived (the plugin's rows_recorded hook on this process: every record exactly once),
and a worker thread computes the window's statistics (webui.live), so a local run's event loop
is not held up by pandas. On a master, the window ends at the oldest latest worker report
("watermark"), since workers ship records every 3 s: the newest seconds would otherwise look
empty and every rate would saw-tooth. After the run, one final snapshot is kept, ending at the
last record's end.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from collections import OrderedDict

import gevent
import gevent.event
from flask import Blueprint, Response, abort, jsonify, redirect, request, send_file, url_for
from locust.runners import STATE_MISSING, MasterRunner

from metrics.schema import Summary
from plugin.health import Health
from plugin.server_metrics import ServerMetrics
from plugin.state import Plugin, role_of, state_of
from reports.rows import setup_rows
from webui.form import headings_style, install_form_order
from webui.live import DEFAULT_WINDOW, WINDOWS, Flight, LiveWindow, window_key
from webui.progress import REPORT_KEY as PROGRESS_KEY
from webui.progress import StreamTracker
from webui.progress import valid as valid_progress
from webui.start_check import install_start_check

log = logging.getLogger("llm.webui")

INTERVAL_S = 2.0  # between snapshots while a run is on; the page polls at the same pace
KEEP_SNAPSHOTS = 10  # retained by number for /llm/stats?seq=N
WINDOW_KEYS = tuple(window_key(w) for w in WINDOWS)
LIVE_VIEW = "live_view"  # the master's web UI is on: its workers report their open streams

WATERMARK_MAX_LAG_S = 10.0  # never let a silent worker hold the window further back than this
REPORT_FILES = {"report.html": "text/html", "report.md": "text/markdown", "summary.json": "application/json",
                "run.json": "application/json"}  # fmt: skip
_RUN_ID = re.compile(r"^[A-Za-z0-9._-]+$")
PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llm.html")

# Server gauges shown from --server-metrics, by engine (first name found wins).
SERVER_GAUGES = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
}

# The LLM tab in Locust's own page (key, title): one row per class and one "All" row.
TAB_KEY = "llm"
TAB_COLUMNS = [
    ("name", "Class"), ("ended", "Requests"), ("failed", "Failed"), ("users", "Users"), ("in_flight", "In flight"),
    ("ttft_p50", "TTFT P50 ms"), ("ttft_p95", "TTFT P95 ms"), ("ttft_p99", "TTFT P99 ms"), ("tpot_p50", "TPOT P50 ms"),
    ("tpot_p95", "TPOT P95 ms"), ("itl_p50", "ITL P50 ms"), ("e2e_p95", "E2E P95 ms"), ("req_s", "Req/s"),
    ("out_tok_s", "Out tok/s"), ("total_tok_s", "Total tok/s"), ("good_pct", "Good %"), ("errors", "Errors"),
    ("updated", "Window end (#)"),
]  # fmt: skip


class LiveView:
    """The LLM view's state on the web UI process: the current run's window and snapshots."""

    def __init__(self, environment):
        self.environment = environment
        self.run = None
        self.window: LiveWindow | None = None
        self.runs: "OrderedDict[str, str]" = OrderedDict()  # run_id -> results folder, runs of this process
        self.finished: set[str] = set()
        self.snapshots: "OrderedDict[int, dict]" = OrderedDict()
        self.seq = 0
        self.latest: dict | None = None
        self.reports: dict[str, float] = {}  # worker client id -> time its latest report arrived
        self.progress: dict[str, dict] = {}  # worker client id -> its latest open streams (webui/progress.py)
        self.tracker: StreamTracker | None = None  # a local run's own open streams
        self.markers: list[dict] = []  # user-count changes of a run that has no steps
        self.summary: Summary | None = None  # the finished run's summary.json
        self.step_rows: list | None = None  # the latest snapshot's load steps
        self._loop: gevent.Greenlet | None = None
        self._stop: gevent.event.Event | None = None
        self._busy = False
        self._failed_once = False

    # -- run events -------------------------------------------------------------------------------

    def on_run_started(self, run) -> None:
        self.run = run
        self.window = LiveWindow(run.plan.slo, run_start=run.started)
        self.runs[run.run_id] = run.writer.path
        self.snapshots.clear()
        self.latest = None
        self.progress = {}
        self.markers = []
        self.summary = None
        self.step_rows = None
        if self._loop is None or self._loop.dead:
            self._stop = gevent.event.Event()
            self._loop = gevent.spawn(self._sample_loop, self._stop)

    def on_rows(self, run, rows) -> None:
        if run is self.run and self.window is not None:
            self.window.add_rows(rows)

    def on_run_finished(self, run, summary: Summary | None = None) -> None:
        if run is not self.run or self.window is None:
            return
        if self._loop is not None:  # let a snapshot under way finish, then stop sampling
            self._stop.set()
            self._loop.join(timeout=120)
            self._loop = None
        self.summary = summary
        self.sample(final=True)
        self.finished.add(run.run_id)

    def on_worker_report(self, client_id, data) -> None:
        self.reports[client_id] = time.time()
        progress = data.pop(PROGRESS_KEY, None)
        if progress is not None and valid_progress(progress):
            self.progress[client_id] = progress

    # -- sampling ---------------------------------------------------------------------------------

    def _sample_loop(self, stop) -> None:
        delay = 0.0
        while not stop.wait(timeout=delay):
            started = time.monotonic()
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - the view must never break a run
                if not self._failed_once:
                    self._failed_once = True
                    log.exception("LLM view: computing the live statistics failed (logged once); the run goes on")
            cost = time.monotonic() - started
            delay = max(INTERVAL_S - cost, 2.0 * cost, 0.2)

    def _open_streams(self, now: float) -> tuple[float, list[dict]]:
        """The windows' end and the open streams of every load process (module doc: watermark)."""
        runner = self.environment.runner
        if not isinstance(runner, MasterRunner):
            tracker = self.tracker
            if tracker is None:
                return now, []
            report = tracker.collect(now)
            return report["t"], [report]
        live = [c.id for c in list(runner.clients.values()) if c.state != STATE_MISSING]
        reports = [self.progress[c] for c in live if c in self.progress]
        times = [self.progress[c]["t"] if c in self.progress else self.reports[c] for c in live if c in self.reports]
        if not times:
            return now, reports
        return max(min(min(times), now), now - WATERMARK_MAX_LAG_S), reports

    def _steps(self, run):
        """(StepPlan of the levels so far, run start) of a step ramp or capacity search; else None."""
        if run.steps is not None:
            return run.steps, run.started
        search = run.search
        if search is not None and search.levels:
            return search.plan(), run.started
        return None

    def sample(self, final: bool = False) -> dict | None:
        """Take a snapshot (in a worker thread) and keep it; None when one is being taken.
        `final`: every record of the run is in (run_finished)."""
        window, run = self.window, self.run
        if window is None or self._busy:
            return None
        self._busy = True
        try:
            now = time.time()
            rows = window.take()  # the records and the open streams of the same moment
            end, reports = (now, []) if final else self._open_streams(now)
            steps = None if final else self._steps(run)
            snap = gevent.get_hub().threadpool.apply(lambda: window.snapshot(end, rows, final, Flight(reports), steps))
            if window is not self.window:  # a new run started meanwhile
                return None
            snap.update(self._gauges(run, snap, now))
            if final:  # every stream has ended and is a record (the gauge would be a last report's)
                snap["in_flight"].update(value=0.0, source="the run has ended")
            self.seq += 1
            snap["seq"] = self.seq
            snap["generated_at"] = now
            snap["lag_s"] = max(0.0, now - snap["end"])
            snap["final"] = final
            server = {f"server_{k}": v for k, v in (snap["server"] or {}).items() if k in SERVER_GAUGES}
            window.add_point(snap, seq=self.seq, users=snap["users"], in_flight=snap["in_flight"]["value"],
                             waiting=snap["in_flight"].get("waiting_first_token"), **server)  # fmt: skip
            if snap.get("steps"):
                self.step_rows = snap["steps"]
            self.latest = snap
            self.snapshots[self.seq] = snap
            while len(self.snapshots) > KEEP_SNAPSHOTS:
                self.snapshots.popitem(last=False)
            return snap
        finally:
            self._busy = False

    def _gauges(self, run, snap: dict, now: float) -> dict:
        env = self.environment
        runner = env.runner
        users = int(runner.user_count) if runner is not None else 0
        workers = runner.worker_count if isinstance(runner, MasterRunner) else None
        if run.steps is None and run.search is None and runner is not None:
            target = int(getattr(runner, "target_user_count", users) or 0)
            if target and (not self.markers or self.markers[-1]["users"] != target):
                self.markers.append({"t": now, "users": target})
        return {
            "users": users,
            "workers": workers,
            "in_flight": {**in_flight(env, run, users, snap), **snap.pop("in_flight")},
            "health": client_health(env),
            "server": server_gauges(env, run),
        }

    # -- answers ----------------------------------------------------------------------------------

    def run_info(self) -> dict | None:
        run = self.run
        if run is None:
            return None
        path = run.writer.path
        report = os.path.join(path, "report.html")
        finished = run.run_id in self.finished  # the final snapshot is in
        return {
            "id": run.run_id,
            "results_path": os.path.abspath(path),
            "started": run.started,
            "finished": finished,
            "host": self.environment.host,
            "model": run.plan.model,
            "slo": [o.text for o in run.plan.slo],
            "plan": run.plan.summary_line(),
            # the load and the target, as the report states them first (summary.json setup)
            "setup": setup_rows(run.summary_extra["setup"]) if run.summary_extra.get("setup") else [],
            "load": run.plan.load.kind,
            "report": "ready" if os.path.exists(report) else ("building" if getattr(run, "finished", False) else "after the run"),
            "report_url": url_for("llm.report", run_id=run.run_id) if os.path.exists(report) else None,
            "summary_url": url_for("llm.report_file", run_id=run.run_id, name="summary.json")
            if os.path.exists(os.path.join(path, "summary.json")) else None,
        }  # fmt: skip

    def stats(self, since: int = 0, history: bool = True, seq: int | None = None, window: str | None = None) -> dict | None:
        """The view's data for one window length (`window`, seconds as text; the default when
        absent or unknown); None when snapshot `seq` is no longer kept."""
        key = window if window in WINDOW_KEYS else window_key(DEFAULT_WINDOW)
        if seq is not None:
            snap = self.snapshots.get(seq)
            if snap is None:
                return None
        else:
            snap = self.latest
        runner = self.environment.runner
        out = {
            "seq": 0, "generated_at": None, "lag_s": None, "final": False, "window": None, "overall": None, "by_class": {},
            "totals": None, "users": None, "workers": None, "in_flight": None, "steps": None, "ratios": None,
            "health": client_health(self.environment), "server": None,
        }  # fmt: skip
        if snap is not None:
            out.update({k: v for k, v in snap.items() if k not in ("windows", "end")})
            out.update(snap["windows"][key])
        out.update({
            "state": runner.state if runner is not None else "missing",
            "window_s": float(key),
            "windows": [float(k) for k in WINDOW_KEYS],
            "run": self.run_info(),
            "markers": self.step_markers() or list(self.markers),
            "summary": summary_view(self.summary) if self.summary is not None and self.run is not None
            and self.run.run_id in self.finished else None,
        })  # fmt: skip
        if history:
            points = list(self.window.history) if self.window is not None else []
            out["history"] = [_flat_point(p, key) for p in points if p.get("seq", 0) > since]
        return out

    def step_markers(self) -> list[dict]:
        """A marker at the start of every load step begun so far (stepped runs)."""
        return [{"t": r["begin"], "users": r["users"], "step": r["step"]} for r in self.step_rows or []]

    def tab_rows(self) -> list[dict]:
        """The LLM tab's rows (Locust renders them as text): the latest window's, or after the run
        the run's summary."""
        snap = self.latest
        summary = self.summary if self.run is not None and self.run.run_id in self.finished else None
        if summary is not None:
            stamp = f"run summary ({self.run.run_id})"
            rows = [_tab_row(name, b.model_dump(mode="json"), "", sent="sent") for name, b in summary.by_class.items()]
            rows.append(_tab_row("All", summary.overall.model_dump(mode="json"), stamp, sent="sent", users=snap and snap["users"]))
            return rows
        if not snap:
            return []
        w = snap["windows"][window_key(DEFAULT_WINDOW)]
        if not w.get("overall"):
            return []
        stamp = f"{time.strftime('%H:%M:%S', time.localtime(w['window']['end']))} (#{snap['seq']})"
        rows = [_tab_row(name, b, "") for name, b in w["by_class"].items()]
        rows.append(_tab_row("All", w["overall"], stamp, users=snap["users"], in_flight=snap["in_flight"]["value"]))
        return rows


def _flat_point(p: dict, key: str) -> dict:
    out = {k: v for k, v in p.items() if k != "w"}
    out.update(p["w"].get(key) or {})
    return out


SUMMARY_KEYS = ("window", "records", "overall", "by_class", "by_step", "slo", "capacity", "concurrency", "open_loop",
                "client_bound", "complete")  # fmt: skip


def summary_view(summary: Summary) -> dict:
    """The parts of a run's summary.json the view shows after the run."""
    return summary.model_dump(mode="json", include=set(SUMMARY_KEYS))


def _tab_row(name: str, b: dict, stamp: str, sent: str = "ended", users=None, in_flight=None) -> dict:
    """Locust renders the tab's cells as given: text, with the report's digits and separators
    (reports/rows.py fmt: TTFT and E2E whole ms, TPOT and ITL to 0.1 ms, tokens/s whole)."""
    from reports.rows import fmt

    r, th, gp = b["requests"], b["throughput"], b["goodput"]
    return {
        "name": name,
        "ended": fmt(r[sent]),
        "failed": fmt(r["failed"]),
        "users": fmt(users),
        "in_flight": fmt(None if in_flight is None else int(in_flight)),
        "ttft_p50": fmt(b["ttft_ms"]["p50"]),
        "ttft_p95": fmt(b["ttft_ms"]["p95"]),
        "ttft_p99": fmt(b["ttft_ms"]["p99"]),
        "tpot_p50": fmt(b["tpot_ms"]["p50"], 1),
        "tpot_p95": fmt(b["tpot_ms"]["p95"], 1),
        "itl_p50": fmt(b["itl_ms"]["p50"], 1),
        "e2e_p95": fmt(b["e2e_ms"]["p95"]),
        "req_s": fmt(th["requests_per_s"], 2),
        "out_tok_s": fmt(th["output_tokens_per_s"]),
        "total_tok_s": fmt(th["total_tokens_per_s"]),
        "good_pct": fmt(None if gp["good_fraction"] is None else 100 * gp["good_fraction"], 1),
        "errors": ", ".join(f"{k} {v:,}" for k, v in r["by_error"].items()) or "-",
        "updated": stamp,
    }


# -- gauges and hooks -------------------------------------------------------------------------------


def _number(value) -> float | None:
    try:
        value = float(value() if callable(value) else value)
    except Exception:  # noqa: BLE001 - a misbehaving provider must not break the view
        return None
    return value if math.isfinite(value) else None


def in_flight(env, run, users: int, snap: dict) -> dict:
    """Requests on the wire: counted by every load process for each run (plugin/state.py; workers
    report theirs every 3 s)."""
    value = _number(env.llm.in_flight())
    return {"value": value, "source": "counted" if value is not None else "unknown"}


HEALTH_WORKER_KEYS = ("worker", "index", "bound", "contended", "reasons", "cpu_last", "cpu_p95", "loop_lag_p99_ms",
                      "token_lag_p99_ms", "samples")  # fmt: skip


def client_health(env) -> dict:
    """The client-health monitor's live state (`Health.snapshot()`, plugin/health.py),
    condensed for the view: {state, checks, bound, advice, workers_needed, limits, workers: [...]},
    each worker without its recent samples. `checks` holds every value the card shows with its
    limit (the worst over the workers: CPU p95, loop lag p99, token lag p99 when measured) and
    whether it is over. `state` is the snapshot's own when it has one, else "client bound" (a
    worker passed the accuracy limits, sustained while busy), "over limit" (a value is above its
    limit, not sustained), "contended" (late while idle: other processes took the CPU), "ok"
    (every value within its limit), or "unknown" (no monitor, or no sample yet)."""
    health = env.llm.plugin(Health)
    if health is None:
        return {"state": "unknown"}
    try:
        data = health.snapshot()
        data = json.loads(json.dumps(data, default=str))  # JSON-safe, and a copy
    except Exception as e:  # noqa: BLE001 - a misbehaving monitor must not break the view
        return {"state": "unknown", "error": f"{type(e).__name__}: {e}"}
    if not isinstance(data, dict):
        return {"state": "unknown"}
    workers = [w for w in data["workers"] if isinstance(w, dict)] if isinstance(data.get("workers"), list) else None
    checks = health_checks(workers or [], data.get("limits") or {})
    if data.get("state"):
        state = str(data["state"])
    elif data.get("bound"):
        state = "client bound"
    elif any(c["over"] for c in checks):
        state = "over limit"
    elif workers and any(w.get("contended") for w in workers):
        state = "contended"
    elif workers and any(w.get("samples") for w in workers):
        state = "ok"
    else:
        state = "unknown"
    out = {"state": state, "checks": checks, **{k: v for k, v in data.items() if k not in ("state", "workers", "recent")}}
    if workers is not None:
        out["workers"] = [{k: w.get(k) for k in HEALTH_WORKER_KEYS if k in w} for w in workers]
    return out


# (label, the workers' key, the limits' key, unit) of the values the Client card shows
HEALTH_CHECKS = (("CPU p95", "cpu_p95", "cpu_pct", "%"), ("loop lag p99", "loop_lag_p99_ms", "loop_lag_ms", "ms"),
                 ("token lag p99", "token_lag_p99_ms", "token_lag_ms", "ms"))  # fmt: skip


def health_checks(workers: list[dict], limits: dict) -> list[dict]:
    """The worst value over the workers of each health figure, with its limit."""
    out = []
    for label, key, limit_key, unit in HEALTH_CHECKS:
        values = [w[key] for w in workers if isinstance(w.get(key), (int, float))]
        limit = limits.get(limit_key)
        if not values or not isinstance(limit, (int, float)):
            continue
        value = max(values)
        out.append({"name": label, "value": value, "limit": limit, "unit": unit, "over": value > limit})
    return out


def server_gauges(env, run) -> dict | None:
    """The server's latest running/waiting requests and KV-cache usage from --server-metrics;
    None when it is off. Metric names are matched as in SERVER_GAUGES (vLLM, SGLang, TGI)."""
    if env.llm.plan is None or not env.llm.plan.server_metrics:
        return None
    latest = _latest_server_values(env, run)
    out = {"available": latest is not None}
    for key, names in SERVER_GAUGES.items():
        value = None
        for name in names:
            if latest and name in latest:
                value = _number(latest[name])
                break
        out[key] = value
    if out["kv_cache_usage"] is not None and out["kv_cache_usage"] > 1.0:
        out["kv_cache_usage"] /= 100.0  # a percentage where a fraction was expected
    return out


def _latest_server_values(env, run) -> dict | None:
    """The run's --server-metrics scraper's newest values (plugin/server_metrics.py)."""
    scraper = env.llm.plugin(ServerMetrics)
    return scraper.latest() if scraper is not None else None


# -- Flask ----------------------------------------------------------------------------------------------


def install(environment, web_ui) -> LiveView:
    """Routes, the LLM tab and the listeners, on the process that serves the web UI."""
    view = LiveView(environment)
    base = getattr(environment.parsed_options, "web_base_path", None) or None
    bp = Blueprint("llm", __name__, url_prefix=base)
    auth = web_ui.auth_required_if_enabled
    with open(PAGE, encoding="utf-8") as f:
        page = f.read()

    @bp.route("/llm")
    @auth
    def page_view():
        html = page.replace("__STATS_URL__", url_for("llm.stats")).replace("__LOCUST_URL__", url_for("locust.index"))
        return Response(html, mimetype="text/html")

    @bp.route("/llm/stats")
    @auth
    def stats():
        seq = request.args.get("seq", type=int)
        since = request.args.get("since", default=0, type=int)
        history = request.args.get("history", "1") != "0"
        out = view.stats(since=since, history=history, seq=seq, window=request.args.get("window"))
        if out is None:
            abort(404, f"snapshot {seq} is no longer kept (the last {KEEP_SNAPSHOTS} are)")
        response = jsonify(out)
        response.headers["Cache-Control"] = "no-store"
        return response

    @bp.route("/llm/report/<run_id>")
    @auth
    def report(run_id):
        if run_id == "latest":
            if not view.runs:
                abort(404, "no run has started in this process yet")
            return redirect(url_for("llm.report", run_id=next(reversed(view.runs))))
        return _send(view, run_id, "report.html")

    @bp.route("/llm/report/<run_id>/<name>")
    @auth
    def report_file(run_id, name):
        return _send(view, run_id, name)

    web_ui.app.register_blueprint(bp)

    args = web_ui.template_args
    args["extended_tabs"] = [*(args.get("extended_tabs") or []), {"title": "LLM", "key": TAB_KEY}]
    args["extended_tables"] = [*(args.get("extended_tables") or []),
                               {"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in TAB_COLUMNS]}]  # fmt: skip
    args["extended_csv_files"] = [
        *(args.get("extended_csv_files") or []),
        {"href": "./llm", "title": "LLM view: live TTFT, tokens/s and goodput charts"},
        {"href": "./llm/report/latest", "title": "LLM report of the latest run (report.html)"},
    ]

    @web_ui.app.after_request
    def _extend(response):
        endpoint = request.endpoint
        if endpoint == "locust.request_stats" and response.is_json:
            try:
                data = response.get_json()
                extended = [e for e in (data.get("extended_stats") or []) if e.get("key") != TAB_KEY]
                data["extended_stats"] = [*extended, {"key": TAB_KEY, "data": view.tab_rows()}]
                response.set_data(json.dumps(data))
            except Exception:  # noqa: BLE001 - Locust's own statistics must still arrive
                log.exception("LLM view: could not add the LLM tab's rows")
        elif endpoint == "locust.index" and response.mimetype == "text/html" and response.status_code == 200:
            html = response.get_data(as_text=True)
            if "</body>" in html and "llm-view-links" not in html:
                extra = _index_links(url_for("llm.page_view"), url_for("llm.stats"))
                extra += headings_style(web_ui.template_args.get("extra_options") or {})
                response.set_data(html.replace("</body>", extra + "</body>", 1))
        return response

    return view


def _send(view: LiveView, run_id: str, name: str):
    """A file of a run of this process; nothing else (no path from the request reaches the disk
    except a known run's folder and a fixed file name)."""
    if not _RUN_ID.match(run_id) or run_id in (".", "..") or run_id not in view.runs or name not in REPORT_FILES:
        abort(404)
    folder = os.path.realpath(view.runs[run_id])
    path = os.path.realpath(os.path.join(folder, name))
    if os.path.dirname(path) != folder or not os.path.isfile(path):
        abort(404, f"{name} of run {run_id} is not there (yet)" if name == "report.html" else None)
    response = send_file(path, mimetype=REPORT_FILES[name], max_age=0)
    response.headers["Cache-Control"] = "no-store"
    return response


def _index_links(page_url: str, stats_url: str) -> str:
    """A small box on Locust's own page: the LLM view, and the report once a run has finished."""
    return f"""
<div id="llm-view-links" style="position:fixed;left:16px;bottom:12px;z-index:1300;display:flex;gap:8px;font:500 13px/1.2 Roboto,Helvetica,Arial,sans-serif">
  <a id="llm-view-link" href="{page_url}" target="_blank" rel="noopener" style="background:#15803d;color:#fff;padding:7px 12px;border-radius:6px;text-decoration:none;box-shadow:0 1px 4px rgba(0,0,0,.25)">LLM view &#8599;</a>
  <a id="llm-report-link" href="#" target="_blank" rel="noopener" hidden style="background:#fff;color:#15803d;border:1px solid #15803d;padding:6px 12px;border-radius:6px;text-decoration:none;box-shadow:0 1px 4px rgba(0,0,0,.25)">LLM report &#8599;</a>
</div>
<div id="llm-charts-note" hidden style="position:fixed;right:16px;bottom:12px;z-index:1300;max-width:560px;background:#fef9c3;color:#713f12;border:1px solid #facc15;border-radius:6px;padding:7px 12px;font:500 13px/1.35 Roboto,Helvetica,Arial,sans-serif;box-shadow:0 1px 4px rgba(0,0,0,.2)">
  Response Times here are end-to-end streams (E2E, first byte to last token). TTFT, TPOT and tokens/s:
  <a href="{page_url}" target="_blank" rel="noopener" style="color:#15803d;font-weight:600">LLM view &#8599;</a> (and the LLM tab).
</div>
<script>
(function () {{
  var link = document.getElementById('llm-report-link');
  function poll() {{
    fetch('{stats_url}?history=0', {{cache: 'no-store'}}).then(function (r) {{ return r.json(); }}).then(function (d) {{
      var run = d.run;
      if (run && run.report_url) {{ link.href = run.report_url; link.title = run.results_path; link.hidden = false; }}
      else {{ link.hidden = true; }}
    }}).catch(function () {{}});
  }}
  poll();
  setInterval(poll, 3000);
  // Locust's Charts tab plots its own request rows: "Response Times" there are whole streams (E2E)
  var note = document.getElementById('llm-charts-note');
  function charts() {{
    var tab = document.querySelector('[role="tab"][aria-selected="true"]');
    note.hidden = !(tab && /^charts$/i.test(tab.textContent.trim()));
  }}
  charts();
  setInterval(charts, 400);
}})();
</script>
"""


def _live(state) -> bool:
    """A worker: its master shows the run live (it said so with the run)."""
    return state.start is not None and bool(state.start.shared.get(LIVE_VIEW))


# -- wiring ---------------------------------------------------------------------------------------------


class WebUI(Plugin):
    """The LLM view and the start form's check, on the process that serves the web UI; on every
    load process of a web-UI run, the tracker of its open streams (webui/progress.py)."""

    def __init__(self):
        self.view: LiveView | None = None
        self.tracker: StreamTracker | None = None

    def init(self, environment) -> None:
        web_ui = environment.web_ui
        if web_ui is None or role_of(environment) == "worker":
            return
        self.view = install(environment, web_ui)
        install_start_check(environment, web_ui)
        install_form_order(web_ui)

    def test_start(self, environment) -> None:
        state = state_of(environment)
        if state.role == "master":
            if self.view is not None:  # travels to the workers with the run (plugin/run_start.py)
                state.shared[LIVE_VIEW] = True
            return
        live = self.view is not None if state.role == "local" else _live(state)
        self._stop_tracker()
        if live:
            self._tracker_for(state)

    def _tracker_for(self, state) -> StreamTracker | None:
        """This process's tracker over the run's context (a late-joining worker gets its context
        a moment after test_start)."""
        ctx = state.context
        if ctx is None:
            return None
        if self.tracker is None or self.tracker.ctx is not ctx:
            self._stop_tracker()
            self.tracker = StreamTracker(ctx)
            self.tracker.start()
            if self.view is not None:
                self.view.tracker = self.tracker
        return self.tracker

    def _stop_tracker(self) -> None:
        if self.tracker is not None:
            self.tracker.stop()
            self.tracker = None
            if self.view is not None:
                self.view.tracker = None

    def report_to_master(self, environment, data) -> None:
        if not _live(state_of(environment)):
            return
        tracker = self._tracker_for(state_of(environment))
        if tracker is not None:  # the same call that cut the record batch: nothing is counted twice
            data[PROGRESS_KEY] = tracker.collect()

    def test_stop(self, environment) -> None:
        self._stop_tracker()

    def worker_report(self, environment, client_id, data) -> None:
        if self.view is not None:
            self.view.on_worker_report(client_id, data)

    def run_started(self, run) -> None:
        if self.view is not None:
            self.view.on_run_started(run)

    def rows_recorded(self, run, rows) -> None:
        if self.view is not None:
            self.view.on_rows(run, rows)

    def run_finished(self, run, summary) -> None:
        if self.view is not None:
            self.view.on_run_finished(run, summary)
