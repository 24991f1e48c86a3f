"""Every kind of generated output is a token: content, reasoning and tool calls, parsed after the
stream into one record (metrics/sse.py, metrics/timing.py), summarised (metrics/summary.py) and
judged (metrics/slo.py). Byte-exact server streams are in tests/corpus; these are the rules."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pytest

from core.errors import InputError
from metrics.record import RequestRecord, rows_to_table, with_all_columns
from metrics.slo import good_mask, parse_slo
from metrics.sse import parse_response, parse_stream
from metrics.summary import summarize
from metrics.timing import fill_record
from plugin.finisher import reply_text


def sse(*events) -> list[tuple[float, bytes]]:
    """(arrival, bytes) pieces, one event each, 10 ms apart."""
    out = [
        (0.01 * (i + 1), b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n")
        for i, e in enumerate(events)
    ]
    return out + [(0.01 * (len(events) + 1), b"data: [DONE]\n\n")]


def delta(d, finish=None):
    return {"choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


def record(pieces, stream=True, count_tokens=None) -> tuple[RequestRecord, object]:
    rec = RequestRecord("r", "w", "chat", "c", 10, 50, stream=stream)
    rec.t_send = 0.0
    parsed = parse_stream(pieces) if stream else parse_response(pieces)
    fill_record(rec, 200, parsed, count_tokens, stream=stream)
    return rec, parsed


def test_a_tool_call_only_reply_is_a_success_with_usage_tokens():
    rec, parsed = record(
        sse(
            delta({"role": "assistant", "content": ""}),
            delta({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "f"}}]}),
            delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]}, "tool_calls"),
            {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9}},
        )
    )
    assert rec.ok and rec.error == ""
    assert rec.output_tokens == 9 and rec.tokens_source == "usage"
    assert rec.ttft_s == rec.ttfa_s == pytest.approx(0.02)
    assert rec.tool_calls == 1 and rec.finish_reason == "tool_calls"
    assert rec.reasoning_tokens == 0 and rec.answer_tokens == 9
    assert parsed.tool_calls == [{"id": "c1", "name": "f", "arguments": '{"a": 1}'}]
    assert reply_text(parsed) == ""  # a tool call is not content


def test_reasoning_then_content_splits_ttft_from_the_first_answer_token_and_counts_reasoning():
    rec, parsed = record(
        sse(
            delta({"reasoning": "think"}),
            delta({"reasoning_content": " more"}),
            delta({"content": "Hi"}),
            delta({"content": "!"}, "stop"),
            {"choices": [], "usage": {"completion_tokens": 12, "completion_tokens_details": {"reasoning_tokens": 8}}},
        )
    )
    assert rec.ttft_s == pytest.approx(0.01) and rec.ttfa_s == pytest.approx(0.03)
    assert (rec.reasoning_tokens, rec.reasoning_source, rec.answer_tokens) == (8, "usage", 4)
    assert reply_text(parsed) == "Hi!"  # reasoning is not sent back in a conversation


def test_reasoning_without_usage_detail_is_counted_by_the_tokenizer_else_by_chunks():
    events = (delta({"reasoning": "a b c"}), delta({"reasoning": " d"}), delta({"content": "x y"}, "stop"))
    rec, _ = record(sse(*events))
    assert (rec.output_tokens, rec.tokens_source) == (3, "chunks")
    assert (rec.reasoning_tokens, rec.reasoning_source, rec.answer_tokens) == (2, "chunks", 1)
    rec, _ = record(sse(*events), count_tokens=lambda text: len(text.split()))
    assert (rec.reasoning_tokens, rec.reasoning_source) == (4, "tokenizer")


def test_a_reasoning_only_reply_has_no_time_to_first_answer_token():
    rec, _ = record(sse(delta({"reasoning": "a"}), delta({"reasoning": "b"}, "length")))
    assert rec.ok and rec.ttft_s == pytest.approx(0.01) and math.isnan(rec.ttfa_s)
    assert rec.answer_tokens == 0


def test_parallel_tool_calls_are_told_apart_by_index():
    _, parsed = record(
        sse(
            delta(
                {
                    "tool_calls": [
                        {"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}},
                        {"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}},
                    ]
                }
            ),
            delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"x":'}}]}),
            delta({"tool_calls": [{"index": 0, "function": {"arguments": "2}"}}]}, "tool_calls"),
        )
    )
    assert [(c["name"], c["arguments"]) for c in parsed.tool_calls] == [("f", '{"x":2}'), ("g", "{}")]


def test_a_non_streaming_tool_call_reply_is_a_success():
    body = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "reasoning": "hm",
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                },
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 7},
    }
    rec, parsed = record([(0.5, json.dumps(body).encode())], stream=False)
    assert rec.ok and rec.tool_calls == 1 and rec.output_tokens == 7
    assert rec.ttfa_s == rec.ttft_s == rec.e2e_s == 0.5


def test_ttfa_slo_reads_and_a_reply_without_an_answer_misses_it():
    (obj,) = parse_slo("ttfa.p95<1s")
    assert obj.key == "ttfa.p95"
    with pytest.raises(InputError, match="ttfa"):
        parse_slo("ttfx.p95<1s")
    import pandas as pd

    df = pd.DataFrame({"ok": [True, True, True], "ttfa_s": [0.5, 2.0, np.nan]})
    assert good_mask([obj], df, pa.array([[], [], []], pa.list_(pa.float64()))).tolist() == [True, False, False]


def _rec(i, ttft, ttfa, reasoning, answer, calls, finish):
    r = RequestRecord(f"r{i}", "w", "chat", "c", 10, 50)
    r.wall_send, r.t_send, r.ok, r.ttft_s, r.e2e_s = 100.0 + i, 0.0, True, ttft, ttft + 1
    r.ttfa_s, r.output_tokens, r.reasoning_tokens, r.answer_tokens = ttfa, reasoning + answer, reasoning, answer
    r.tool_calls, r.finish_reason, r.chunk_times = calls, finish, [ttft, ttft + 1]
    return r.as_row()


def test_summary_has_the_time_to_first_answer_token_the_split_and_the_finish_reasons():
    rows = [
        _rec(0, 0.1, 0.3, 20, 5, 0, "stop"),
        _rec(1, 0.2, 0.2, 0, 9, 2, "tool_calls"),
        _rec(2, 0.1, math.nan, 30, 0, 0, "length"),
    ]
    s = summarize(rows_to_table(rows), 99.0, 200.0, objectives=parse_slo("ttfa.p95<1s"))
    o = s.overall
    assert o.ttfa_ms.count == 2 and o.ttfa_ms.max == pytest.approx(300) and o.ttft_ms.count == 3
    assert (o.tokens.reasoning, o.tokens.answer, o.tokens.split_known) == (50, 14, 3)
    assert o.requests.by_finish_reason == {"length": 1, "stop": 1, "tool_calls": 1}
    assert o.requests.tool_calls == 2
    # the run's verdict is the levels' (metrics/verdict.py): the reasoning-only reply's TTFA counts as
    # infinite, so the P95 of 3 (the largest) is too (null), and 3 values cannot bound it from above
    e = o.slo.objectives[0]
    assert e.value_ms is None and e.lower_ms == pytest.approx(300) and e.upper_ms is None and o.slo.state == "undecided"
    assert o.goodput.good_fraction == pytest.approx(2 / 3)  # the reasoning-only reply missed it


def test_an_older_records_file_without_the_new_columns_is_summarised():
    table = rows_to_table([_rec(0, 0.1, 0.1, 0, 5, 0, "stop")])
    old = table.drop_columns(["ttfa_s", "reasoning_tokens", "answer_tokens", "reasoning_source", "tool_calls"])
    s = summarize(old, 99.0, 200.0)
    assert s.overall.requests.ok == 1 and s.overall.ttfa_ms.count == 0
    assert with_all_columns(old).schema == table.schema


def test_the_report_table_shows_the_first_answer_token_and_the_split_only_when_there_is_one():
    from reports.rows import summary_table

    agentic = summarize(
        rows_to_table([_rec(0, 0.1, 0.3, 20, 5, 0, "stop"), _rec(1, 0.2, 0.2, 0, 9, 2, "tool_calls")]), 99.0, 200.0
    )
    table = summary_table(agentic)
    assert table.headers[-5:] == ["TTFA p50", "TTFA p95", "reasoning tok", "answer tok", "tool calls"]
    plain = summarize(rows_to_table([_rec(0, 0.1, 0.1, 0, 5, 0, "stop")]), 99.0, 200.0)
    assert "TTFA p95" not in summary_table(plain).headers
