"""sweeps/ and the statistics it uses (stats/rounds.py, stats/sequential.py, stats/student_t.py):
the grid and template checks, the ranking's verdicts, a real sweep on the built-in simulator (its
table, ranking and report against the truth logs, then resumed), failed points classified while
the sweep goes on, and the A/B's difference over rounds (synthetic, then a real one)."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from core.errors import InputError
from stats.rounds import BETTER, NO_DIFFERENCE, WORSE, bracket_difference, rounds_difference
from stats.sequential import BUDGET, CONTINUE, DECIDED, SMALL, SequentialRule, fixed_rounds
from stats.student_t import t_critical
from sweeps.charts import pareto, pareto_front, point_labels
from sweeps.cli import main
from sweeps.grid import build_grid, check_template, parse_param, points
from sweeps.ranking import EXIT_BEST, EXIT_NO_DIFFERENCE, EXIT_NONE, rank
from sweeps.ranking import NO_DIFFERENCE as RANK_NO_DIFFERENCE
from sweeps.server_metrics import fill_server_metrics
from tests.helpers import ROOT, read_truth

PY = sys.executable
SWEEPS = [PY, "-m", "sweeps"]
# a short fixed load: replies of 8-16 tokens so each run drains in a second
SHORT = ["-u", "8", "-r", "8", "-t", "4s", "--max-tokens-override", "16", "--stop-timeout", "5"]


# --------------------------------------------------------------------------------------- the grid


@pytest.mark.parametrize(
    "text, words",
    [
        ("max_num_seqs", "no '='"),
        ("max num=1", "not a parameter name"),
        ("x=", "an empty value"),
        ("x=1,,2", "an empty value"),
        ("x=1,1", "given twice"),
        ("port=1,2", "free port the suite picks"),
    ],
)
def test_a_bad_param_is_one_line_naming_it(text, words):
    with pytest.raises(InputError, match=words) as e:
        parse_param(text)
    assert "--param" in str(e.value) and "\n" not in str(e.value)


def test_points_are_every_combination_with_values_read_as_yaml():
    grid = build_grid(["max_num_seqs=64,128", "enable_prefix_caching=true,false"])
    pts = points(grid)
    assert [p.texts for p in pts] == [
        {"max_num_seqs": "64", "enable_prefix_caching": "true"},
        {"max_num_seqs": "64", "enable_prefix_caching": "false"},
        {"max_num_seqs": "128", "enable_prefix_caching": "true"},
        {"max_num_seqs": "128", "enable_prefix_caching": "false"},
    ]
    assert pts[0].values == {"max_num_seqs": 64, "enable_prefix_caching": True}
    assert len({p.name for p in pts}) == 4
    with pytest.raises(InputError, match="given twice"):
        build_grid(["x=1", "x=2"])


def test_a_grid_file_is_read_like_params(tmp_path):
    f = tmp_path / "grid.yaml"
    f.write_text("max_num_seqs: [64, 128]\nenable_prefix_caching: [true, false]\n")
    assert build_grid([], str(f)) == {"max_num_seqs": ["64", "128"], "enable_prefix_caching": ["true", "false"]}
    f.write_text("- 1\n")
    with pytest.raises(InputError, match="--grid"):
        build_grid([], str(f))


@pytest.mark.parametrize(
    "template, grid, words",
    [
        (
            "vllm serve M --port {port} --max-num-seqs {max_num_seqs}",
            {},
            "names {max_num_seqs} but the grid has no parameter",
        ),
        ("vllm serve M --port {port}", {"max_num_seqs": ["64"]}, "never uses {max_num_seqs}"),
        ("vllm serve M --max-num-seqs {max_num_seqs}", {"max_num_seqs": ["64"]}, "no {port}"),
        ("vllm serve M --port {port} {x:>3}", {"x": ["1"]}, "not a parameter field"),
        ("vllm serve M --port {port", {}, "braces do not match"),
    ],
)
def test_a_template_and_grid_that_disagree_are_one_line(template, grid, words):
    with pytest.raises(InputError, match=words) as e:
        check_template(template, grid)
    assert "\n" not in str(e.value)


def test_bad_input_is_refused_before_anything_starts(capsys, tmp_path):
    """From the command line: exit 2 with one line, and no folder made."""
    out = str(tmp_path / "sweep")
    cases = [
        (["run", "--param", "max_num_seq=64,128", "--out", out, "--", "-t", "5s"], "max_num_seq: unknown field"),
        (["run", "--param", "max_num_seqs=0", "--out", out, "--", "-t", "5s"], "max_num_seqs"),
        (["run", "--param", "x=1", "--server", "srv --port {port} --y {y}", "--out", out], "grid has no parameter y"),
        (["run", "--param", "max_num_seqs=64", "--out", out, "--", "--host", "http://x"], "the sweep sets it"),
        (["run", "--param", "max_num_seqs=64", "--rank", "speed", "--out", out], "no such ranking"),
        (["ab", "--a-set", "max_num_seqs=64", "--out", out], "exactly one way to run B"),
        (["ab", "--a-set", "max_num_seqs=64", "--b-set", "max_num_seqs=64,128", "--out", out], "one value"),
        (["ab", "--a-url", "http://127.0.0.1:1", "--b-server", "srv", "--out", out], "no {port}"),
    ]
    for argv, words in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert words in err and len(err.splitlines()) == 1, (argv, err)
    assert not os.path.exists(out)


def test_dry_run_prints_every_points_commands(capsys, tmp_path):
    assert (
        main(["run", "--param", "max_num_seqs=64,128,256", "--out", str(tmp_path / "s"), "--dry-run", "--", "-t", "5s"])
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("  server: ") == 3 and out.count("  load:   ") == 3
    assert "point 3/3 max_num_seqs=256" in out and "--run-id run" in out and "-t 5s" in out
    assert not os.path.exists(tmp_path / "s")


def test_server_metrics_auto_is_each_points_own_server():
    url = "http://127.0.0.1:40123"
    assert fill_server_metrics(["-u", "8", "--server-metrics", "auto"], url) == [
        "-u",
        "8",
        "--server-metrics",
        "http://127.0.0.1:40123/metrics",
    ]
    gpu = "http://gpu-box:9400/metrics"
    assert fill_server_metrics([f"--server-metrics=auto,{gpu}"], url + "/") == [f"--server-metrics={url}/metrics,{gpu}"]
    assert fill_server_metrics(["--server-metrics", gpu, "--tags", "auto"], url) == [
        "--server-metrics",
        gpu,
        "--tags",
        "auto",
    ]


# ------------------------------------------------------------------------------------ the ranking


def _row(i, value, lo, hi, status="done"):
    return {
        "index": i,
        "point": f"p{i}",
        "label": f"p{i}",
        "status": status,
        "capacity": value,
        "capacity_lo": lo,
        "capacity_hi": hi,
        "throughput": value,
        "throughput_lo": lo,
        "throughput_hi": hi,
        "slo_state": "met",
    }


def test_overlapping_intervals_are_no_difference_measured():
    rows = [_row(1, 100.0, 80.0, 120.0), _row(2, 110.0, 95.0, 125.0), _row(3, 50.0, 40.0, 60.0)]
    r = rank(rows, "throughput")
    assert r["best"]["point"] == "p2" and r["runner_up"]["point"] == "p1"
    assert r["verdict"] == RANK_NO_DIFFERENCE and r["exit_code"] == EXIT_NO_DIFFERENCE
    assert r["margin"] == pytest.approx(10.0) and "no difference measured" in r["sentence"]
    rows[0].update(throughput=70.0, throughput_lo=60.0, throughput_hi=90.0)
    r = rank(rows, "throughput")
    assert r["verdict"] == "best" and r["exit_code"] == EXIT_BEST and r["margin"] == pytest.approx(40.0)
    assert "beyond both intervals" in r["sentence"]


def test_capacity_intervals_are_met_to_missed_and_failed_points_are_not_ranked():
    # met at 144 where the other missed: above it, though [128, 144) and [144, 160) touch
    rows = [_row(1, 128, 128, 144), _row(2, 144, 144, 160), _row(3, 999, 999, None, status="exited")]
    r = rank(rows, "capacity")
    assert r["best"]["point"] == "p2" and r["verdict"] == "best"
    # no level missed: unbounded above, it overlaps anything above its level
    rows = [_row(1, 128, 128, None), _row(2, 144, 144, None)]
    assert rank(rows, "capacity")["verdict"] == RANK_NO_DIFFERENCE
    assert rank([_row(1, None, None, None)], "capacity")["exit_code"] == EXIT_NONE
    assert rank(rows, "auto")["ranking"] == "capacity"


def test_the_pareto_front_is_the_points_nothing_beats_on_both():
    ttft = np.array([100.0, 200.0, 150.0, 300.0, math.nan])
    tput = np.array([10.0, 30.0, 5.0, 30.0, 50.0])
    assert pareto_front(ttft, tput) == [0, 1]  # 2 is beaten by 0, 3 by 1; 4 has no TTFT


def test_the_pareto_chart_labels_points_by_their_values_in_their_order_and_inside_the_chart():
    # a grid of one setting: the chart names it once and labels the points by their values
    assert point_labels(["cb_max_batch_tokens=256", "cb_max_batch_tokens=1024"]) == (
        ["256", "1024"],
        "cb_max_batch_tokens",
    )
    assert point_labels(["a=1, b=2", "a=1, b=3"])[1] == ""  # two settings: labels as they are
    # the H100 sweep's three points: two markers 6 px apart at ~350 ms, one far right
    labels = ["cb_max_batch_tokens=256", "cb_max_batch_tokens=1024", "cb_max_batch_tokens=4096"]
    ttft, lo, hi = [6186.0, 352.0, 354.0], [4541.0, 333.0, 318.0], [6866.0, 386.0, 495.0]
    tput, tlo, thi = [1413.0, 1316.0, 1376.0], [1262.0, 1216.0, 1257.0], [1573.0, 1421.0, 1511.0]
    svg = pareto("p", "t", "P95 TTFT (ms)", "tok/s", labels, ttft, lo, hi, tput, tlo, thi)
    root = ET.fromstring(svg)
    texts = {t.text: t for t in root.iter("{http://www.w3.org/2000/svg}text") if t.text in ("256", "1024", "4096")}
    assert set(texts) == {"256", "1024", "4096"} and "points labelled by cb_max_batch_tokens" in svg
    y = {k: float(t.get("y")) for k, t in texts.items()}
    assert y["4096"] < y["1024"] and y["1024"] - y["4096"] >= 12  # the higher marker's label above, apart
    width = float(root.get("width"))
    for t in texts.values():  # nothing runs past the right edge
        x, n = float(t.get("x")), len(t.text) * 6.6
        assert (x + n if t.get("text-anchor") == "start" else x) <= width


# --------------------------------------------------------------------- the A/B's statistics (pure)


def test_student_t_critical_values():
    for df, c95 in ((1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (120, 1.980)):
        assert t_critical(0.95, df) == pytest.approx(c95, abs=1e-3)
    assert t_critical(0.99, 3) == pytest.approx(5.841, abs=1e-3)


def test_rounds_difference_on_synthetic_replicates():
    rng = np.random.default_rng(7)
    # A/A: both sides drawn from one distribution: the interval holds 0
    a_reps = [1000 + 30 * rng.standard_normal(1000) for _ in range(4)]
    b_reps = [1000 + 30 * rng.standard_normal(1000) for _ in range(4)]
    d = rounds_difference([1000, 1010, 995, 1002], [1003, 998, 1001, 1006], False, 0.95, a_reps, b_reps)
    assert d.verdict == NO_DIFFERENCE and d.lo < 0 < d.hi
    # the within-run half-width: replicates of the mean of 4 differences of sd 30 -> sd 30*sqrt(2)/2
    assert d.within == pytest.approx(1.96 * 30 * math.sqrt(2) / 2, rel=0.1)
    assert d.half_width == max(d.within, d.between) and d.detectable_pct == pytest.approx(d.half_width / d.a * 100)
    # B 20 % slower on a latency: worse; 20 % more tokens/s: better
    b_slow = [r * 1.2 for r in a_reps]
    d = rounds_difference([1000] * 4, [1200] * 4, False, 0.95, a_reps, b_slow)
    assert d.verdict == WORSE and d.diff == pytest.approx(200) and d.lo > 0
    assert rounds_difference([1000] * 4, [1200] * 4, True, 0.95, a_reps, b_slow).verdict == BETTER


def test_rounds_difference_between_rounds_only():
    """No replicates: the paired t interval, t(0.95, n-1) sd/sqrt(n)."""
    d = rounds_difference([10.0, 10.0, 10.0], [11.0, 12.0, 13.0], True, 0.95)
    assert d.diff == pytest.approx(2.0) and d.within is None
    assert d.half_width == pytest.approx(4.303 * 1.0 / math.sqrt(3), rel=1e-3)
    assert d.lo == pytest.approx(2 - 2.484, abs=1e-2) and d.verdict == NO_DIFFERENCE  # 2 +- 2.48 holds 0
    d = rounds_difference([10.0, 10.0, 10.0], [11.9, 12.0, 12.1], True, 0.95)
    assert d.verdict == BETTER and d.half_width == pytest.approx(4.303 * 0.1 / math.sqrt(3), rel=1e-3)


def test_bracket_difference_of_capacity_answers():
    a = [(128.0, 144.0), (128.0, 144.0)]
    b = [(144.0, 160.0), (160.0, 176.0)]
    lo, hi, v = bracket_difference(a, b)
    assert v == BETTER and lo == pytest.approx(8.0) and hi == pytest.approx(40.0)
    assert bracket_difference(a, [(128.0, 144.0), (144.0, 160.0)])[2] == NO_DIFFERENCE
    assert bracket_difference(b, a)[2] == WORSE


def test_the_sequential_rule():
    rule = SequentialRule(min_rounds=2, max_rounds=6, min_effect_pct=5.0, confidence=0.95)
    assert rule.looks == 5 and rule.look_confidence == pytest.approx(0.99)
    assert rule.decide(1, 10.0, 20.0) == CONTINUE  # before min_rounds, whatever it shows
    assert rule.decide(2, 10.0, 20.0) == DECIDED
    assert rule.decide(2, -20.0, -1.0) == DECIDED
    assert rule.decide(3, -3.0, 4.0) == SMALL
    assert rule.decide(3, -8.0, 4.0) == CONTINUE
    assert rule.decide(6, -8.0, 4.0) == BUDGET
    assert rule.decide(4, None, None) == CONTINUE
    # a capacity's bracket rule says "better" with an interval touching 0 (B met the level A missed)
    assert rule.decide(2, 0.0, 20.0, measured=True) == DECIDED and rule.decide(1, 0.0, 20.0, True) == CONTINUE
    fixed = fixed_rounds(3)
    assert fixed.look_confidence == pytest.approx(0.95) and fixed.decide(3, -1.0, 1.0) == BUDGET


# ------------------------------------------------------------------------------ real sweeps (process)


def sweeps(*args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run([*SWEEPS, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def mean_queue_s(truth: list[dict]) -> float:
    """How long requests waited in the engine's queue for a free sequence slot (the truth log's own)."""
    return float(np.mean([t["queue_time"] for t in truth]))


def truth_p95_ttft_ms(truth: list[dict]) -> float:
    return float(np.percentile([(t["first_token"] - t["arrival"]) * 1000 for t in truth if t["outcome"] == "ok"], 95))


@pytest.mark.process
def test_a_sweep_on_the_simulator_ranks_its_points_and_resumes(tmp_path):
    out = str(tmp_path / "sweep")
    # the first point alone, as if the sweep had been stopped after it
    load = [*SHORT, "--server-metrics", "auto", "--server-metrics-interval", "0.5s"]
    first = sweeps("run", "--param", "max_num_seqs=2", "--out", out, "--rank", "ttft", "--", *load)
    assert first.returncode == 0, first.stdout + first.stderr
    run_json = os.path.join(out, "points", "max_num_seqs-2", "run", "run.json")
    mtime = os.stat(run_json).st_mtime_ns
    r = sweeps("run", "--param", "max_num_seqs=2,64", "--out", out, "--rank", "ttft", "--", *load)
    assert "point 1/2 max_num_seqs=2: complete results folder, not run again" in r.stdout
    assert "point 2/2 max_num_seqs=64: server ready" in r.stdout and "left, estimated" in r.stdout
    assert os.stat(run_json).st_mtime_ns == mtime  # not run again
    table = json.load(open(os.path.join(out, "table.json")))
    rows = {p["settings"]["max_num_seqs"]: p for p in table["points"]}
    truth = {k: read_truth(os.path.join(out, "points", f"max_num_seqs-{k}", "truth.jsonl")) for k in ("2", "64")}
    # the setting reached the engine: 8 users' requests queue for 2 sequence slots, hardly for 64
    assert mean_queue_s(truth["2"]) > 3 * mean_queue_s(truth["64"])
    for k, row in rows.items():
        assert row["status"] == "done"
        assert row["requests"] == sum(t["outcome"] == "ok" for t in truth[k])  # every request the engine served
        assert row["ttft_p95_ms_lo"] <= row["ttft_p95_ms"] <= row["ttft_p95_ms_hi"]
        assert row["throughput_lo"] <= row["throughput"] <= row["throughput_hi"]
    # each point's own simulator was scraped (--server-metrics auto): of 8 closed-loop users on 2 slots at
    # most 6 wait, and more than on 64 slots (where only the step's prefill budget holds a few back); the
    # sweep's table carries it
    journal = [json.loads(x) for x in open(os.path.join(out, "journal.jsonl"))]
    urls = {e["point"]: e["url"] for e in journal if e["event"] == "server_ready"}
    for k in ("2", "64"):
        point = f"max_num_seqs-{k}"
        scraped = pd.read_parquet(os.path.join(out, "points", point, "run", "server_metrics.parquet"))
        assert set(scraped["source"]) == {urls[point] + "/metrics"}
    assert 2 < rows["2"]["waiting"] <= 6 and rows["64"]["waiting"] < rows["2"]["waiting"] - 1
    assert 0 < rows["2"]["kv_cache_peak"] <= 1
    # the ranking by P95 TTFT names the point the truth log says is faster, beyond both intervals
    assert truth_p95_ttft_ms(truth["64"]) < truth_p95_ttft_ms(truth["2"])
    assert table["ranking"]["best"]["label"] == "max_num_seqs=64" and table["ranking"]["verdict"] == "best"
    assert r.returncode == EXIT_BEST, r.stdout + r.stderr
    assert "best: max_num_seqs=64" in r.stdout
    csv = open(os.path.join(out, "table.csv")).read().splitlines()
    assert csv[0].startswith("max_num_seqs,index,point,status") and len(csv) == 3
    html = open(os.path.join(out, "report.html")).read()
    svgs = [ET.fromstring(m) for m in re.findall(r"<svg.*?</svg>", html, flags=re.S)]
    assert [s.get("data-chart") for s in svgs] == ["capacity", "pareto"]
    ns = "{http://www.w3.org/2000/svg}"
    pareto = svgs[1]
    assert len([e for e in pareto.iter(f"{ns}circle") if e.get("class") == "mark"]) == 2
    assert len([e for e in pareto.iter(f"{ns}line") if e.get("class") == "errorbar"]) == 4  # both intervals of both
    md = open(os.path.join(out, "report.md")).read()
    assert "best: max_num_seqs=64" in md and "| max_num_seqs=2 | done |" in md
    events = [json.loads(x)["event"] for x in open(os.path.join(out, "journal.jsonl"))]
    assert events.count("point_skipped") == 1 and events.count("server_ready") == 2 and events[-1] == "ranked"


FAKE_SERVER = textwrap.dedent(
    """
    import subprocess, sys, time
    mode, port = sys.argv[1], sys.argv[2]
    if mode == "exits":
        print("loading the model"); sys.exit(3)
    if mode == "hangs":
        time.sleep(60)
    if mode == "dies":  # serves for a few seconds, then its engine dies
        sim = subprocess.Popen([sys.executable, "-m", "simulator", "--port", port, "--profile", "fixed"])
        time.sleep(4)
        sim.terminate(); sim.wait()
        print("engine core died", flush=True); sys.exit(7)
    """
)


@pytest.mark.process
def test_points_whose_server_fails_are_recorded_and_the_sweep_goes_on(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(FAKE_SERVER)
    out = str(tmp_path / "sweep")
    r = sweeps(
        "run",
        "--param",
        "mode=exits,hangs,dies",
        "--server",
        f"{PY} {script} {{mode}} {{port}}",
        "--start-timeout",
        "2s",
        "--out",
        out,
        "--",
        "-u",
        "2",
        "-t",
        "30s",
        "--max-tokens-override",
        "8",
    )
    rows = {p["settings"]["mode"]: p for p in json.load(open(os.path.join(out, "table.json")))["points"]}
    assert rows["exits"]["status"] == "exited" and rows["exits"]["exit_code"] == 3
    assert "loading the model" in rows["exits"]["log_tail"]
    assert rows["hangs"]["status"] == "start_timeout" and rows["hangs"]["exit_code"] is None
    assert rows["hangs"]["seconds"] < 10  # bounded by --start-timeout
    assert rows["dies"]["status"] == "died" and rows["dies"]["exit_code"] == 7
    assert "engine core died" in rows["dies"]["log_tail"]
    assert rows["dies"]["seconds"] < 25  # the load was stopped when the server died, long before its 30 s
    assert r.returncode == EXIT_NONE, r.stdout + r.stderr
    for mode in ("exits", "hangs", "dies"):
        assert f"{mode}: " in r.stdout
    assert "exited with 3" in open(os.path.join(out, "report.md")).read()


@pytest.mark.process
def test_an_ab_on_the_simulator_in_two_rounds(tmp_path):
    out = str(tmp_path / "ab")
    r = sweeps(
        "ab",
        "--a-set",
        "max_num_seqs=2",
        "--b-set",
        "max_num_seqs=64",
        "--rounds",
        "2",
        "--out",
        out,
        "--",
        "-u",
        "8",
        "-r",
        "8",
        "-t",
        "3s",
        "--max-tokens-override",
        "16",
        "--stop-timeout",
        "5",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.load(open(os.path.join(out, "ab.json")))
    assert result["rounds"] == 2 and result["primary"] == "ttft.p95"
    # ABBA: round 1 ran A first, round 2 B first (the journal's order of starts)
    starts = [json.loads(x)["folder"] for x in open(os.path.join(out, "journal.jsonl")) if '"server_ready"' in x]
    assert [os.path.relpath(s, out) for s in starts] == ["round-01/A", "round-01/B", "round-02/B", "round-02/A"]
    # the same request sequence in both runs of a round
    for rnd in ("round-01", "round-02"):
        seeds = {json.load(open(os.path.join(out, rnd, s, "run", "run.json")))["plan"]["seed"] for s in "AB"}
        assert len(seeds) == 1
    truth = {
        s: sum((read_truth(os.path.join(out, rnd, s, "truth.jsonl")) for rnd in ("round-01", "round-02")), [])
        for s in "AB"
    }
    ttft = result["metrics"]["ttft.p95"]
    assert (truth_p95_ttft_ms(truth["B"]) < truth_p95_ttft_ms(truth["A"])) and ttft["verdict"] == BETTER
    assert ttft["lo"] <= ttft["diff"] <= ttft["hi"] and ttft["detectable_pct"] > 0
    for name in ("tpot.p95", "e2e.p95", "total_tokens_per_s", "goodput_per_s"):
        assert result["metrics"][name]["verdict"] in (BETTER, WORSE, NO_DIFFERENCE)
    assert "smallest detectable" in open(os.path.join(out, "ab.md")).read()


def test_compare_says_when_a_rule_is_below_the_smallest_change_it_could_detect():
    """reports compare: a --fail-on threshold below the runs' power gets one line, with the run
    length that would give it 80 % power (the half-width shrinks as one over the root of the length)."""
    from reports.compare import power_note

    result = {
        "scopes": [
            {
                "scope": "overall",
                "seconds": [30.0, 30.0],
                "metrics": [{"metric": "ttft.p95", "unit": "ms", "detectable": 300.0, "detectable_pct": 30.0}],
            }
        ]
    }
    rule = {"rule": "ttft.p95>+10%", "scope": "overall", "metric": "ttft.p95", "relative": True, "threshold": 10.0}
    note = power_note(rule, result)
    # 30 s x (1.4294 x 30 / 10)^2 = 552 s
    assert "(10%) is below the smallest change these runs could detect (±30%)" in note and "about 9 min each" in note
    assert power_note({**rule, "threshold": 40.0}, result) is None
    assert power_note({**rule, "relative": False, "threshold": 200.0}, result).count("ms") == 2


def test_one_sweep_at_a_time_in_a_folder(tmp_path):
    from sweeps.folder_lock import lock_folder

    held = lock_folder(str(tmp_path / "s"))
    with pytest.raises(InputError, match="another sweep or A/B is running in this folder"):
        lock_folder(str(tmp_path / "s"))
    held.close()  # as when the holder ends, killed or not
    lock_folder(str(tmp_path / "s")).close()


def processes_naming(text: str) -> list[int]:
    """Processes whose command line holds `text` (a sweep folder's path)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


@pytest.mark.process
def test_a_sweep_stopped_mid_point_stops_its_server_and_load_and_resumes(tmp_path):
    out = str(tmp_path / "sweep")
    cmd = [
        *SWEEPS,
        "run",
        "--profile",
        "fixed",
        "--param",
        "max_num_seqs=1,2",
        "--out",
        out,
        "--",
        "-u",
        "2",
        "-t",
        "60s",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        journal = os.path.join(out, "journal.jsonl")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (os.path.exists(journal) and "server_ready" in open(journal).read()):
            time.sleep(0.2)
        time.sleep(2)  # the load has started
        assert len(processes_naming(out)) >= 2  # the point's simulator and its locust
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output
    assert "run the same command again to resume" in output
    assert processes_naming(out) == []  # nothing of the point left running
    events = [json.loads(x)["event"] for x in open(journal)]
    assert "sweep_interrupted" in events and events[-1] == "ranked"
    # resumed, the interrupted point is run again from its start (its folder was not complete)
    at = cmd.index("--")
    dry = subprocess.run([*cmd[:at], "--dry-run", *cmd[at:]], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "would be skipped" not in dry.stdout and dry.stdout.count("  server: ") == 2


@pytest.mark.process
def test_a_sweep_of_step_ramps_ranks_by_capacity(tmp_path):
    """Two fixed-TTFT engines (the profile's ttft_s: the truth) under a ramp of 4 then 8 users with
    a P95 TTFT objective of 200 ms: 50 ms meets it at 8 users with no level missed, 400 ms misses
    it from the first level."""
    out = str(tmp_path / "sweep")
    r = sweeps(
        "run",
        "--profile",
        "fixed",
        "--param",
        "ttft_s=0.05,0.4",
        "--out",
        out,
        "--",
        "--steps",
        "4,8",
        "--step-time",
        "5s",
        "--step-warmup",
        "1s",
        "--slo",
        "ttft.p95<200ms",
        "--max-tokens-override",
        "8",
        "--stop-timeout",
        "5",
    )
    assert r.returncode == EXIT_BEST, r.stdout + r.stderr
    table = json.load(open(os.path.join(out, "table.json")))
    fast, slow = ({p["settings"]["ttft_s"]: p for p in table["points"]}[k] for k in ("0.05", "0.4"))
    assert table["ranking"]["ranking"] == "capacity" and table["ranking"]["best"]["label"] == "ttft_s=0.05"
    assert (fast["capacity"], fast["capacity_hi"], fast["users"]) == (8, None, 8)  # met at the highest level tried
    assert slow["capacity"] in (0, None) and slow["capacity_hi"] in (4, 8)  # missed from the first level decided
    # the P95 TTFT of the capacity level, and its bounds, hold the engine's constant TTFT (plus the client's ms)
    assert 50 <= fast["ttft_p95_ms_lo"] <= fast["ttft_p95_ms"] <= fast["ttft_p95_ms_hi"] < 80
    assert 400 <= slow["ttft_p95_ms"] < 440
    html = open(os.path.join(out, "report.html")).read()
    capacity_chart = re.findall(r'<svg class="chart" data-chart="capacity".*?</svg>', html, flags=re.S)[0]
    bars = 2 if slow["capacity"] is not None else 1  # a capacity not known has no bar
    assert capacity_chart.count('class="errorbar"') == bars and "no level missed" in capacity_chart
