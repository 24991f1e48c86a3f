"""Trace replay (`--replay`, `--time-scale`): trace parsing, the split across processes, option
checks, and end to end: imported prompts sent verbatim at their (scaled) times, the run ending with
the trace, and a 30 s trace at ~20 requests/s over two workers on one clock with its schedule lag."""

from __future__ import annotations

import json
import os
import random
import time

import numpy as np
import pytest
from locust import argument_parser

from core.errors import InputError
from plugin.options import add_arguments
from plugin.plan import RunPlan
from shapes.arrivals import START_DELAY_S
from shapes.replay import ReplaySchedule, load_trace
from tests.helpers import master_and_workers, read_results, run_locust, simulator, stop
from tests.test_sessions import CaptureServer
from workloads.__main__ import main as workloads_cli

pytestmark = pytest.mark.timing  # arrival and schedule timings: tests/conftest.py


def write_trace(path, rows, header=None):
    with open(path, "w", encoding="utf-8") as f:
        if header is not None:
            f.write(json.dumps({"trace": header}) + "\n")
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return str(path)


# ------------------------------------------------------------------------------------ traces


def test_trace_with_library_ids_inline_text_and_messages(tmp_path):
    lib = tmp_path / "lib.jsonl"
    lib.write_text(
        json.dumps({"kind": "system", "domain": "d", "lang": "en", "text": "Be brief. ", "id": "s1"})
        + "\n"
        + json.dumps(
            {
                "kind": "prompt",
                "domain": "d",
                "lang": "en",
                "text": " Why? ",
                "id": "p1",
                "system": "s1",
                "history": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
            }
        )
        + "\n",
        encoding="utf-8",
    )
    path = write_trace(
        tmp_path / "t.jsonl",
        [
            {"t": 2.0, "class": "short", "prompt": "p1", "max_tokens": 7},
            {"t": 0.5, "text": "inline", "system": "sys"},
            {
                "t": 1.0,
                "class": "chat",
                "messages": [
                    {"role": "system", "content": "S"},
                    {"role": "user", "content": "a"},
                    {"role": "assistant", "content": "b"},
                    {"role": "user", "content": "c"},
                ],
                "max_tokens": 3,
            },
        ],
        header={"templates": "lib.jsonl"},
    )
    tr = load_trace(path)
    assert tr.times == (0.5, 1.0, 2.0) and tr.duration_s == 2.0
    inline, chat, logged = tr.requests
    assert (inline.request_class, inline.system, inline.user, inline.max_tokens) == ("replay", "sys", "inline", 256)
    assert chat.messages() == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    # a logged prompt is exactly as logged: whitespace kept, system prompt and history with it
    assert logged.messages() == [
        {"role": "system", "content": "Be brief. "},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": " Why? "},
    ]
    assert logged.input_chars == len("Be brief. ") + 2 + 5 + len(" Why? ") and logged.max_tokens == 7
    assert tr.rate(1.0) == pytest.approx(1.5) and tr.rate(0.5) == pytest.approx(3.0)  # at least over 1 s
    assert load_trace(path) is tr  # cached while unchanged


@pytest.mark.parametrize(
    "rows,needle",
    [
        ([], "holds no requests"),
        (["{bad"], "line 1: malformed JSON"),
        ([{"t": -1, "text": "x"}], "t must be seconds"),
        ([{"t": 1, "text": "x", "max_tokens": 0}], "max_tokens"),
        ([{"t": 1}], "needs prompt"),
        ([{"t": 1, "prompt": "p9"}], "no template library"),
        ([{"t": 1, "messages": [{"role": "assistant", "content": "x"}]}], "last message must be the user's"),
    ],
)
def test_bad_traces(tmp_path, rows, needle):
    with pytest.raises(InputError) as ei:
        load_trace(write_trace(tmp_path / "t.jsonl", rows))
    assert needle in str(ei.value) and "\n" not in str(ei.value)


def test_schedule_splits_by_index_on_one_clock(tmp_path):
    rows = [{"t": i * 0.1, "text": f"q{i}", "max_tokens": 1} for i in range(25)]
    tr = load_trace(write_trace(tmp_path / "t.jsonl", rows))
    t0 = 1000.0
    shares = [ReplaySchedule(tr, 0.5, 3, i, t0) for i in range(3)]
    got = []
    for s in shares:
        while (item := s.take()) is not None:
            got.append(item)
    assert len(got) == 25 and sorted(r.user for _, r in got) == sorted(f"q{i}" for i in range(25))
    assert [r.user for r in shares[1].requests] == [f"q{i}" for i in range(1, 25, 3)]
    times = sorted(t for t, _ in got)
    assert np.allclose(times, t0 + START_DELAY_S + np.arange(25) * 0.05)  # start + 1 s + t x scale
    assert len(ReplaySchedule(tr, 1.0, 30, 29, t0)) == 0  # more processes than requests


def parse(*args):
    p = argument_parser.get_parser()
    if "--replay" not in p._option_string_actions:  # a loaded locustfile's listener may have added them
        add_arguments(p)
    return p.parse_args(["-f", "locustfile.py", *args])


def test_replay_options(tmp_path):
    path = write_trace(tmp_path / "t.jsonl", [{"t": t, "text": "x"} for t in (0, 10, 20)])
    s = RunPlan.from_options(parse("--replay", path, "--time-scale", "0.5", "--max-concurrency", "8"))
    assert s.replay == path and s.load.kind == "replay" and s.load.time_scale == 0.5 and s.load.max_concurrency == 8
    assert s.request_rate == pytest.approx(3 / 10)  # the trace's mean rate: open loop everywhere else
    for args, needle in (
        (("--replay", path, "--request-rate", "5"), "drop --request-rate"),
        (("--replay", path, "--steps", "1,2"), "--steps"),
        (("--time-scale", "2"), "only applies with --replay"),
        (("--replay", path, "--time-scale", "0"), "--time-scale"),
        (("--replay", str(tmp_path / "missing.jsonl")), "trace file not found"),
    ):
        with pytest.raises(InputError) as ei:
            RunPlan.from_options(parse(*args))
        assert needle in str(ei.value), (args, str(ei.value))


# ------------------------------------------------------------------------------------ end to end


@pytest.mark.process
def test_replay_sends_logged_prompts_verbatim_at_scaled_times_and_ends_with_the_trace(tmp_path):
    log = tmp_path / "log.jsonl"
    with open(log, "w", encoding="utf-8") as f:
        for i in range(30):
            msgs = (
                ([{"role": "system", "content": "  Keep it short.\n"}] if i % 3 == 0 else [])
                + (
                    [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "reply"}]
                    if i % 5 == 0
                    else []
                )
                + [{"role": "user", "content": f" question {i} " + "x" * (i * 7)}]
            )
            f.write(
                json.dumps(
                    {"timestamp": 1_700_000_000 + i * 0.2, "messages": msgs, "usage": {"completion_tokens": 2 + i % 4}}
                )
                + "\n"
            )
    assert workloads_cli(["import", str(log), "--out", str(tmp_path / "imp")]) == 0
    trace = str(tmp_path / "imp" / "trace.jsonl")
    with CaptureServer() as srv:
        t0 = time.monotonic()
        proc = run_locust(
            "--host",
            srv.url,
            "--model",
            "capture",
            "--replay",
            trace,
            "--time-scale",
            "0.5",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "rp",
            "--stop-timeout",
            "5",
            timeout=120,
        )
        took = time.monotonic() - t0
        bodies = dict(srv.bodies)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "replay: all 30 requests of the trace were sent" in proc.stderr
    assert took < 60  # no -t: the run ended with the trace (3 s of it at double speed)
    df, summary = read_results(str(tmp_path), "rp")
    assert len(df) == 30 and df["ok"].all()
    logged = [json.loads(x) for x in log.read_text(encoding="utf-8").splitlines()]
    sent = sorted((bodies[r]["messages"] for r in df.sort_values("t_intended")["request_id"]), key=json.dumps)
    assert sent == sorted((r["messages"] for r in logged), key=json.dumps)  # verbatim, whitespace and all
    by_time = df.sort_values("t_intended")
    rel = by_time["t_intended"].to_numpy() - by_time["t_intended"].iloc[0]
    assert np.allclose(rel, np.arange(30) * 0.2 * 0.5, atol=1e-6)  # logged times, twice as fast
    assert list(by_time["max_tokens"]) == [2 + i % 4 for i in range(30)]
    ol = summary["open_loop"]
    assert ol["target_rate"] == pytest.approx(30 / (29 * 0.2 * 0.5))
    assert ol["scheduled"] == ol["sent"] == 30, ol  # every arrival due was sent (the first at the window's start)
    assert summary["overall"]["schedule_lag_ms"]["count"] == 30
    assert set(df["request_class"]) <= {"short", "medium", "long"}


@pytest.mark.process
def test_replay_is_cut_by_run_time(tmp_path):
    path = write_trace(tmp_path / "t.jsonl", [{"t": i * 0.5, "text": f"q{i}", "max_tokens": 2} for i in range(60)])
    with CaptureServer() as srv:
        proc = run_locust(
            "--host",
            srv.url,
            "--model",
            "capture",
            "--replay",
            path,
            "-t",
            "4s",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "cut",
            "--stop-timeout",
            "5",
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, _ = read_results(str(tmp_path), "cut")
    assert 3 <= len(df) <= 12, len(df)  # about 3 s of a 30 s trace at 2 requests/s


@pytest.mark.process
def test_two_workers_replay_a_trace_on_one_clock(tmp_path):
    """A 30 s trace at ~20 requests/s (Poisson, ~600 requests) over two workers: each request
    once, request i by process i mod 2, at its logged time; P99 schedule lag under 50 ms (a
    generous bound for a shared CI machine; the quiet-machine figure is in bench/RESULTS.md
    "Replay"). When the machine was overloaded meanwhile (1-minute load above its cores), other
    processes' bursts delay sends on every worker at once, and only P95 < 50 ms and P99 < 500 ms
    are asserted. The trace begins 3 s in, so the workers' own start (options arrive with the
    spawn message) is not measured."""
    rng = random.Random(8)
    t, rows = 3.0, []
    while t < 33.0:
        rows.append(
            {
                "t": round(t, 6),
                "class": rng.choice(["short", "long"]),
                "text": f"q{len(rows)} " + "x" * rng.randint(5, 300),
                "max_tokens": rng.randint(2, 6),
            }
        )
        t += rng.expovariate(20.0)
    path = write_trace(tmp_path / "t.jsonl", rows)
    n = len(rows)
    with simulator("--profile", "fixed") as url:
        with master_and_workers(
            "--host",
            url,
            "--replay",
            path,
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "rp2",
            "--stop-timeout",
            "10",
            expect_workers=2,
            log_path=str(tmp_path / "master.log"),
            worker_logs=[None] * 2,
        ) as run:
            assert stop(run.master, timeout=180) == 0, (tmp_path / "master.log").read_text()[-3000:]
    log = (tmp_path / "master.log").read_text()
    assert "every worker sent its share of the trace" in log
    df, summary = read_results(str(tmp_path), "rp2")
    assert len(df) == n and df["ok"].all() and df["request_id"].is_unique
    df = df.sort_values("t_intended")
    rel = df["t_intended"].to_numpy() - df["t_intended"].iloc[0]
    assert np.allclose(
        rel, np.array([r["t"] for r in rows]) - rows[0]["t"], atol=1e-6
    )  # one clock (core/clock.py: each process within 0.25 µs)
    workers = df["worker"].to_numpy()
    assert len(set(workers)) == 2 and (workers[::2] == workers[0]).all() and (workers[1::2] != workers[0]).all()
    lag = summary["overall"]["schedule_lag_ms"]
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    print(
        f"replay schedule lag ms: p50 {lag['p50']:.2f} p95 {lag['p95']:.2f} p99 {lag['p99']:.2f} "
        f"max {lag['max']:.2f} (n {lag['count']}, 1-min load {load:.1f} on {cores} cores)"
    )
    assert lag["p50"] < 10, lag
    if load <= cores:
        assert lag["p99"] < 50, lag
    else:
        assert lag["p95"] < 50 and lag["p99"] < 500, lag
    ol = summary["open_loop"]
    assert ol["target_rate"] == pytest.approx(n / rows[-1]["t"])
    assert abs(ol["sent_per_s"] / ol["target_rate"] - 1) < 0.1, ol
