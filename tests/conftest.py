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

import fcntl
import json
import os
import sys
import tempfile

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
    if any("/.cache/venv-" in w for w in words):  # bench/servers/venvs.py: the real servers' own venvs
        return "servers"
    return "process"


def declared(item) -> set[str]:
    return {k for k in KINDS if item.get_closest_marker(k) is not None}


def pytest_collection_modifyitems(items):
    for item in items:
        if not declared(item):
            item.add_marker(pytest.mark.unit)
    modules = dict.fromkeys(_module(item) for item in items)  # in collection order, once each
    rank = {module: place for place, module in enumerate(longest_first(modules, _recorded()))}
    items.sort(key=lambda item: rank[_module(item)])  # stable: a module's tests keep their order


# ------------------------------------------------------------------ longest modules first
# pytest-xdist (`--dist loadfile --no-loadscope-reorder`, pytest.ini) hands each idle test process
# the next module in collection order. Its own order (most tests first) left the run's last
# minutes to long modules of one or two tests, one process busy and three idle; so modules go out
# by the time they took in the last recorded whole run, longest first (the longest-processing-time
# rule). A module with no record (a new one) goes first, as if longest. (Counting a `timing` second
# twice put the modules with most timing tests side by side at the start, where all but one of
# them waited for their turn: bench/RESULTS.md.)
# `python bench/suite_timeline.py --record` rewrites the record from a timeline of a whole run.

DURATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "durations.json")


def _module(item) -> str:
    return item.nodeid.split("::", 1)[0]


def _recorded() -> dict[str, dict[str, float]]:
    try:
        with open(DURATIONS) as f:
            return json.load(f)["modules"]
    except FileNotFoundError:
        return {}


def longest_first(modules, recorded: dict[str, dict[str, float]]) -> list[str]:
    """The modules in the order to hand out: unrecorded ones first (in the order given), then by
    their recorded seconds (all turns), longest first."""
    return sorted(modules, key=lambda m: (m in recorded, -sum(recorded.get(m, {}).values())))


# ------------------------------------------------------------------ the check, while tests run

_current: tuple[str, frozenset] | None = None  # (test id, its declared kinds) during its setup/call/teardown


def _refuse(what: str, need: str) -> None:
    test, kinds = _current
    raise RuntimeError(
        f"{test} starts {what} but is marked {', '.join(sorted(kinds)) or 'unit'}: mark it {need} "
        f"(pytestmark = pytest.mark.{need} in its module, or on the test; tests/conftest.py)"
    )


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


@pytest.hookimpl(
    hookwrapper=True, tryfirst=True
)  # outside pytest-timeout's clock: waiting for a turn is no test's time
def pytest_runtest_protocol(item, nextitem):
    global _current
    kind = turn_of(item)
    if _turns is not None:
        _turns.take(kind)
    _current = (item.nodeid, frozenset(declared(item)))
    try:
        yield
    finally:
        _current = None
        if _turns is not None:
            _turns.give_back()


# ------------------------------------------------------------------ side by side (pytest-xdist)
# `-n 4 --dist loadfile` runs the tests in several processes: most of a test's time is spent
# waiting on the processes it starts (`pytest.ini` asks for it; `-n 0` runs one at a time). `--dist loadfile` keeps each module in one process, so a
# module-scoped fixture (often a whole Locust run) is made once and `containers` tests (fixed
# ports 8089, 9090) never overlap. (`--dist loadgroup` would group finer, but pytest-xdist 3.8
# cannot rename a test's id under pytest 9, so its groups are ignored.)
#
# A `timing` test asserts timing that a busy CPU would change (the simulator's schedule, TTFT
# against the truth log, an open-loop rate): it runs at nice 0 while every other test, and each
# process it starts, runs at nice 19. A task of nice 0 that wakes preempts one of nice 19 at once
# and, while both want the CPU, gets 68 times its share (sched(7): weights 1024 and 15); the nice-19
# task still gets that share, so a Locust worker's heartbeat is late by a fraction of a second at
# most, never starved (SCHED_IDLE starved them: a worker declared lost beside a busy timing test).
# So the other tests fill the CPU a timing test leaves (it uses a quarter of this 2-core machine)
# instead of waiting for it, and no two timing tests run at once. An `alone` test runs while no
# other test does: it reads the host's own CPU pressure or run queue (the client's self-health),
# which tasks waiting at nice 19 still count. Where a process may not return from nice 19 to 0
# (not root, RLIMIT_NICE under 20), a timing test runs alone instead.

SIDE, TIMING, ALONE = "side", "timing", "alone"


def turn_of(item) -> str:
    if item.get_closest_marker("alone") is not None:
        return ALONE
    return TIMING if item.get_closest_marker("timing") is not None else SIDE


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads -n
def pytest_cmdline_main(config):
    """`-m unit` runs in one process unless -n is given: its tests compute rather than wait, and
    each extra process would import every test module again (twice the CPU time)."""
    explicit = config.invocation_params.args
    if config.option.markexpr == "unit" and not any(str(a).startswith(("-n", "--numprocesses")) for a in explicit):
        config.option.numprocesses = 0


BACKGROUND_NICE = 19


def _priorities_can_change() -> bool:
    """Whether this process may go back from nice 19 to 0 (setpriority(2))."""
    import resource

    return os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_NICE)[0] >= 20


def _set_nice(nice: int, pids) -> None:
    for pid in pids:
        try:
            os.setpriority(os.PRIO_PROCESS, pid, nice)  # on Linux: that thread; a process's children inherit it
        except (ProcessLookupError, PermissionError):
            pass  # a process gone meanwhile, or not ours


def _descendants() -> list[int]:
    """The processes this one started that are still running (a module fixture's simulator)."""
    import psutil

    return [p.pid for p in psutil.Process().children(recursive=True)]


class _Turns:
    """Whose turn it is among the run's processes, by flock(2) on three files. `turn`: a side
    or timing test holds it shared, an alone test exclusive; each takes `gate` while it waits for
    `turn`, so an alone test waiting for the running tests to end keeps new ones from starting (it
    is not starved). `timing`: a timing or alone test holds it exclusive, so no two overlap. The
    nice value (see above) is set for this process, which the test's processes inherit, and for
    the processes it started before (a module fixture's simulator), so a timing test's server and
    client both run at nice 0, and a fixture started by a timing test runs at 19 beside others."""

    def __init__(self, folder: str):
        os.makedirs(folder, exist_ok=True)
        self.gate = open(os.path.join(folder, "gate"), "a")
        self.turn = open(os.path.join(folder, "turn"), "a")
        self.timing = open(os.path.join(folder, "timing"), "a")
        self.priorities = _priorities_can_change()

    def take(self, kind: str) -> None:
        if kind == TIMING and not self.priorities:
            kind = ALONE
        if kind != SIDE:
            fcntl.flock(self.timing, fcntl.LOCK_EX)
        fcntl.flock(self.gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.turn, fcntl.LOCK_EX if kind == ALONE else fcntl.LOCK_SH)
        finally:
            fcntl.flock(self.gate, fcntl.LOCK_UN)
        if self.priorities:  # this process, which the test's processes inherit, and those it started before
            _set_nice(BACKGROUND_NICE if kind == SIDE else 0, [0, *_descendants()])

    def give_back(self) -> None:
        fcntl.flock(self.turn, fcntl.LOCK_UN)
        fcntl.flock(self.timing, fcntl.LOCK_UN)


_turns: _Turns | None = None  # in a pytest-xdist worker only: a serial run is one test at a time


def pytest_configure(config):
    global _turns
    run = getattr(config, "workerinput", {}).get("testrunuid")
    if run:
        _turns = _Turns(os.path.join(tempfile.gettempdir(), f"pytest-turns-{run}"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """In a pytest-xdist worker, wait for the next test on OS locks. Importing Locust
    monkey-patches threading with gevent's, and xdist's queue of tests to run, filled by its
    receiver thread (an OS thread), would then wait on a gevent lock in the main thread: gevent
    raises LoopExit ("this operation would block forever"). The same holds for execnet's event
    that the main thread waits on once the tests are done, for its next task or the shutdown."""
    for plugin in session.config.pluginmanager.get_plugins():
        queue = getattr(plugin, "torun", None)
        if queue is not None and hasattr(queue, "_has_items_event"):
            with queue._lock:
                event = _OSEvent()
                if queue._items:
                    event.set()
                queue._has_items_event = event
            pool = getattr(getattr(plugin.channel, "gateway", None), "_execpool", None)
            ready = getattr(pool, "_primary_thread_task_ready", None)
            if ready is not None:  # its waiting loop holds the object: its methods are replaced, not it
                with pool._running_lock:  # the lock execnet sets the event under
                    event = _OSEvent()
                    if ready.is_set():
                        event.set()
                    ready.set, ready.clear, ready.wait, ready.is_set = event.set, event.clear, event.wait, event.is_set


class _OSEvent:
    """threading.Event's set, clear and wait on the OS locks gevent saved before patching."""

    def __init__(self):
        from gevent.monkey import get_original

        allocate = get_original("_thread", "allocate_lock")
        self._mutex, self._open = allocate(), allocate()  # `_open` is held while the event is clear
        self._open.acquire()
        self._set = False

    def set(self):
        with self._mutex:
            if not self._set:
                self._set = True
                self._open.release()

    def clear(self):
        with self._mutex:
            if self._set:
                self._set = False
                self._open.acquire()

    def is_set(self) -> bool:
        return self._set

    def wait(self):
        self._open.acquire()
        self._open.release()
