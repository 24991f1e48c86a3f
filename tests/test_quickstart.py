"""The README's main job, exactly as written (results redirected through the option's env var):
30 users, 60 s, no --host, against the built-in simulator."""

import os
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT, read_results
from tests.test_readme import readme

# not a timing test (tests/conftest.py): 30 users waiting seconds for their replies need little CPU,
# so it runs beside the others; the count below allows for a run slowed by them
pytestmark = pytest.mark.process


def test_quickstart_main_job(tmp_path):
    command = re.findall(r"```bash\n(.*?)\n```", readme().split("## Quickstart", 1)[1], re.S)[0]
    locust_part = command.split("&&", 1)[1].strip()  # the packages are installed by .ci/run
    env = {**os.environ, "LOCUST_RESULTS_DIR": str(tmp_path), "LOCUST_RUN_ID": "quick"}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]  # the environment's `locust`
    proc = subprocess.run(locust_part, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "started the built-in simulator" in proc.stderr
    for name in ("requests.parquet", "summary.json", "run.json"):
        assert (tmp_path / "quick" / name).exists(), name
    df, summary = read_results(str(tmp_path), "quick")
    # 30 users for about 57 s after the ramp, replies of the reference mix's ~6.5 s on average: about
    # 260 requests on an idle 2-core machine (a fresh venv's first run: 265); a broken ramp or a load
    # that stopped early sends far fewer. The load ran throughout:
    assert len(df) >= 150, len(df)
    assert df["wall_send"].max() - df["wall_send"].min() >= 50, df["wall_send"].describe()
    assert df["ok"].all(), df.loc[~df["ok"], "error"].value_counts()
    shares = df["request_class"].value_counts(normalize=True)
    for name, share in (("short", 0.4), ("medium", 0.4), ("long", 0.2)):
        assert abs(shares[name] - share) <= 0.05, shares
    assert "LLM results" in proc.stdout and "overall" in proc.stdout
