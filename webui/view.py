"""The LLM view's state on the process that serves the web UI: the current run's live window and
its snapshots, and the answers the routes give from them (webui/routes.py).

Every 2 s while a run is on (longer when a computation takes long), a greenlet takes the
records that arrived (the plugin's rows_recorded hook on this process: every record exactly once),
and a worker thread computes the window's statistics (webui.live), so a local run's event loop
is not held up by pandas. On a master, the window ends at the oldest latest worker report
("watermark"), since workers ship records every 3 s: the newest seconds would otherwise look
empty and every rate would saw-tooth. After the run, one final snapshot is kept, ending at the
last record's end.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict

import gevent
import gevent.event
from flask import url_for
from locust.runners import STATE_MISSING, MasterRunner

from metrics.schema import Summary
from metrics.verdict import held, judged_on
from plugin.progress import OpenStreams
from plugin.run import spread_over
from plugin.state import state_of
from runfolder.layout import REPORT_HTML, SUMMARY
from webui.gauges import SERVER_GAUGES, client_health, gpu_gauges, in_flight, live_client, server_frame, server_gauges
from webui.live import DEFAULT_WINDOW, WINDOWS, LiveWindow, window_key
from webui.live_blocks import Flight
from webui.live_steps import live_diagnosis, search_text

log = logging.getLogger("llm.webui")

INTERVAL_S = 2.0  # between snapshots while a run is on; the page polls at the same pace
KEEP_SNAPSHOTS = 10  # retained by number for /llm/stats?seq=N
WINDOW_KEYS = tuple(window_key(w) for w in WINDOWS)

WATERMARK_MAX_LAG_S = 10.0  # never let a silent worker hold the window further back than this
# Locust's page is told the run is still stopping while its summary is computed, this long at most
# after the runner read `stopped` (a finish that failed never brings the summary)
FINAL_WAIT_S = 180.0


class LiveView:
    """The LLM view's state on the web UI process: the current run's window and snapshots."""

    def __init__(self, environment):
        self.environment = environment
        self.run = None
        self.window: LiveWindow | None = None
        self.runs: OrderedDict[str, str] = OrderedDict()  # run_id -> results folder, runs of this process
        self.finished: set[str] = set()
        self.snapshots: OrderedDict[int, dict] = OrderedDict()
        self.seq = 0
        self.latest: dict | None = None
        self.reports: dict[str, float] = {}  # worker client id -> time its latest report arrived
        self.markers: list[dict] = []  # user-count changes of a run that has no steps
        self.summary: Summary | None = None  # the finished run's summary.json
        self.step_rows: list | None = None  # the latest snapshot's load steps
        self._loop: gevent.Greenlet | None = None
        self._stop: gevent.event.Event | None = None
        self._busy = False
        self._failed_once = False
        self._stopped_at: float | None = None  # when the page was first told `stopped` was not read yet

    # -- run events -------------------------------------------------------------------------------

    def on_run_started(self, run) -> None:
        self.run = run
        self.window = LiveWindow(
            run.plan.slo,
            run_start=run.started,
            backends=spread_over(self.environment.host or ""),
            backend_count=run.plan.backend_count,
        )
        self.runs[run.run_id] = run.writer.path
        self.snapshots.clear()
        self.latest = None
        self.markers = []
        self.summary = None
        self.step_rows = None
        self._stopped_at = None
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

    # -- sampling ---------------------------------------------------------------------------------

    def _sample_loop(self, stop) -> None:
        delay = 0.0
        while not stop.wait(timeout=delay):
            started = time.monotonic()
            try:
                self.sample()
            except Exception:
                if not self._failed_once:
                    self._failed_once = True
                    log.exception("LLM view: computing the live statistics failed (logged once); the run goes on")
            cost = time.monotonic() - started
            delay = max(INTERVAL_S - cost, 2.0 * cost, 0.2)

    def _open_streams(self, now: float) -> tuple[float, list[dict]]:
        """The windows' end and the open streams of every load process (module doc: watermark)."""
        runner = self.environment.runner
        streams = state_of(self.environment).plugin(OpenStreams)  # plugin/progress.py
        reports = streams.reports(self.environment, now)
        if not isinstance(runner, MasterRunner):
            return (reports[0]["t"], reports) if reports else (now, [])
        progress = streams.latest
        live = [c.id for c in list(runner.clients.values()) if c.state != STATE_MISSING]
        times = [progress[c]["t"] if c in progress else self.reports[c] for c in live if c in self.reports]
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
            snap["diagnosis"] = self._diagnosis(run, final, snap.get("steps") or self.step_rows)
            if final:  # every stream has ended and is a record (the gauge would be a last report's)
                snap["in_flight"].update(value=0.0, source="the run has ended")
            self.seq += 1
            snap["seq"] = self.seq
            snap["generated_at"] = now
            snap["lag_s"] = max(0.0, now - snap["end"])
            snap["final"] = final
            server = {f"server_{k}": v for k, v in (snap["server"] or {}).items() if k in SERVER_GAUGES}
            window.add_point(
                snap,
                seq=self.seq,
                users=snap["users"],
                in_flight=snap["in_flight"]["value"],
                waiting=snap["in_flight"].get("waiting_first_token"),
                **server,
            )
            if snap.get("steps"):
                self.step_rows = snap["steps"]
            self.latest = snap
            self.snapshots[self.seq] = snap
            while len(self.snapshots) > KEEP_SNAPSHOTS:
                self.snapshots.popitem(last=False)
            return snap
        finally:
            self._busy = False

    def _diagnosis(self, run, final: bool, step_rows) -> dict | None:
        """Why the knee is there: summary.json's after the run, else over the levels final so far."""
        if final:
            d = self.summary.diagnosis if self.summary is not None else None
            return d.model_dump(mode="json") if d is not None else None
        return live_diagnosis(step_rows, run.plan.slo, server_frame(self.environment), live_client(self.environment))

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
            "gpu": gpu_gauges(env),
        }

    # -- answers ----------------------------------------------------------------------------------

    def page_state(self, state: str, now: float | None = None) -> str:
        """The runner's state as Locust's page is told it (its poll of /stats/requests). The runner
        reads `stopped` before the run's summary is computed (Locust's test_stop, where the run
        finishes, comes after it: 5-8 s after a 5-minute search), and the page stops asking at
        `stopped`: its LLM tab kept the last live window, never the run's summary. Until the final
        snapshot is in (at most FINAL_WAIT_S), the page reads the run as still stopping
        (`cleanup` on a local runner, `stopping` on a master: it keeps asking in those,
        webui/page_state.py), so the response that first says `stopped` carries the summary."""
        run = self.run
        if state != "stopped" or run is None or run.run_id in self.finished:
            return state
        now = time.time() if now is None else now
        if self._stopped_at is None:
            self._stopped_at = now
        if now - self._stopped_at > FINAL_WAIT_S:
            return state
        return "stopping" if isinstance(self.environment.runner, MasterRunner) else "cleanup"

    def run_info(self) -> dict | None:
        run = self.run
        if run is None:
            return None
        path = run.writer.path
        report = os.path.join(path, REPORT_HTML)
        finished = run.run_id in self.finished  # the final snapshot is in
        return {
            "id": run.run_id,
            "results_path": os.path.abspath(path),
            "started": run.started,
            "finished": finished,
            "host": self.environment.host,
            "model": run.plan.model,
            "slo": [o.text for o in run.plan.slo],
            "good": good_rule(run.plan.slo),
            "plan": run.plan.summary_line(),
            # the load and the target, as the report states them first (summary.json setup)
            "setup": live_setup_rows(run.summary_extra["setup"], run, time.time())
            if run.summary_extra.get("setup")
            else [],
            "load": run.plan.load.kind,
            **search_said(getattr(run, "search", None)),
            "report": "ready"
            if os.path.exists(report)
            else ("building" if getattr(run, "finished", False) else "after the run"),
            "report_url": url_for("llm.report", run_id=run.run_id) if os.path.exists(report) else None,
            "summary_url": url_for("llm.report_file", run_id=run.run_id, name=SUMMARY)
            if os.path.exists(os.path.join(path, SUMMARY))
            else None,
        }

    def stats(
        self, since: int = 0, history: bool = True, seq: int | None = None, window: str | None = None
    ) -> dict | None:
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
            "seq": 0,
            "generated_at": None,
            "lag_s": None,
            "final": False,
            "window": None,
            "overall": None,
            "by_class": {},
            "by_backend": {},
            "backends": None,
            "totals": None,
            "users": None,
            "workers": None,
            "in_flight": None,
            "steps": None,
            "ratios": None,
            "health": client_health(self.environment),
            "server": None,
            "diagnosis": None,
        }
        if snap is not None:
            out.update({k: v for k, v in snap.items() if k not in ("windows", "end")})
            out.update(snap["windows"][key])
        out.update(
            {
                "state": runner.state if runner is not None else "missing",
                "window_s": float(key),
                "windows": [float(k) for k in WINDOW_KEYS],
                "run": self.run_info(),
                "markers": self.step_markers() or list(self.markers),
                "summary": summary_view(self.summary)
                if self.summary is not None and self.run is not None and self.run.run_id in self.finished
                else None,
            }
        )
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
            rows.append(
                _tab_row(
                    "All", summary.overall.model_dump(mode="json"), stamp, sent="sent", users=snap and snap["users"]
                )
            )
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


SUMMARY_KEYS = (
    "window",
    "records",
    "overall",
    "by_class",
    "by_backend",
    "backends",
    "by_step",
    "slo",
    "capacity",
    "concurrency",
    "open_loop",
    "client_bound",
    "complete",
    "diagnosis",
)


def search_said(search) -> dict:
    """What a capacity search said of itself, as its console lines do: before it started
    (`search_check`: whether its levels can decide, its ceiling) and as it ran (`search_notes`: a
    level too slow to get the values it needs, and the --step-time that would; the page had not
    shown it)."""
    if search is None:
        return {"search_check": None, "search_notes": []}
    return {"search_check": search.precheck(), "search_notes": list(getattr(search, "notes", None) or [])}


METRIC_WORDS = {"ttft": "TTFT", "ttfa": "TTFA", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E"}


def good_rule(objectives) -> str:
    """The Good card's line: what makes one request good (metrics/slo.py good_mask: under every
    objective's threshold), "good = TTFT under 5s, TPOT under 80ms (each request)". It read "good =
    within ttft.p95<5s", which beside "Good 100 %" and a TTFT P95 of 5.5 s read as a contradiction:
    a percentile is a verdict over the requests, a single request is good or not by the threshold."""
    if not objectives:
        return "no --slo: good = OK"
    parts = [f"{METRIC_WORDS.get(o.metric, o.metric)} under {o.text.split('<', 1)[1].strip()}" for o in objectives]
    return "good = " + ", ".join(parts) + " (each request)"


def summary_view(summary: Summary) -> dict:
    """The parts of a run's summary.json the view shows after the run; each level says what its
    verdict rests on as the live rows and the report's per-step table do (`judged_on`), and a
    capacity search's level why it ended and the bracket it left, as its live row said it
    (`search_text`: after the run the row had said only how long it was held). `client_warning`:
    the console's "Client warning" line (the diagnosis may say "see its warning": the page had
    shown it only in the Client card's tooltip)."""
    out = summary.model_dump(mode="json", include=set(SUMMARY_KEYS))
    out["client_warning"] = summary.client_bound.warning() if summary.client_bound is not None else ""
    cap = summary.capacity
    search = {"levels": [e.model_dump(mode="json") for e in cap.levels]} if cap is not None and cap.levels else None
    for k, (step, s) in enumerate(zip(out.get("by_step") or (), summary.by_step or ())):
        seconds = s.window.end - s.window.start
        step["held"] = held(s.steps, seconds)
        if search is not None and k < len(search["levels"]) and search["levels"][k]["users"] == s.users:
            step["held"] = search_text(search, k)  # the search's k-th level (in the order tried, as by_step)
        step["judged_on"] = judged_on(s.verdict, s.steps, seconds) if s.verdict is not None else None
    return out


def _tab_row(name: str, b: dict, stamp: str, sent: str = "ended", users=None, in_flight=None) -> dict:
    """Locust renders the tab's cells as given: text, with the report's digits and separators
    (core/numbers.py fmt: TTFT and E2E whole ms, TPOT and ITL to 0.1 ms, tokens/s whole)."""
    from core.numbers import fmt

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


def live_setup_rows(setup, run, now: float) -> list[tuple[str, str]]:
    """summary.json's setup rows as the live view states them. The setup is written as the run
    starts, when nothing is measured yet (its `measured_s` 0, which the header showed as
    "measured 0.0 s" through the whole run): until the window ends the time row says how much of
    it has been measured so far (or that the warm-up is on), then the window's length."""
    from reports.rows import setup_rows  # here, not at the top: a worker loads this module too, never these

    rows = setup_rows(setup)
    asked = f"-t {setup.run_time_s:g} s" if setup.run_time_s is not None else "until stopped"
    if run.window_end is not None:
        text = f"{asked}; measured {max(0.0, run.window_end - run.window_start):.1f} s"
    elif now < run.window_start:
        text = f"{asked}; running, warm-up (the measurement starts in {run.window_start - now:.0f} s)"
    else:
        text = f"{asked}; running, {now - run.window_start:.1f} s measured so far"
    return [(k, text if k == "time" else v) for k, v in rows]
