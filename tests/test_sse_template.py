"""The text template of metrics/sse.py: an event that differs from the one before only in its
generated text is read by decoding that text alone. It must give exactly what the full parse of
every event gives, on every stream shape the corpus holds and on events made to mislead it, and it
must be what reads a plain stream (else the tests of equality would pass without it)."""

from __future__ import annotations

import math
import random
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest

import metrics.sse as sse
from metrics.sse import parse_reads, text_template

pytestmark = pytest.mark.unit

CORPUS = Path(__file__).parent / "corpus"


def chunked_reads(events: list[bytes]) -> list[bytes]:
    """One HTTP chunk per SSE event, one read per chunk; the last read ends the message."""
    reads = [b"%x\r\n%s\r\n" % (len(e), e) for e in events]
    reads[-1] += b"0\r\n\r\n"
    return reads


def as_plain(parsed) -> tuple:
    """A ParsedStream as plain values (NaN made comparable)."""

    def fix(v):
        return None if isinstance(v, float) and math.isnan(v) else v

    chunks = [tuple(fix(getattr(c, f)) for f in c.__slots__) for c in parsed.chunks]
    rest = {f: fix(getattr(parsed, f)) for f in parsed.__slots__ if f != "chunks"}
    return chunks, rest


def both_ways(reads: list[bytes], chunked: bool = True, monkeypatch=None) -> tuple:
    times = [0.01 * i for i in range(len(reads))]
    with_template = parse_reads(times, reads, chunked)
    monkeypatch.setattr(sse, "TEMPLATE_TRIES", 0)
    full = parse_reads(times, reads, chunked)
    monkeypatch.undo()
    return as_plain(with_template[0]), with_template[1], as_plain(full[0]), full[1]


def completion(text, finish_reason=None, **extra) -> bytes:
    event = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1796604786,
        "model": "m",
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
        **extra,
    }
    return b"data: " + orjson.dumps(event) + b"\n\n"


def chat(content, **delta) -> bytes:
    event = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1796604786,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": content, **delta}, "logprobs": None, "finish_reason": None}],
    }
    return b"data: " + orjson.dumps(event) + b"\n\n"


def corpus_streams() -> list[tuple[str, list[bytes]]]:
    out = []
    for path in sorted(CORPUS.glob("*/*.sse")):
        body = path.read_bytes()
        events = [e + b"\n\n" for e in body.split(b"\n\n") if e.strip()]
        out.append((f"{path.parent.name}/{path.stem}", events))
    return out


@pytest.mark.parametrize("name,events", corpus_streams(), ids=[n for n, _ in corpus_streams()])
def test_every_corpus_stream_parses_the_same_with_templates(name, events, monkeypatch):
    a, a_len, b, b_len = both_ways(chunked_reads(events), True, monkeypatch)
    assert a == b and a_len == b_len, name
    a, a_len, b, b_len = both_ways([b"".join(events)], False, monkeypatch)  # one read, not chunked
    assert a == b and a_len == b_len, name


TRICKY = [
    "",
    " plain",
    'a "quoted" word',
    "back\\slash",
    "ünïcode ✓",
    "\u2028line sep",
    "tab\tand\nnewline",
    "m",  # the model's name: found twice, no template
    '","text":"',  # looks like the bytes around a text
    "\x00text\x00",  # the marker itself
    "}]}",
    "null",
]


def test_misleading_texts_parse_the_same(monkeypatch):
    rng = random.Random(7)
    for make in (completion, chat):
        for _ in range(40):
            texts = [rng.choice(TRICKY) for _ in range(12)]
            events = [make(t) for t in texts] + [b"data: [DONE]\n\n"]
            a, a_len, b, b_len = both_ways(chunked_reads(events), True, monkeypatch)
            assert a == b and a_len == b_len, texts


def test_events_that_differ_outside_the_text_parse_the_same(monkeypatch):
    """What lies between the template's ends is not one JSON string, or the ends differ: each such
    event is parsed in full. Each stream starts with the event its template is made of."""
    good = completion(" a")
    before, _, after = good.partition(b'" a"')
    done = b"data: [DONE]\n\n"
    streams = {
        "not one string": [
            good,
            before + b'" b","x":"y"' + after,  # two tokens where the text was: a malformed event
            before + b'" c\x01"' + after,  # a raw control character: not a JSON string
            before + b'"\\u00e9"' + after,  # escaped differently from how orjson writes it: still a string
            before + b'  " d"  ' + after,  # blanks around the string
            before + b'"' + after,  # cut: the ends overlap
            before + b"12" + after,  # a number
            done,
        ],
        "the end differs, same length": [
            good,
            before + b'" e"' + after.replace(b'"finish_reason":null', b'"finish_reason":"ab"'),
            done,
        ],
        "the text found once, but elsewhere": [
            before.replace(b'"cmpl-1"', b'" hi"') + b'"\\u0020hi"' + after,  # " hi" is the id's
            before.replace(b'"cmpl-1"', b'"zz"') + b'"\\u0020hi"' + after,
            done,
        ],
        "more than the text differs": [
            good,
            completion(" f", usage={"completion_tokens": 5}),
            completion(" g", created=1796604787),
            completion(" h", created=1796604787),
            completion(" i", sim_t=1.5),
            chat(None, reasoning_content="think"),
            chat("x", tool_calls=[{"index": 0, "function": {"name": "f", "arguments": "{}"}}]),
            completion(" last", finish_reason="length"),
            done,
        ],
    }
    for name, events in streams.items():
        a, a_len, b, b_len = both_ways(chunked_reads(events), True, monkeypatch)
        assert a == b and a_len == b_len, name
    assert b[1]["finish_reason"] == "length"


def test_a_plain_stream_is_read_through_the_template(monkeypatch):
    """Of 100 vLLM-shaped events, two are decoded whole (the first, and the template's check); the
    rest only as their text."""
    decoded: list[bytes] = []

    def loads(b):
        decoded.append(bytes(b))
        return orjson.loads(b)

    monkeypatch.setattr(
        sse, "orjson", SimpleNamespace(loads=loads, dumps=orjson.dumps, JSONDecodeError=orjson.JSONDecodeError)
    )
    for make in (completion, chat):
        decoded.clear()
        events = [make(f" t{i}") for i in range(100)] + [b"data: [DONE]\n\n"]
        parsed, _ = parse_reads([float(i) for i in range(101)], chunked_reads(events), True)
        assert [c.text for c in parsed.chunks] == [f" t{i}" for i in range(100)]
        whole = [d for d in decoded if d.lstrip().startswith(b"{")]
        assert len(whole) == 2, len(whole)


def test_a_template_is_only_made_where_the_marker_lands_in_the_text():
    event = completion(" hi")[6:-2]
    assert text_template(event, orjson.loads(event), " hi") == (
        event[: event.index(b'" hi"')],
        event[event.index(b'" hi"') + 5 :],
    )
    twice = completion("m")[6:-2]  # the text is also the model's name
    assert text_template(twice, orjson.loads(twice), "m") is None
    escaped = event.replace(b'" hi"', b'"\\u0020hi"')  # the server escaped what orjson does not
    assert text_template(escaped, orjson.loads(escaped), " hi") is None
