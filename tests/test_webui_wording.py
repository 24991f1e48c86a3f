"""What the web UI says, where a unit can say it: the live header's time row while the run is on,
the start form's labels and values, and Locust's page script served polling through a stop."""

from __future__ import annotations

import argparse
import glob
import os
from types import SimpleNamespace

import locust
import pytest

from metrics.schema.run_setup import LoadSetup, Setup
from plugin.options import DECLARED
from webui.form import _locust_title, field_label, labels_script, last_values
from webui.page_state import widened
from webui.view import good_rule, live_setup_rows, search_said

pytestmark = pytest.mark.unit


def _setup(measured_s: float) -> Setup:
    return Setup(
        load=LoadSetup(kind="closed", text="closed loop", users=4, parameters={}),
        run_time_s=60.0,
        measured_s=measured_s,
        slo=[],
        workload="default",
        workload_hash="0" * 64,
        server="http://127.0.0.1:1",
        model="m",
        client_hosts=["h"],
        workers=1,
        suite_version="v",
    )


def test_the_time_row_says_what_has_been_measured_while_the_run_is_on():
    """The setup is written as the run starts (measured_s 0): the live header said "measured 0.0 s"
    through the whole run."""
    setup = _setup(0.0)
    run = SimpleNamespace(window_start=1000.0, window_end=None)
    assert dict(live_setup_rows(setup, run, 1012.34))["time"] == "-t 60 s; running, 12.3 s measured so far"
    assert (
        dict(live_setup_rows(setup, run, 995.0))["time"] == "-t 60 s; running, warm-up (the measurement starts in 5 s)"
    )
    run.window_end = 1060.0
    assert dict(live_setup_rows(setup, run, 1070.0))["time"] == "-t 60 s; measured 60.0 s"
    assert [k for k, _ in live_setup_rows(setup, run, 1070.0)][:3] == ["load", "time", "SLO"]


def test_form_labels_are_the_suites_words():
    assert field_label("slo") == "SLO" and _locust_title("slo") == "Slo"
    assert field_label("sim_profile") == "Simulator profile" and _locust_title("sim_profile") == "Sim Profile"
    assert (
        field_label("run_id") == "Run ID"
        and field_label("tls_ca") == "TLS CA"
        and field_label("ignore_eos") == "Ignore EOS"
    )
    form = {d.name: {} for d in DECLARED if d.web}
    script = labels_script(form)
    # every web option whose Locust title differs is relabelled, none other
    for name in form:
        camel = name.split("_")[0] + "".join(p.capitalize() for p in name.split("_")[1:])
        assert (f'"{camel}": ["{_locust_title(name)}", "{field_label(name)}"]' in script) == (
            _locust_title(name) != field_label(name)
        ), name
    assert "</script" not in script.removesuffix("</script>")


def test_the_form_shows_the_last_run_started_not_the_command_line():
    fields = {
        "sim_profile": {"default_value": "v100-7b-tp8"},
        "slo": {"default_value": ""},
        "not_an_option": {"default_value": 1},
    }
    shown = last_values(fields, argparse.Namespace(sim_profile="fixed", slo="ttft.p95<5s"))
    assert shown["sim_profile"]["default_value"] == "fixed" and shown["slo"]["default_value"] == "ttft.p95<5s"
    assert shown["not_an_option"]["default_value"] == 1


def test_locusts_page_script_polls_through_a_stop():
    """The installed Locust's page script has the polling condition once, and is served with the two
    states of a stop added to it (a Locust upgrade that changes the script fails here)."""
    (script,) = [
        p
        for p in glob.glob(os.path.join(os.path.dirname(locust.__file__), "webui", "dist", "assets", "*.js"))
        if "shouldRunInterval" in open(p, encoding="utf-8").read()
    ]
    text = open(script, encoding="utf-8").read()
    new = widened(text)
    assert new is not None and len(new) > len(text)
    assert "u=i.state===CT.SPAWNING||i.state==CT.RUNNING||i.state==CT.CLEANUP||i.state==CT.STOPPING" in new
    assert new.replace("||i.state==CT.CLEANUP||i.state==CT.STOPPING", "", 1) == text
    assert widened("no such expression") is None


def test_locusts_page_reads_stopped_only_once_the_runs_summary_is_in():
    """The runner reads `stopped` before the run's summary is computed, and Locust's page stops
    asking at `stopped`: its LLM tab kept the last live window after a 5-minute search. Until the
    final snapshot is in, the page is told the run is still stopping (a state it polls in), for
    FINAL_WAIT_S at most; the state of a run not stopping is passed as it is."""
    from locust.runners import MasterRunner

    from webui.view import FINAL_WAIT_S, LiveView

    class Master(MasterRunner):  # only the runner's type is read: none of Locust's set-up or tear-down
        def __init__(self):
            pass

        def __del__(self):
            pass

    local = LiveView(SimpleNamespace(runner=object()))
    assert local.page_state("stopped") == "stopped"  # no run yet
    local.run = SimpleNamespace(run_id="r1")
    assert local.page_state("running", now=100.0) == "running"
    assert local.page_state("stopped", now=100.0) == "cleanup"
    assert local.page_state("stopped", now=100.0 + FINAL_WAIT_S) == "cleanup"
    local.finished.add("r1")
    assert local.page_state("stopped", now=101.0) == "stopped"
    master = LiveView(SimpleNamespace(runner=Master()))
    master.run = SimpleNamespace(run_id="r2")
    assert master.page_state("stopped", now=50.0) == "stopping"
    assert master.page_state("stopped", now=50.1 + FINAL_WAIT_S) == "stopped"  # a finish that never came
    assert widened("x=s.state===S.SPAWNING||s.state==S.RUNNING").count("S.STOPPING") == 1  # polled in


def test_the_good_card_says_what_makes_one_request_good():
    """Good % counts requests under each objective's threshold (metrics/slo.py good_mask); the card
    said "good = within ttft.p95<5s", which beside 100 % good and a TTFT P95 over 5 s read as a
    contradiction: the percentile is the verdict's, over the requests."""
    from metrics.slo import parse_slo

    assert good_rule(parse_slo("ttft.p95<5s")) == "good = TTFT under 5s (each request)"
    assert good_rule(parse_slo("ttft.p99<2s,tpot.mean<80ms")) == "good = TTFT under 2s, TPOT under 80ms (each request)"
    assert good_rule([]) == "no --slo: good = OK"


def test_the_page_says_what_the_search_said_as_it_ran():
    """The console's warning of a capacity search that a level cannot get the values it needs (and
    the --step-time that would) is in the page too, after what it said before it started."""
    search = SimpleNamespace(precheck=lambda: "capacity search: ...", notes=["at 1 user a level gets about 23 values"])
    assert search_said(search) == {
        "search_check": "capacity search: ...",
        "search_notes": ["at 1 user a level gets about 23 values"],
    }
    assert search_said(None) == {"search_check": None, "search_notes": []}
