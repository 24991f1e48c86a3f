"""The import graph points one way: every project import goes to the same layer or one below it,
and no two modules (or packages) import each other, directly or around a loop.

The graph is read with `ast` from every `import` in the source, at module level or inside a
function alike: an import hidden in a function to dodge a cycle is still an arrow.
"""

from __future__ import annotations

import ast
import functools
import os
from collections import defaultdict

from tests.helpers import ROOT

# Lowest first. A module belongs to the longest prefix named here.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("ground", ("core",)),  # values, durations, the one bad-input error, text helpers
    # no Locust; users/ is the plain client, targets/ the backends it spreads load over, runfolder/ the
    # results folder's format (written, recovered, read), stats/ the statistics over measurements
    ("pure", ("metrics", "workloads", "simulator", "shapes", "users", "targets", "runfolder", "stats")),
    ("plugin", ("plugin",)),  # everything that plugs into Locust: hooks, options, run plan, load models, users, ...
    ("outputs", ("reports", "webui")),  # reports and the web UI's LLM view
    ("planning", ("sweeps",)),  # runs of runs: sweeps of server settings, A/B of one change
    ("entry", ("locustfile", "bench")),
]
LOCUST_FREE = ("core", "metrics", "workloads", "simulator", "shapes", "users", "targets", "runfolder", "stats")
PACKAGES = sorted({p.split(".")[0] for _, prefixes in LAYERS for p in prefixes})


def module_name(path: str) -> str:
    rel = os.path.relpath(path, ROOT)[: -len(".py")].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def project_modules() -> dict[str, str]:
    out = {}
    for top in PACKAGES:
        base = os.path.join(ROOT, top)
        if os.path.isfile(base + ".py"):
            out[top] = base + ".py"
            continue
        for folder, _dirs, files in os.walk(base):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(folder, f)
                    out[module_name(path)] = path
    return out


def imports_of(name: str, path: str, known: set[str]) -> set[str]:
    """The project modules `name` imports (resolved to the longest known module name)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets.add(mod)
            targets.update(f"{mod}.{alias.name}" for alias in node.names)
    resolved = set()
    for t in targets:
        parts = t.split(".")
        for i in range(len(parts), 0, -1):
            candidate = ".".join(parts[:i])
            if candidate in known:
                resolved.add(candidate)
                break
    resolved.discard(name)
    return resolved


def layer_of(module: str) -> int:
    best, best_len = None, -1
    for index, (_layer, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best


@functools.cache  # one walk of the sources for all the tests of this module
def graph() -> dict[str, set[str]]:
    modules = project_modules()
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_points_up_a_layer():
    upward = []
    for module, targets in graph().items():
        for target in targets:
            if layer_of(target) > layer_of(module):
                upward.append(
                    f"{module} -> {target} ({LAYERS[layer_of(module)][0]} imports {LAYERS[layer_of(target)][0]})"
                )
    assert not upward, "imports that point up a layer:\n" + "\n".join(sorted(upward))


def test_no_module_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_package_cycle():
    """Packages import each other one way only."""

    def unit(module: str) -> str:
        return module.split(".")[0]

    edges: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph().items():
        for target in targets:
            if unit(target) != unit(module):
                edges[unit(module)].add(unit(target))
    cycle = find_cycle(edges)
    assert cycle is None, "packages import each other: " + " -> ".join(cycle)


def test_pure_layers_do_not_import_locust():
    offenders = []
    for module, path in project_modules().items():
        if not any(module == p or module.startswith(p + ".") for p in LOCUST_FREE):
            continue
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            if any(n == "locust" or n.startswith("locust.") for n in names):
                offenders.append(module)
    assert not offenders, f"modules below the plugin layer import Locust: {sorted(set(offenders))}"


def test_the_checker_sees_an_upward_arrow_and_a_cycle():
    """The checks above can fail: a made-up graph with one upward arrow and one loop is caught."""
    assert layer_of("plugin.hooks") > layer_of("metrics.summary")
    assert layer_of("users.stream") < layer_of("plugin.users")
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
