"""A start from the web form is checked like a headless run before anything starts.

Locust's `/swarm` copies the form's values into the parsed options and starts the run. This hook
runs first: it builds the run's plan from the options as the form would leave them, checks the
host (it answers, and serves a model), restarts the built-in simulator when the form picked another
profile, and picks Locust's shape or its plain start for the plan's load model. A bad value answers
`{"success": false, "message": ...}`, which Locust's page shows, with the same one line a headless
run prints; nothing is sent to the target.
"""

from __future__ import annotations

import argparse
import logging

from flask import jsonify, request
from locust.util.timespan import parse_timespan

from core.errors import InputError
from plugin.embedded import EmbeddedSimulator
from plugin.hooks import check_target, choose_shape
from plugin.context import load_workload, token_counter
from plugin.plan import RunPlan
from simulator.profiles import load_profile

log = logging.getLogger("llm.webui")


def options_with_form(parsed_options, form) -> argparse.Namespace:
    """A copy of the options with the form's values, converted the way Locust's /swarm converts them."""
    opts = argparse.Namespace(**vars(parsed_options))
    values = vars(opts)
    for key, value in form.items():
        if key == "user_count":
            values["num_users"] = value
        elif key == "host":
            values["host"] = str(value).replace("<", "").replace(">", "")
        elif key == "run_time":
            if not value:
                values["run_time"] = None  # no limit (see install_start_check)
                continue
            try:
                values["run_time"] = parse_timespan(value)
            except ValueError:
                pass  # Locust's own check answers this one
        elif key in values:
            current = values[key]
            if isinstance(current, bool):
                values[key] = value == "true"
            elif current is None or isinstance(current, list):
                values[key] = value
            else:
                try:
                    values[key] = type(current)(value)
                except (TypeError, ValueError):
                    values[key] = value
    return opts


def check_start(environment, form) -> RunPlan:
    """The plan a start with this form would run (raises InputError). Restarts the built-in
    simulator with the form's profile when it changed, on the same address."""
    opts = options_with_form(environment.parsed_options, form)
    plan = RunPlan.from_options(opts)
    load_workload(plan)
    if plan.tokenizer:
        token_counter(plan.tokenizer)
    host = (opts.host or environment.host or "").rstrip("/")
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
            raise InputError(f"--sim-profile: the built-in simulator did not start with '{plan.sim_profile}': {e}") from None
    return check_target(environment, plan, host)


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
        # the run builds its plan from the options as Locust leaves them with this form: the shape's
        # reset (stepped runs) or test start; never a plan prepared earlier (at init, from the command line)
        environment.llm.prepared = False
        if request.form.get("run_time", None) == "":  # an emptied field means no limit (Locust keeps the last one)
            environment.parsed_options.run_time = None
        return None
