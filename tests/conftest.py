"""Tests marked by what they start, and held to it.

A module (or one test) declares the kinds of thing it starts with a mark: `process` (simulator,
Locust or any other child process), `browser` (Chromium), `containers` (podman), `servers` (real
inference servers and their venvs). A test with none of them is marked `unit`: it starts no
process at all, so `python -m pytest -m unit` runs in under a minute (in-process test doubles, such as
a small HTTP server on a thread, are allowed).

The marks are checked while the tests run, so a wrong one fails at once rather than slowing the
inner loop or hiding a requirement: an audit hook sees every process a test (or a fixture it
uses) starts. A `unit` test that starts one fails at that line with the mark its module needs; a
marked test that starts Chromium, podman or a server venv without the matching mark fails the
same way. `process` is implied by the other three (a browser test also starts Locust).
"""

from __future__ import annotations

import os
import sys

import pytest

KINDS = ("process", "browser", "containers", "servers")

# what a started command is, by its words' base names (the first that matches wins)
_CONTAINERS = {"podman", "podman-compose", "docker", "buildah", "debootstrap"}


def kind_of(argv) -> str:
    words = [os.fsdecode(w) for w in (argv or ())] if not isinstance(argv, (str, bytes)) else [os.fsdecode(argv)]
    names = {os.path.basename(w.split()[0]) for w in words if w.strip() and not w.startswith("-")}
    if names & _CONTAINERS:
        return "containers"
    if any(n.startswith("chrom") or n == "headless_shell" for n in names):
        return "browser"
    if any("/.cache/venv-" in w for w in words):  # tests/servers/venvs.py: the real servers' own venvs
        return "servers"
    return "process"


def declared(item) -> set[str]:
    return {k for k in KINDS if item.get_closest_marker(k) is not None}


def pytest_collection_modifyitems(items):
    for item in items:
        if not declared(item):
            item.add_marker(pytest.mark.unit)


# ------------------------------------------------------------------ the check, while tests run

_current: tuple[str, frozenset] | None = None  # (test id, its declared kinds) during its setup/call/teardown


def _refuse(what: str, need: str) -> None:
    test, kinds = _current
    raise RuntimeError(f"{test} starts {what} but is marked {', '.join(sorted(kinds)) or 'unit'}: mark it {need} "
                       f"(pytestmark = pytest.mark.{need} in its module, or on the test; tests/conftest.py)")


def _audit(event: str, args: tuple) -> None:
    if _current is None or not event.startswith(("os.", "subprocess.")):
        return
    if event == "subprocess.Popen":
        argv = args[1]
    elif event in ("os.posix_spawn", "os.exec", "os.spawn"):
        argv = args[1] if event != "os.spawn" else args[2]
    elif event == "os.system":
        argv = args[0]
    elif event in ("os.fork", "os.forkpty"):
        argv = _popen_args()  # gevent's Popen (Locust's, once imported) forks, then execs in the child
    else:
        return
    kinds = _current[1]
    if not kinds:
        _refuse(_describe(argv), "process")
    kind = kind_of(argv) if argv is not None else "process"
    if kind != "process" and kind not in kinds:
        _refuse(_describe(argv), kind)


def _popen_args():
    """The command of the Popen this fork is for, if it is one (None for a bare fork)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name != "_execute_child":
        frame = frame.f_back
    return frame.f_locals.get("args") if frame is not None else None


def _describe(argv) -> str:
    if argv is None:
        return "a process"
    words = [argv] if isinstance(argv, (str, bytes)) else list(argv)
    return "`" + " ".join(os.fsdecode(w) for w in words[:4])[:120] + "`"


sys.addaudithook(_audit)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item):
    global _current
    _current = (item.nodeid, frozenset(declared(item)))
    try:
        yield
    finally:
        _current = None
