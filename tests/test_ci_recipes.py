"""The CI recipes in deploy/ci/ run as the CI would: their YAML is parsed, the shell commands of the
nightly job are taken out and executed in a copy of the checkout, against a simulator on 127.0.0.1,
with the CI's variables set to a short run. Two nights each: the first has no baseline (the gate
is skipped, the job passes), then its results are promoted to the baseline as docs/ci.md says,
and the second night runs against a simulator three times slower to the first token: the gate
fails on the TTFT rule, the JUnit file shows that rule failed with the measured values, and the
report and compare tables reach the job summary. Only the `pip install` command is not run (the
test's environment has the requirements) and the `uses:` actions (checkout, upload) are checked,
not run."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import yaml

from tests.helpers import ROOT, simulator

pytestmark = pytest.mark.process

CI = os.path.join(ROOT, "deploy", "ci")
INSTALL = "pip install -r requirements.txt"
# the CI's variables: the target comes from the test, the run is short
# 8 users: the slower night's replies (TTFT 300 ms) still give the SLO's p95 the 59 values its upper
# bound needs (metrics/verdict.py) on a crowded machine; 4 users gave 56-68, and 40 once in CI
# (undecided: the run's own SLO cases failed)
SETTINGS = {
    "LOCUST_RUN_TIME": "6s",
    "LOCUST_USERS": "8",
    "LOCUST_SPAWN_RATE": "8",
    "LOCUST_WARMUP": "1s",
    "LOCUST_MAX_TOKENS_OVERRIDE": "12",
    "LOCUST_STOP_TIMEOUT": "10",
}


def checkout(tmp_path) -> str:
    """A fresh checkout: the repository's files (linked), no results/ and no baseline yet."""
    work = tmp_path / "checkout"
    work.mkdir()
    for name in os.listdir(ROOT):
        if name not in ("results", ".git", ".pytest_cache"):
            os.symlink(os.path.join(ROOT, name), work / name)
    return str(work)


def profile(tmp_path, ttft_s: float) -> str:
    path = tmp_path / f"fixed-{ttft_s}.yaml"
    path.write_text(
        f"kind: fixed\nmodel: sim-model\nttft_s: {ttft_s}\nitl_s: 0.005\nstream_interval: 1\nmax_model_len: 1048576\n"
    )
    return str(path)


def base_env(host: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    return {**env, **SETTINGS, "LOCUST_HOST": host}


def sh(script: str, cwd: str, env: dict) -> subprocess.CompletedProcess:
    # GitHub's and GitLab's bash: stop at the first failing command
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


# -- GitHub Actions ----------------------------------------------------------------------------------


def github_job():
    wf = yaml.safe_load(open(os.path.join(CI, "github-actions.yml")))
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` as true
    assert "schedule" in on and on["schedule"][0]["cron"]
    (job,) = wf["jobs"].values()
    return wf["env"], job


def run_github(work: str, host: str, summary_file: str) -> tuple[list[str], int, str]:
    """Runs the job's steps as the runner does: a step runs when no step failed before it, or when
    its `if` is always(). Returns (names of the steps that ran, the job's result, their output)."""
    recipe_env, job = github_job()
    env = base_env(host)
    for k, v in recipe_env.items():
        if "${{" not in str(v) and k not in env:
            env[k] = str(v)
    env |= {"GITHUB_STEP_SUMMARY": summary_file, "LOCUST_MODEL": "", "LOCUST_API_KEY": ""}
    failed, ran, out = False, [], ""
    for step in job["steps"]:
        cond = step.get("if")
        assert cond in (None, "always()"), f"the test runs steps with no `if` or `if: always()`, not {cond!r}"
        if failed and cond is None:
            continue
        if "uses" in step:
            continue  # checkout, setup-python, upload, test report: checked by the caller
        if step["run"].strip() == INSTALL:
            continue
        ran.append(step["name"])
        proc = sh(step["run"], work, env)
        out += f"--- {step['name']} (exit {proc.returncode})\n{proc.stdout}{proc.stderr}"
        failed = failed or proc.returncode != 0
    return ran, int(failed), out


def test_github_actions_recipe_runs_a_nightly_and_gates_on_the_baseline(tmp_path):
    recipe_env, job = github_job()
    uses = {s["uses"].split("@")[0]: s for s in job["steps"] if "uses" in s}
    upload = uses["actions/upload-artifact"]
    assert upload["if"] == "always()" and upload["with"]["path"] == "results/"
    assert "actions/checkout" in uses and uses["actions/setup-python"]["with"]["python-version"] == "3.11"
    assert [s["run"] for s in job["steps"] if "run" in s][0] == INSTALL
    work = checkout(tmp_path)
    summary = str(tmp_path / "step-summary.md")

    with simulator("--profile", profile(tmp_path, 0.1)) as host:
        ran, result, out = run_github(work, host, summary)
    assert result == 0, out
    assert ran == ["Load test", "Compare with the baseline", "Job summary"], out
    assert "no baseline in ci/baseline" in out
    cases = junit_cases(os.path.join(work, "results", "junit-run.xml"))
    assert {"complete", "results written", "requests", "ttft.p95<5s", "tpot.p95<100ms"} <= set(cases), cases
    assert not run_failures(cases), cases
    assert "## LLM load test: `nightly`" in open(summary).read()

    promote(work)  # docs/ci.md "The baseline"
    with simulator("--profile", profile(tmp_path, 0.3)) as host:
        ran, result, out = run_github(work, host, summary)
    assert result == 1, out
    assert ran == ["Load test", "Compare with the baseline", "Job summary"], out
    assert_regression(work, open(summary).read(), out)


def promote(work: str) -> None:
    """A good night's results become the baseline; the next job starts from a fresh checkout."""
    os.makedirs(os.path.join(work, "ci"))
    shutil.copytree(os.path.join(work, "results", "nightly"), os.path.join(work, "ci", "baseline"))
    shutil.rmtree(os.path.join(work, "results"))


def assert_regression(work: str, summary: str, out: str) -> None:
    run_cases = junit_cases(os.path.join(work, "results", "junit-run.xml"))
    assert not run_failures(run_cases), (run_cases, out)  # the run itself is fine
    cases = junit_cases(os.path.join(work, "results", "junit-compare.xml"))
    assert list(cases) == ["ttft.p95>+20%", "output_tokens_per_s<-10%", "error_rate>+1pp"], cases
    failure, measured = cases["ttft.p95>+20%"]
    assert failure and failure.startswith("base ") and ", new " in failure and "regression" in failure, cases
    base, new = (
        float(x.replace(",", "")) for x in re.match(r"base ([\d,.]+) ms, new ([\d,.]+) ms, change \+", failure).groups()
    )
    # the two figures are the baseline's and this run's own P95s, and this run's is the slower
    # simulator's (its TTFT is 300 ms, the baseline's 100 ms); their difference is not asserted: on
    # this crowded machine either tail can carry tens of ms of the load (base 156, new 303 once)
    with open(os.path.join(work, "ci", "baseline", "summary.json")) as f:
        base_p95 = json.load(f)["overall"]["ttft_ms"]["p95"]
    with open(os.path.join(work, "results", "nightly", "summary.json")) as f:
        new_p95 = json.load(f)["overall"]["ttft_ms"]["p95"]
    assert abs(base - base_p95) <= 0.06 and abs(new - new_p95) <= 0.06, (base, new, base_p95, new_p95)
    assert 100 <= base < 300 <= new, (base, new)
    assert cases["error_rate>+1pp"][0] is None
    assert "REGRESSION: ttft.p95" in summary and "## Compare" in summary


CLIENT_CASE = "client within accuracy limits"


def run_failures(cases: dict[str, tuple[str | None, str]]) -> list[str]:
    """The run's failed cases, but for the client's own accuracy: on this test's crowded machine (the
    other tests, the simulator and the job on two cores) the load process may wait for a CPU long
    enough to be rightly judged client bound; that case fails the report, not the job (its exit code
    is checked), and tests/test_junit.py checks the case itself."""
    return [
        n
        for n, (failure, _) in cases.items()
        if failure and not (n == CLIENT_CASE and failure.startswith("client bound"))
    ]


def junit_cases(path: str) -> dict[str, tuple[str | None, str]]:
    """{case name: (failure message or None, system-out)} of a JUnit file, checked for its counts."""
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    failures = [c for c in cases if c.find("failure") is not None]
    assert int(suite.get("tests")) == len(cases) and int(suite.get("failures")) == len(failures)
    out = {}
    for c in cases:
        f = c.find("failure")
        out[c.get("name")] = (f.get("message") if f is not None else None, c.findtext("system-out") or "")
    return out


# -- GitLab CI --------------------------------------------------------------------------------------


def gitlab_job():
    doc = yaml.safe_load(open(os.path.join(CI, "gitlab-ci.yml")))
    (job,) = doc.values()
    return job


def run_gitlab(work: str, host: str) -> tuple[int, str]:
    """Runs the job's script as the runner does: one shell, stopping at the first failing line;
    the job's variables unless the schedule sets them (here the test's short run and target)."""
    job = gitlab_job()
    env = {**{k: str(v) for k, v in job["variables"].items()}, **base_env(host)}
    lines = [line for line in job["script"] if line.strip() != INSTALL]
    proc = sh("\n".join(lines), work, env)
    return proc.returncode, proc.stdout + proc.stderr


def test_gitlab_ci_recipe_runs_a_nightly_and_gates_on_the_baseline(tmp_path):
    job = gitlab_job()
    assert job["script"][0] == INSTALL
    assert {"if": '$CI_PIPELINE_SOURCE == "schedule"'} in job["rules"]
    art = job["artifacts"]
    assert art["when"] == "always" and art["paths"] == ["results/"] and art["reports"]["junit"] == "results/junit-*.xml"
    work = checkout(tmp_path)

    with simulator("--profile", profile(tmp_path, 0.1)) as host:
        code, out = run_gitlab(work, host)
    assert code == 0, out
    assert "no baseline in ci/baseline" in out
    cases = junit_cases(os.path.join(work, "results", "junit-run.xml"))
    assert cases and not run_failures(cases), cases

    promote(work)
    with simulator("--profile", profile(tmp_path, 0.3)) as host:
        code, out = run_gitlab(work, host)
    assert code == 1, out
    assert_regression(
        work,
        open(os.path.join(work, "results", "nightly", "compare.md")).read()
        + open(os.path.join(work, "results", "nightly", "report.md")).read(),
        out,
    )


def test_without_a_target_the_recipes_stop_before_any_load(tmp_path):
    """An unset LLM_HOST would otherwise run the nightly against the built-in simulator."""
    work = checkout(tmp_path)
    env = base_env("")
    _, job = github_job()
    load = next(s for s in job["steps"] if s.get("name") == "Load test")
    proc = sh(load["run"], work, env)
    assert proc.returncode == 2 and "LLM_HOST" in proc.stdout and not os.path.exists(os.path.join(work, "results"))
    code, out = run_gitlab(work, "")
    assert code == 2 and "LOCUST_HOST" in out and not os.path.exists(os.path.join(work, "results"))
