"""The open loop's schedule check (metrics/open_loop_check.py): the arrivals sent are compared with
the arrivals the schedule had due in the measured window, not the achieved rate with the target, so
a rate too low for any arrival to fall in the window is not "behind schedule", and arrivals that
were due but not sent are."""

from __future__ import annotations

from metrics.record import RequestRecord, rows_to_table
from metrics.summary import summarize
from plugin.load_models.open_loop import OpenLoop
from shapes.arrivals import ArrivalSchedule

T0 = 1_000.0  # the run's start, wall clock


def _sent(intended: float, lag: float = 0.001) -> tuple:
    """A request of the schedule due at `intended` (wall clock), sent `lag` later, served in 0.2 s."""
    return RequestRecord(
        "r",
        "w",
        "chat",
        "short",
        10,
        4,
        wall_send=intended + lag,
        t_intended=50.0,
        t_send=50.0 + lag,
        status=200,
        ok=True,
        ttft_s=0.1,
        e2e_s=0.2,
        tpot_s=0.01,
        chunk_times=[0.1, 0.2],
    ).as_row()


def _schedule(rate: float) -> list[float]:
    """The run's constant-rate arrivals (wall clock) up to T0 + 60 s, as the load processes take them."""
    s = ArrivalSchedule(rate, "constant", 1.0, 0, 1, 0, T0)
    out = [s.take()]
    while out[-1] < T0 + 60:
        out.append(s.take())
    return out


def test_a_rate_with_no_arrival_due_in_the_window_is_on_schedule():
    """0.05 requests/s: the first arrival is 21 s after the start (1 s delay + one 20 s gap). A 5 s
    window after a 10 s warm-up has none due; the arrival sent in the warm-up's place is not in it.
    The old check compared 0.00 requests/s sent with the 0.05 asked and warned."""
    load = OpenLoop(rate=0.05, arrival="constant", burstiness=1.0, max_concurrency=4)
    start, end = T0 + 11.0, T0 + 16.0
    scheduled = load.scheduled_between(T0, start, end, 0)
    assert scheduled == 0
    s = summarize(rows_to_table([_sent(T0 + 1.0)]), start, end, run_start=T0, target_rate=0.05, scheduled=scheduled)
    assert s.overall.throughput.sent_per_s == 0.0
    assert (s.open_loop.scheduled, s.open_loop.sent) == (0, 0)
    assert not s.open_loop.behind_schedule and s.open_loop.reasons == []


def test_arrivals_due_but_not_sent_are_behind_schedule():
    """10 requests/s over a 2 s window: 20 arrivals due; the client sent the first 12 on time and
    none after (all users busy): behind schedule, and the reason counts them."""
    load = OpenLoop(rate=10.0, arrival="constant", burstiness=1.0, max_concurrency=4)
    start, end = T0 + 1.05, T0 + 3.05
    due = [t for t in _schedule(10.0) if start <= t <= end]
    scheduled = load.scheduled_between(T0, start, end, 0)
    assert scheduled == len(due) == 20
    s = summarize(
        rows_to_table([_sent(t) for t in due[:12]]), start, end, run_start=T0, target_rate=10.0, scheduled=scheduled
    )
    assert (s.open_loop.scheduled, s.open_loop.sent) == (20, 12)
    assert s.open_loop.behind_schedule
    assert any(
        r.startswith("sent 12 of the 20 arrivals the schedule had due in the window") for r in s.open_loop.reasons
    )
    # every due arrival sent, the last ones late (after the window's end): on schedule by count
    late = summarize(
        rows_to_table([_sent(t, lag=0.004) for t in due]),
        start,
        end,
        run_start=T0,
        target_rate=10.0,
        scheduled=scheduled,
    )
    assert late.open_loop.sent == 20 and not late.open_loop.behind_schedule


def test_the_count_is_the_schedule_the_processes_share():
    """Poisson arrivals split over three processes: the global count in a window equals the union of
    the processes' own send times in it (one schedule drawn from the seed)."""
    t0, start, end = 0.0, 3.0, 40.0
    union = 0
    for i in range(3):
        s = ArrivalSchedule(25.0, "poisson", 1.0, 7, 3, i, t0)
        t = s.take()
        while t <= end:
            union += start <= t
            t = s.take()
    assert ArrivalSchedule(25.0, "poisson", 1.0, 7, 1, 0, t0).count_between(start, end) == union > 800


def _served(due: float, sent: float, e2e: float) -> tuple:
    """An arrival due at `due` (wall clock), sent at `sent`, served in `e2e` seconds."""
    return RequestRecord(
        "r",
        "w",
        "chat",
        "short",
        10,
        4,
        wall_send=sent,
        t_intended=50.0,
        t_send=50.0 + (sent - due),
        status=200,
        ok=True,
        ttft_s=0.1,
        e2e_s=e2e,
        tpot_s=0.01,
        chunk_times=[0.1, e2e],
    ).as_row()


def _pool(users: int, due: list[float], e2e: float, delay: float = 0.0) -> list[tuple]:
    """The open loop's users as they run: each arrival taken by the first user free at its time
    (or when one frees up), sent `delay` after that, served in `e2e`."""
    free = [due[0]] * users
    rows = []
    for t in due:
        i = min(range(users), key=lambda k: free[k])
        sent = max(t, free[i]) + delay
        free[i] = sent + e2e
        rows.append(_served(t, sent, e2e))
    return rows


def test_a_run_held_by_its_in_flight_cap_is_told_apart_from_a_client_that_fell_behind():
    """10 requests/s of 1 s replies need 10 users. With a cap of 4 (--max-concurrency 4), every
    user is busy when each late arrival comes due: the cap held them, the load asked for (the
    report said "the client could not keep to the schedule"). With 40 users but every send 30 ms
    late (a client that cannot keep up), users were free: the client fell behind."""
    due = [t for t in _schedule(10.0) if t <= T0 + 30]
    start, end = T0 + 5.0, T0 + 25.0
    scheduled = sum(start <= t <= end for t in due)
    capped = summarize(
        rows_to_table(_pool(4, due, 1.0)), start, end, run_start=T0, target_rate=10.0, scheduled=scheduled
    )
    ol = capped.open_loop
    assert ol.behind_schedule and ol.capped_at == 4
    assert all("all 4 users were busy when 100% of the late arrivals came due" in r for r in ol.reasons), ol.reasons
    assert ol.headline().startswith("the in-flight cap of 4 held arrivals back")
    slow = summarize(
        rows_to_table(_pool(40, due, 1.0, delay=0.03)), start, end, run_start=T0, target_rate=10.0, scheduled=scheduled
    )
    ol = slow.open_loop
    assert ol.behind_schedule and ol.capped_at is None and ol.schedule_lag_p99_ms > 25
    assert all(
        r.endswith("the client fell behind with users free (its CPU or event loop: see client_bound)")
        for r in ol.reasons
    )
    assert ol.headline() == "the client could not keep to the schedule"
    # on schedule: no cause stated
    kept = summarize(
        rows_to_table(_pool(40, due, 1.0)), start, end, run_start=T0, target_rate=10.0, scheduled=scheduled
    )
    assert not kept.open_loop.behind_schedule and kept.open_loop.capped_at is None
