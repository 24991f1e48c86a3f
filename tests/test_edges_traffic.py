"""Edges of traffic: failures that would flood the server, responses too large to parse quickly,
mistakes that would otherwise pass in silence, and what the console says during and after a run.

Real processes where it matters (the simulator, Locust); every run is short and bounded in time,
and all traffic stays on 127.0.0.1."""

from __future__ import annotations

import time

import orjson

from metrics.sse import parse_reads

READ = 65536


def one_big_event(size: int) -> bytes:
    text = "x" * size
    event = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}
    return b"data: " + orjson.dumps(event) + b"\n\ndata: [DONE]\n\n"


def as_reads(body: bytes, chunked: bool) -> list[bytes]:
    if chunked:  # the server's chunks of 8 KiB, the client's reads of 64 KiB across them
        framed = b"".join(b"%x\r\n%s\r\n" % (len(body[i : i + 8192]), body[i : i + 8192]) for i in range(0, len(body), 8192))
        body = framed + b"0\r\n\r\n"
    return [body[i : i + READ] for i in range(0, len(body), READ)]


def parse_time(size: int, chunked: bool) -> float:
    reads = as_reads(one_big_event(size), chunked)
    times = [float(i) for i in range(len(reads))]
    t = time.perf_counter()
    parsed, length = parse_reads(times, reads, chunked)
    elapsed = time.perf_counter() - t
    assert len(parsed.chunks) == 1 and len(parsed.chunks[0].text) == size and parsed.done
    assert parsed.chunks[0].t == times[-1] or chunked  # the event's time: the read that completed its line
    return elapsed


def test_one_large_event_parses_in_linear_time():
    """A single event of many megabytes (one JSON line over hundreds of reads) parses in time
    proportional to its size: 4x the bytes take about 4x the time, never 16x, and 50 MB well
    under a second or two (it runs on the event loop every stream shares)."""
    for chunked in (False, True):
        small = min(parse_time(5_000_000, chunked) for _ in range(2))
        large = min(parse_time(20_000_000, chunked) for _ in range(2))
        assert large < 8 * small + 0.15, f"chunked={chunked}: 5 MB {small:.3f}s, 20 MB {large:.3f}s: not linear"
        assert parse_time(50_000_000, chunked) < 1.5


# -- self-health: a loop blocked for seconds is late for every second it was blocked ----------------


def test_a_loop_blocked_for_seconds_counts_as_lag_for_every_second_it_missed():
    """The event loop busy for 3.5 s (one huge parse, say): the monitor's sampler could not run
    during it. Each second it missed is a sample of its own, late by as much as the loop was at
    that moment, so the sustained limits see the stall (before: one sample for the whole stall,
    and a run that took 2 samples in 53 s was "within limits")."""
    import gevent

    import locust  # noqa: F401  gevent's patching, as in a run
    from plugin.health import HealthMonitor, Limits

    monitor = HealthMonitor(Limits(sustain_s=2.0), token_lag=False, name="local", index=0)
    monitor.start()
    try:
        gevent.sleep(1.3)
        before = len(monitor.samples)
        t = time.perf_counter()
        while time.perf_counter() - t < 3.5:  # the loop blocked, the CPU busy
            pass
        gevent.sleep(0.3)
        stalled = list(monitor.samples)[before:]
    finally:
        monitor.stop()
    assert len(stalled) >= 3, f"{len(stalled)} samples for a 3.5 s stall"
    late = [s["loop_lag_p99_ms"] for s in stalled]
    assert sum(1 for v in late if v and v > 500) >= 3, late
    # busy: the CPU it used plus the CPU it waited for (2 shared cores: others take some)
    assert all(s["demand"] > 50 for s in stalled[:3]), stalled
    state = monitor.state()
    assert state["bound"] and "loop_lag" in state["reasons"], state
    assert state["loop_lag_p99_ms"] > 1000  # the run-wide figure counts the probes it missed
