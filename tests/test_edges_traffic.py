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
        assert large < max(8 * small, 0.05), f"chunked={chunked}: 5 MB {small:.3f}s, 20 MB {large:.3f}s: not linear"
        assert parse_time(50_000_000, chunked) < 1.5
