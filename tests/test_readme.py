"""The documentation stays true: the options table in docs/options.md is the options the suite has,
the README's quickstart is the two commands .ci/run and the tests use, every relative link in
README.md and docs/ leads to a file (and heading) that exists, every docs page is on the README's
map, and nothing cites a document that is not in the repository."""

import os
import re
import subprocess

import pytest

from plugin.options import markdown_table
from tests.helpers import ROOT

DOCS = os.path.join(ROOT, "docs")
# The names of documents outside the repository, spelled in pieces so this file does not cite them.
OUTSIDE_DOCUMENTS = ("FIELD" + "_NOTES", "DESIGN" + ".md", "REFERENCE" + "_MEASUREMENTS")
SKIPPED_DIRS = {".git", ".venv", ".cache"}


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def readme() -> str:
    return read(os.path.join(ROOT, "README.md"))


def docs_pages() -> list[str]:
    return sorted(os.path.join(DOCS, f) for f in os.listdir(DOCS) if f.endswith(".md"))


def linked_markdown() -> list[str]:
    """The files whose links are checked: README.md, docs/*.md and the package READMEs."""
    packages = [os.path.join(ROOT, p, "README.md") for p in ("workloads", "simulator", "webui")]
    return [os.path.join(ROOT, "README.md"), *docs_pages(), *(p for p in packages if os.path.exists(p))]


# -- options table -------------------------------------------------------------------------------


def options_table(text: str) -> str:
    found = re.search(r"<!-- options-table:[^>]*-->\n(.*?)\n<!-- end options-table -->", text, re.S)
    assert found, "docs/options.md has no <!-- options-table: ... --> ... <!-- end options-table --> block"
    return found.group(1)


def test_options_table_is_generated_from_the_options():
    table = options_table(read(os.path.join(DOCS, "options.md")))
    assert table == markdown_table(), (
        "docs/options.md options table is stale: paste the output of `python -m plugin.options --markdown`"
    )


def test_options_table_names_every_option_once():
    """The generated table itself: one row per option, each flag and env var once."""
    rows = [row for row in markdown_table().splitlines() if row.startswith("| `--")]
    flags = [re.match(r"\| `(--[a-z0-9-]+)` \| `(LOCUST_[A-Z0-9_]+)` \|", row).groups() for row in rows]
    assert len({f for f, _ in flags}) == len(flags) == len({e for _, e in flags}), "an option appears twice"
    for flag, env in flags:
        assert env == "LOCUST_" + flag[2:].upper().replace("-", "_"), (flag, env)


# -- quickstart ----------------------------------------------------------------------------------


def quickstart_blocks(text: str) -> list[str]:
    section = text.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```bash\n(.*?)\n```", section, re.S)]


def test_quickstart_is_two_commands_and_ci_runs_the_test_command():
    blocks = quickstart_blocks(readme())
    assert len(blocks) == 2, f"the README's quickstart must be exactly two commands, found {len(blocks)}"
    main_job, test_command = blocks
    assert "\n" not in main_job and "\n" not in test_command, "each quickstart command is one line"
    assert main_job.startswith("pip install -r requirements.txt && locust -f locustfile.py --headless")
    assert "--host" not in main_job  # the built-in simulator
    assert test_command.startswith("pip install -r requirements-dev.txt && ")
    assert test_command in read(os.path.join(ROOT, ".ci", "run")), ".ci/run must run the README's test command"


# -- links ---------------------------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return {slug(h) for h in re.findall(r"(?m)^#{1,6} +(.+?) *#*$", prose)}


def links(text: str) -> list[str]:
    """Link targets outside code: [text](target)."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return re.findall(r"\]\(([^)\s]+)\)", prose)


def broken_links(path: str) -> list[str]:
    text = read(path)
    broken = []
    for target in links(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            broken.append(f"{target}: no such file")
        elif fragment and dest.endswith(".md") and fragment not in anchors(read(dest)):
            broken.append(f"{target}: no heading with anchor #{fragment}")
    return broken


def test_every_relative_link_leads_to_an_existing_file_and_heading():
    problems = [f"{os.path.relpath(p, ROOT)}: {b}" for p in linked_markdown() for b in broken_links(p)]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_link_checker_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "there.md").write_text("# Here\n\n## Exit codes\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#exit-codes) [gone](missing.md) [no heading](there.md#nowhere) `[code](nope.md)`\n"
        "[web](https://example.com/x) [self](#page)\n\n# Page\n",
        encoding="utf-8",
    )
    assert broken_links(str(page)) == ["missing.md: no such file", "there.md#nowhere: no heading with anchor #nowhere"]
    assert (
        slug("Reference scenario end to end (`bench/reference_scenario.py`)")
        == "reference-scenario-end-to-end-benchreference_scenariopy"
    )


def test_every_docs_page_is_on_the_readme_map():
    text = readme()
    listed = set(re.findall(r"(?m)^- \[docs/([\w.-]+\.md)\]\(docs/\1\)", text))
    on_disk = {os.path.basename(p) for p in docs_pages()}
    assert not on_disk - listed, f"docs pages missing from README's map (one line each): {sorted(on_disk - listed)}"
    assert not listed - on_disk, f"README's map lists pages that do not exist: {sorted(listed - on_disk)}"


def test_the_metric_definitions_stay_in_the_readme():
    section = readme().split("\n## Metric definitions\n", 1)[1].split("\n## ", 1)[0]
    for metric in ("TTFT", "E2E", "TPOT", "ITL", "throughput", "goodput", "percentiles"):
        assert re.search(rf"(?m)^\| {metric} \|", section), f"README's metric table lost its {metric} row"


# -- no citations of documents outside the repository --------------------------------------------


def repository_files() -> list[str]:
    """Files the repository holds (tracked, or new and not ignored); every file when git is absent."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
        for folder, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
            names += [os.path.relpath(os.path.join(folder, f), ROOT) for f in files]
    kept = [n for n in names if not set(n.split("/")[:-1]) & SKIPPED_DIRS]
    return [os.path.join(ROOT, n) for n in kept if os.path.isfile(os.path.join(ROOT, n))]


def citations(paths: list[str]) -> list[str]:
    found = []
    needles = [n.encode() for n in OUTSIDE_DOCUMENTS]
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        for number, line in enumerate(data.splitlines(), 1):
            if any(n in line for n in needles):
                found.append(f"{os.path.relpath(path, ROOT)}:{number}: {line.decode(errors='replace').strip()[:120]}")
    return found


@pytest.mark.process  # git ls-files
def test_nothing_cites_a_document_outside_the_repository():
    files = repository_files()
    assert os.path.join(ROOT, "README.md") in files and os.path.join(ROOT, "plugin", "hooks.py") in files
    found = citations(files)
    assert not found, "say the fact itself (or link a page under docs/) instead of citing:\n" + "\n".join(found)


def test_the_citation_check_finds_one(tmp_path):
    cited = tmp_path / "x.py"
    cited.write_text("x = 1\n# see " + OUTSIDE_DOCUMENTS[0] + " 6\n", encoding="utf-8")
    clean = tmp_path / "y.md"
    clean.write_text("nothing here\n", encoding="utf-8")
    found = citations([str(cited), str(clean)])
    assert len(found) == 1 and found[0].endswith(":2: # see " + OUTSIDE_DOCUMENTS[0] + " 6"), found


# -- the three uses on the first screen ----------------------------------------------------------


def test_the_first_screen_shows_the_three_uses_and_each_command_builds_its_plan():
    """Headless, the web UI and a capacity search, each a command the suite accepts as written."""
    import shlex

    from locust.argument_parser import get_parser

    from plugin.options import add_arguments
    from plugin.plan import RunPlan

    text = readme()
    section = text.split("\n## Three ways to use it\n", 1)[1].split("\n## ", 1)[0]
    assert text.index("## Three ways to use it") < text.index("## Metric definitions")
    commands = [
        line for line in re.findall(r"```bash\n(.*?)\n```", section, re.S)[0].splitlines() if not line.startswith("#")
    ]
    assert len(commands) == 3, commands
    plans = []
    for command in commands:
        argv = shlex.split(command)
        assert argv[:3] == ["locust", "-f", "locustfile.py"], command
        parser = get_parser(default_config_files=[])
        if "--endpoint" not in parser._option_string_actions:  # Locust adds them when plugin.hooks is loaded
            add_arguments(parser)
        opts = parser.parse_args(argv[1:])
        plans.append((opts, RunPlan.from_options(opts)))
    (headless, _), (web, _), (capacity, plan) = plans
    assert headless.headless and not web.headless and capacity.headless
    assert plan.find_capacity and [o.text for o in plan.slo] == ["ttft.p95<5s"]
