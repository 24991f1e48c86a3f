"""A capacity search in requests/s (--find-capacity --capacity-unit rate): its options are checked
before any load, each mistake one line naming the option and the fix, and a good command line
builds the plan the search runs (its levels as the policies' whole numbers of RATE_GRAIN)."""

from __future__ import annotations

from argparse import Namespace

import pytest

from core.errors import InputError
from plugin.plan import RunPlan
from shapes.capacity import RATE_GRAIN

pytestmark = pytest.mark.unit

SEARCH = {"find_capacity": True, "capacity_unit": "rate", "slo": "ttft.p95<1s", "step_time": "10s", "step_warmup": "2s"}


def plan(distributed: bool = False, **options) -> RunPlan:
    ns = Namespace(**options)
    if distributed:
        ns.master = True
    return RunPlan.from_options(ns)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (
            {"max_rate": "10"},
            "--max-rate: applies to a capacity search in requests/s; give --find-capacity --capacity-unit rate",
        ),
        (
            {"find_capacity": True, "slo": "ttft.p95<1s", "max_rate": "10"},
            "--max-rate: applies to a capacity search in requests/s; give --find-capacity --capacity-unit rate",
        ),
        ({"start_rate": "2"}, "--start-rate: applies to a capacity search in requests/s"),
        ({"capacity_unit": "rate"}, "--capacity-unit: says what --find-capacity searches; give --find-capacity too"),
        ({**SEARCH, "max_users": "8"}, "--max-users: a search in requests/s is bounded by --max-rate"),
        ({**SEARCH, "start_rate": "20", "max_rate": "10"}, "--start-rate: 20 requests/s is above --max-rate 10"),
        ({**SEARCH, "max_rate": "0"}, "--max-rate"),
        ({**SEARCH, "capacity_unit": "rps"}, "--capacity-unit"),
        ({**SEARCH, "steps": "5,10"}, "--steps: user counts; a search in requests/s walks --rate-steps instead"),
        ({**SEARCH, "capacity_policy": "walk"}, "--capacity-policy walk: walks the levels of --rate-steps"),
        ({**SEARCH, "capacity_policy": "doubling", "rate_steps": "1,2"}, "--capacity-policy doubling"),
        ({**SEARCH, "rate_steps": "4,8", "start_rate": "2"}, "--start-rate: --rate-steps gives the first level"),
        (
            {**SEARCH, "rate_steps": "4,8", "max_rate": "3"},
            "--max-rate: 3 is below the first level of --rate-steps (4)",
        ),
        ({**SEARCH, "request_rate": "5"}, "--find-capacity: searches the load itself; drop --request-rate"),
        ({**SEARCH, "slo": ""}, "--find-capacity: needs --slo"),
        ({**SEARCH, "step_time": "5s"}, "--step-time: 5s leaves 3s to judge each capacity-search level"),
        (
            {"find_capacity": True, "slo": "ttft.p95<1s", "rate_steps": "1,2"},
            "drop --rate-steps (or give --capacity-unit rate)",
        ),
    ],
)
def test_a_mistake_is_one_line_naming_the_option_and_the_fix(options, says):
    with pytest.raises(InputError) as e:
        plan(**options)
    message = str(e.value)
    assert says in message and "\n" not in message, message


def test_a_search_in_requests_per_second_runs_in_one_process():
    with pytest.raises(InputError, match="--capacity-unit rate: .* run it without --master/--processes"):
        plan(distributed=True, **SEARCH)


def test_the_plan_of_a_search_in_requests_per_second():
    p = plan(**SEARCH, start_rate="0.5", max_rate="40", arrival="constant", max_concurrency="64")
    load = p.load
    assert p.find_capacity and p.stepped and load.unit == "rate" and load.headless_users() == 64
    assert (load.start_rate, load.max_rate, load.arrival) == (0.5, 40.0, "constant")
    policy = load.new_policy()  # the same policies, on whole numbers of RATE_GRAIN requests/s
    assert (policy.start, policy.max_users) == (round(0.5 / RATE_GRAIN), round(40 / RATE_GRAIN))
    assert policy.next_level([]) * RATE_GRAIN == pytest.approx(0.5)
    line = p.summary_line()
    assert (
        "capacity search in requests/s for ttft.p95<1s: probing up from 0.5 requests/s to the first miss, then narrowing to within 5% (adaptive)"
        in line
    )
    assert "open loop (constant, at most 64 in flight)" in line and "at most 40 requests/s" in line
    search = load.new_search(p, distributed=False)
    assert search.rate_cap == 64 and search.record()["unit"] == "rate"
    assert "at most 64 requests in flight; it tries 40 requests/s at most" in search.precheck()


def test_a_walk_in_requests_per_second_walks_the_rate_steps():
    p = plan(**SEARCH, capacity_policy="walk", rate_steps="2,4.5,9")
    assert p.load.kind == "capacity" and p.load.rates == (2.0, 4.5, 9.0)
    policy = p.load.new_policy()
    assert [level * RATE_GRAIN for level in policy.levels] == pytest.approx([2.0, 4.5, 9.0])
    assert "levels 2,4.5,9 requests/s in order up to the first miss, then bisecting to 10 % (walk)" in p.summary_line()


def test_a_search_in_users_is_unchanged_and_the_rate_steps_alone_are_an_open_loop_in_steps():
    assert plan(find_capacity=True, slo="ttft.p95<1s").load.unit == "users"
    assert plan(rate_steps="1,2").load.kind == "rate_steps"


def form_plan(form: dict) -> RunPlan:
    """The plan a start from the web form builds (webui/start_check.py check_start): the process's
    options, every one at its default as Locust's parser leaves it, the form's text fields over them."""
    from argparse import Namespace as Ns

    from plugin.options import DECLARED, Options

    values = {d.name: d.default for d in DECLARED}
    values.update(form)
    return RunPlan.from_parsed(Options.parse(Ns(**values)), 120.0)


def test_the_web_forms_fields_are_checked_as_the_command_line_is():
    form = {"find_capacity": "true", "slo": "ttft.p95<1s", "step_time": "10s", "step_warmup": "2s"}
    with pytest.raises(InputError, match="^--max-rate: applies to a capacity search in requests/s"):
        form_plan({**form, "max_rate": "10"})
    with pytest.raises(InputError, match="^--start-rate: 8 requests/s is above --max-rate 4"):
        form_plan({**form, "capacity_unit": "rate", "start_rate": "8", "max_rate": "4"})
    p = form_plan({**form, "capacity_unit": "rate", "start_rate": "2", "max_rate": "", "max_users": ""})
    assert (p.load.unit, p.load.start_rate, p.load.max_rate) == ("rate", 2.0, None)


def test_the_precheck_says_when_t_leaves_no_room_for_the_knees_levels():
    """The web form's search (find-capacity, 60 s levels held up to 180 s) with -t 300s: two
    levels held to their longest do not fit, and the levels near the knee are the ones held longest."""
    short = plan(find_capacity=True, slo="ttft.p95<5s", step_time="60s", run_time=300)
    line = short.load.new_search(short, distributed=False).precheck()
    assert "-t 300s has room for fewer than two levels held to their longest (180s each)" in line, line
    roomy = plan(find_capacity=True, slo="ttft.p95<5s", step_time="60s", run_time=600)
    assert "room for" not in roomy.load.new_search(roomy, distributed=False).precheck()


def test_the_web_forms_precheck_and_the_consoles_say_the_same_room_for_one_plan():
    """A walk of 80 s steps within -t 5m, from the web form (webui/start_check.py's plan, the LLM
    view's search_check) and from the command line (the console's precheck line): one message, and
    the room it speaks of is a fixed hold's longest, three steps (240 s: an undecided level near the
    knee is held step by step), not one step, under which -t 300s had looked roomy."""
    from argparse import Namespace as Ns

    from plugin.options import DECLARED
    from webui.start_check import form_plan as web_plan
    from webui.view import search_said

    process = Ns(**{d.name: d.default for d in DECLARED}, run_time=None, master=False)
    form = {"find_capacity": "true", "slo": "ttft.p95<5s", "step_time": "80s", "capacity_policy": "walk"}
    web = web_plan(process, {**form, "steps": "1,2,4,8", "run_time": "5m"})
    said = search_said(web.load.new_search(web, distributed=False))["search_check"]
    cli = plan(
        find_capacity=True, slo="ttft.p95<5s", step_time="80s", capacity_policy="walk", steps="1,2,4,8", run_time=300
    )
    console = cli.load.new_search(cli, distributed=False).precheck()
    assert said == console, (said, console)
    assert "-t 300s has room for fewer than two levels held to their longest (240s each)" in console, console
    rated = plan(**SEARCH, run_time=50)  # a search in requests/s: levels of 10 s held up to 30 s
    assert (
        "-t 50s has room for fewer than two levels held to their longest (30s each)"
        in rated.load.new_search(rated, distributed=False).precheck()
    )
