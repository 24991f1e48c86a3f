"""tests/conftest.py holds every test to the marks of what it starts: a pytest of its own runs probe
tests under it (with Locust's gevent subprocess and with the standard one, in one process and
side by side under pytest-xdist) and each wrong mark fails naming the mark to add, while a right
one passes; `-m unit` selects the unmarked tests; an `alone` test runs while no other test does, a
`timing` test at nice 0 beside the others at nice 19, never beside another; modules are handed out
longest first by their recorded seconds."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.process

PROBE = """
import subprocess, sys
import pytest
{gevent}

def run(*argv):
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60)

def test_unit_computes():
    assert sum(range(4)) == 6

def test_unit_starts_python():
    run(sys.executable, "-c", "pass")

@pytest.mark.process
def test_process_starts_python():
    assert run(sys.executable, "-c", "print(6)").stdout == "6\\n"

@pytest.mark.process
def test_process_starts_chromium():
    run("./bin/chromium")

@pytest.mark.browser
def test_browser_starts_chromium():
    assert run("./bin/chromium").returncode == 0

@pytest.mark.process
def test_process_starts_podman():
    run("./bin/podman", "ps")

@pytest.mark.containers
def test_containers_starts_podman_and_python():
    assert run("./bin/podman", "ps").returncode == 0 and run(sys.executable, "-c", "pass").returncode == 0
"""


def probe(
    tmp_path, gevent: bool, *args: str, source: str = PROBE, env: dict | None = None
) -> subprocess.CompletedProcess:
    shutil.copy(os.path.join(ROOT, "tests", "conftest.py"), tmp_path / "conftest.py")
    shutil.copy(os.path.join(ROOT, "pytest.ini"), tmp_path / "pytest.ini")
    (tmp_path / "bin").mkdir(exist_ok=True)
    for tool in ("chromium", "podman"):  # stand-ins: what a command is, is told by its name
        (tmp_path / "bin" / tool).write_text("#!/bin/sh\nexit 0\n")
        (tmp_path / "bin" / tool).chmod(0o755)
    (tmp_path / "test_probe.py").write_text(
        source.format(gevent="import locust  # gevent's subprocess" if gevent else "")
    )
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-rA", *args, "test_probe.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    "gevent, args", [(True, ()), (False, ()), (True, ("-n", "2"))], ids=["gevent", "standard", "gevent-xdist"]
)
def test_a_test_that_starts_more_than_its_marks_say_fails_naming_the_mark(tmp_path, gevent, args):
    out = probe(tmp_path, gevent, *args).stdout
    outcomes = {test: result for result, test in re.findall(r"^(PASSED|FAILED) test_probe.py::(\w+)", out, re.M)}
    assert outcomes == {
        "test_unit_computes": "PASSED",
        "test_unit_starts_python": "FAILED",
        "test_process_starts_python": "PASSED",
        "test_process_starts_chromium": "FAILED",
        "test_browser_starts_chromium": "PASSED",
        "test_process_starts_podman": "FAILED",
        "test_containers_starts_podman_and_python": "PASSED",
    }, out[-3000:]
    for test, need in (
        ("test_unit_starts_python", "process"),
        ("test_process_starts_chromium", "browser"),
        ("test_process_starts_podman", "containers"),
    ):
        assert re.search(
            rf"test_probe.py::{test} starts `.*` but is marked \w+: mark it {need} "
            rf"\(pytestmark = pytest.mark.{need} in its module",
            out,
        ), (test, out[-3000:])


def test_unit_selects_the_tests_without_a_mark(tmp_path):
    out = probe(tmp_path, False, "-m", "unit", "--collect-only", "-q").stdout
    assert re.findall(r"test_probe.py::(\w+)", out) == ["test_unit_computes", "test_unit_starts_python"], out


TURNS = """
import json, os, subprocess, sys, time
import pytest
{gevent}

def log(name):
    # the nice value of this process and of a process it starts
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"], capture_output=True, text=True)
    with open(os.environ["TURNS_LOG"], "a") as f:
        f.write(json.dumps([name, time.time(), os.getpriority(os.PRIO_PROCESS, 0), int(child.stdout)]) + "\\n")
        time.sleep(1)
        f.write(json.dumps([name, time.time(), os.getpriority(os.PRIO_PROCESS, 0), int(child.stdout)]) + "\\n")

pytestmark = pytest.mark.process

@pytest.mark.timing
@pytest.mark.parametrize("i", range(3))
def test_timing(i):
    log(f"timing{{i}}")

@pytest.mark.parametrize("i", range(6))
def test_side(i):
    log(f"side{{i}}")

@pytest.mark.alone
@pytest.mark.parametrize("i", range(2))
def test_alone(i):
    log(f"alone{{i}}")
"""


def test_an_alone_test_runs_while_no_other_test_does_a_timing_test_before_the_others_and_the_others_side_by_side(
    tmp_path,
):
    out = probe(
        tmp_path, True, "-n", "3", "--dist", "load", source=TURNS, env={"TURNS_LOG": str(tmp_path / "turns.log")}
    )
    assert out.returncode == 0 and "11 passed" in out.stdout, out.stdout[-3000:]
    spans, policies = {}, {}
    for name, t, own, child in (json.loads(line) for line in (tmp_path / "turns.log").read_text().splitlines()):
        spans.setdefault(name, []).append(t)
        policies[name] = (own, child)
    assert len(spans) == 11 and all(len(s) == 2 for s in spans.values()), spans

    def beside(name):
        (start, end) = spans[name]
        return [other for other, (s, e) in spans.items() if other != name and s < end and start < e]

    assert not beside("alone0") and not beside("alone1"), spans
    assert any(beside(f"side{i}") for i in range(6)), spans  # and the others did run side by side
    for i in range(3):  # no two timing tests at once
        assert not [o for o in beside(f"timing{i}") if o.startswith(("timing", "alone"))], spans
    if os.geteuid() == 0:  # root may return from nice 19 to 0 (tests/conftest.py)
        assert any(beside(f"timing{i}") for i in range(3)), spans  # the others go on beside a timing test
        assert all(policies[f"timing{i}"] == (0, 0) for i in range(3)), policies
        assert all(policies[f"alone{i}"] == (0, 0) for i in range(2)), policies
        assert all(policies[f"side{i}"] == (19, 19) for i in range(6)), policies


def test_modules_are_handed_out_unrecorded_first_then_longest_first(tmp_path):
    """With one test process, the order the tests run in is the order pytest-xdist handed their
    modules out, under pytest.ini's own options: not its default (most tests first), but
    tests/conftest.py's (tests/durations.json)."""
    shutil.copy(os.path.join(ROOT, "tests", "conftest.py"), tmp_path / "conftest.py")
    shutil.copy(os.path.join(ROOT, "pytest.ini"), tmp_path / "pytest.ini")
    (tmp_path / "tests").mkdir()
    log = tmp_path / "order.log"
    for module, tests in (("few_long", 1), ("many", 4), ("timing", 2), ("new", 1)):
        (tmp_path / "tests" / f"test_{module}.py").write_text(
            "".join(f"def test_{i}():\n    open({str(log)!r}, 'a').write({module!r} + '\\n')\n" for i in range(tests))
        )
    (tmp_path / "durations.json").write_text(
        json.dumps(
            {
                "modules": {
                    "tests/test_few_long.py": {"side": 30.0},
                    "tests/test_many.py": {"side": 5.0},
                    "tests/test_timing.py": {"side": 1.0, "timing": 20.0},
                }
            }
        )
    )  # 30, 5 and 21 s; test_new unrecorded
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "1", "tests"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout[-3000:]
    assert log.read_text().split() == ["new", "few_long", "timing", "timing", "many", "many", "many", "many"], (
        out.stdout[-3000:]
    )
