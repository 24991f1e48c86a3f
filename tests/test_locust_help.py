"""`locust -f locustfile.py --help`, exactly as a person types it, lists every suite option in the
web form's groups with its default and environment variable (plugin/locust_help.py, installed by
requirements.txt's `.`); Locust's help of another locustfile, and every other program, stay as they were."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig

import pytest

from plugin.options import DECLARED, GROUP_ORDER
from tests.helpers import ROOT

pytestmark = pytest.mark.process
BIN = os.path.dirname(sys.executable)
REINSTALL = "the environment's copy differs from the checkout's: pip install -r requirements.txt"


def fresh_env() -> dict:
    """No LOCUST_* setting of the caller's; this environment's `locust` first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
    env["PATH"] = BIN + os.pathsep + env["PATH"]
    env["COLUMNS"] = "1000"  # argparse wraps help at the terminal's width, and breaks words at hyphens
    return env


def run(command: str, cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, shell=True, cwd=cwd, env=fresh_env(), capture_output=True, text=True, timeout=120)


def test_the_installed_start_up_hook_is_the_checkouts():
    site = sysconfig.get_paths()["purelib"]
    for source, installed in (
        ("locust_help.py", "llm_loadtest_locust_help.py"),
        ("locust_help.pth", "llm_loadtest_locust_help.pth"),
    ):
        path = os.path.join(site, installed)
        assert os.path.isfile(path), f"{installed} is not installed: pip install -r requirements.txt"
        with open(path, encoding="utf-8") as a, open(os.path.join(ROOT, "plugin", source), encoding="utf-8") as b:
            assert a.read() == b.read(), f"{installed}: {REINSTALL}"


def test_locust_help_lists_the_suites_options_grouped_with_defaults_and_variables():
    proc = run("locust -f locustfile.py --help", ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = " ".join(proc.stdout.split())
    assert "--spawn-rate" in text  # Locust's own options are still there
    places = [text.index(f" {group}: ") for group in GROUP_ORDER]
    assert places == sorted(places), "the groups in the web form's order"
    for d in DECLARED:
        assert f" {d.flag} " in text, d.flag
        assert f"; env {d.env}]" in text, d.env
    for flag, shown in (
        ("--slo", "[default: empty; env LOCUST_SLO]"),
        ("--find-capacity", "[default: off; env LOCUST_FIND_CAPACITY]"),
        ("--model", "[default: empty; env LOCUST_MODEL]"),
        ("--step-time", "[default: '60s'; env LOCUST_STEP_TIME]"),
    ):
        following = [d.flag for d in DECLARED][[d.flag for d in DECLARED].index(flag) + 1]
        own = text[text.index(f" {flag} ") : text.index(f" {following} ")]  # up to the next option's flag
        assert shown in own, (flag, own)
    # the same lines as `python -m plugin.options`, the help without Locust
    alone = subprocess.run(
        [sys.executable, "-m", "plugin.options"], cwd=ROOT, env=fresh_env(), capture_output=True, text=True, timeout=60
    )
    for d in DECLARED:
        assert " ".join(d.help_line().replace("%%", "%").split()) in " ".join(alone.stdout.split()), d.flag
        assert " ".join(d.help_line().replace("%%", "%").split()) in text, d.flag


def test_another_locustfiles_help_and_other_programs_are_unchanged(tmp_path):
    (tmp_path / "locustfile.py").write_text(
        "from locust import HttpUser, task\n\n\nclass U(HttpUser):\n    @task\n    def t(self):\n        pass\n"
    )
    for command in ("locust -f locustfile.py --help", "locust --help"):
        proc = run(command, str(tmp_path))
        assert proc.returncode == 0 and "--spawn-rate" in proc.stdout, proc.stderr[-2000:]
        assert "--slo" not in proc.stdout and "Target and model" not in proc.stdout, command
    # a Python program given --help: the start-up line imports nothing
    probe = "import sys; print(sorted(m for m in sys.modules if m.startswith(('locust', 'llm_loadtest', 'gevent'))))"
    proc = run(f'{sys.executable} -c "{probe}" --help', str(tmp_path))
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr
