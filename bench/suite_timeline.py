"""Where the test suite's time goes: each test's start and end in each pytest-xdist worker, and how
many tests ran at once over the run.

    python -m pytest -p bench.suite_timeline            # writes .suite-timeline/<worker>.jsonl
    python bench/suite_timeline.py [.suite-timeline]    # the summary below
    python bench/suite_timeline.py --record [.suite-timeline]   # and tests/durations.json from it

The summary: wall time from the first test's start to the last test's end, summed test time and
the part of it in `alone` and `timing` tests (tests/conftest.py), seconds of the run by the number of tests
running, and the modules with the most summed time. A test's time is its setup, call and
teardown, as it ran beside whatever else ran then (not its time on an empty machine).

`--record` writes each module's seconds by turn into tests/durations.json, the order in which
tests/conftest.py hands modules to the test processes (longest first): record it from a whole run.
Modules the timeline lacks keep their record while their file exists.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time
from collections import Counter, defaultdict

import pytest

FOLDER = os.environ.get("SUITE_TIMELINE_DIR", ".suite-timeline")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DURATIONS = os.path.join(ROOT, "tests", "durations.json")


@pytest.hookimpl(hookwrapper=True, trylast=True)  # inside tests/conftest.py's turn: a test's own time
def pytest_runtest_protocol(item, nextitem):
    worker = getattr(item.config, "workerinput", {}).get("workerid", "main")
    start = time.time()
    yield
    os.makedirs(FOLDER, exist_ok=True)
    with open(os.path.join(FOLDER, f"{worker}.jsonl"), "a") as f:
        turn = next((m for m in ("alone", "timing") if item.get_closest_marker(m) is not None), "side")
        f.write(
            json.dumps({"worker": worker, "test": item.nodeid, "start": start, "end": time.time(), "turn": turn}) + "\n"
        )


def read(folder: str) -> list[dict]:
    return [json.loads(line) for path in glob.glob(os.path.join(folder, "*.jsonl")) for line in open(path)]


def record(rows: list[dict], path: str) -> str:
    """Write each module's summed seconds by turn to `path`, keeping the records of modules the
    rows lack while their file exists."""
    try:
        with open(path) as f:
            modules = {m: s for m, s in json.load(f)["modules"].items() if os.path.exists(os.path.join(ROOT, m))}
    except FileNotFoundError:
        modules = {}
    seconds: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        seconds[r["test"].split("::")[0]][r.get("turn", "side")] += r["end"] - r["start"]
    modules.update({m: {turn: round(s, 1) for turn, s in sorted(by_turn.items())} for m, by_turn in seconds.items()})
    about = (
        "seconds each test module took in a whole run, by turn (tests/conftest.py hands modules out "
        "longest first); python bench/suite_timeline.py --record"
    )
    lines = [f"  {json.dumps(m)}: {json.dumps(s)}" for m, s in sorted(modules.items())]  # one module a line
    with open(path, "w") as f:
        f.write(f'{{\n "about": {json.dumps(about)},\n "modules": {{\n' + ",\n".join(lines) + "\n }\n}\n")
    return f"{len(seconds)} modules recorded in {path} ({len(modules)} in all)"


def summarize(rows: list[dict], folder: str) -> str:
    if not rows:
        return f"no timeline in {folder}"
    first, last = min(r["start"] for r in rows), max(r["end"] for r in rows)
    total = sum(r["end"] - r["start"] for r in rows)
    turns = {t: sum(r["end"] - r["start"] for r in rows if r.get("turn") == t) for t in ("alone", "timing")}
    events = sorted([(r["start"], 1) for r in rows] + [(r["end"], -1) for r in rows])
    running, at, by_count = 0, first, Counter()
    for t, step in events:
        by_count[running] += t - at
        running, at = running + step, t
    modules: dict[str, float] = defaultdict(float)
    for r in rows:
        modules[r["test"].split("::")[0]] += r["end"] - r["start"]
    lines = [
        f"{len(rows)} tests, {last - first:,.0f} s from the first start to the last end",
        f"summed test time {total:,.0f} s, of which alone tests {turns['alone']:,.0f} s, timing tests "
        f"{turns['timing']:,.0f} s (each kind one at a time: tests/conftest.py)",
        "seconds by tests running at once: " + ", ".join(f"{n}: {s:,.0f}" for n, s in sorted(by_count.items())),
        "modules with the most summed time:",
    ]
    lines += [f"  {t:7.1f} s  {m}" for m, t in sorted(modules.items(), key=lambda x: -x[1])[:15]]
    return "\n".join(lines)


if __name__ == "__main__":
    args = sys.argv[1:]
    recording = "--record" in args
    folder = next((a for a in args if a != "--record"), FOLDER)
    rows = read(folder)
    print(summarize(rows, folder))
    if recording and rows:
        print(record(rows, DURATIONS))
