"""The README stays true: its options table is the options the suite has, and its quickstart
commands are the ones .ci/run and the tests use."""

import os
import re

from plugin.options import markdown_table
from tests.helpers import ROOT


def readme() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


def test_options_table_is_generated_from_the_options():
    text = readme()
    table = re.search(r"<!-- options-table:[^>]*-->\n(.*?)\n<!-- end options-table -->", text, re.S).group(1)
    assert table == markdown_table(), "README options table is stale: regenerate it with `python -m plugin.options`"


def test_quickstart_is_two_commands_and_ci_runs_the_test_command():
    blocks = re.findall(r"```bash\n(.*?)\n```", readme().split("## Quickstart", 1)[1], re.S)
    main_job, test_command = blocks[0].strip(), blocks[1].strip()
    assert main_job.startswith("pip install -r requirements.txt && locust -f locustfile.py --headless")
    assert "--host" not in main_job  # the built-in simulator
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        assert test_command in f.read()
