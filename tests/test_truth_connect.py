"""Connection setup stays out of TTFT: a ramp where every request opens a new connection,
against the simulator's truth log.

Opening a connection yields to the event loop (gevent waits for the connect to finish), and
during a ramp the loop has hundreds of users to start: when `t_send` was stamped before the
connect, the first request of every user carried that wait in its TTFT (TTFT error p99 over a
whole run 37-225 ms, against 0.6-2 ms once the users were running). `t_send` is now stamped when
the request is written on a ready connection; the setup time is the record's `connect_s`.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers import ROOT, read_results, read_truth, run_locust, simulator

pytestmark = [pytest.mark.process, pytest.mark.timing]  # timing against the truth or a rate: tests/conftest.py

WORKLOAD = """
name: connect-ramp
templates: {templates}
classes:
  only: {{weight: 1, input_chars: {{min: 50, max: 200}}, output_tokens: {{min: 16, max: 16}}}}
"""


def _err(df, truth) -> np.ndarray:
    """Client TTFT minus the simulator's own (first token written - request read), ms."""
    return np.array(
        [
            (r.ttft_s - (truth[r.request_id]["first_token"] - truth[r.request_id]["arrival"])) * 1000
            for r in df.itertuples()
        ]
    )


def test_new_connections_in_a_ramp_keep_ttft_exact(tmp_path):
    truth_path = str(tmp_path / "truth.jsonl")
    spec = tmp_path / "w.yaml"
    spec.write_text(WORKLOAD.format(templates=os.path.join(ROOT, "workloads", "templates.jsonl")))
    with simulator("--profile", "fixed", truth_log=truth_path) as url:
        proc = run_locust(
            "--host",
            url,
            "-u",
            "300",
            "-r",
            "100",
            "-t",
            "6s",
            "--seed",
            "3",
            "--workload",
            str(spec),
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "ramp",
            "--stop-timeout",
            "10",
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, _ = read_results(str(tmp_path), "ramp")
    truth = {t["request_id"]: t for t in read_truth(truth_path)}
    ok = df[df["ok"]]
    assert len(ok) >= 1500, len(ok)
    # each user's first request opened its connection and said how long that took; the rest reused it
    opened = ok["connect_s"].notna()
    assert 250 <= opened.sum() <= 300 and (ok.loc[opened, "connect_s"] >= 0).all(), opened.sum()
    err_ms = _err(ok, truth)
    # The request leg (write to the server's read) and the reply leg, for the requests that opened a
    # connection against those that reused one. With t_send stamped before the connect the first
    # requests' TTFT error was the connect wait (here, 2 shared cores: p50 16-19 ms); now their
    # median is the others' level. Their upper percentiles are not the client's: Locust starts
    # 100 users at once each second (-r 100), their 100 requests reach the simulator together, and
    # the last ones wait in its socket backlog before it reads them and stamps their arrival (its
    # truth counts TTFT from that read). Those waits (a p90 of up to 59 ms on this machine, falling
    # linearly through a burst) belong to the server, and the run-wide p99 moves with the load.
    first, rest = _err(ok[opened], truth), _err(ok[~opened], truth)
    shown = (np.percentile(first, [50, 90, 99]), np.percentile(rest, [50, 90, 99]), np.percentile(err_ms, 99))
    assert np.percentile(first, 50) < 3.0, shown
    assert np.percentile(rest, 50) < 3.0, shown
    # the report says how long the connections took, apart from TTFT
    from reports.build import build

    files = build(str(tmp_path / "ramp"))
    text = open(files["md"]).read() if "md" in files else open(next(iter(files.values()))).read()
    assert "connection setup" in text and "not part of TTFT" in text, text[:2000]


def test_a_kept_alive_connection_has_no_connect_time(tmp_path):
    with simulator("--profile", "fixed") as url:
        proc = run_locust(
            "--host",
            url,
            "-u",
            "5",
            "-r",
            "5",
            "-t",
            "3s",
            "--max-tokens-override",
            "4",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "ka",
            "--stop-timeout",
            "5",
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, _ = read_results(str(tmp_path), "ka")
    ok = df[df["ok"]].sort_values("t_send")
    assert len(ok) > 10
    opened = ok["connect_s"].notna()
    assert 1 <= opened.sum() <= 5, opened.sum()  # one connection per user, reused after
    from reports.summary_text import connection_setup
    from runfolder.reading import load_run

    run = load_run(str(tmp_path / "ka"))
    run.df["connect_s"] = 0.0002  # a fast local connect is not material: no line
    assert connection_setup(run) == ""
