"""Sweeps and A/B of capacity searches in requests/s (`--find-capacity --capacity-unit rate`): the
capacity in requests/s with its bracket and the level its figures are of (matched by rate), the
ranking and the A/B verdict in requests/s, and the refusal of a folder that mixes a search in users
with one in requests/s. Unit tests on summaries whose capacity metrics/capacity.py computes from
by_step levels as it does for summary.json, then an A/B and a sweep of two real searches against
the built-in simulator, checked against its configured slots and its truth log."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from core.errors import InputError
from metrics.capacity import capacity
from metrics.schema.figures import Step
from metrics.slo import parse_slo
from stats.rounds import BETTER
from stats.sequential import fixed_rounds
from sweeps.ab import AB, summary_line
from sweeps.capacity_unit import RATE, USERS, of_load, refuse_mixed
from sweeps.figures import AB_METRICS, capacity_figures, capacity_level
from sweeps.ranking import EXIT_BEST, rank
from sweeps.servers import RunningServer
from tests.helpers import ROOT, read_truth

SLO = "ttft.p90<100ms"
CAP = 512  # a search in requests/s: every level's users are the in-flight cap (--max-concurrency)


def level(i: int, load: float, state: str, rate: bool = True, steps: int = 1) -> Step:
    """A by_step level as metrics/summary.py writes it: a search in requests/s has the level's rate
    and the in-flight cap as its users; one in users has its users and no rate."""
    margin = {"met": 0.5, "missed": -0.8, "undecided": 0.0}[state]
    n = 32
    return Step.model_validate(
        {
            "step": i,
            "users": CAP if rate else int(load),
            "rate": load if rate else None,
            "steps": steps,
            "window": {"start": 5.0 * i + 1, "end": 5.0 * (i + steps)},
            "requests": {
                "sent": n,
                "ok": n,
                "failed": 0,
                "stopped": 0,
                "cancelled": 0,
                "retries": 0,
                "resent": 0,
                "by_error": {},
            },
            "ttft_ms": {},
            "tpot_ms": {},
            "itl_ms": {},
            "e2e_ms": {},
            "stream_tokens_per_s": {},
            "throughput": {"requests_per_s": load if rate else None},
            "goodput": {},
            "tokens": {"prompt": 0, "output": 0, "prompt_known": 0, "source": {}},
            "verdict": {
                "state": state,
                "requests": n,
                "margin": margin,
                "objectives": [
                    {
                        "objective": SLO,
                        "metric": "ttft.p90",
                        "threshold_ms": 100.0,
                        "value_ms": 100.0 * (1 - margin),
                        "state": state,
                        "margin": margin,
                    }
                ],
            },
        }
    )


def summary(*levels: Step) -> SimpleNamespace:
    """The two sections the sweep reads of a summary: by_step and the capacity metrics/capacity.py
    answers from it (as metrics/summary.py does)."""
    steps = list(levels)
    return SimpleNamespace(by_step=steps, capacity=capacity(steps, parse_slo(SLO)))


# ----------------------------------------------------------------------------- the load's unit


@pytest.mark.unit
@pytest.mark.parametrize(
    "args, unit",
    [
        (["--find-capacity", "--capacity-unit", "rate", "--slo", SLO], RATE),
        (["--find-capacity", "--capacity-unit=rate", "--rate-steps", "2,4"], RATE),
        (["--find-capacity", "--slo", SLO, "-t", "5m"], USERS),
        (["--find-capacity", "--capacity-unit", "users"], USERS),
        (["--rate-steps", "1,2,4", "--slo", SLO], RATE),
        (["--steps", "4,8", "--slo", SLO], USERS),
        (["--rate-steps", "1,2,4"], None),
        (["-u", "8", "-t", "10s", "--slo", SLO], None),
    ],
)
def test_the_unit_a_load_searches_in(args, unit):
    assert of_load(args) == unit


@pytest.mark.unit
def test_users_and_requests_per_second_are_refused_in_one_line_naming_both():
    assert refuse_mixed({"this load": RATE, "complete point a=1": RATE, "fixed": None}) == RATE
    assert refuse_mixed({"x": None}) is None
    with pytest.raises(InputError) as e:
        refuse_mixed({"this load": USERS, "complete point a=1": RATE, "complete point a=2": RATE})
    text = str(e.value)
    assert text.startswith("--capacity-unit:") and "\n" not in text
    assert "complete point a=1, complete point a=2: requests/s" in text and "this load: users" in text
    assert "one --capacity-unit" in text  # the fix


# ------------------------------------------------------------------------- a point's capacity


@pytest.mark.unit
def test_a_search_in_requests_per_second_has_its_capacity_bracket_and_level_in_requests_per_second():
    # walked 6, 7.9, 8.7 (missed), then halved to 8.3: rates as the search's thousandths make them
    s = summary(level(0, 6.0, "met"), level(1, 7.9, "met"), level(2, 8.700000000000001, "missed"), level(3, 8.3, "met"))
    assert s.capacity.users is None  # what the sweep read until now: no capacity at all
    assert capacity_figures(s.capacity) == {
        "capacity_unit": RATE,
        "capacity": 8.3,
        "capacity_lo": 8.3,
        "capacity_hi": pytest.approx(8.7),
    }
    # every level has the same users (the in-flight cap): the level is the one at the answer's rate
    assert capacity_level(s).step == 3
    # an undecided level held for two steps and then met: the level, with its steps
    s = summary(level(0, 4.0, "met"), level(1, 8.0, "met", steps=2), level(3, 16.0, "missed"))
    assert capacity_level(s).step == 1 and capacity_level(s).steps == 2
    # no level missed: unbounded above
    s = summary(level(0, 6.0, "met"), level(1, 12.0, "met"))
    assert capacity_figures(s.capacity)["capacity_hi"] is None and capacity_level(s).rate == 12.0


@pytest.mark.unit
def test_a_search_in_requests_per_second_missed_or_undecided_below_its_miss():
    # missed from the lowest rate tried: the capacity lies below it, from 0
    s = summary(level(0, 4.0, "missed"))
    assert capacity_figures(s.capacity) == {"capacity_unit": RATE, "capacity": 0, "capacity_lo": 0, "capacity_hi": 4.0}
    assert capacity_level(s) is None
    # a rate below the miss left undecided: the capacity is not known
    s = summary(level(0, 2.0, "undecided"), level(1, 4.0, "missed"))
    assert capacity_figures(s.capacity)["capacity"] is None and capacity_figures(s.capacity)["capacity_hi"] == 4.0


@pytest.mark.unit
def test_a_search_in_users_keeps_its_users():
    s = summary(level(0, 8, "met", rate=False), level(1, 16, "met", rate=False), level(2, 32, "missed", rate=False))
    assert capacity_figures(s.capacity) == {
        "capacity_unit": USERS,
        "capacity": 16,
        "capacity_lo": 16,
        "capacity_hi": 32,
    }
    assert capacity_level(s).users == 16 and capacity_level(s).rate is None
    assert capacity_figures(None) == {"capacity_unit": None, "capacity": None, "capacity_lo": None, "capacity_hi": None}


# --------------------------------------------------------------------------------- the ranking


def row(i: int, s: SimpleNamespace) -> dict:
    """A sweep's row of a point whose summary is `s` (sweeps/sweep.py collect, sweeps/figures.py)."""
    return {"index": i, "point": f"p{i}", "label": f"p{i}", "status": "done", **capacity_figures(s.capacity)}


@pytest.mark.unit
def test_a_sweep_of_searches_in_requests_per_second_ranks_them_in_requests_per_second():
    low = summary(level(0, 7.95, "met"), level(1, 8.74, "missed"))
    high = summary(level(0, 7.95, "met"), level(1, 8.74, "met"))
    r = rank([row(1, low), row(2, high)], "auto", RATE)
    assert r["ranking"] == "capacity" and r["capacity_unit"] == RATE
    assert r["best"]["point"] == "p2" and r["exit_code"] == EXIT_BEST
    assert r["by"] == "capacity at the SLO (requests/s)" and "users" not in r["sentence"]
    # before any point has a capacity, the label says the load's unit
    assert rank([], "capacity", RATE)["sentence"] == "no point has a capacity at the SLO (requests/s)"
    in_users = summary(level(0, 8, "met", rate=False), level(1, 16, "missed", rate=False))
    assert rank([row(1, in_users)], "capacity")["by"] == "capacity at the SLO (users)"
    with pytest.raises(InputError, match="^--capacity-unit: .*p1: requests/s; p2: users"):
        rank([row(1, low), row(2, in_users)], "throughput")


# ------------------------------------------------------------------------------------- the A/B


def run_values(s: SimpleNamespace) -> dict:
    """An A/B run's values (sweeps/figures.py run_values) of a search whose summary is `s`: the
    capacity's bracket and unit; no other figure."""
    value, lo, hi = (capacity_figures(s.capacity)[k] for k in ("capacity", "capacity_lo", "capacity_hi"))
    return {name: (None, None) for name, *_ in AB_METRICS} | {
        "capacity": None if value is None else (lo, hi),
        "capacity_unit": capacity_figures(s.capacity)["capacity_unit"],
    }


@pytest.mark.unit
def test_an_ab_of_searches_in_requests_per_second_compares_them_in_requests_per_second(tmp_path):
    a = summary(level(0, 7.95, "met"), level(1, 8.74, "missed"))
    b = summary(level(0, 7.95, "met"), level(1, 8.74, "met"))
    server = RunningServer("http://127.0.0.1:8000")
    ab = AB(str(tmp_path), server, server, ["--find-capacity"], 1, 60.0, fixed_rounds(1), "capacity", ["capacity"], "")
    result = ab.compare({"A": [run_values(a)], "B": [run_values(b)]})
    cap = result["metrics"]["capacity"]
    assert cap["unit"] == RATE and cap["verdict"] == BETTER  # B met the rate A missed
    assert (cap["a"], cap["b"], cap["lo"], cap["hi"]) == (7.95, 8.74, 0.0, None)
    result["stopped"] = "budget"
    assert "capacity (requests/s) +9.9 %" in summary_line(result)
    in_users = summary(level(0, 8, "met", rate=False), level(1, 16, "missed", rate=False))
    with pytest.raises(InputError, match="^--capacity-unit: .*round 1 A: requests/s; round 1 B: users"):
        ab.compare({"A": [run_values(a)], "B": [run_values(in_users)]})


# ----------------------------------------------------------------------- real searches (process)

PROFILE = os.path.join(ROOT, "bench", "profiles", "ten-slots.yaml")
TOKENS = 30  # each reply 30 tokens of one 20 ms engine step: a slot is held 0.6 s
# 5 slots carry 5 / 0.6 = 8.3 requests/s, 10 slots 16.7: a walk of 7.95 then 8.74 (within 10 %, so
# not narrowed further) meets both with 10 slots and misses the second with 5, each rate about 5 %
# from 8.3; a level's constant arrivals below the capacity never wait for a slot, above it they
# queue by (rate - capacity) per second, past 100 ms within a 4 s level.
RATE_LOAD = [
    "--find-capacity",
    "--capacity-unit",
    "rate",
    "--capacity-policy",
    "walk",
    "--rate-steps",
    "7.95,8.74",
    "--arrival",
    "constant",
    "--slo",
    SLO,
    "--step-time",
    "5s",
    "--step-warmup",
    "1s",
    "-t",
    "30s",
    "--max-tokens-override",
    str(TOKENS),
    "--stop-timeout",
    "5",
]


def sweeps(*args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sweeps", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def truth_capacity(truth: list[dict], slots: int) -> float:
    """Requests/s the server's slots carry: its slots over how long it held each one (truth log)."""
    held = np.array([t["last_token"] - t["scheduled"] for t in truth if t["outcome"] == "ok"])
    return slots / float(np.median(held))


@pytest.mark.process
@pytest.mark.timing  # each verdict on TTFTs about 5 % either side of the capacity, which CPU load can stretch
def test_an_ab_and_a_sweep_of_searches_in_requests_per_second_on_the_simulator(tmp_path):
    ab_out = str(tmp_path / "ab")
    r = sweeps(
        "ab", "--profile", PROFILE, "--a-set", "max_num_seqs=5", "--b-set", "max_num_seqs=10", "--rounds", "1",
        "--out", ab_out, "--", *RATE_LOAD,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    runs = {side: os.path.join(ab_out, "round-01", side) for side in "AB"}
    truth = {side: read_truth(os.path.join(runs[side], "truth.jsonl")) for side in "AB"}
    truth_cap = {"A": truth_capacity(truth["A"], 5), "B": truth_capacity(truth["B"], 10)}
    assert 7.95 < truth_cap["A"] < 8.74 < truth_cap["B"], truth_cap  # the slots did what they say
    result = json.load(open(os.path.join(ab_out, "ab.json")))
    cap = result["metrics"]["capacity"]
    assert result["primary"] == "capacity" and cap["unit"] == "requests/s"
    bracket = {}
    for side in "AB":
        c = json.load(open(os.path.join(runs[side], "run", "summary.json")))["capacity"]
        bracket[side] = (c["rate"], c["next_failing_rate"])
    assert bracket["A"][0] <= truth_cap["A"] < bracket["A"][1] and bracket["B"] == (8.74, None), bracket
    assert (cap["a"], cap["b"], cap["verdict"]) == (bracket["A"][0], 8.74, BETTER), cap  # B met the rate A missed
    assert "capacity (requests/s)" in r.stdout and "capacity (users)" not in r.stdout
    assert "capacity (requests/s)" in open(os.path.join(ab_out, "ab.md")).read()

    # the same folder resumed with a search in users: one line, before any server starts
    starts = open(os.path.join(ab_out, "journal.jsonl")).read().count('"server_start"')
    users_load = ["--find-capacity", "--slo", SLO, "--step-time", "5s", "-t", "30s"]
    r = sweeps(
        "ab", "--profile", PROFILE, "--a-set", "max_num_seqs=5", "--b-set", "max_num_seqs=10", "--rounds", "1",
        "--out", ab_out, "--", *users_load,
    )  # fmt: skip
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--capacity-unit" in r.stderr, r.stderr
    assert open(os.path.join(ab_out, "journal.jsonl")).read().count('"server_start"') == starts

    # a sweep of the same two settings with the same seed: the A/B's two runs are its two points'
    # complete results folders, read back as a resumed sweep reads them (no server starts)
    sweep_out = tmp_path / "sweep"
    for side, point in (("A", "max_num_seqs-5"), ("B", "max_num_seqs-10")):
        shutil.copytree(runs[side], sweep_out / "points" / point)
    r = sweeps("run", "--profile", PROFILE, "--param", "max_num_seqs=5,10", "--out", str(sweep_out), "--", *RATE_LOAD)
    assert r.returncode == EXIT_BEST, r.stdout + r.stderr
    assert r.stdout.count("complete results folder, not run again") == 2
    table = json.load(open(sweep_out / "table.json"))
    ranked = table["ranking"]
    assert ranked["by"] == "capacity at the SLO (requests/s)" and ranked["best"]["label"] == "max_num_seqs=10"
    five = next(p for p in table["points"] if p["label"] == "max_num_seqs=5")
    assert five["capacity_unit"] == "requests/s" and five["capacity_lo"] <= truth_cap["A"] < five["capacity_hi"]
    # its figures are those of the level at its capacity's rate, not of the whole search: the
    # requests that level's constant arrivals sent in its window
    summary_json = json.load(open(sweep_out / "points" / "max_num_seqs-5" / "run" / "summary.json"))
    (at,) = [st for st in summary_json["by_step"] if st["rate"] == pytest.approx(five["capacity"])]
    assert five["rate"] == pytest.approx(five["capacity"]) and five["users"] is None
    window_s = at["window"]["end"] - at["window"]["start"]
    assert abs(five["requests"] - five["rate"] * window_s) <= 1.5, (five["requests"], window_s)
    report = open(sweep_out / "report.md").read()
    assert "capacity (requests/s)" in report and "(users)" not in report
    html = open(sweep_out / "report.html").read()
    chart = re.findall(r'<svg class="chart" data-chart="capacity".*?</svg>', html, flags=re.S)[0]
    assert "requests/s" in chart and "users" not in chart and chart.count('class="errorbar"') == 2
