"""A start from the web form is checked like a headless run before anything starts, and the plan
it checked is the plan that runs.

Locust's `/swarm` copies the form's values into the parsed options and starts the run. This hook
runs first: it builds the run's plan from the options with the form's values over them (the
option types of plugin/options.py parse the form's text as they parse the command line's), loads
its workload, checks the host (it answers, and serves a model), restarts the built-in simulator
when the form picked another profile, and picks Locust's shape or its plain start for the plan's
load model. The plan and the workload become the run's (the state's); test start uses them as
they are. A bad value answers `{"success": false, "message": ...}`, which Locust's page shows,
with the same one line a headless run prints; nothing is sent to the target.
"""

from __future__ import annotations

import argparse
import logging

from flask import jsonify, request
from locust.util.timespan import parse_timespan

from core.errors import InputError
from plugin.embedded import EmbeddedSimulator, scrape_when_target
from plugin.options import DECLARED, Options
from plugin.plan import RunPlan, check_users
from plugin.run import check_target, choose_shape, prepare_run
from simulator.profiles import load_profile

log = logging.getLogger("llm.webui")


def check_start(environment, form) -> RunPlan:
    """The plan a start with this form runs, with its workload made the run's (raises InputError).
    Restarts the built-in simulator with the form's profile when it changed, on the same address."""
    opts = environment.parsed_options
    plan = form_plan(opts, form)
    check_users(plan, form.get("user_count", opts.num_users), form.get("spawn_rate", opts.spawn_rate))
    inputs = prepare_run(plan)
    host = str(form.get("host") or environment.host or "").replace("<", "").replace(">", "").rstrip("/")
    state = environment.llm
    sim = state.simulator
    if sim is not None and host == sim.url and plan.sim_profile != sim.profile:
        try:
            load_profile(plan.sim_profile)  # before the running simulator is stopped
        except InputError as e:
            raise InputError(f"--sim-profile: {str(e).removeprefix('--profile: ')}") from None
        log.info("the form asks for simulator profile %s: restarting the built-in simulator", plan.sim_profile)
        sim.stop()
        try:
            state.simulator = EmbeddedSimulator(plan.sim_profile, port=sim.port)
        except RuntimeError as e:
            state.simulator = EmbeddedSimulator(sim.profile, port=sim.port)  # keep a target up
            raise InputError(
                f"--sim-profile: the built-in simulator did not start with '{plan.sim_profile}': {e}"
            ) from None
    plan = check_target(environment, scrape_when_target(plan, state.simulator, host), host)
    state.plan, state.inputs = plan, inputs
    # run.json's argv: what ran, not this process's command line. The built-in simulator's address is
    # left out: it lives as long as this process, and the options without --host start one again
    own = state.simulator is not None and host == state.simulator.url
    state.form_argv = form_settings(form, opts, "" if own else host)
    return plan


def form_plan(opts, form) -> RunPlan:
    """The plan of a start with this form: the process's options with the form's values over them,
    and the form's run time (Locust's own parser; an emptied field means no limit). Raises InputError."""
    values = {**vars(opts), **{k: v for k, v in form.items() if k in Options.model_fields}}
    run_time = form.get("run_time", None)
    try:
        run_time_s = (parse_timespan(run_time) if run_time else None) if run_time is not None else opts.run_time
    except ValueError:
        run_time_s = opts.run_time  # Locust's own check answers this one
    return RunPlan.from_parsed(
        Options.parse(argparse.Namespace(**values)),
        float(run_time_s) if run_time_s else None,
        distributed=bool(getattr(opts, "master", False)),
    )


def form_settings(form, opts, host: str) -> list[str]:
    """The run's settings as the web form set them, written as the options that run the same:
    Locust's users, ramp, run time and host, then each of the suite's form fields whose value is
    not its default (a flag: set; a field the form left out keeps the process's value, as the plan
    does). The process's own command line (a master's) says nothing of what a form start ran."""
    from core.urls import public_url

    out = ["-u", str(form.get("user_count", opts.num_users)), "-r", str(form.get("spawn_rate", opts.spawn_rate))]
    run_time = form.get("run_time", None)
    if run_time is None and opts.run_time:  # not in the form: the process's own -t holds
        run_time = f"{opts.run_time:g}s"
    if run_time:
        out += ["-t", str(run_time)]
    if host:
        out += ["--host", public_url(host)]
    for d in DECLARED:
        if not d.web or d.secret:
            continue
        value = form[d.name] if d.name in form else getattr(opts, d.name, d.default)  # a field left out: the process's
        if d.flag_only:
            if value is True or str(value).strip().lower() in ("true", "on", "1", "yes"):
                out.append(d.flag)
        elif value is not None and str(value).strip() != str(d.default):
            out += [d.flag, str(value).strip()]
    return out


def install_start_check(environment, web_ui) -> None:
    @web_ui.app.before_request
    def _check_start():
        if request.endpoint != "locust.swarm" or request.method != "POST":
            return None
        runner = environment.runner
        if runner is not None and runner.state in ("spawning", "running"):
            return None  # a change of the user count while running: nothing of the plan changes
        try:
            plan = check_start(environment, request.form)
        except InputError as e:
            log.warning("start refused: %s", e)
            return jsonify({"success": False, "message": str(e), "host": environment.host})
        choose_shape(environment, plan)
        if request.form.get("run_time", None) == "":  # an emptied field means no limit (Locust keeps the last one)
            environment.parsed_options.run_time = None
        return None
