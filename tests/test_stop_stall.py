"""The stop of a run with 800 users streaming, the loop's longest hold, and the first-token stamps of
the requests in flight, against the simulator's truth log.

Locust's own `stop_users` spawns a greenlet per user, all run in one turn of the loop: with 800
users it holds the loop for 10-50 ms of the process's own CPU time, while the streams in flight wait
unread (a first token that waits with the next in its socket is stamped with the later one's time).
Stopped in batches (plugin/locust_fixes.py), no stretch up to a user's stop holds the loop more than
a few milliseconds (2.6-3.8 ms measured, most of it the stop's other work), and every request in
flight when the stop began has its first token stamped within 2 ms of the simulator's send of it.
The same run with Locust's stop as it is shows the hold: the check can fail. (The replies' gap of
100 ms is longer than this shared machine's own pauses, so a stamp is judged on the stop alone; the
hold, not the stamps, tells the two stops apart.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import ROOT, read_results, read_truth, simulator

pytestmark = [pytest.mark.process, pytest.mark.timing]

USERS = 800
LOCUST = [
    sys.executable,
    "-m",
    "locust",
    "-f",
    f"{os.path.join(ROOT, 'locustfile.py')},{os.path.join(ROOT, 'tests', 'stop_stall_locustfile.py')}",
]
UNFIXED = """import plugin.locust_fixes as fixes
fixes.stop_users_in_batches = lambda: None  # Locust's stop_users as it is
"""


def run(tmp_path, path: tuple[str, ...] = ()):
    """USERS users streaming 3 tokens each (TTFT 300 ms, ITL 100 ms: a gap the machine's own
    pauses do not bridge), spawned over 2 s (their
    requests at every phase), stopped by -t 4s mid-stream. Returns the requests in flight at the
    stop, how many of them waited for their first token then, the TTFT error of each against the
    truth (ms), and the longest stretch of the process's CPU time up to a user's stop without a
    turn of the loop (ms)."""
    tmp_path.mkdir(exist_ok=True)
    prof = tmp_path / "fixed.yaml"
    prof.write_text("kind: fixed\nmodel: sim-model\nttft_s: 0.3\nitl_s: 0.1\nstream_interval: 1\n")
    truth, out = str(tmp_path / "truth.jsonl"), str(tmp_path / "ticks.json")
    env = {**os.environ, "STOP_STALLS_OUT": out}
    if path:
        env["PYTHONPATH"] = os.pathsep.join([*path, ROOT, env.get("PYTHONPATH", "")])
    with simulator("--profile", str(prof), truth_log=truth) as url:
        proc = subprocess.run(
            [
                *LOCUST,
                "--headless",
                "--host",
                url,
                "-u",
                str(USERS),
                "-r",
                str(USERS // 2),
                "-t",
                "4s",
                "--max-tokens-override",
                "3",
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
            env=env,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, _ = read_results(str(tmp_path), "r")
    t = {x["request_id"]: x for x in read_truth(truth)}
    with open(out) as f:
        log = json.load(f)
    stop = log["stopping"]
    ticks, stops = np.array(log["ticks"]), np.array(log["stops"])
    # each stop call's stretch: the CPU time since the last tick before it; the longest, per stretch
    since = stops[:, 1] - ticks[np.searchsorted(ticks[:, 0], stops[:, 0]) - 1, 1]
    hold = since.max() * 1000
    df = df[df["ok"]]
    in_flight = df[(df["t_send"] < stop) & (df["t_send"] + df["e2e_s"] > stop)]
    err_ms = np.array([(r.t_send + r.ttft_s - t[r.request_id]["first_token"]) * 1000 for r in in_flight.itertuples()])
    waited = int((in_flight["t_send"] + in_flight["ttft_s"] > stop).sum())  # their first token came during the stop
    return in_flight, waited, err_ms, hold


def test_the_stop_of_800_streaming_users_holds_the_loop_a_few_ms_and_their_stamps_stay_exact(tmp_path):
    in_flight, waited, err, hold = run(tmp_path / "batched")
    assert len(in_flight) >= USERS * 0.9, len(in_flight)  # the users were streaming at the stop
    assert waited >= USERS // 20, waited  # ... some of them waiting for their first token
    # 1-4 ms alone, up to 6.6 beside the whole suite, once 8.8 with the first-token watch's thread
    # (it may take the GIL within the stop); Locust's own stop 10-50 ms
    assert hold < 10.0, hold
    assert np.abs(err).max() < 2.0, np.sort(np.abs(err))[-5:]
    # Locust's stop as it is: one turn of the loop for all 800 users
    shim = tmp_path / "unfixed"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(UNFIXED)
    _, _, _, hold_unfixed = run(tmp_path / "locust", path=(str(shim),))
    assert hold_unfixed > 1.5 * hold, (hold, hold_unfixed)  # Locust's own stop: 7-50 ms measured
