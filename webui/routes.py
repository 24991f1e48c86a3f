"""The LLM view's routes in Locust's web UI (Flask), its tab in Locust's own page and the links on it.

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
"""

from __future__ import annotations

import json
import logging
import os
import re

from flask import Blueprint, Response, abort, jsonify, redirect, request, send_file, url_for

from runfolder.layout import REPORT_HTML, REPORT_MD, RUN, SUMMARY
from webui.form import SIGNED_FIELDS_SCRIPT, headings_style, labels_script
from webui.view import KEEP_SNAPSHOTS, LiveView

log = logging.getLogger("llm.webui")

REPORT_FILES = {
    REPORT_HTML: "text/html",
    REPORT_MD: "text/markdown",
    SUMMARY: "application/json",
    RUN: "application/json",
}
_RUN_ID = re.compile(r"^[A-Za-z0-9._-]+$")
PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llm.html")

# The LLM tab in Locust's own page (key, title): one row per class and one "All" row.
TAB_KEY = "llm"
TAB_COLUMNS = [
    ("name", "Class"),
    ("ended", "Requests"),
    ("failed", "Failed"),
    ("users", "Users"),
    ("in_flight", "In flight"),
    ("ttft_p50", "TTFT P50 ms"),
    ("ttft_p95", "TTFT P95 ms"),
    ("ttft_p99", "TTFT P99 ms"),
    ("tpot_p50", "TPOT P50 ms"),
    ("tpot_p95", "TPOT P95 ms"),
    ("itl_p50", "ITL P50 ms"),
    ("e2e_p95", "E2E P95 ms"),
    ("req_s", "Req/s"),
    ("out_tok_s", "Out tok/s"),
    ("total_tok_s", "Total tok/s"),
    ("good_pct", "Good %"),
    ("errors", "Errors"),
    ("updated", "Window end (#)"),
]


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
        return _send(view, run_id, REPORT_HTML)

    @bp.route("/llm/report/<run_id>/<name>")
    @auth
    def report_file(run_id, name):
        return _send(view, run_id, name)

    web_ui.app.register_blueprint(bp)

    args = web_ui.template_args
    args["extended_tabs"] = [*(args.get("extended_tabs") or []), {"title": "LLM", "key": TAB_KEY}]
    args["extended_tables"] = [
        *(args.get("extended_tables") or []),
        {"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in TAB_COLUMNS]},
    ]
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
                if isinstance(data.get("state"), str):  # stopping until the run's summary is in
                    data["state"] = view.page_state(data["state"])
                extended = [e for e in (data.get("extended_stats") or []) if e.get("key") != TAB_KEY]
                data["extended_stats"] = [*extended, {"key": TAB_KEY, "data": view.tab_rows()}]
                response.set_data(json.dumps(data))
            except Exception:
                log.exception("LLM view: could not add the LLM tab's rows")
        elif endpoint == "locust.index" and response.mimetype == "text/html" and response.status_code == 200:
            html = response.get_data(as_text=True)
            if "</body>" in html and "llm-view-links" not in html:
                extra = _index_links(url_for("llm.page_view"), url_for("llm.stats"))
                extra += headings_style(web_ui.template_args.get("extra_options") or {})
                extra += SIGNED_FIELDS_SCRIPT + labels_script(web_ui.template_args.get("extra_options") or {})
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
        abort(404, f"{name} of run {run_id} is not there (yet)" if name == REPORT_HTML else None)
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
