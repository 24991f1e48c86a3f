"""The LLM view's numbers (webui/): the live windows against numpy over the same records, the
open streams counted where their tokens arrive, the per-step rows against summary.json's by_step,
the stream tracker against a full parse, the form's order, the health card's checks, and a web-UI
run (master + forked workers, --processes) whose view ends on its summary.json.

The browser side is tests/test_webui_browser.py."""

from __future__ import annotations

import glob
import json
import math
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from html import escape as html_escape
from types import SimpleNamespace

import numpy as np
import pytest

from metrics.record import FIELD_NAMES, RequestRecord, rows_to_table
from metrics.slo import parse_slo
from tests.helpers import LOCUST, ROOT, free_port
from tests.test_one_verdict import reference
from webui.live import LiveWindow
from webui.live_blocks import Flight
from webui.live_table import LIVE_COLUMNS

T0 = 1_800_000_000.0  # a fixed wall clock for the synthetic runs
NAN = float("nan")


def _record(rng, i: int, wall: float, cls: str, error: str = "", step: int = -1) -> tuple:
    n = int(rng.integers(1, 60))
    ttft = float(rng.uniform(0.02, 0.4))
    times = list(ttft + np.cumsum(np.r_[0.0, rng.exponential(0.02, n - 1)]))
    rec = RequestRecord(
        f"r{i}",
        "0",
        "chat",
        cls,
        int(rng.integers(50, 400)),
        64,
        wall_send=wall,
        t_send=wall - T0,
        status=200,
        step=step,
    )
    if error in ("", "stopped", "timeout", "mid_stream_error"):
        rec.chunk_times = times
        rec.n_chunks = n
        rec.ttft_s, rec.e2e_s = times[0], times[-1]
        rec.output_tokens, rec.prompt_tokens, rec.tokens_source = n, int(rng.integers(5, 50)), "usage"
        if n > 1:
            rec.tpot_s = (times[-1] - times[0]) / (n - 1)
    rec.ok = not error
    rec.error = error
    if error == "connect_error":
        rec.status = 0  # no timings at all: ends at its send time
    return rec.as_row()


def _rows(seed=1, n=900, span=60.0, step_s=None):
    rng = np.random.default_rng(seed)
    errors = ["", "", "", "", "", "", "", "", "timeout", "http_5xx", "connect_error", "stopped", "mid_stream_error"]
    out = []
    for i in range(n):
        wall = T0 + float(rng.uniform(0, span))
        step = int((wall - T0) // step_s) if step_s else -1
        out.append(_record(rng, i, wall, str(rng.choice(["short", "medium", "long"])), str(rng.choice(errors)), step))
    return out


def _expected(rows, start, end, objectives=()):
    """A window's statistics by plain numpy, written independently of webui.live: outcomes and
    latencies of the records that ended in it, TTFT of first tokens that came in it, tokens that
    arrived in it (a record's output spread evenly over its chunks, its prompt at its first token)."""
    col = {name: [r[FIELD_NAMES.index(name)] for r in rows] for name in FIELD_NAMES}
    wall, e2e = np.array(col["wall_send"], float), np.array(col["e2e_s"], float)
    ttft = np.array(col["ttft_s"], float)
    ended = np.where(np.isnan(e2e), wall, wall + e2e)
    sel = (ended >= start) & (ended <= end)
    ok = np.array(col["ok"], bool)
    err = np.array(col["error"], object)
    okw = sel & ok
    counted = ok | (err == "stopped")
    output = prompt = 0.0
    for i in np.flatnonzero(counted):
        times = wall[i] + np.asarray(col["chunk_times"][i], float)
        n_out = max(col["output_tokens"][i], 0)
        if times.size:
            output += n_out * np.sum((times >= start) & (times <= end)) / times.size
        elif start <= ended[i] <= end:
            output += n_out
        if start <= wall[i] + ttft[i] <= end:
            prompt += max(col["prompt_tokens"][i], 0)
    first = wall + ttft
    out = {
        "ended": int(sel.sum()),
        "ok": int(okw.sum()),
        "failed": int((sel & ~ok & ~np.isin(err, ["stopped", "cancelled"])).sum()),
        "stopped": int((sel & (err == "stopped")).sum()),
        "ttft": ttft[ok & (first >= start) & (first <= end)] * 1000,
        "tpot": np.array(col["tpot_s"], float)[okw] * 1000,
        "e2e": e2e[okw] * 1000,
        "itl": np.concatenate([np.diff(col["chunk_times"][i]) for i in np.flatnonzero(okw)] or [np.empty(0)]) * 1000,
        "output": output,
        "prompt": prompt,
    }
    good = okw.copy()
    for obj in objectives:
        values = {"ttft": ttft, "tpot": np.array(col["tpot_s"], float), "e2e": e2e}[obj.metric]
        good &= ~(values >= obj.threshold_s)
    out["good"] = int(good.sum())
    return out


def _close(a, b, rel=1e-9):
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)


def _check_block(block, exp, seconds):
    r = block["requests"]
    assert (r["ended"], r["ok"], r["failed"], r["stopped"]) == (exp["ended"], exp["ok"], exp["failed"], exp["stopped"])
    for metric in ("ttft", "tpot", "e2e", "itl"):
        values = exp[metric][~np.isnan(exp[metric])]
        dist = block[f"{metric}_ms"]
        assert dist["count"] == values.size, metric
        if values.size:
            for key, q in (("p50", 50), ("p95", 95), ("p99", 99)):
                assert _close(dist[key], float(np.percentile(values, q))), (metric, key)
            assert _close(dist["mean"], float(values.mean())), metric
    th = block["throughput"]
    assert _close(th["requests_per_s"], exp["ok"] / seconds)
    assert _close(th["output_tokens_per_s"], exp["output"] / seconds)
    assert _close(th["total_tokens_per_s"], (exp["output"] + exp["prompt"]) / seconds)
    assert _close(block["goodput"]["requests_per_s"], exp["good"] / seconds)
    ended = exp["ok"] + exp["failed"]
    assert _close(block["goodput"]["good_fraction"], exp["good"] / ended if ended else None)


def test_window_equals_numpy_over_the_same_records():
    rows = _rows()
    objectives = parse_slo("ttft.p95<200ms,tpot.p50<25ms")
    w = LiveWindow(objectives, run_start=T0)
    w.add_rows(rows[:400])
    w.snapshot(end=T0 + 20)  # an early snapshot: later rows must still count in the next one
    w.add_rows(rows[400:])
    end = T0 + 50.0
    snap = w.snapshot(end=end)
    json.dumps(snap, allow_nan=False)  # strict JSON
    assert set(snap["windows"]) == {"5", "10", "30", "60"}
    for key, seconds in (("5", 5.0), ("30", 30.0)):
        win = snap["windows"][key]
        assert win["window"]["start"] == end - seconds and win["window"]["seconds"] == seconds
        exp = _expected(rows, end - seconds, end, objectives)
        assert win["window"]["records"] == exp["ended"] > 10
        _check_block(win["overall"], exp, seconds)
        for cls in ("short", "medium", "long"):
            sub = [r for r in rows if r[FIELD_NAMES.index("request_class")] == cls]
            _check_block(win["by_class"][cls], _expected(sub, end - seconds, end, objectives), seconds)
    o = snap["windows"]["30"]["overall"]
    assert o["requests"]["by_error"]  # failures by class are reported
    assert {v["objective"] for v in o["slo"]["objectives"]} == {"ttft.p95<200ms", "tpot.p50<25ms"}
    # the window's verdict by the one rule (metrics/verdict.py), on the first tokens that came in it
    truth, judged = reference(_expected(rows, end - 30, end)["ttft"] / 1000, 0.2), o["slo"]["objectives"][0]
    assert judged["state"] == truth["state"] and _close(judged["value_ms"], truth["value"] * 1000), (judged, truth)
    assert _close(judged["upper_ms"], truth["upper"] * 1000) and _close(judged["margin"], truth["margin"])
    assert snap["totals"]["records"] == len(rows)
    assert snap["windows"]["60"]["window"]["start"] == T0  # never before the run started


def test_open_streams_count_where_their_tokens_arrive():
    """A stream counts once: as an open stream of its process's report, or as a record, and the
    window's tokens are the same either way (its events spread evenly, one token each)."""
    end = T0 + 30.0
    chunk = np.linspace(0.1, 20.0, 200)  # 200 tokens from 0.1 s to 20 s after its send at T0 + 5

    def window(as_record: bool) -> dict:
        w = LiveWindow(parse_slo("ttft.p95<50ms"), run_start=T0)
        rec = RequestRecord(
            "s",
            "0",
            "chat",
            "long",
            400,
            256,
            wall_send=T0 + 5,
            t_send=0.0,
            status=200,
            ok=True,
            ttft_s=0.1,
            e2e_s=20.0,
            tpot_s=19.9 / 199,
            prompt_tokens=100,
            output_tokens=200,
            tokens_source="usage",
            n_chunks=200,
            chunk_times=list(chunk),
        )
        calibration = RequestRecord(
            "c",
            "0",
            "chat",
            "short",
            400,
            8,
            wall_send=T0,
            t_send=0.0,
            status=200,
            ok=True,
            ttft_s=0.1,
            e2e_s=0.5,
            tpot_s=0.1,
            prompt_tokens=100,
            output_tokens=4,
            tokens_source="usage",
            n_chunks=4,
            chunk_times=[0.1, 0.2, 0.3, 0.5],
        )
        w.add_rows([calibration.as_row()] + ([rec.as_row()] if as_record else []))
        open_stream = {
            "t": end,
            "cls": ["long"],
            "sent": [T0 + 5],
            "chars": [400],
            "first": [T0 + 5.1],
            "ttft": [0.1],
            "last": [T0 + 25.0],
            "events": [200],
        }
        flight = Flight([] if as_record else [open_stream])
        return w.snapshot(end=T0 + 23.0, flight=flight)["windows"]

    closed, open_ = window(True), window(False)
    for key in ("5", "10", "30"):
        a, b = closed[key]["overall"], open_[key]["overall"]
        assert _close(a["throughput"]["output_tokens_per_s"], b["throughput"]["output_tokens_per_s"], rel=0.02), key
        assert _close(a["throughput"]["total_tokens_per_s"], b["throughput"]["total_tokens_per_s"], rel=0.02), key
    # the first token came at T0 + 5.1: in the 30 s window (TTFT 100 ms, missing the 50 ms SLO), not in the 5 s one
    assert open_["30"]["overall"]["ttft_ms"]["count"] == 2 and open_["5"]["overall"]["ttft_ms"]["count"] == 0
    # judged by the one rule: one value above the threshold proves a miss (metrics/verdict.py)
    assert open_["30"]["overall"]["slo"]["objectives"][0]["value_ms"] > 50
    assert open_["30"]["overall"]["slo"]["state"] == "missed" and not open_["30"]["overall"]["slo"]["passed"]
    assert open_["5"]["overall"]["open_streams"]["counted"] == 1
    # tokens per event and prompt tokens per character come from the records (4 tokens in 4 chunks; 100 per 400)
    out = open_["5"]["overall"]["open_streams"]
    assert _close(out["output_tokens"], 200 * 5 / 19.9, rel=1e-6) and out["prompt_tokens"] == 0


def test_step_rows_equal_summary_by_step():
    from metrics.summary import summarize
    from shapes.steps import StepPlan

    plan = StepPlan([2, 4, 8], 20.0, 5.0)
    rows = _rows(seed=5, n=1200, span=60.0, step_s=20.0)
    objectives = parse_slo("ttft.p95<300ms")
    w = LiveWindow(objectives, run_start=T0)
    w.add_rows(rows)
    open_stream = {
        "t": T0 + 50,
        "cls": ["short"],
        "sent": [T0 + 38],
        "chars": [100],
        "first": [T0 + 38.2],
        "ttft": [0.2],
        "last": [T0 + 49],
        "events": [40],
    }
    snap = w.snapshot(end=T0 + 50, flight=Flight([open_stream]), steps=(plan, T0))
    assert [(r["step"], r["status"]) for r in snap["steps"]] == [(0, "final"), (1, "pending"), (2, "running")]
    assert snap["steps"][1]["open"] == 1 and snap["steps"][1]["block"]["verdict"] is None
    assert snap["steps"][2]["so_far_s"] == 10.0  # the running step began at T0 + 40: how long it has run
    summary = summarize(rows_to_table(rows), T0, T0 + 60, run_start=T0, plan=plan, objectives=objectives).model_dump()
    by_step = summary["by_step"]
    row = snap["steps"][0]
    assert (
        (row["start"], row["end"]) == (by_step[0]["window"]["start"], by_step[0]["window"]["end"]) == (T0 + 5, T0 + 20)
    )
    expected = {k: v for k, v in by_step[0].items() if k not in ("step", "users", "window", "steps", "cut")}
    assert json.loads(json.dumps(row["block"])) == json.loads(json.dumps(expected))
    # kept once final; the pending step becomes final when its open stream has ended
    again = w.snapshot(end=T0 + 61, flight=Flight(), steps=(plan, T0))
    assert again["steps"][0] == snap["steps"][0]
    assert [(r["step"], r["status"]) for r in again["steps"]] == [(0, "final"), (1, "final"), (2, "final")]
    for i in (1, 2):
        expected = {k: v for k, v in by_step[i].items() if k not in ("step", "users", "window", "steps", "cut")}
        assert json.loads(json.dumps(again["steps"][i]["block"])) == json.loads(json.dumps(expected)), i


def test_a_held_level_and_the_knee_are_said_live_as_after_the_run():
    """A capacity search held its 2-user level for two steps (steps 0-1), then 4 users: the live
    row marks it held and says what its verdict rests on in the words of the report's per-step
    table and of the view after the run (metrics/verdict.py judged_on), from the same Step. No
    diagnosis while no final level missed (the old view diagnosed the highest level so far: no
    knee yet); once one missed, the diagnosis names it."""
    from metrics.schema.client_health import ClientBound
    from metrics.schema.verdicts import Capacity
    from metrics.summary import summarize
    from metrics.verdict import judged_on
    from reports.rows import level_verdict
    from shapes.steps import StepPlan
    from webui.live_steps import live_diagnosis, search_text
    from webui.view import summary_view

    plan = StepPlan([2, 2, 4], 20.0, 5.0, cut_lag_s=0.0)
    rows = _rows(seed=5, n=1200, span=60.0, step_s=20.0)
    for slo, knee in (("ttft.p95<500ms", None), ("ttft.p95<300ms", 2)):  # replies' TTFT: 20-400 ms
        objectives = parse_slo(slo)
        w = LiveWindow(objectives, run_start=T0)
        w.add_rows(rows)
        snap = w.snapshot(end=T0 + 61, flight=Flight(), steps=(plan, T0))
        assert [(r["step"], r["last"], r["status"], r["held"]) for r in snap["steps"]] == [
            (0, 1, "final", "35 s measured"),
            (2, 2, "pending", ""),
        ]  # the search may still hold the last level
        summary = summarize(rows_to_table(rows), T0, T0 + 60, run_start=T0, plan=plan, objectives=objectives)
        step = summary.by_step[0]
        assert step.steps == 2 and step.verdict.state == ("met" if knee is None else "missed"), step.verdict
        # the time measured, not the steps (an adaptive search's are 2 s slices)
        said = judged_on(step.verdict, 2, 35.0)
        assert said.endswith(", 35 s measured") and said.split(", ")[0].endswith(" requests"), said
        assert snap["steps"][0]["judged_on"] == summary_view(summary)["by_step"][0]["judged_on"] == said
        # the console's "Client warning" line, for the page: none from a healthy client, the contended one's
        assert summary_view(summary)["client_warning"] == ""
        summary.client_bound = ClientBound(contended=True, advice="Other processes took the CPU.")
        assert summary_view(summary)["client_warning"] == (
            "The load generator's machine was contended: Other processes took the CPU."
        )
        summary.client_bound = None
        assert level_verdict(step)[1].text == said  # the report's "judged on" cell
        # a capacity search's level says after the run why it ended and the bracket it left, as live
        search = {
            "levels": [
                {
                    "users": 2,
                    "state": step.verdict.state,
                    "margin": step.verdict.margin or 0.0,
                    "ended": "decided",
                    "seconds": 40.0,
                    "looks": 2,
                },
                {"users": 4, "state": "missed", "margin": -0.5, "ended": "decided", "seconds": 20.0, "looks": 1},
            ]
        }
        summary.capacity = Capacity(slo=slo, sentence="-", levels=search["levels"])
        shown = [r["held"] for r in summary_view(summary)["by_step"]]
        assert shown == [search_text(search, 0), search_text(search, 1)], shown
        assert shown[0].startswith("decided in 40s (2 looks)") and shown[1].endswith("bracket 2..4 users (100%)") == (
            knee is None
        ), shown
        diagnosis = live_diagnosis(snap["steps"], objectives, None, None)
        assert (diagnosis and diagnosis["users"]) == knee, diagnosis


def test_a_level_the_search_decided_shows_its_verdicts_set_while_pending():
    """A capacity search has judged its 2-user level at its cut (T0 + 40) while a stream sent in it
    is still open, its first token long after the cut. The pending row had added that stream's
    TTFT to its figures (no verdict yet): 4,585 ms under the SLO beside "decided ...; bracket" of a
    level that missed. Now it shows the set the verdict rests on, with the verdict: the figures and
    verdict summary.json's by_step holds once that stream has ended."""
    from metrics.summary import summarize
    from shapes.steps import StepPlan

    objectives = parse_slo("ttft.p95<300ms")
    level = {"users": 2, "state": "missed", "margin": -0.1, "ended": "decided", "seconds": 40.0, "looks": 2}
    plan = StepPlan([2, 2, 4], 20.0, 5.0, cut_lag_s=0.0, search={"levels": [level]})
    rows = _rows(seed=5, n=1200, span=60.0, step_s=20.0)
    late = RequestRecord("late", "0", "chat", "short", 100, 64, wall_send=T0 + 30, t_send=30.0, status=200, step=1)
    late.chunk_times, late.n_chunks = [25.0, 25.5], 2  # first token at T0 + 55: after the cut
    late.ttft_s, late.e2e_s, late.output_tokens, late.prompt_tokens, late.tokens_source = 25.0, 25.5, 2, 9, "usage"
    late.tpot_s, late.ok = 0.5, True
    stream = {"t": T0 + 56, "cls": ["short"], "step": [1], "sent": [T0 + 30], "chars": [100], "first": [T0 + 55],
              "ttft": [25.0], "ttfa": [25.0], "last": [T0 + 55], "events": [1]}  # fmt: skip
    w = LiveWindow(objectives, run_start=T0)
    w.add_rows([r for r in rows if r[FIELD_NAMES.index("wall_send")] < T0 + 56])
    snap = w.snapshot(end=T0 + 56, flight=Flight([stream]), steps=(plan, T0))
    row = snap["steps"][0]
    assert (row["status"], row["open"]) == ("pending", 1) and row["held"].startswith("decided in 40s"), row
    final = summarize(
        rows_to_table([*rows, late.as_row()]), T0, T0 + 60, run_start=T0, plan=plan, objectives=objectives
    )
    expected = final.by_step[0]
    assert row["block"]["verdict"] is not None and row["block"]["verdict"]["state"] == expected.verdict.state
    assert row["block"]["ttft_ms"] == expected.ttft_ms.model_dump(mode="json")  # the censored stream at its cut
    assert row["block"]["requests"] == expected.requests.model_dump(mode="json")
    assert row["judged_on"] and row["judged_on"].startswith(f"{expected.verdict.requests:,} requests"), row


def test_window_is_cut_at_the_run_start_and_forgets_old_records():
    rows = _rows(seed=2, n=300)
    w = LiveWindow(run_start=T0 + 5)
    w.add_rows(rows)
    snap = w.snapshot(end=T0 + 12)["windows"]["30"]
    assert snap["window"]["start"] == T0 + 5 and math.isclose(snap["window"]["seconds"], 7.0)
    _check_block(snap["overall"], _expected(rows, T0 + 5, T0 + 12), 7.0)
    # far later: everything old is pruned, the window is empty but well-formed
    snap = w.snapshot(end=T0 + 500)
    win = snap["windows"]["5"]
    assert win["window"]["records"] == 0 and win["overall"]["requests"]["ended"] == 0
    assert win["overall"]["ttft_ms"]["p95"] is None and win["overall"]["throughput"]["requests_per_s"] == 0
    assert sum(t.num_rows for t in w._tables) == 0
    json.dumps(snap, allow_nan=False)


def test_history_points_follow_snapshots():
    w = LiveWindow(run_start=T0)
    w.add_rows(_rows(seed=3, n=200))
    for i, end in enumerate((T0 + 20, T0 + 40, T0 + 60)):
        w.add_point(w.snapshot(end=end), seq=i + 1, users=10)
    assert [p["seq"] for p in w.history] == [1, 2, 3]
    assert all(p["users"] == 10 and set(p["w"]) == {"5", "10", "30", "60"} for p in w.history)
    assert all(p["w"]["5"]["output_tokens_per_s"] >= 0 and "tpot_p95_ms" in p["w"]["30"] for p in w.history)


def test_live_columns_are_record_fields():
    assert set(LIVE_COLUMNS) <= set(FIELD_NAMES)


# -- the open streams of a load process ----------------------------------------------------------


def _sse(obj) -> bytes:
    body = b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n" % len(body) + body + b"\r\n"


def test_stream_tracker_counts_what_open_streams_delivered():
    from metrics.sse import parse_reads
    from plugin.progress import StreamTracker, valid
    from users.connection import CHUNKED
    from users.stream import Exchange

    def token(text):
        return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}

    role = {"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
    ex = Exchange()
    ex.framing, ex.t_send = CHUNKED, 100.0
    rec = RequestRecord("a", "0", "chat", "short", 321, 64, wall_send=T0)
    ctx = SimpleNamespace(streams={ex: rec}, finisher=SimpleNamespace(queue=[]))
    tracker = StreamTracker(ctx)

    def read(t, *events):
        ex.times.append(t)
        ex.datas.append(b"".join(_sse(e) for e in events))

    read(100.05, role)
    first = tracker.collect(now=T0 + 0.06)
    assert valid(first) and first["cls"] == ["short"] and first["chars"] == [321] and first["events"] == [0]
    assert math.isnan(first["first"][0])  # the role chunk carries no token
    read(100.2, token("Hi"))
    read(100.25, token(" there"), token(","))  # two events in one read
    read(100.3, token(""))  # no token: the first reads are parsed exactly
    mid = tracker.collect(now=T0 + 0.31)
    assert math.isclose(mid["first"][0], T0 + 0.2) and math.isclose(mid["ttft"][0], 0.2)
    assert mid["events"] == [3] and math.isclose(mid["last"][0], T0 + 0.25)
    for i in range(20):
        read(100.4 + 0.05 * i, token(f" w{i}"))
    read(101.5, {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 24}})
    ex.times.append(101.5)
    ex.datas.append(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
    # the exchange ended: handed to the finisher, not yet a record: still counted
    ctx.streams.clear()
    ctx.finisher.queue.append(("/v1/chat/completions", rec, ex, False, None))
    done = tracker.collect(now=T0 + 2)
    parsed, _ = parse_reads(ex.times, ex.datas, True)
    assert done["events"] == [len(parsed.chunks)] == [23]  # later reads: data events, [DONE] and usage left out
    assert math.isclose(done["last"][0], T0 + 1.35)
    # a record now: gone from the report, and from the tracker
    ctx.finisher.queue.clear()
    assert tracker.collect(now=T0 + 3)["events"] == [] and tracker.tracks == {}


def test_stream_tracker_cost_per_report():
    """A report with 1,000 open streams, 30 new reads each, takes well under the 10 ms loop-lag
    limit of the client's self-health on this machine (`bytes.count`, no parse)."""
    from plugin.progress import StreamTracker
    from users.connection import CHUNKED
    from users.stream import Exchange

    event = _sse({"choices": [{"index": 0, "delta": {"content": " word"}, "finish_reason": None}]})
    ctx = SimpleNamespace(streams={}, finisher=SimpleNamespace(queue=[]))
    for i in range(1000):
        ex = Exchange()
        ex.framing, ex.t_send = CHUNKED, 10.0
        ex.times.extend(10.0 + 0.02 * k for k in range(5))
        ex.datas.extend([event] * 5)
        ctx.streams[ex] = RequestRecord(f"r{i}", "0", "chat", "short", 100, 64, wall_send=T0)
    tracker = StreamTracker(ctx)
    tracker.collect()
    for ex in ctx.streams:
        ex.times.extend(10.2 + 0.02 * k for k in range(30))
        ex.datas.extend([event] * 30)
    started = time.thread_time()  # its own CPU time: what other processes take meanwhile is not its cost
    out = tracker.collect()
    cost = time.thread_time() - started
    assert sum(out["events"]) == 35_000
    assert cost < 0.05, cost  # typically 5-10 ms


# -- the start form and the health card ----------------------------------------------------------


def test_form_groups_name_every_form_option():
    from plugin.options import DECLARED
    from webui.form import GROUPS, ordered

    form = [d.name for d in DECLARED if d.web]
    named = [n for _, names in GROUPS for n in names]
    assert sorted(named) == sorted(set(named))  # each once
    assert set(named) <= set(form), set(named) - set(form)  # no stale name
    assert set(form) <= set(named), set(form) - set(named)  # a new option gets a place (else: last, with the experts)
    extra = {n: {"help_text": n} for n in sorted(form) + ["another_plugins_option"]}
    order = list(ordered(extra))
    assert order[:4] == ["model", "sim_profile", "endpoint", "workload"] and order[-1] == "another_plugins_option"
    assert order.index("steps") < order.index("slo") < order.index("results_dir")


def test_gauges_read_the_health_monitor_and_server_metrics_hooks():
    from plugin.health import Health
    from plugin.server_metrics import ServerMetrics
    from plugin.state import SuiteState
    from webui.gauges import client_health, in_flight, server_gauges

    health, scraping = Health(), ServerMetrics()
    env = SimpleNamespace(llm=SuiteState("local", (health, scraping)))
    env.llm.plan = SimpleNamespace(server_metrics=())
    run = SimpleNamespace(run_id="r1")
    assert client_health(env) == {"state": "unknown"}
    health.snapshot = lambda: {"state": "client_bound", "cpu_percent": 97.5, "reasons": ["cpu"]}
    assert client_health(env) == {"state": "client_bound", "checks": [], "cpu_percent": 97.5, "reasons": ["cpu"]}
    health.snapshot = lambda: 1 / 0
    assert client_health(env)["state"] == "unknown"
    # plugin.health's board: no state of its own; derived from its workers, samples left out
    worker = {
        "worker": "w0",
        "index": 0,
        "bound": False,
        "contended": False,
        "reasons": [],
        "cpu_p95": 40.0,
        "loop_lag_p99_ms": 1.2,
        "samples": 12,
        "recent": [{"t": 1.0, "cpu": 40.0}],
    }
    limits = {"cpu_pct": 70.0, "loop_lag_ms": 10.0, "token_lag_ms": 5.0}
    board = {
        "running": True,
        "bound": False,
        "advice": "fine",
        "workers_needed": 1,
        "limits": limits,
        "workers": [worker],
    }
    health.snapshot = lambda: board
    h = client_health(env)
    assert (
        h["state"] == "ok"
        and h["advice"] == "fine"
        and "recent" not in h["workers"][0]
        and h["workers"][0]["cpu_p95"] == 40.0
    )
    assert h["checks"] == [
        {"name": "CPU p95", "value": 40.0, "limit": 70.0, "unit": "%", "over": False},
        {"name": "loop lag p99", "value": 1.2, "limit": 10.0, "unit": "ms", "over": False},
    ]
    # a value over its limit, not sustained (not bound): never "ok"
    worker["loop_lag_p99_ms"] = 49.6
    h = client_health(env)
    assert h["state"] == "over limit" and h["checks"][1] == {
        "name": "loop lag p99",
        "value": 49.6,
        "limit": 10.0,
        "unit": "ms",
        "over": True,
    }
    # first tokens a stall may have stamped late: the card's line says so, and what helps
    board["stamp_suspect"] = 26
    assert client_health(env)["stall_note"] == (
        "26 requests waited for their first token through a client stall: TTFT may read high. "
        "Spawn users slower (-r) or add worker processes (--processes)."
    )
    # late while idle (other processes took the CPU), its lag over the limit: contended, not "over
    # limit", and the stall line does not ask for more workers, which would wait for a CPU too
    worker["contended"] = True
    h = client_health(env)
    assert h["state"] == "contended" and h["checks"][1]["over"], h
    assert (
        h["stall_note"].endswith(
            "run the load generator on a quieter machine, or spread its workers over more machines."
        )
        and "--processes" not in h["stall_note"]
    )
    worker["loop_lag_p99_ms"] = 1.2
    assert client_health(env)["state"] == "contended"
    board["stamp_suspect"] = 0
    assert "stall_note" not in client_health(env)
    board["bound"], worker["bound"] = True, True
    assert client_health(env)["state"] == "client bound"
    board["workers"] = []
    board["bound"] = False
    assert client_health(env)["state"] == "unknown"  # no sample yet

    assert server_gauges(env, run) is None  # --server-metrics off
    env.llm.plan = SimpleNamespace(server_metrics=("http://127.0.0.1:1/metrics",))
    assert server_gauges(env, run) == {"available": False, "running": None, "waiting": None, "kv_cache_usage": None}
    scraper = scraping.scraper = SimpleNamespace(
        latest=lambda: {
            "vllm:num_requests_running": 12,
            "vllm:num_requests_waiting": 3.0,
            "vllm:kv_cache_usage_perc": 0.42,
        }
    )
    assert server_gauges(env, run) == {"available": True, "running": 12.0, "waiting": 3.0, "kv_cache_usage": 0.42}
    scraper.latest = lambda: {"sglang:num_running_reqs": 5, "sglang:num_queue_reqs": 0, "sglang:token_usage": 0.1}
    assert server_gauges(env, run) == {"available": True, "running": 5.0, "waiting": 0.0, "kv_cache_usage": 0.1}
    scraper.latest = lambda: {"vllm:num_requests_running": 2, "vllm:kv_cache_usage_perc": 55.0}  # a percentage
    assert server_gauges(env, run) == {"available": True, "running": 2.0, "waiting": None, "kv_cache_usage": 0.55}

    snap = {"overall": {"e2e_ms": {"mean": 500.0, "count": 120}}, "window": {"seconds": 30.0}}
    assert in_flight(env, run, 8, snap) == {"value": None, "source": "unknown"}  # no run counting yet
    env.llm.context = SimpleNamespace(in_flight=17)
    assert in_flight(env, run, 64, snap) == {"value": 17.0, "source": "counted"}


# -- a real web-UI run -----------------------------------------------------------------------------------


def _get(url: str, timeout: float = 10.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read()


def _json(url: str):
    return json.loads(_get(url)[2])


def _wait(predicate, timeout: float, what: str, proc=None, log=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError):
            pass
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.5)
    tail = open(log).read()[-3000:] if log and os.path.exists(log) else ""
    pytest.fail(f"timed out waiting for {what}\n{tail}")


def start_group(*args: str, log_path: str) -> subprocess.Popen:
    """A Locust process in a session of its own, so that stop_group() also ends the workers that
    --processes forks (they would otherwise outlive a master that dies)."""
    out = open(log_path, "w")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [*LOCUST, *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env
    )


def stop_group(proc: subprocess.Popen, timeout: float = 60) -> None:
    """SIGTERM to this process's own session (Locust shuts down cleanly), then SIGKILL to whatever
    of it is left."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


def _status(url: str) -> int:
    try:
        return _get(url)[0]
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.process
def test_web_ui_run_with_processes_serves_the_records(tmp_path):
    """A web-UI run with --processes 2 (master + 2 forked workers, records shipped every 3 s, open
    streams with every report): the LLM view's live numbers come from the merged records and the
    workers' open streams, and after the run it shows the run's summary.json; the results folder
    and report are those of a headless run, served under /llm/report/."""
    port, master_port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    results = tmp_path / "results"
    log = str(tmp_path / "master.log")
    proc = start_group(
        "--processes",
        "2",
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        str(master_port),
        "--master-host",
        "127.0.0.1",
        "--master-port",
        str(master_port),
        "--autostart",
        "--autoquit",
        "60",
        "-u",
        "6",
        "-r",
        "6",
        "-t",
        "16s",
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(port),
        "--sim-profile",
        "fixed",
        "--max-tokens-override",
        "300",
        "--slo",
        "ttft.p95<2s",
        "--results-dir",
        str(results),
        "--run-id",
        "ui",
        "--stop-timeout",
        "10",
        log_path=log,
    )
    try:
        # the start form carries the suite's options with their defaults, grouped for a ramp tester
        index = _wait(lambda: _get(base + "/")[2].decode(), 60, "the web UI", proc, log)
        args = json.loads(re.search(r"window.templateArgs = (\{.*\})", index).group(1))
        extra = args["extra_options"]
        for name, default in (
            ("model", ""),
            ("workload", ""),
            ("slo", "ttft.p95<2s"),
            ("endpoint", "chat"),
            ("max_tokens_override", "300"),
            ("warmup", "0s"),
            ("steps", ""),
        ):
            assert extra[name]["default_value"] == default, name
        assert list(extra)[:4] == ["model", "sim_profile", "endpoint", "workload"]
        assert {"title": "LLM", "key": "llm"} in args["extended_tabs"]
        assert any(t["key"] == "llm" for t in args["extended_tables"])
        assert (
            "llm-view-link" in index and "/llm" in index and "llm-charts-note" in index and "llm-form-groups" in index
        )

        # replies of 6 s: tokens and first tokens show while every request is still open
        live = _wait(
            lambda: (
                lambda d: (
                    d
                    if d["seq"]
                    and d["overall"]["throughput"]["output_tokens_per_s"]
                    and d["users"] == 6
                    and d["in_flight"]["streams"]
                    else None
                )
            )(_json(base + "/llm/stats?window=5")),
            60,
            "live LLM statistics",
            proc,
            log,
        )
        assert live["state"] in ("running", "spawning") and live["workers"] == 2 and live["window_s"] == 5.0
        assert (
            live["overall"]["ttft_ms"]["p95"] > 0
            and live["overall"]["open_streams"]["counted"] == live["in_flight"]["streams"]
        )
        assert live["run"]["id"] == "ui" and live["run"]["slo"] == ["ttft.p95<2s"] and live["run"]["report_url"] is None
        assert live["windows"] == [5.0, 10.0, 30.0, 60.0] and live["summary"] is None
        # a retained snapshot answers by number, the same as it was, in any window
        again = _json(f"{base}/llm/stats?seq={live['seq']}&history=0&window=5")
        assert again["overall"] == live["overall"] and again["window"] == live["window"]
        wide = _json(f"{base}/llm/stats?seq={live['seq']}&history=0&window=30")
        assert wide["window"]["length_s"] == 30.0 and wide["window"]["end"] == live["window"]["end"]
        assert _status(f"{base}/llm/stats?seq=999999") == 404
        # the LLM tab's rows ride on Locust's /stats/requests
        tab = _wait(
            lambda: [e for e in _json(base + "/stats/requests")["extended_stats"] if e["key"] == "llm"][0]["data"],
            30,
            "the LLM tab's rows",
            proc,
            log,
        )
        # text as the report writes it: TTFT in whole ms, TPOT to 0.1 ms, tokens/s whole, thousands separated
        assert (
            tab[-1]["name"] == "All" and re.fullmatch(r"[1-9][\d,]*", tab[-1]["ttft_p95"]) and tab[-1]["users"] == "6"
        )
        assert tab[-1]["in_flight"] != "-"
        seq = int(re.search(r"#(\d+)", tab[-1]["updated"]).group(1))
        try:
            snap = _json(f"{base}/llm/stats?seq={seq}&history=0")
            assert tab[-1]["ttft_p95"] == f"{snap['overall']['ttft_ms']['p95']:,.0f}"
            tpot = snap["overall"]["tpot_ms"]["p95"]  # None while no request has ended
            assert tab[-1]["tpot_p95"] == ("-" if tpot is None else f"{tpot:,.1f}")
            assert tab[-1]["out_tok_s"] == f"{snap['overall']['throughput']['output_tokens_per_s']:,.0f}"
        except urllib.error.HTTPError:
            pass  # only on a very slow machine: that snapshot is gone already
        page = _get(base + "/llm")[2].decode()
        assert not re.search(r'<script[^>]+src=|<link[^>]+href="(?!data:)', page)  # nothing fetched (an inline icon)
        assert set(re.findall(r"https?://[^\s\"'<>]+", page)) <= {
            "http://www.w3.org/2000/svg"
        }  # offline: nothing fetched

        final = _wait(
            lambda: (lambda d: d if d["summary"] and d["run"]["report_url"] else None)(_json(base + "/llm/stats")),
            120,
            "the end of the run and its report",
            proc,
            log,
        )
        history = final.pop("history")
        assert len(history) >= 4 and [p["seq"] for p in history] == sorted(p["seq"] for p in history)
        assert all(p["users"] is not None and "ttft_p95_ms" in p for p in history)
        assert max(p["users"] for p in history) == 6
        assert final["final"] and final["in_flight"]["value"] == 0
        # the report and the results folder
        status, ctype, body = _get(base + final["run"]["report_url"])
        assert status == 200 and ctype.startswith("text/html") and b"<html" in body.lower()
        assert final["run"]["results_path"] == str(results / "ui")
        assert _get(base + final["run"]["summary_url"])[0] == 200
        assert _get(base + "/llm/report/latest")[2] == body  # redirect to the latest run's report
        for bad in (
            "/llm/report/..%2F..%2Fetc%2Fpasswd",
            "/llm/report/ui/..%2Frun.json",
            "/llm/report/ui/requests.parquet",
            "/llm/report/nope",
            "/llm/report/ui/%2Fetc%2Fpasswd",
            "/llm/report/..",
            "/llm/report/ui/..%2F..%2Fui%2Freport.html",
        ):
            assert _status(base + bad) == 404, bad
        tab = [e for e in _json(base + "/stats/requests")["extended_stats"] if e["key"] == "llm"][0]["data"]
    finally:
        stop_group(proc)
    # after the run the view is the run's summary.json, and so is the LLM tab
    summary = json.loads((results / "ui" / "summary.json").read_text())
    for key in ("window", "overall", "by_class", "slo", "records"):
        assert final["summary"][key] == summary[key], key
    assert (
        tab[-1]["updated"] == "run summary (ui)"
        and tab[-1]["ttft_p95"] == f"{summary['overall']['ttft_ms']['p95']:,.0f}"
    )
    assert tab[-1]["ended"] == f"{summary['overall']['requests']['sent']:,}"


@pytest.mark.process
def test_local_web_ui_run_shows_tokens_before_any_request_ended(tmp_path):
    """One local process with the web UI (no workers): replies take 6 s, and the view shows
    tokens/s, TTFT and the open streams while no request has ended yet."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = str(tmp_path / "local.log")
    proc = start_group(
        "--autostart",
        "--autoquit",
        "30",
        "-u",
        "4",
        "-r",
        "4",
        "-t",
        "10s",
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(port),
        "--sim-profile",
        "fixed",
        "--max-tokens-override",
        "300",
        "--results-dir",
        str(tmp_path / "results"),
        "--stop-timeout",
        "5",
        log_path=log,
    )
    try:
        live = _wait(
            lambda: (
                lambda d: (
                    d
                    if d["seq"]
                    and d["totals"]["records"] == 0
                    and d["users"] == 4
                    and d["overall"]["throughput"]["output_tokens_per_s"]
                    else None
                )
            )(_json(base + "/llm/stats?window=5")),
            60,
            "tokens/s before the first request ended",
            proc,
            log,
        )
        assert live["workers"] is None and live["in_flight"]["streams"] == 4 and live["in_flight"]["value"] == 4
        o = live["overall"]
        assert o["requests"]["ended"] == 0 and o["ttft_ms"]["count"] >= 1 and 90 <= o["ttft_ms"]["p50"] <= 200
        assert (
            o["open_streams"]["counted"] == 4 and o["throughput"]["output_tokens_per_s"] > 50
        )  # 4 streams of 50 tokens/s
    finally:
        stop_group(proc)


@pytest.mark.process
def test_a_form_runs_report_says_what_ran_not_the_command_line(tmp_path):
    """A web UI process started with --steps 1,9 --step-time 30s; the form runs 2 users for 3 s
    without steps, 5 tokens a reply. run.json's argv and the report's row say the form's settings,
    labelled as such (they said the process's command line, with the steps that did not run)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = str(tmp_path / "local.log")
    proc = start_group(
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(port),
        "--sim-profile",
        "fixed",
        "--steps",
        "1,9",
        "--step-time",
        "30s",
        "--results-dir",
        str(tmp_path / "results"),
        "--stop-timeout",
        "5",
        log_path=log,
    )
    try:
        _wait(lambda: _json(base + "/stats/requests")["state"] == "ready", 60, "the web UI", proc, log)
        form = urllib.parse.urlencode(
            {
                "user_count": 2,
                "spawn_rate": 2,
                "run_time": "3s",
                "steps": "",
                "max_tokens_override": "5",
                "slo": "ttft.p95<2s",
            }
        ).encode()
        with urllib.request.urlopen(urllib.request.Request(base + "/swarm", data=form), timeout=30) as r:
            answer = json.loads(r.read())
        assert answer["success"], answer
        folder = _wait(
            lambda: next(iter(glob.glob(str(tmp_path / "results" / "*" / "report.html"))), None),
            60,
            "the report",
            proc,
            log,
        )
    finally:
        stop_group(proc)
    run = json.load(open(os.path.join(os.path.dirname(folder), "run.json")))
    assert run["started_from"] == "web form" and run["plan"]["load"]["kind"] == "closed"
    argv = run["argv"]
    assert argv[:6] == ["-u", "2", "-r", "2", "-t", "3s"] and "--steps" not in argv and "--step-time" in argv, argv
    assert argv[argv.index("--max-tokens-override") + 1] == "5" and argv[argv.index("--sim-profile") + 1] == "fixed", (
        argv
    )
    assert argv[argv.index("--slo") + 1] == "ttft.p95<2s" and "--web-port" not in argv, argv
    # the target was the built-in simulator: the options start one again (its address dies with this process)
    assert "--host" not in argv and run["host"].startswith("http://127.0.0.1:"), argv
    html = open(folder, encoding="utf-8").read()
    assert "web form settings" in html and html_escape(" ".join(argv)) in html


@pytest.mark.process
def test_workers_are_ready_for_the_next_start_soon_after_a_stop(tmp_path):
    """Locust's worker waits --stop-timeout after every stop before it tells the master it is ready
    (30 s by default here): a Start pressed after a Stop in the web UI waited that long for its
    workers. The suite's workers say so once their users have stopped and their records are sent;
    the second run gets the same workers and the stop timeout back."""
    port, master_port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    log = str(tmp_path / "master.log")
    proc = start_group(
        "--processes",
        "2",
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        str(master_port),
        "--master-host",
        "127.0.0.1",
        "--master-port",
        str(master_port),
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(port),
        "--sim-profile",
        "fixed",
        "--max-tokens-override",
        "20",
        "--stop-timeout",
        "30",
        "--results-dir",
        str(tmp_path / "results"),
        log_path=log,
    )

    def workers(state: str):
        report = _json(base + "/stats/requests")
        return report if [w["state"] for w in report["workers"]] == [state, state] else None

    def swarm():
        form = urllib.parse.urlencode({"user_count": 4, "spawn_rate": 4}).encode()
        with urllib.request.urlopen(urllib.request.Request(base + "/swarm", data=form), timeout=30) as r:
            answer = json.loads(r.read())
        assert answer["success"], answer

    try:
        _wait(lambda: workers("ready"), 60, "two ready workers", proc, log)
        for run in (1, 2):
            swarm()
            _wait(
                lambda: (lambda r: r if r and r["user_count"] == 4 else None)(workers("running")),
                30,
                f"run {run} running",
                proc,
                log,
            )
            time.sleep(3)  # some requests of 20 tokens (about 0.5 s each) end, some are in flight
            urllib.request.urlopen(urllib.request.Request(base + "/stop", data=b"", method="POST"), timeout=60).read()
            t_stop = time.monotonic()
            _wait(lambda: workers("ready"), 40, f"the workers ready after run {run}", proc, log)
            ready_s = time.monotonic() - t_stop
            assert ready_s < 10, f"run {run}: the workers were ready {ready_s:.1f} s after the stop (--stop-timeout 30)"
    finally:
        stop_group(proc)
    text = open(log).read()
    assert "Traceback" not in text, text[-3000:]
