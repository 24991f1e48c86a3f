"""The loop-stall log and the records it flags, on synthetic stalls and timings (plugin/health_stalls.py),
their count on the self-health board and in summary.json's client_bound, and the start gate
(plugin/start_pacing.py): twice as many users a tick while the loop keeps up, one a tick when not."""

from __future__ import annotations

import math

import gevent
import pytest

from metrics.record import RequestRecord
from metrics.schema.client_health import ClientBound
from plugin.health_board import HealthBoard, crowded
from plugin.health_monitor import HealthMonitor, Limits
from plugin.health_stalls import StallLog, stamp_skew_s, suspect
from plugin.start_pacing import StartGate


def log_of(*stalls):
    log = StallLog()
    for a, b in stalls:
        log.add(a, b)
    return log


def test_the_longest_stall_inside_a_wait_counts_its_part_inside():
    log = log_of((1.0, 1.010), (2.0, 2.200), (2.5, 2.503), (9.0, 9.5))
    assert log.longest_within(0.0, 0.9) == 0.0
    assert log.longest_within(0.0, 1.5) == pytest.approx(0.010)
    assert log.longest_within(2.1, 2.6) == pytest.approx(0.100)  # 2.1 .. 2.2 of the 200 ms stall
    assert log.longest_within(2.45, 2.6) == pytest.approx(0.003)
    assert log.longest_within(1.9, 3.0) == pytest.approx(0.200)
    assert log.longest_within(9.2, 9.3) == pytest.approx(0.100)  # inside one stall
    assert math.isnan(stamp_skew_s(log, 2.0, math.nan))


def test_a_record_is_suspect_when_a_stall_could_have_merged_its_first_token_with_the_next():
    # kernel stamps: a first token read apart from the next was stamped when it came, whatever the stall
    assert not suspect(150.0, 0.1, [0.1, 0.4], kernel_stamps=True)
    assert suspect(150.0, 0.25, [0.25, 0.25, 0.25], kernel_stamps=True)
    assert suspect(3.0, 5.0, [5.0, 5.0], kernel_stamps=True)  # a long TTFT is still off by the merge
    assert not suspect(1.5, 0.1, [0.1, 0.1], kernel_stamps=True)  # under the floor
    assert suspect(150.0, 0.1, [0.1], kernel_stamps=True)  # one token: cannot tell, so it may
    # not streamed: timed at its last byte, whose kernel stamp a late read keeps
    assert not suspect(150.0, 0.1, [0.1], kernel_stamps=True, streamed=False)
    assert not suspect(150.0, 0.1, [], kernel_stamps=True, streamed=False)
    assert suspect(150.0, 0.25, [0.25], kernel_stamps=False, streamed=False)  # the loop's clock: late all the same
    # the loop's clock: every delayed read is late; material when the stall is 2 % of the TTFT
    assert suspect(150.0, 0.25, [0.25, 0.4], kernel_stamps=False)
    assert not suspect(3.0, 1.0, [1.0, 1.02], kernel_stamps=False)
    assert not suspect(math.nan, 0.1, [], kernel_stamps=False)


def record(t_send, ttft, chunks, error=""):
    rec = RequestRecord(request_id="r", worker="w", endpoint="chat", request_class="c", input_chars=1, max_tokens=4)
    rec.t_send, rec.ttft_s, rec.chunk_times, rec.error = t_send, ttft, chunks, error
    return rec


def test_the_monitor_marks_records_and_the_board_counts_them_with_the_advice():
    mon = HealthMonitor(Limits(), False, "w", 0, kernel_stamps=True)
    mon.stalls = log_of((100.05, 100.25))  # a 200 ms stall
    merged = record(100.0, 0.25, [0.25, 0.25, 0.25])  # first tokens piled up behind it
    alone = record(100.0, 0.1, [0.1, 0.4])  # its first token alone in its socket: exact
    clean = record(101.0, 0.1, [0.1, 0.12])  # after the stall
    cut = record(100.0, 0.25, [0.25, 0.25], error="stopped")  # the run's end: not counted
    for rec in (merged, alone, clean, cut):
        mon.on_record(rec)
    assert merged.stamp_skew_ms == pytest.approx(200.0) and alone.stamp_skew_ms == pytest.approx(50.0)
    assert clean.stamp_skew_ms == 0.0 and cut.stamp_skew_ms == pytest.approx(200.0)
    state = mon.state()
    assert (state["stamp_suspect"], state["stamp_judged"], state["stamp_skew_max_ms"]) == (1, 3, pytest.approx(200.0))
    board = HealthBoard()
    board.update("a", {**state, "worker": "a", "index": 0}, [])
    board.update("b", {**state, "worker": "b", "index": 1}, [])
    summary = board.summary()
    assert (summary["stamp_suspect"], summary["stamp_judged"]) == (2, 6)
    assert summary["advice"].startswith("2 of 6 requests waited for their first token through a stall")
    assert "-r" in summary["advice"] and "--processes" in summary["advice"]
    warning = ClientBound.model_validate(summary).warning()
    assert warning.startswith("The load generator's event loop stalled: 2 of 6")
    # a contended worker (late while idle: other processes took the CPU): a quieter machine, not more workers
    board.update("b", {**state, "worker": "b", "index": 1, "contended": True}, [])
    crowded = board.summary()["advice"]
    assert "quieter machine" in crowded and "--processes" not in crowded, crowded
    clean_board = HealthBoard()
    clean_board.update("a", {**state, "stamp_suspect": 0}, [])
    assert ClientBound.model_validate(clean_board.summary()).warning() == ""


def test_a_stall_on_a_crowded_machine_is_never_told_to_add_worker_processes(caplog):
    """Worker 0 late while idle (contended), worker 1's records stamped through a stall: the machine
    is crowded (plugin.health_board.crowded), so every place the stall sentence appears, the console's
    warning as the stall is first reported included, says a quieter machine or more machines, never
    more worker processes there, which would wait for a CPU too; the same holds for one worker bound
    while starved (little CPU, as long again waiting for one)."""
    from webui.gauges import stall_note

    stalled = {"stamp_suspect": 3, "stamp_judged": 40, "stamp_skew_max_ms": 150.0}
    starved = {"bound": True, "cpu_p95": 20.0, "demand_p95": 60.0, "samples": 30}
    for first, second in (
        ({"worker": "a", "index": 0, "contended": True}, {"worker": "b", "index": 1, **stalled}),
        (None, {"worker": "b", "index": 1, **starved, **stalled}),
    ):
        board = HealthBoard()
        if first is not None:
            board.update("a", first, [])
        with caplog.at_level("WARNING", logger="llm.health"):
            caplog.clear()
            board.update("b", second, [])
        console = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("client stalled"))
        summary = board.summary()
        report = ClientBound.model_validate(summary).warning()
        snapshot = board.snapshot()
        live = stall_note(snapshot["stamp_suspect"], crowded(snapshot["workers"], snapshot["limits"]["cpu_pct"]))
        for said in (console, summary["advice"], report, snapshot["advice"], live):
            assert "--processes" not in said and "add worker" not in said, said
            assert "a quieter machine, or spread its workers over more machines" in said, said
    calm = HealthBoard()  # a stall alone, on a machine with CPU to spare: start users slower or add workers
    with caplog.at_level("WARNING", logger="llm.health"):
        caplog.clear()
        calm.update("b", {"worker": "b", "index": 1, **stalled}, [])
    assert "Spawn users slower (-r) or add worker processes (--processes)" in caplog.records[-1].getMessage()


def admissions(gate: StartGate, n: int) -> list[int]:
    """Each user's view of the gate's count when it was let through: the users of one tick all see
    that tick's running total (they resume only after the gate's loop has let the whole batch go)."""
    seen: list[int] = []

    def user():
        gate.wait()
        seen.append(gate.admitted)

    gevent.joinall([gevent.spawn(user) for _ in range(n)], timeout=10)
    return seen


def test_the_start_gate_lets_users_through_twice_as_many_a_tick_while_the_loop_keeps_up():
    seen = admissions(StartGate(tick_s=0.001, budget_s=1e9, max_batch=8), 100)  # never late
    assert len(seen) == 100
    assert sorted(set(seen)) == [2, 6, 14, *range(22, 100, 8), 100]  # 2, 4, 8, 8, ... a tick


def test_the_start_gate_lets_one_user_a_tick_through_while_the_loop_is_late():
    seen = admissions(StartGate(tick_s=0.001, budget_s=-1.0, max_batch=8), 30)  # always late
    assert sorted(seen) == list(range(1, 31))  # never all at once, never stuck
