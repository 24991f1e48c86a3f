"""Bad input is refused before any load: each mistake, given to a real headless Locust process, ends
it with exit code 2 and one last line on stderr naming the option (or workload field) and the fix;
the simulator it points at receives no request and no results folder is made.

Every case is its own subprocess. Locust's start-up dominates (1-3 s), so the cases that pytest
selected are started together, a few at a time, when the first of them runs; each test then checks
its own outcome.
"""

from __future__ import annotations

import os
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers import LOCUST, ROOT, simulator

pytestmark = pytest.mark.process

PARALLEL = 4
TIMEOUT_S = 120

TEMPLATES = os.path.join(ROOT, "workloads", "templates.jsonl")


def workload(classes: str, top: str = "") -> str:
    return f"name: bad\ntemplates: {TEMPLATES}\n{top}classes:\n{classes}"


GOOD_CLASS = "  short:\n    weight: 1.0\n    input_chars: {min: 20, max: 200}\n    output_tokens: {min: 5, max: 10}\n"

# id -> (arguments, {file name: content}, what the last line must name). "{dir}" is the case's folder.
CASES = {
    # workload files
    "yaml-malformed": (["--workload", "{dir}/w.yaml"], {"w.yaml": "classes: [short, {weight: 1\n"}, "--workload"),
    "yaml-weights-not-summing": (["--workload", "{dir}/w.yaml"], {"w.yaml": workload(
        "  a:\n    weight: 0.5\n    input_chars: {min: 20, max: 200}\n    output_tokens: 10\n"
        "  b:\n    weight: 0.2\n    input_chars: {min: 20, max: 200}\n    output_tokens: 10\n")}, "weight"),
    "yaml-min-above-max": (["--workload", "{dir}/w.yaml"], {"w.yaml": workload(
        "  a:\n    weight: 1.0\n    input_chars: {min: 300, max: 100}\n    output_tokens: 10\n")}, "input_chars.min"),
    "yaml-unknown-field": (["--workload", "{dir}/w.yaml"], {"w.yaml": workload(
        "  a:\n    wieght: 1.0\n    input_chars: {min: 20, max: 200}\n    output_tokens: 10\n")}, "classes.a.wieght"),
    "yaml-unknown-distribution": (["--workload", "{dir}/w.yaml"], {"w.yaml": workload(
        "  a:\n    weight: 1.0\n    input_chars: {min: 20, max: 200, dist: zipf}\n    output_tokens: 10\n")}, "input_chars.dist"),
    "yaml-share-above-1": (["--workload", "{dir}/w.yaml"], {"w.yaml": workload(GOOD_CLASS, "system_prompt: {share: 1.5}\n")},
                           "system_prompt.share"),
    "yaml-empty-file": (["--workload", "{dir}/w.yaml"], {"w.yaml": "# nothing\n"}, "--workload"),
    "templates-empty-file": (["--workload", "{dir}/w.yaml"], {"w.yaml": workload(GOOD_CLASS).replace(TEMPLATES, "t.jsonl"),
                                                              "t.jsonl": ""}, "is empty"),
    "workload-missing-file": (["--workload", "{dir}/missing.yaml"], {}, "--workload"),
    # option values
    "arrival-unknown": (["--arrival", "bogus"], {}, "--arrival"),
    "endpoint-unknown": (["--endpoint", "chatty"], {}, "--endpoint"),
    "slo-unparsable": (["--slo", "ttft.p95<<5s"], {}, "--slo"),
    "host-without-scheme": (["--host", "127.0.0.1:8000"], {}, "--host"),
    "host-bad-port": (["--host", "http://127.0.0.1:99999"], {}, "--host"),
    "tokenizer-missing-path": (["--tokenizer", "{dir}/no-such-tokenizer"], {}, "--tokenizer"),
    "steps-not-increasing": (["--steps", "10,5,20"], {}, "--steps"),
    "warmup-negative": (["--warmup=-5s"], {}, "--warmup"),
    "extra-body-not-json": (["--extra-body", "{top_k: 1"], {}, "--extra-body"),
    "request-rate-with-steps": (["--request-rate", "5", "--steps", "1,2"], {}, "--request-rate"),
    "request-rate-not-number": (["--request-rate", "fast"], {}, "--request-rate"),
    "find-capacity-without-slo": (["--find-capacity"], {}, "--find-capacity"),
    "max-concurrency-without-rate": (["--max-concurrency", "10"], {}, "--max-concurrency"),
    "step-warmup-not-below-step-time": (["--steps", "5,10", "--step-time", "30s", "--step-warmup", "30s"], {}, "--step-warmup"),
    "burstiness-zero": (["--request-rate", "5", "--arrival", "gamma", "--burstiness", "0"], {}, "--burstiness"),
    "timeout-idle-zero": (["--timeout-idle", "0"], {}, "--timeout-idle"),
    "timeout-connect-not-duration": (["--timeout-connect", "ten"], {}, "--timeout-connect"),
    "run-id-with-slash": (["--run-id", "a/b"], {}, "--run-id"),
    "seed-not-integer": (["--seed", "abc"], {}, "--seed"),
    "min-tokens-negative": (["--min-tokens=-1"], {}, "--min-tokens"),
    "retry-negative": (["--retry=-1"], {}, "--retry"),
    "retry-on-unknown-class": (["--retry", "2", "--retry-on", "http_429,oops"], {}, "--retry-on"),
    "cancel-rate-above-1": (["--cancel-rate", "1.5"], {}, "--cancel-rate"),
    "cancel-after-zero": (["--cancel-rate", "0.1", "--cancel-after", "0s"], {}, "--cancel-after"),
    "prometheus-port-out-of-range": (["--prometheus-port", "70000"], {}, "--prometheus-port"),
    "server-metrics-without-scheme": (["--server-metrics", "localhost:9100/metrics"], {}, "--server-metrics"),
    "gpu-telemetry-unknown-source": (["--gpu-telemetry", "dcgm"], {}, "--gpu-telemetry"),
    "gpu-telemetry-unreachable-url": (["--gpu-telemetry", "http://127.0.0.1:9/metrics"], {}, "--gpu-telemetry"),
    "gpus-zero": (["--gpus", "0"], {}, "--gpus"),
    "gpu-hour-price-negative": (["--gpus", "2", "--gpu-hour-price=-2"], {}, "--gpu-hour-price"),
    "gpu-hour-price-without-gpus": (["--gpu-hour-price", "2"], {}, "--gpu-hour-price"),
    # Locust's own -u and -r (a traceback and exit 4 seven seconds in; an empty run)
    "users-negative": (["-u", "-5"], {}, "Number of users (-u): -5 is below 0"),
    "users-zero": (["-u", "0"], {}, "Number of users (-u): 0 would send nothing"),
    "spawn-rate-zero": (["-r", "0"], {}, "-r/--spawn-rate: must be > 0"),  # Locust's own check
}  # fmt: skip


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """A simulator with a truth log: it must see no completion request from any case."""
    tmp = tmp_path_factory.mktemp("bad-input")
    truth = tmp / "truth.jsonl"
    with simulator("--profile", "fixed", truth_log=str(truth)) as url:
        yield url, tmp
    assert not truth.exists() or truth.read_text().strip() == "", "a request reached the server"


class Outcomes:
    """Starts the selected cases together (PARALLEL at a time) on first use."""

    def __init__(self, url, tmp, selected):
        self.url, self.tmp = url, tmp
        # taken here, on pytest's thread: copying os.environ on a pool thread races pytest setting and
        # deleting PYTEST_CURRENT_TEST meanwhile (KeyError, seen on a loaded machine)
        self.env = dict(os.environ)
        self.pool = ThreadPoolExecutor(PARALLEL)
        self.futures = {case: self.pool.submit(self.run, case) for case in selected}
        self.lock = threading.Lock()

    def run(self, case):
        args, files, _ = CASES[case]
        folder = self.tmp / case
        folder.mkdir()
        for name, text in files.items():
            (folder / name).write_text(text)
        args = [a.replace("{dir}", str(folder)) for a in args]
        host = [] if "--host" in args else ["--host", self.url]
        cmd = [
            *LOCUST,
            "--headless",
            *host,
            "--model",
            "sim-model",
            "-u",
            "2",
            "-r",
            "2",
            "-t",
            "20s",
            "--results-dir",
            str(folder / "results"),
            *args,
        ]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S, env=self.env), folder

    def get(self, case):
        if case not in self.futures:  # not foreseen (e.g. a rerun plugin): run it on its own
            self.futures[case] = self.pool.submit(self.run, case)
        return self.futures[case].result()


@pytest.fixture(scope="module")
def outcomes(target, request):
    selected = [
        item.callspec.params["case"]
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec") and "case" in item.callspec.params
    ]
    out = Outcomes(*target, selected)
    yield out
    out.pool.shutdown(wait=True)


def test_there_are_at_least_20_kinds_of_mistake():
    assert len(CASES) >= 20


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_refused_before_any_load(outcomes, case):
    proc, folder = outcomes.get(case)
    expected = CASES[case][2]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, f"exit code {proc.returncode}; stderr tail: {lines[-5:]}"
    assert lines, "nothing on stderr"
    last = lines[-1]
    assert "error:" in last and expected in last, f"the last line does not name {expected!r}: {last!r}"
    assert len(last) < 400, last
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert not (folder / "results").exists(), "a run was started"
