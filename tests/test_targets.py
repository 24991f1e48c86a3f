"""The balancing policies (targets/), a backend taken out of the spread and probed back at a bounded
pace, --host with several URLs, and the per-backend flags of summary.json (metrics/backends.py)."""

from __future__ import annotations

import time

import gevent
import numpy as np
import pyarrow as pa
import pytest

from core.errors import InputError
from metrics.record import RequestRecord, rows_to_table
from metrics.summary import summarize
from plugin.options import check_host
from targets import NAMES, POLICIES
from targets.backends import Targets, backend_name, split_hosts

URLS = ("http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3")


def test_the_registered_policies_round_robin_first():
    assert NAMES == ("round-robin", "least-outstanding", "sticky")
    assert set(POLICIES) == set(NAMES)


def test_round_robin_takes_turns_and_skips_a_backend_out_of_the_spread():
    t = Targets(URLS, "round-robin")
    assert [t.pick() for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    t.up[1] = False
    assert [t.pick() for _ in range(4)] == [2, 0, 2, 0]
    t.up[:] = [False] * 3  # every backend down: the policy's own pick, which fails fast
    assert t.pick() in (0, 1, 2)


def test_least_outstanding_picks_the_backend_with_fewest_in_flight():
    t = Targets(URLS, "least-outstanding")
    picks = []
    for _ in range(6):  # nothing ends: the counts stay level, each backend in turn
        i = t.pick()
        t.sent(i)
        picks.append(i)
    assert sorted(picks) == [0, 0, 1, 1, 2, 2] and t.outstanding == [2, 2, 2]
    t.ended(1)
    t.ended(1)
    assert t.pick() == 1  # two fewer in flight there
    t.sent(1)
    assert t.pick() == 1
    t.up[1] = False
    assert t.pick() != 1


def test_sticky_keeps_a_session_on_one_backend_and_spreads_sessions():
    t = Targets(URLS, "sticky")
    sessions = [f"run-w0-ab12-s{i}" for i in range(60)]
    first = {s: t.pick(s) for s in sessions}
    for _ in range(3):  # every later turn where the first went, in any order
        assert all(t.pick(s) == first[s] for s in reversed(sessions))
    counts = np.bincount(list(first.values()), minlength=3)
    assert counts.min() >= 10, counts  # sessions spread over the backends
    # the same in another process: the hash is not Python's salted one
    assert {s: Targets(URLS, "sticky").pick(s) for s in sessions} == first
    down = first[sessions[0]]
    t.up[down] = False
    moved = t.pick(sessions[0])
    assert moved != down
    t.up[down] = True
    assert t.pick(sessions[0]) == down  # back on its own once that is back
    assert [t.pick("") for _ in range(3)] == [0, 1, 2]  # no conversation: round-robin


def test_one_backend_is_no_spread_and_its_records_name_none():
    t = Targets(("http://127.0.0.1:1",), "sticky")
    assert not t.spread and t.names == ("",) and t.pick("s1") == 0


def test_a_refused_backend_is_probed_at_most_once_a_second_until_it_answers():
    answering = {"now": False}
    probes = []

    def probe(url):
        probes.append((url, time.monotonic()))
        return answering["now"]

    lines = []
    t = Targets(URLS[:2], "round-robin", probe, probe_every_s=0.2, on_change=lambda name, text: lines.append(text))
    t.refused(1)
    t.refused(1)  # already out: no second prober
    assert t.up == [True, False]
    assert [t.pick() for _ in range(3)] == [0, 0, 0]
    gevent.sleep(1.05)
    assert 1 <= len(probes) <= 5, probes  # one per 0.2 s at most, none at once (a busy machine: fewer)
    gaps = np.diff([p[1] for p in probes])
    assert (gaps >= 0.19).all(), gaps
    answering["now"] = True
    gevent.sleep(0.3)
    assert t.up == [True, True]
    n = len(probes)
    gevent.sleep(0.5)
    assert len(probes) == n  # back: no more probes
    assert "out of the spread" in lines[0] and "back in the spread" in lines[1] and URLS[1] in lines[1]
    t.refused(0)
    t.close()
    gevent.sleep(0.3)
    assert len(probes) == n  # the run ended: no probe


def test_several_hosts_checked_each():
    assert check_host("http://127.0.0.1:8001/, http://127.0.0.1:8002") == "http://127.0.0.1:8001,http://127.0.0.1:8002"
    assert split_hosts("http://a:1/,http://b:2") == ("http://a:1", "http://b:2")
    assert backend_name("http://user:secret@h:9/api/") == "http://h:9/api"
    from core.urls import public_url

    assert (
        public_url("http://u:secret@a:1,http://b:2") == "http://a:1,http://b:2"
    )  # run.json, logs: each URL without its key
    with pytest.raises(InputError, match=r"--host: '127.0.0.1:8002' needs a scheme"):
        check_host("http://127.0.0.1:8001,127.0.0.1:8002")
    with pytest.raises(InputError, match=r"--host: http://127.0.0.1:8001 given twice"):
        check_host("http://127.0.0.1:8001,http://127.0.0.1:8001/")


def _records(backend_of, n: int, ttft_of=lambda b: 0.1) -> pa.Table:
    rows = []
    for i in range(n):
        b = backend_of(i)
        rows.append(
            RequestRecord(
                f"r{i}",
                "w",
                "chat",
                "short",
                100,
                32,
                t_send=float(i),
                wall_send=1000.0 + i * 0.1,
                ok=True,
                status=200,
                ttft_s=ttft_of(b),
                e2e_s=0.5,
                tpot_s=0.02,
                output_tokens=20,
                prompt_tokens=30,
                tokens_source="usage",
                n_chunks=20,
                chunk_times=[ttft_of(b) + 0.02 * k for k in range(20)],
                backend=b,
            ).as_row()
        )
    return rows_to_table(rows)


def test_the_per_backend_breakdown_is_the_class_grouping_and_flags_a_skew_and_a_slow_one():
    a, b = "http://127.0.0.1:1", "http://127.0.0.1:2"
    even = summarize(_records(lambda i: (a, b)[i % 2], 200), 999.0, 1030.0)
    assert set(even.by_backend) == {a, b} and not even.backends.flagged
    assert even.by_backend[a].requests.sent == 100 and even.backends.backends[0].share == pytest.approx(0.5)
    # the same block as a class's: the per-class grouping, by another column
    assert even.by_backend[a].ttft_ms.count == 100

    pinned = summarize(_records(lambda i: a if i % 4 else b, 200), 999.0, 1030.0)  # 75 % on a
    rows = {r.backend: r for r in pinned.backends.backends}
    assert pinned.backends.flagged == [a, b]
    assert (
        rows[a].share_off == pytest.approx(0.5)
        and "share 75.0% of 200 requests against a fair 50.0% (+50%)" in rows[a].flags[0]
    )

    slow = summarize(_records(lambda i: (a, b)[i % 2], 200, ttft_of=lambda x: 0.4 if x == b else 0.1), 999.0, 1030.0)
    assert slow.backends.flagged == [b]
    assert any(
        f.startswith("slower: TTFT p50 400.0 ms against 100.0 ms")
        for f in {r.backend: r for r in slow.backends.backends}[b].flags
    )

    few = summarize(
        _records(lambda i: a if i % 3 else b, 12), 999.0, 1030.0
    )  # 8 and 4 of 12: within a fair draw's noise
    assert not few.backends.flagged


def test_one_plain_host_has_no_backend_section():
    s = summarize(_records(lambda i: "", 20), 999.0, 1030.0)
    assert s.by_backend is None and s.backends is None


def test_the_live_view_has_a_block_per_backend_equal_to_its_records():
    from webui.live import LiveWindow

    a, b = "http://127.0.0.1:1", "http://127.0.0.1:2"
    table = _records(lambda i: (a, b)[i % 3 == 0], 90)  # every third on b
    rows = [tuple(table.column(name)[i].as_py() for name in table.column_names) for i in range(table.num_rows)]
    w = LiveWindow(run_start=999.0, windows=(60.0,))
    w.add_rows(rows)
    snap = w.snapshot(end=1020.0)
    win = snap["windows"]["60"]
    assert set(win["by_backend"]) == {a, b}
    assert win["by_backend"][b]["requests"]["ended"] == 30 and win["by_backend"][a]["requests"]["ended"] == 60
    assert win["by_backend"][b]["ttft_ms"]["count"] == 30
    plain = LiveWindow(run_start=999.0, windows=(60.0,))
    plain.add_rows(
        [tuple(table.column(n)[i].as_py() if n != "backend" else "" for n in table.column_names) for i in range(5)]
    )
    assert plain.snapshot(end=1020.0)["windows"]["60"]["by_backend"] == {}


def test_the_planner_scales_one_replicas_capacity_and_states_its_assumptions():
    from targets.planner import Assumptions, capacity_of, replicas_for

    linear = Assumptions(efficiency=1.0)
    assert capacity_of(1, 8.0, linear) == 8.0 and capacity_of(4, 8.0, linear) == 32.0
    assert replicas_for(600.0, 100.0, linear) == 6 and replicas_for(601.0, 100.0, linear) == 7
    lossy = Assumptions(efficiency=0.9)
    assert capacity_of(1, 100.0, lossy) == 100.0  # one replica is what was measured
    assert capacity_of(2, 100.0, lossy) == pytest.approx(180.0)
    assert replicas_for(180.0, 100.0, lossy) == 2 and replicas_for(181.0, 100.0, lossy) == 3
    assert replicas_for(90.0, 100.0, lossy) == 1
    text = lossy.text()
    assert "least-outstanding" in text and "linear" in text and "90%" in text
    with pytest.raises(ValueError):
        replicas_for(10.0, 0.0)


def test_a_replica_that_served_nothing_counts_in_the_fair_share_and_is_flagged():
    a, b, c = "http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"
    spread = summarize(_records(lambda i: (a, b)[i % 2], 200), 999.0, 1030.0, backends=(a, b, c))
    rows = {r.backend: r for r in spread.backends.backends}
    assert rows[c].sent == 0 and rows[c].fair_share == pytest.approx(1 / 3) and rows[c].share_off == -1.0
    assert spread.backends.flagged == [a, b, c] and rows[c].flags[0].startswith(
        "share 0.0% of 200 requests against a fair 33.3%"
    )
    # behind a balancer pinned to one of its 3 replicas: the other two named no reply
    pinned = summarize(_records(lambda i: "10.0.0.1:8000", 200), 999.0, 1030.0, backend_count=3)
    check = pinned.backends
    assert check.unseen == 2 and check.backends[0].share == 1.0 and check.backends[0].fair_share == pytest.approx(1 / 3)
    assert check.flagged == ["10.0.0.1:8000", "2 of the 3 replicas (--backend-count) named in no reply"]
