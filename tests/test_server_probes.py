"""What the suite asks of a server besides the load, against a server that misbehaves on purpose
(tests/fake_server.py, with its own log of what it served): a silent GET /version or /metrics
takes nothing from the load's time, the start check survives one reset connection and tells a
silent /v1/models from an unreachable host, and replies longer than their max_tokens are counted."""

from __future__ import annotations

import pytest

from tests.fake_server import MODEL, fake_server
from tests.helpers import read_results, run_locust

pytestmark = pytest.mark.process


@pytest.mark.timing  # the load's span against -t: a starved client would stretch it
def test_a_silent_version_probe_takes_nothing_from_the_load(tmp_path):
    """A gateway that routes only /v1/*: GET /version and GET /metrics are accepted and never
    answered. The load still runs the whole -t, and the window starts when the load does, so the
    rate summary.json states is the rate the server saw."""
    with fake_server(hold={"/version", "/metrics"}, tokens=10, gap_s=0.02) as srv:
        done = run_locust("--host", srv.url, "-u", "2", "-r", "2", "-t", "6s", "--timeout-connect", "2s",
                          "--results-dir", str(tmp_path), "--run-id", "silent", timeout=90)  # fmt: skip
        served = list(srv.served)
    assert done.returncode == 0, done.stderr[-3000:]
    df, summary = read_results(str(tmp_path), "silent")
    assert sorted(df["request_id"]) == sorted(s["request_id"] for s in served)  # one record per served request
    first, last = min(s["begun"] for s in served), max(s["ended"] for s in served)
    assert last - first >= 5.0, f"the load ran {last - first:.1f} s of -t 6s"
    window = summary["window"]
    assert abs(window["start"] - first) < 0.5, "the measured window starts when the load does"
    in_window = sum(window["start"] <= s["ended"] <= window["end"] for s in served)
    assert summary["overall"]["throughput"]["requests_per_s"] == pytest.approx(in_window / window["seconds"], rel=0.05)
    assert summary["overall"]["throughput"]["requests_per_s"] == pytest.approx(len(served) / (last - first), rel=0.15)
    assert summary["setup"]["server_version"] is None
    said = [line for line in done.stderr.splitlines() if "server version: GET /version and GET /metrics took" in line]
    assert len(said) == 1 and "had no answer" in said[0], done.stderr[-3000:]
