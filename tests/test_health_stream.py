"""The fast stream reader stays exact (client speed, bench/RESULTS.md "Client speed").

The hot path keeps raw reads and only tracks where the chunked message ends; the framing is undone
and the events parsed after the stream, in one pass with a fast path. These tests drive the
pieces with random SSE streams cut into random reads and compare them with plain, obviously
correct decoders:

  - the end-of-message tracking of a read (users.connection.Connection._feed) says "complete" at the
    read that completes the last chunk and never before;
  - metrics.sse.dechunk gives every payload byte the time of the read that brought it;
  - metrics.sse.parse_reads equals parse_stream(dechunk(...)) (and the body length).
"""

from __future__ import annotations

import bisect
import json
import random

import locust  # noqa: F401  (the suite always runs under gevent's patching)

import metrics.sse as sse
from metrics.sse import dechunk, parse_reads, parse_stream
from users.connection import CHUNKED, Connection


def reference_dechunk(times, reads):
    """Byte by byte: each payload byte keeps the time of the read it arrived in."""
    raw = b"".join(reads)
    ends, acc = [], 0
    for d in reads:
        acc += len(d)
        ends.append(acc)
    per_read = [bytearray() for _ in reads]
    pos = 0
    while True:
        j = raw.find(b"\n", pos)
        if j < 0:
            break
        try:
            size = int(raw[pos:j].split(b";")[0], 16)
        except ValueError:
            break
        if size == 0:
            break
        start = j + 1
        for k in range(start, min(start + size, len(raw))):
            per_read[bisect.bisect_right(ends, k)].append(raw[k])
        if start + size > len(raw):
            break
        pos = start + size + 2
    return [(t, bytes(b)) for t, b in zip(times, per_read) if b]


def random_event(rng: random.Random, i: int) -> bytes:
    k = rng.random()
    if k < 0.6:
        # without the simulator's stamp, most events differ only in their text (metrics/sse.py's
        # text template reads them); with it, each is parsed in full
        obj = {"choices": [{"index": 0, "text": f"w{i}", "finish_reason": None}]}
        if rng.random() < 0.3:
            obj["sim_t"] = i + 0.5
    elif k < 0.7:
        obj = {
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": f"c{i}", "reasoning": "r" if rng.random() < 0.3 else None},
                    "finish_reason": "stop" if rng.random() < 0.1 else None,
                }
            ]
        }
    elif k < 0.75:
        obj = {"choices": [], "usage": {"completion_tokens": i, "prompt_tokens": 3}}
    elif k < 0.78:
        return b": keep-alive\n\n"
    elif k < 0.80:
        return b"data: {bad json\n\n"
    elif k < 0.82:
        return b"event: x\r\ndata: " + json.dumps({"choices": [{"text": "y"}]}).encode() + b"\r\n\r\n"
    elif k < 0.84:
        return b"data:[DONE]\n\n"
    elif k < 0.86:
        return b'data: {"error": {"message": "boom"}}\n\n'
    else:
        obj = {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}
    sep = b"data: " if rng.random() < 0.9 else b"data:"
    return sep + json.dumps(obj).encode() + (b"\n\n" if rng.random() < 0.95 else b"\r\n\r\n")


def random_chunked(rng: random.Random, events: list[bytes], terminated: bool = True) -> tuple[bytes, list[bytes]]:
    """The chunked body and its reads: mostly one chunk per event and per read, sometimes an
    event split over chunks, chunks merged into one read or split over reads."""
    chunks = []
    for e in events:
        if rng.random() < 0.15 and len(e) > 2:
            c = rng.randint(1, len(e) - 1)
            chunks += [e[:c], e[c:]]
        else:
            chunks.append(e)
    parts = [b"%x%s\r\n%s\r\n" % (len(c), b";ext=1" if rng.random() < 0.05 else b"", c) for c in chunks]
    if terminated:
        parts.append(b"0\r\n\r\n")
    raw = b"".join(parts)
    reads, cut, acc = [], 0, 0
    for p in parts:
        acc += len(p)
        r = rng.random()
        if r < 0.1:
            continue  # merged with the next
        if r < 0.2 and acc - cut > 2:
            m = rng.randint(cut + 1, acc - 1)
            reads.append(raw[cut:m])
            cut = m
        reads.append(raw[cut:acc])
        cut = acc
    if cut < len(raw):
        reads.append(raw[cut:])
    return raw, reads


def _key(p):
    nan = lambda x: None if x != x else x  # noqa: E731
    chunks = [(c.t, c.text, c.answer, c.usage_tokens, nan(c.sim_t)) for c in p.chunks]
    return chunks, p.usage, p.finish_reason, p.done, p.error, p.error_detail, nan(p.t_end)


def test_end_of_message_is_found_at_the_last_read_and_not_before():
    rng = random.Random(3)
    for _ in range(3000):
        events = [random_event(rng, i) for i in range(rng.randint(0, 10))]
        raw, _ = random_chunked(rng, events)
        cuts = sorted(rng.sample(range(1, len(raw)), min(len(raw) - 1, rng.randint(0, 12))))
        reads = [raw[a:b] for a, b in zip([0] + cuts, cuts + [len(raw)])]
        conn = Connection.__new__(Connection)  # the framing state only, no socket
        conn.framing, conn.need, conn.head, conn.remaining = CHUNKED, 0, b"", 0
        ends = [conn._feed(d) for d in reads]
        assert ends == [False] * (len(reads) - 1) + [True], (reads, ends)


def test_dechunk_keeps_each_payload_byte_with_the_time_of_its_read():
    rng = random.Random(5)
    for _ in range(3000):
        events = [random_event(rng, i) for i in range(rng.randint(0, 10))]
        raw, reads = random_chunked(rng, events, terminated=rng.random() < 0.9)
        if rng.random() < 0.5:  # arbitrary cuts too
            cuts = sorted(rng.sample(range(1, len(raw)), min(len(raw) - 1, rng.randint(0, 12)))) if len(raw) > 1 else []
            reads = [raw[a:b] for a, b in zip([0] + cuts, cuts + [len(raw)])]
        times = [float(i) for i in range(len(reads))]
        assert dechunk(times, reads) == reference_dechunk(times, reads), reads


def test_parse_reads_equals_parse_stream_of_the_decoded_body(monkeypatch):
    """parse_reads, text templates and all, against parse_stream with every event parsed in full."""
    rng = random.Random(7)
    for _ in range(4000):
        events = [random_event(rng, i) for i in range(rng.randint(0, 12))]
        chunked = rng.random() < 0.8
        if chunked:
            _, reads = random_chunked(rng, events, terminated=rng.random() < 0.9)
        else:
            raw = b"".join(events)
            if raw and rng.random() < 0.1:
                raw = raw.rstrip(b"\n")  # the last event without its blank line
            cuts = sorted(rng.sample(range(1, len(raw)), min(len(raw) - 1, rng.randint(0, 6)))) if len(raw) > 1 else []
            reads = [raw[a:b] for a, b in zip([0] + cuts, cuts + [len(raw)])] if raw else []
        times = [float(i) for i in range(len(reads))]
        pieces = dechunk(times, reads) if chunked else [(t, d) for t, d in zip(times, reads) if d]
        parsed, length = parse_reads(times, reads, chunked)
        monkeypatch.setattr(sse, "TEMPLATE_TRIES", 0)
        full = parse_stream(pieces)
        monkeypatch.undo()
        assert _key(parsed) == _key(full), reads
        assert length == sum(len(d) for _, d in pieces)
