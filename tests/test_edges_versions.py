"""A worker of another version of the suite: two copies of the source, one line apart. The master
refuses the worker in one line naming both versions, the run is incomplete (exit 4), and every
request the server answered has its record."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from datetime import datetime

import pytest

from plugin import exit_codes
from runfolder.provenance import source_hash
from tests.edges import PYTHON, ended, record_ids, slow_profile, summary_of, truth_ids, wait_for_text
from tests.helpers import ROOT, load_options, master_and_workers, simulator

NOT_COPIED = ("tests", "bench", "docs", "deploy", ".venv", ".git", ".cache", "__pycache__", ".*")


def copy_of_the_suite(to) -> None:
    """The suite's source as a folder of its own: not a git checkout, so its version is its source's hash."""
    shutil.copytree(ROOT, to, ignore=shutil.ignore_patterns(*NOT_COPIED))


def one_line_changed(tree) -> None:
    with open(os.path.join(tree, "metrics", "record.py"), "a") as f:
        f.write("# classified on this worker by one changed line\n")


BEFORE_THE_EXCHANGE = '''"""A suite of a version before its master and workers exchanged theirs."""
KEY = "llm_suite_version"
def announce(environment): pass
def report(data): pass
def masters_differs(environment): return None
def workers_differs(client_id, data): return None
'''


def older(tree) -> None:
    """A version that neither sends nor checks one: it runs the master's run until the master refuses it."""
    with open(os.path.join(tree, "plugin", "suite_match.py"), "w") as f:
        f.write(BEFORE_THE_EXCHANGE)


@pytest.mark.unit
def test_copies_of_the_source_hash_alike_until_one_line_differs(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    copy_of_the_suite(a)
    copy_of_the_suite(b)
    assert source_hash(str(a)) == source_hash(str(b))
    (a / "tests").mkdir()  # not what a load process runs: the same load
    (a / "tests" / "test_more.py").write_text("x = 1\n")
    (a / "simulator" / "more.py").write_text("x = 1\n")
    assert source_hash(str(a)) == source_hash(str(b))
    one_line_changed(b)
    assert source_hash(str(a)) != source_hash(str(b))


def seconds_between(log: str, first: str, then: str) -> float:
    """Seconds between the master log's first lines holding `first` and `then` (Locust's stamps)."""

    def at(text: str) -> datetime:
        line = next(line for line in log.splitlines() if text in line)
        return datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f")

    return (at(then) - at(first)).total_seconds()


def launch_from(*args: str, tree, log_path) -> subprocess.Popen:
    """Locust with the locustfile of `tree`, its modules from `tree` alone."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(tree)}
    return subprocess.Popen(
        [PYTHON, "-m", "locust", "-f", os.path.join(tree, "locustfile.py"), *args],
        cwd=str(tree),
        stdout=open(log_path, "w"),
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.mark.process
@pytest.mark.parametrize("change", [one_line_changed, older])
def test_a_worker_of_another_version_is_refused_in_one_line_naming_both(tmp_path, change):
    """One line changed: the worker refuses the master's run itself. A worker older than the exchange
    runs users until its first report tells the master: what it sent has its records."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    copy_of_the_suite(ours)
    copy_of_the_suite(theirs)
    change(theirs)
    truth = str(tmp_path / "truth.jsonl")
    with simulator("--profile", slow_profile(tmp_path, 0.05, 0.05), truth_log=truth) as url:
        with master_and_workers(
            *load_options(url, tmp_path, "mixed", 4, 30, 30),
            "--model",
            "sim-model",
            "--max-tokens-override",
            "20",
            expect_workers=2,
            log_path=tmp_path / "master.log",
            tree=ours,
            start=launch_from,
        ) as run:
            # Theirs joins last: the run starts as it connects. Locust sends a worker's report as it
            # connects and every 3 s after, so its first report inside the run comes after its
            # users' first requests. Joining first, it could report at any moment of the run's start.
            run.start_worker(tree=ours, log_path=tmp_path / "ours.log")
            wait_for_text(tmp_path / "master.log", "1 workers connected", 60)
            run.start_worker(tree=theirs, log_path=tmp_path / "theirs.log")
            code = ended(run.master, 90)
            # both leave with the master, theirs too: a worker that refused has no users left waiting
            left = [ended(w, 10) for w in run.workers]
    log = (tmp_path / "master.log").read_text()
    ours_v, theirs_v = f"source {source_hash(str(ours))}", f"source {source_hash(str(theirs))}"
    refused = [line for line in log.splitlines() if "suite version" in line and "the run is stopped" in line]
    assert len(refused) == 1 and ours_v in refused[0], log[-3000:]
    named = (
        theirs_v if change is one_line_changed else "sent no suite version (it runs a version older than the master's"
    )
    assert named in refused[0], refused[0]
    assert code == exit_codes.INCOMPLETE, log[-3000:]
    theirs_code = exit_codes.INCOMPLETE if change is one_line_changed else 0  # it knew, or it did not
    assert left == [0, theirs_code], (left, (tmp_path / "theirs.log").read_text()[-2000:])
    summary = summary_of(tmp_path / "mixed")
    assert summary["complete"] is False and named in summary["reason"], summary.get("reason")
    served = truth_ids(truth)
    if change is older and seconds_between(log, "Sending spawn jobs", "the run is stopped") >= 1.0:
        # its refusal came with its second report, 3 s after its start, as it nearly always does;
        # a first report the master read in the instant the run started leaves no request to check
        assert served, "the older worker ran no request before it was refused"
    ids = record_ids(tmp_path / "mixed" / "requests.parquet")
    assert len(ids) == len(set(ids)) and set(ids) == set(served), "a request served without its one record"


@pytest.mark.process  # importing plugin.suite_match reads `git describe`
def test_a_worker_of_this_folder_edited_since_the_master_started_is_refused():
    """The master's own folder on its machine, edited between the two starts: the worker runs other
    code, so it is refused, the refusal saying the folder was edited. The same source from another
    folder or machine is that version."""
    from plugin import suite_match

    edited = {**suite_match.OURS, "source": "0" * 12, "version": "1a2b3c4-dirty, source " + "0" * 12}
    elsewhere = {**edited, "tree": "another-host:" + ROOT}
    refused = suite_match.workers_differs("w1", {suite_match.KEY: dict(edited)})
    assert refused.startswith("worker w1 runs suite version 1a2b3c4-dirty, source 000000000000, the master ")
    assert f"(the folder {ROOT} was edited between their starts)" in refused
    assert suite_match.workers_differs("w1", {suite_match.KEY: {**suite_match.OURS, "tree": "another-host:/x"}}) is None
    refused = suite_match.workers_differs("w2", {suite_match.KEY: elsewhere})
    assert refused.startswith("worker w2 runs suite version 1a2b3c4-dirty, source 000000000000, the master ")
    assert "edited between" not in refused
