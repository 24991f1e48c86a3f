"""A stall of the client's event loop and the first-token stamps, against the simulator's truth log.

A test-only locustfile (tests/stall_locustfile.py) blocks the load process for 200 ms while a
request waits for its first token (due 100 ms after the request, in the middle of the stall):

  - a first token alone in its socket is stamped with the kernel's receive time: its TTFT matches
    the truth to the millisecond, and the record is not flagged (without kernel stamps, the same
    stall puts it 150 ms late: the stall did happen, and the check could fail);
  - chunks every 20 ms pile up behind the stall and are read as one, stamped with the newest; the
    first-token watch (users/first_token_watch.py, a thread of its own) peeked at each first token
    before its second came: the TTFT matches the truth and nothing is flagged;
  - without the watch the same TTFT is off, and every record so off is flagged (stamp_skew_ms,
    summary.json's client_bound.stamp_suspect, a console line with the advice);
  - a run with no stall flags nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from plugin.health_stalls import suspect
from tests.helpers import ROOT, read_results, read_truth, simulator

pytestmark = [pytest.mark.process, pytest.mark.timing]

LOCUST = [
    sys.executable,
    "-m",
    "locust",
    "-f",
    f"{os.path.join(ROOT, 'locustfile.py')},{os.path.join(ROOT, 'tests', 'stall_locustfile.py')}",
]


def run(tmp_path, itl: float, users: int, requests: int, stall_s: float, env: dict | None = None, tokens: int = 4):
    """One headless run against a fixed profile (TTFT 100 ms, the given ITL): records with their
    truth, summary.json and the console."""
    tmp_path.mkdir(exist_ok=True)
    prof = tmp_path / f"fixed-{itl}.yaml"
    prof.write_text(f"kind: fixed\nmodel: sim-model\nttft_s: 0.1\nitl_s: {itl}\nstream_interval: 1\n")
    truth = str(tmp_path / "truth.jsonl")
    with simulator("--profile", str(prof), truth_log=truth) as url:
        proc = subprocess.run(
            [
                *LOCUST,
                "--headless",
                "--host",
                url,
                "-u",
                str(users),
                "-r",
                str(users),
                "-t",
                "30s",
                "--num-requests",
                str(requests),
                "--max-tokens-override",
                str(tokens),
                "--ignore-eos",
                "--results-dir",
                str(tmp_path),
                "--run-id",
                "r",
                "--stop-timeout",
                "10",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "STALL_S": str(stall_s), "STALL_AFTER_S": "0.05", **(env or {})},
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, summary = read_results(str(tmp_path), "r")
    t = {x["request_id"]: x for x in read_truth(truth)}
    df = df[df["ok"]]
    # the client's share of the TTFT error: its first-token stamp minus the simulator's send of it
    # (one clock on one host); the request's way in (the simulator reading it) is the server's share
    err_ms = np.array([(r.t_send + r.ttft_s - t[r.request_id]["first_token"]) * 1000 for r in df.itertuples()])
    return df, err_ms, summary, proc.stderr


def test_a_first_token_alone_in_its_socket_keeps_its_stamp_through_a_200ms_stall(tmp_path):
    """ITL 300 ms: only the first token arrives during the stall; the kernel's stamp is its arrival."""
    df, err, summary, _ = run(tmp_path, itl=0.3, users=1, requests=1, stall_s=0.2)
    assert len(df) == 1
    assert abs(err[0]) < 2.0, err
    assert df["stamp_skew_ms"].iloc[0] >= 40  # the stall was in its wait (50 ms of it before the first token)
    assert summary["client_bound"]["stamp_suspect"] == 0
    # the same stall read by the loop's clock: the stamp moves to the stall's end (~150 ms late), flagged
    df, err, summary, _ = run(
        tmp_path / "nokernel", itl=0.3, users=1, requests=1, stall_s=0.2, env={"LLM_KERNEL_TIMESTAMPS": "0"}
    )
    assert err[0] > 100, err
    assert summary["client_bound"]["stamp_suspect"] == 1


def test_chunks_piled_up_behind_a_stall_keep_their_first_tokens_arrival(tmp_path):
    """ITL 20 ms: the stall leaves several chunks in each socket, read as one; the watch's stamps
    give each first token its own arrival: within 2 ms of the truth, nothing flagged."""
    df, err, summary, stderr = run(tmp_path, itl=0.02, users=4, requests=4, stall_s=0.2)
    assert len(df) == 4
    assert (df["stamp_skew_ms"] >= 40).all()  # the stall was in every wait
    assert np.abs(err).max() < 2.0, err
    assert summary["client_bound"]["stamp_suspect"] == 0
    assert "client stalled" not in stderr


def test_without_the_watch_chunks_piled_up_behind_a_stall_are_flagged(tmp_path):
    """The same without the watch (LLM_FIRST_TOKEN_WATCH=0): every record whose TTFT is off by more
    than 2 ms is flagged, and the run says so with the advice."""
    df, err, summary, stderr = run(
        tmp_path, itl=0.02, users=4, requests=4, stall_s=0.2, env={"LLM_FIRST_TOKEN_WATCH": "0"}
    )
    off = err > 2.0
    assert off.any(), err  # the stall did move stamps
    flagged = np.array([suspect(r.stamp_skew_ms, r.ttft_s, list(r.chunk_times), True) for r in df.itertuples()])
    assert flagged[off].all(), (err, df["stamp_skew_ms"].tolist())
    cb = summary["client_bound"]
    assert cb["stamp_suspect"] == int(flagged.sum()) >= 1
    assert cb["stamp_skew_max_ms"] >= err[off].max() - 5
    assert "spawn users slower" in cb["advice"].lower() and "client stalled" in stderr


def test_a_clean_run_flags_nothing(tmp_path):
    """20 users, no stall: TTFT within 2 ms of the truth, no record flagged, no line."""
    df, err, summary, stderr = run(tmp_path, itl=0.02, users=20, requests=60, stall_s=0, tokens=16)
    assert len(df) >= 55
    assert np.percentile(np.abs(err), 99) < 2.0, np.sort(err)[-5:]
    assert summary["client_bound"]["stamp_suspect"] == 0
    assert summary["client_bound"]["stamp_judged"] == len(df)
    assert "client stalled" not in stderr
    assert json.dumps(summary["client_bound"]).count("stamp_suspect") >= 1
