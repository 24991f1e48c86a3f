"""The plugin protocol (plugin/state.py): each hook runs only on a process of its side, decided from
the process's role in one place, and every hook a plugin of the suite defines is one the machinery
calls (a hook misnamed, or one of a protocol that is gone, would silently never run)."""

from __future__ import annotations

import ast
import importlib
import inspect
import os

from plugin.state import HOOK_SIDES, LOAD, RESULTS, Plugin, SuiteState

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCUST_EVENTS = ("init", "test_start", "test_stopping", "test_stop", "quitting", "spawning_complete", "request")


class Recorder(Plugin):
    def __init__(self):
        self.calls: list[str] = []

    def __getattribute__(self, name):
        if name in HOOK_SIDES:
            return lambda *args: object.__getattribute__(self, "calls").append(name)
        return object.__getattribute__(self, name)


def hooks_run(role: str) -> set[str]:
    recorder = Recorder()
    state = SuiteState(role, (recorder,))
    for hook in HOOK_SIDES:
        state.call(hook, None)
    return set(recorder.calls)


def test_each_role_runs_the_hooks_of_its_sides():
    results = {h for h, side in HOOK_SIDES.items() if side == RESULTS}
    load = {h for h, side in HOOK_SIDES.items() if side == LOAD}
    assert {"run_started", "worker_report", "results_init"} <= results and {"load_started", "report_to_master"} <= load
    assert hooks_run("master") == results
    assert hooks_run("worker") == load
    assert hooks_run("local") == results | load


def installed_plugins() -> list[type]:
    """The plugin classes locustfile.py installs (read from its imports, not imported: importing it
    adds Locust listeners and options to every later test)."""
    tree = ast.parse(open(os.path.join(ROOT, "locustfile.py"), encoding="utf-8").read())
    out = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            module = importlib.import_module(node.module)
            out += [c for a in node.names if inspect.isclass(c := getattr(module, a.name)) and issubclass(c, Plugin)]
    return out


def test_every_hook_of_the_protocol_has_a_side_and_no_plugin_waits_for_a_locust_event():
    protocol = {n for n, v in vars(Plugin).items() if inspect.isfunction(v)}
    assert protocol == set(HOOK_SIDES)
    plugins = installed_plugins()
    assert len(plugins) >= 10, plugins
    for cls in plugins:
        methods = {
            n for c in cls.__mro__ if c not in (Plugin, object) for n, v in vars(c).items() if inspect.isfunction(v)
        }
        # a method named after a Locust event is never called: plugin/hooks.py listens to Locust and
        # calls the sides' hooks
        assert not methods & set(LOCUST_EVENTS), f"{cls.__name__}: {sorted(methods & set(LOCUST_EVENTS))}"
        assert methods & protocol, f"{cls.__name__} overrides no hook"
