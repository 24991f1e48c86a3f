"""The fault matrix: every fault the simulator injects, 10 % each, in one run per process mode
(one local process; a master and two workers). Every request in the simulator's truth log is in
the records exactly once with the class the fault implies, nothing is lost or invented, and
summary.json counts the same.

Not repeated here: a worker killed mid-run (tests/test_distributed.py). Client-side timeouts,
retries, cancellation, Ctrl-C and an unreachable host: tests/test_faults_client.py.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from tests.helpers import free_port, read_results, read_truth, run_locust, simulator, start_locust, stop

pytestmark = pytest.mark.process

TIMEOUT_S = 3.0  # --timeout-first-token and --timeout-idle: far below the stalls, far above a busy machine's hiccups
STALL_S = 8.0
SLOW_HEADERS_S = 0.3  # far below the head timeout (--timeout-first-token, from the write): these end ok
RATE = 0.1
FAULTS = {
    "http_429": "",
    "http_500": "",
    "http_503": "",
    "mid_stream_error": ":3",
    "cut_close": ":3",
    "cut_reset": ":3",
    "stall_first": f":{STALL_S}",
    "stall_between": f":{STALL_S}",
    "malformed_chunk": ":2",
    "slow_headers": f":{SLOW_HEADERS_S}",
    "refuse": "",
}
EXPECTED = {
    None: "",
    "http_429": "http_429",
    "http_500": "http_5xx",
    "http_503": "http_5xx",
    "mid_stream_error": "mid_stream_error",
    "cut_close": "stream_truncated",
    "cut_reset": "stream_truncated",
    "stall_first": "timeout",
    "stall_between": "timeout",
    "malformed_chunk": "malformed_chunk",
    "slow_headers": "",
}
SECONDS = 15
LOAD = (
    "-u",
    "20",
    "-r",
    "20",
    "-t",
    f"{SECONDS}s",
    "--model",
    "sim-model",
    "--max-tokens-override",
    "12",
    "--seed",
    "5",
    "--timeout-first-token",
    f"{TIMEOUT_S:g}s",
    "--timeout-idle",
    f"{TIMEOUT_S:g}s",
    "--stop-timeout",
    "30",
)


def fault_args() -> list[str]:
    out = []
    for name, param in FAULTS.items():
        out += ["--fault", f"{name}={RATE}{param}"]
    return out


def run_matrix(tmp, mode: str):
    truth_path = str(tmp / "truth.jsonl")
    run_id = f"faults-{mode}"
    with simulator("--profile", "fixed", "--seed", "7", *fault_args(), truth_log=truth_path) as url:
        common = ("--host", url, "--results-dir", str(tmp), "--run-id", run_id, *LOAD)
        if mode == "local":
            proc = run_locust(*common, timeout=SECONDS + 150)
            code, log = proc.returncode, proc.stdout + proc.stderr
        else:
            port = free_port()
            log_path = tmp / "master.log"
            master = start_locust(
                "--master",
                "--headless",
                "--master-bind-host",
                "127.0.0.1",
                "--master-bind-port",
                str(port),
                "--expect-workers",
                "2",
                *common,
                log_path=str(log_path),
            )
            workers = [
                start_locust(
                    "--worker",
                    "--master-host",
                    "127.0.0.1",
                    "--master-port",
                    str(port),
                    log_path=str(tmp / f"w{i}.log"),
                )
                for i in range(2)
            ]
            try:
                code = stop(master, timeout=SECONDS + 150)
            finally:
                for w in workers:
                    if w.poll() is None:
                        w.kill()
            log = log_path.read_text() + "".join(
                f"\n--- w{i}.log ---\n" + (tmp / f"w{i}.log").read_text()[-4000:] for i in range(2)
            )
    assert code in (0, 1), log[-3000:]  # 1: Locust's exit code when requests failed
    df, summary = read_results(str(tmp), run_id)
    return df, summary, read_truth(truth_path), log


@pytest.fixture(scope="module", params=["local", "distributed"])
def matrix(request, tmp_path_factory):
    return run_matrix(tmp_path_factory.mktemp(f"faults-{request.param}"), request.param)


def request_lines(truth):
    return [t for t in truth if t["fault"] != "refuse"]


def test_every_fault_was_injected(matrix):
    _, _, truth, _ = matrix
    seen = Counter(t["fault"] for t in truth)
    for name in FAULTS:
        assert seen[name] >= 3, f"{name} injected only {seen[name]} times: {dict(seen)}"


def test_every_request_in_the_truth_log_is_recorded_once_with_its_class(matrix):
    df, _, truth, log = matrix
    assert df["request_id"].is_unique, "a record counted twice"
    twice = [rid for rid, n in Counter(t["request_id"] for t in request_lines(truth)).items() if n > 1]
    assert not twice, f"requests that reached the server twice for one record: {twice[:5]}"
    by_id = df.set_index("request_id")
    lost, wrong = [], []
    for t in request_lines(truth):
        rid = t["request_id"]
        if rid not in by_id.index:
            lost.append((rid, t["fault"]))
            continue
        got = by_id.at[rid, "error"]
        if got != EXPECTED[t["fault"]]:
            wrong.append((rid, t["fault"], t["outcome"], got, by_id.at[rid, "error_detail"]))
    assert not lost, f"{len(lost)} records lost: {lost[:5]}"
    assert not wrong, (
        f"{len(wrong)} misclassified (id, fault, server's outcome, class, detail): {wrong[:5]}\n{log[-6000:]}"
    )


def test_refused_connections_are_the_connect_errors(matrix):
    """A refused connection carries no request id on the server side: the records without a truth
    line are exactly the connect errors, one per refused connection of the load. (The TCP check of
    --host at start-up may be refused too; it comes before the first request.)"""
    df, _, truth, _ = matrix
    ids = {t["request_id"] for t in request_lines(truth)}
    extra = df[~df["request_id"].isin(ids)]
    assert (extra["error"] == "connect_error").all(), extra[["request_id", "error", "error_detail"]].head()
    assert (df.loc[df["request_id"].isin(ids), "error"] != "connect_error").all()
    # when the first request began to connect (t_send is stamped after the connect, and a refused
    # connection is stamped on the server when it is accepted, so the write may come after that);
    # the simulator stamps perf_counter too (same clock, same machine)
    first_connect = (df["t_send"] - df["connect_s"].fillna(0.0)).min()
    refused = [t for t in truth if t["fault"] == "refuse" and t["arrival"] > first_connect]
    assert len(refused) >= 3
    assert len(extra) == len(refused)


def test_timeouts_are_censored_at_the_limit_with_the_timings_reached(matrix):
    df, _, truth, _ = matrix
    faults = {t["request_id"]: t["fault"] for t in request_lines(truth)}
    timeouts = df[df["error"] == "timeout"]
    assert len(timeouts) >= 6
    for _, r in timeouts.iterrows():
        assert "timeout" in r["error_detail"] and f"{TIMEOUT_S:g}s" in r["error_detail"], r["error_detail"]
        assert math.isfinite(r["e2e_s"]) and r["e2e_s"] > 0  # kept, with the time it reached
    between = timeouts[timeouts["request_id"].map(faults) == "stall_between"]
    assert (between["n_chunks"] > 0).all() and np.isfinite(between["ttft_s"]).all()  # tokens before the stall
    first = timeouts[timeouts["request_id"].map(faults) == "stall_first"]
    assert (first["n_chunks"] == 0).all()
    assert (first["e2e_s"] >= TIMEOUT_S * 0.99).all() and (first["e2e_s"] < STALL_S).all()  # the limit, not the stall


def test_summary_counts_match_the_records(matrix):
    df, summary, _, _ = matrix
    assert summary["complete"] is True
    assert summary["records"]["total"] == len(df)
    w = summary["window"]
    inside = df[(df["wall_send"] >= w["start"]) & (df["wall_send"] <= w["end"])]
    req = summary["overall"]["requests"]
    failed = inside[~inside["ok"]]
    assert req["sent"] == len(inside)
    assert req["ok"] == int(inside["ok"].sum())
    assert req["stopped"] == 0 and req["cancelled"] == 0 and req["retries"] == 0
    assert req["failed"] == len(failed)
    assert req["by_error"] == {k: int(v) for k, v in failed["error"].value_counts().items()}
    assert set(req["by_error"]) == {
        "http_429",
        "http_5xx",
        "mid_stream_error",
        "stream_truncated",
        "timeout",
        "malformed_chunk",
        "connect_error",
    }
    # failures are in the good fraction's denominator
    assert summary["overall"]["goodput"]["good_fraction"] == pytest.approx(req["ok"] / req["sent"])
    if summary.get("workers"):  # master + 2 workers: both shipped everything
        assert df["worker"].nunique() == 2
        for w in summary["workers"].values():
            assert w["final_received"] and w["missing_batches"] == [] and w["lost_at"] is None


NO_STREAM_EXPECTED = {
    **EXPECTED,
    "mid_stream_error": "http_5xx",  # the simulator answers a non-streaming request with a 500
    "cut_close": ("connect_error", "stream_truncated"),
    "cut_reset": ("connect_error", "stream_truncated"),
    # the whole answer comes after the stall, past --timeout-first-token (counted from the write);
    # the simulator writes a non-streaming answer at once when it is done: no gap between tokens
    "stall_first": "timeout",
    "stall_between": "",
}


def test_no_stream_faults_are_classified_and_never_resent_silently(tmp_path):
    truth_path = str(tmp_path / "truth.jsonl")
    with simulator("--profile", "fixed", "--seed", "7", *fault_args(), truth_log=truth_path) as url:
        proc = run_locust(
            "--host",
            url,
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "ns",
            "--no-stream",
            *LOAD[:5],
            "10s",
            *LOAD[6:],
            timeout=150,
        )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    df, summary = read_results(str(tmp_path), "ns")
    truth = request_lines(read_truth(truth_path))
    seen = Counter(t["request_id"] for t in truth)
    by_id = df.set_index("request_id")
    wrong = []
    for t in truth:
        if seen[t["request_id"]] > 1:
            continue
        expected = NO_STREAM_EXPECTED[t["fault"]]
        got = by_id.at[t["request_id"], "error"]
        if got not in (expected if isinstance(expected, tuple) else (expected,)):
            wrong.append((t["request_id"], t["fault"], got))
    assert not wrong, wrong[:5]
    assert set(seen) <= set(by_id.index), "records lost"
    resent = [(rid, [t["fault"] for t in truth if t["request_id"] == rid]) for rid, n in seen.items() if n > 1]
    assert not resent, f"{len(resent)} requests reached the server twice for one record: {resent[:3]}"
    # a cut after the whole reply was computed is never mistaken for a stale kept-alive connection
    assert not df["resent"].any() and summary["overall"]["requests"]["resent"] == 0
