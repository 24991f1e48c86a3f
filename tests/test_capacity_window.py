"""A capacity search judges each level, while the run goes, on --step-time less --step-warmup and,
with workers, less the last 4 s whose records may still be on their way (shapes/capacity.py). A plan
that leaves less than MIN_JUDGED_S to judge is refused before any load, with one line naming
--step-time and the shortest one that works: at the plan level, and from a real headless master."""

from __future__ import annotations

import argparse
import os
import subprocess

import pytest

from core.errors import InputError
from metrics.record import RequestRecord
from metrics.slo import parse_slo
from plugin import exit_codes
from plugin.load_models import CapacitySearchModel, StepRamp
from plugin.plan import RunPlan
from shapes.capacity import MIN_JUDGED_S, WORKER_REPORT_LAG_S, CapacitySearch
from tests.helpers import LOCUST, ROOT, own_master_port, simulator


def plan(step_time: str, step_warmup: str, master: bool, **more) -> RunPlan:
    o = argparse.Namespace(step_time=step_time, step_warmup=step_warmup, master=master, **more)
    return RunPlan.from_options(o)


def capacity(step_time: str, step_warmup: str, master: bool) -> RunPlan:
    return plan(step_time, step_warmup, master, find_capacity=True, slo="ttft.p95<5s")


@pytest.mark.parametrize(
    "step_time, step_warmup, master, judged, minimum",
    [
        ("5s", "0s", True, 1, 8),  # the workers' margin leaves 1 s
        ("20s", "13s", True, 3, 21),
        ("5s", "2s", False, 3, 6),  # one process: no margin, but still too short
        ("1.5s", "0.5s", True, 0, 8.5),  # less than nothing: said as 0 s
    ],
)
def test_a_capacity_search_with_too_short_a_judged_window_is_refused(step_time, step_warmup, master, judged, minimum):
    with pytest.raises(InputError) as e:
        capacity(step_time, step_warmup, master)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"--step-time: {step_time} leaves {judged:g}s to judge"), message
    assert f"--step-warmup {step_warmup}" in message and f"at least {MIN_JUDGED_S:g}s" in message, message
    assert f"give --step-time {minimum:g}s or more" in message, message
    assert ("workers" in message) == master, message
    assert ("or a shorter --step-warmup" in message) == (step_warmup != "0s"), message


@pytest.mark.parametrize(
    "step_time, step_warmup, master",
    [("8s", "0s", True), ("18s", "10s", True), ("6s", "2s", False), ("60s", "10s", True)],
)
def test_the_minimum_the_message_gives_is_accepted(step_time, step_warmup, master):
    load = capacity(step_time, step_warmup, master).load
    assert isinstance(load, CapacitySearchModel)


def test_a_step_ramp_has_no_margin_and_keeps_short_steps():
    """Steps are measured after the run from every record: --step-time less --step-warmup above 0 is enough."""
    for master in (False, True):
        load = plan("4s", "1s", master, steps="4,8,16").load
        assert isinstance(load, StepRamp) and load.step_s == 4


def test_the_judged_window_is_the_one_the_search_judges_on():
    """The plan's arithmetic is the search's: with workers, a level's requests that ended in its last
    WORKER_REPORT_LAG_S are not in its set; those sent after its warm-up that ended in the
    MIN_JUDGED_S before are."""
    step, warmup = 2 * MIN_JUDGED_S + 1, 1.0
    capacity(f"{step:g}s", f"{warmup:g}s", True)  # accepted: 1 s above the minimum
    search = CapacitySearch(parse_slo("ttft.p95<5s"), step, warmup, None, distributed=True)
    search.run_start = 1000.0
    search.levels = [1]
    judged_end = search.run_start + step - WORKER_REPORT_LAG_S

    def ended_at(t: float) -> tuple:
        e2e = 0.5
        return RequestRecord(
            "r",
            "w",
            "chat",
            "short",
            10,
            4,
            step=0,
            wall_send=t - e2e,
            status=200,
            ok=True,
            ttft_s=0.1,
            e2e_s=e2e,
            tpot_s=0.1,
            chunk_times=[0.1, 0.2],
        ).as_row()

    search.on_rows([ended_at(judged_end + 0.5)])
    assert search.judge(0)[1].requests.ok == 0, "a request that ended inside the workers' margin was judged"
    search.on_rows([ended_at(judged_end - MIN_JUDGED_S + 0.5)])
    assert search.judge(0)[1].requests.ok == 1


@pytest.mark.process
def test_a_headless_master_refuses_it_before_any_load(tmp_path):
    """A real master with a capacity search of 5 s levels and no warm-up: 1 s left to judge. Exit 2,
    one line naming --step-time and 8 s, no request to the server, no results folder."""
    truth = tmp_path / "truth.jsonl"
    results = tmp_path / "results"
    with simulator("--profile", "fixed", truth_log=str(truth)) as url:
        proc = subprocess.run(
            [
                *LOCUST,
                *own_master_port(
                    [
                        "--master",
                        "--headless",
                        "--expect-workers",
                        "1",
                        "--host",
                        url,
                        "--model",
                        "sim-model",
                        "--find-capacity",
                        "--slo",
                        "ttft.p95<5s",
                        "--step-time",
                        "5s",
                        "--step-warmup",
                        "0s",
                        "-t",
                        "60s",
                        "--results-dir",
                        str(results),
                    ]
                ),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ},
        )
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == exit_codes.BAD_INPUT, proc.stderr[-3000:]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert errors == [lines[-1]], lines[-5:]
    assert errors[0] == (
        "error: --step-time: 5s leaves 1s to judge each capacity-search level (5s - --step-warmup 0s "
        "- 4s while the workers' last records arrive), at least 4s is needed; give --step-time 8s or more"
    )
    assert not truth.exists() or truth.read_text().strip() == "", "a request reached the server"
    assert not results.exists(), "a results folder was made"


def test_the_plan_states_the_levels_and_the_warm_up_of_a_search():
    """The load line of the console, run.json and the report's header says what a capacity search
    walks and how each level is held, as a step ramp's says (it said "levels of 40s within -t")."""
    given = dict(find_capacity=True, slo="ttft.p95<5s", run_time=600.0)
    walked = plan("40s", "10s", False, steps="5,10,20,50,80,120,160", capacity_policy="walk", **given)
    assert walked.load.describe(walked) == (
        "capacity search for ttft.p95<5s: levels 5,10,20,50,80,120,160 users in order up to "
        "the first miss, then bisecting to 10%, 40s each (10s warm-up), within -t 600s"
    )
    doubled = plan("40s", "10s", False, capacity_policy="doubling", **given)
    assert doubled.load.describe(doubled) == (
        "capacity search for ttft.p95<5s: doubling from 1 user, then bisecting to 10%, "
        "40s each (10s warm-up), within -t 600s"
    )
    adaptive = plan("40s", "10s", False, max_users="64", **given)
    assert adaptive.load.describe(adaptive) == (
        "capacity search for ttft.p95<5s: probing up from 1 user x2 (x4 past a level far under) to the first miss, then "
        "placing levels where the curve through them crosses the threshold, to within ±5% at 80% confidence, each level "
        "ended once decided, at most 120s (a warm-up until the requests before it ended, at most 10s), "
        "at most 64 users, within -t 600s"
    )
