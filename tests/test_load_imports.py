"""What a process that only drives load imports, and how it ends.

The locustfile, as a worker loads it, imports neither pandas nor pyarrow (a third of a second of
CPU per process start); the process that writes results loads them at init (plugin/hooks.py),
before any run, never mid-run. A worker of a real run never loads them, not even mid-run, and once
its master quits it ends at once (plugin/quick_exit.py) with every record delivered and exit 0."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT, load_options, master_and_workers, read_results, read_truth, simulator, stop

pytestmark = pytest.mark.process

RESULTS_ONLY = ("pandas", "pyarrow")

CHECK = """
import sys
import locust.main  # as the locust command does
import locustfile
loaded = [m for m in ("pandas", "pyarrow") if m in sys.modules]
assert not loaded, f"the locustfile loaded {loaded}"
import plugin.run  # the results side's module itself does not either
loaded = [m for m in ("pandas", "pyarrow") if m in sys.modules]
assert not loaded, f"plugin.run loaded {loaded}"
print("ok")
"""

# Started before anything else in the worker's interpreter: every import of a results-only module
# is written down, with the moment, as it happens.
SPY = """
import sys, time

class Spy:
    def find_spec(self, name, path=None, target=None):
        if name in {names!r}:
            with open({log!r}, "a") as f:
                f.write(f"{{time.time():.3f}} {{name}}\\n")
        return None

sys.meta_path.insert(0, Spy())
open({log!r} + ".ready", "w").close()
"""


def test_the_locustfile_loads_no_pandas_or_pyarrow():
    out = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr[-2000:]


def test_a_worker_of_a_real_run_never_loads_them_and_ends_with_everything_delivered(tmp_path):
    spy_dir, spy_log = tmp_path / "spy", tmp_path / "imports.log"
    spy_dir.mkdir()
    (spy_dir / "sitecustomize.py").write_text(SPY.format(names=RESULTS_ONLY, log=str(spy_log)))
    truth = str(tmp_path / "truth.jsonl")

    def spied(cmd):  # the worker only: the master loads them at init, as it should
        return ["env", f"PYTHONPATH={spy_dir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", *cmd]

    with simulator("--profile", "fixed", truth_log=truth) as url:
        with master_and_workers(
            *load_options(url, tmp_path, "imports", 8, 4, 10),
            "--max-tokens-override",
            "20",
            expect_workers=1,
            log_path=str(tmp_path / "master.log"),
        ) as run:
            worker = run.start_worker(log_path=str(tmp_path / "worker.log"), wrap=spied)
            code = stop(run.master, timeout=90)
            worker_code = stop(worker, timeout=30)
    master_log, worker_log = (tmp_path / "master.log").read_text(), (tmp_path / "worker.log").read_text()
    assert code == 0, master_log[-3000:]
    assert worker_code == 0, worker_log[-3000:]
    assert "Shutting down (exit code 0)" in worker_log, worker_log[-2000:]
    assert os.path.exists(f"{spy_log}.ready"), "the worker did not load the import spy"
    assert not spy_log.exists(), f"the worker loaded: {spy_log.read_text()}"
    df, summary = read_results(str(tmp_path), "imports")
    assert set(df["request_id"]) == {t["request_id"] for t in read_truth(truth)}, "a record was lost"
    (worker,) = summary["workers"].values()
    assert worker["final_received"] and worker["missing_batches"] == []
