"""The metric definitions: chunk arrival times -> TTFT, TPOT, ITL, E2E, output tokens.

This is the one place that turns what a stream delivered into the numbers the suite reports
(README "Metric definitions"). Users fill a RequestRecord with it;
summaries and reports only aggregate the record fields it sets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from metrics.parsed import ParsedStream, server_timing
from metrics.record import NAN, RequestRecord

if TYPE_CHECKING:
    import pyarrow as pa

TokenCounter = Callable[[str], int]

DEFINITIONS = {
    "t_send": "time.perf_counter() just before the request is written to the socket, on a ready connection: "
    "a new connection is opened (TCP connect, the server's accept, TLS) before it",
    "connect": "connect_s: seconds spent opening a new connection before t_send (NaN when the request reused a "
    "kept-alive one); not part of TTFT or E2E. --connection per-request opens one for every request",
    "ttft": "arrival of the first SSE chunk carrying generated output of any kind (delta.content, "
    "delta.reasoning/reasoning_content, a delta.tool_calls name or arguments fragment, or text) minus t_send; "
    "role-only and empty chunks do not count (vLLM's TTFT). Non-streaming requests: equal to e2e",
    "ttfa": "time to first answer token: arrival of the first chunk carrying content or a tool call (not only "
    "reasoning) minus t_send; what a user waits for before seeing the answer. Equal to ttft without reasoning; "
    "none when the reply was only reasoning (guidellm: time to first output token; AIPerf: TTFO)",
    "e2e": "arrival of the last token-bearing chunk minus t_send (non-streaming: the whole response)",
    "output_tokens": "usage.completion_tokens from the server; when absent, the client tokenizer's count "
    "of the generated text (--tokenizer); last resort the number of token-bearing chunks. "
    "tokens.source says which",
    "reasoning_tokens": "output tokens that were reasoning: usage.completion_tokens_details.reasoning_tokens; "
    "when absent, the client tokenizer's count of the reasoning text (--tokenizer); last resort the number of "
    "chunks carrying reasoning. reasoning_source says which",
    "answer_tokens": "output_tokens - reasoning_tokens: the content and tool-call tokens",
    "tool_calls": "tool calls in a reply (delta.tool_calls by index; parallel calls each count); a reply of "
    "tool calls only is a success like any other, its output tokens from usage",
    "embeddings": "/v1/embeddings (--endpoint embeddings): latency is e2e (the whole response; no TTFT, TPOT or "
    "ITL); inputs is the vectors a request returned (its batch size); input tokens (usage.prompt_tokens) count "
    "for throughput when the response arrived. /v1/rerank (--endpoint rerank) is measured the same way: inputs is "
    "the documents ranked (results), input tokens usage.total_tokens when the reply has no prompt_tokens. A reply "
    "with fewer results than the request's inputs or documents (all of them, or top_n) is missing_results",
    "finish_reason": "the server's finish_reason of choice 0: stop, length, tool_calls, ...",
    "tpot": "(t_last_token - t_first_token) / (output_tokens - 1), only when output_tokens > 1",
    "itl": "every gap between consecutive token-bearing chunks, pooled across successful requests "
    "(a chunk may carry several tokens)",
    "throughput": "per second of the measurement window (warm-up and the end-of-run drain excluded): requests "
    "completed successfully inside it; output tokens that arrived inside it (with their chunk; a request's "
    "output tokens spread evenly over its token-bearing chunks) and prompt tokens whose prefill ended inside "
    "it (at the first token), of successful requests and of those still streaming when the run ended",
    "window": "from test start + --warmup to the moment the run began to stop; a request belongs to "
    "the latency statistics when it was sent inside the window",
    "percentiles": "exact, from the per-request records (numpy 'linear' interpolation); a load level's (by_step) are the "
    "order statistic X(ceil(q n)) (numpy 'inverted_cdf'), which its verdict's confidence bounds bracket; ms",
    "success": "HTTP 200, stream ended with [DONE] or a finish_reason, no in-stream error, at least one token",
}


def output_tokens(parsed: ParsedStream, count_tokens: TokenCounter | None) -> tuple[int, str]:
    """The output token count and its source, by the order of trust in DEFINITIONS."""
    if parsed.inputs:  # an embedding or a ranking generates no token
        return 0, "usage"
    if parsed.usage and parsed.usage.get("completion_tokens") is not None:
        return int(parsed.usage["completion_tokens"]), "usage"
    if not parsed.chunks:
        return 0, "chunks"
    if count_tokens is not None:
        return count_tokens("".join(c.text for c in parsed.chunks)), "tokenizer"
    return len(parsed.chunks), "chunks"


def reasoning_tokens(parsed: ParsedStream, count_tokens: TokenCounter | None) -> tuple[int, str]:
    """The reasoning token count and its source, by the order of trust in DEFINITIONS; (0, "")
    for a reply that carried no reasoning, (-1, "") when nothing is known (no token came)."""
    details = parsed.usage.get("completion_tokens_details") if parsed.usage else None
    if type(details) is dict and details.get("reasoning_tokens") is not None:
        return int(details["reasoning_tokens"]), "usage"
    pieces = [c.reasoning for c in parsed.chunks if c.reasoning]
    if not pieces:
        return (0 if parsed.chunks else -1), ""
    if count_tokens is not None:
        return count_tokens("".join(pieces)), "tokenizer"
    return len(pieces), "chunks"


def chunk_token_counts(parsed: ParsedStream) -> list[int]:
    """Tokens per chunk from cumulative usage in every chunk (vLLM continuous_usage_stats)."""
    counts, previous = [], 0
    for c in parsed.chunks:
        if c.usage_tokens < 0:
            return []
        counts.append(c.usage_tokens - previous)
        previous = c.usage_tokens
    return counts


def status_class(status: int) -> str:
    """The failure class of an HTTP status; "" for 200."""
    if status == 200:
        return ""
    if status == 429:
        return "http_429"
    return "http_5xx" if status >= 500 else "http_4xx"


def head_class(status: int, stream: bool = False, content_type: str = "", first: bytes = b"") -> str:
    """The failure class a response shows before its body is parsed (its status, its Content-Type
    and first bytes); "" when it may still succeed. A streaming request answered 200 with one JSON
    document instead of events is `not_streamed`: the server, or a gateway in between that buffers
    the reply, did not stream, so no token could be timed."""
    if status != 200:
        return status_class(status)
    if stream and "json" in content_type.lower() and first.lstrip()[:1] in (b"{", b"["):
        return "not_streamed"
    return ""


NOT_STREAMED = (
    "the server or a gateway in between did not stream: HTTP 200 with Content-Type {type} to a streaming request"
)


def classify(
    status: int,
    parsed: ParsedStream,
    stream: bool = False,
    content_type: str = "",
    first: bytes = b"",
    expected: int = 0,
) -> tuple[str, str]:
    """(error class, detail) of a completed HTTP exchange; ("", "") is a success. `content_type` and
    `first` (the body's first bytes) tell a reply that was not streamed (`head_class`); `expected`: the
    results an embeddings or rerank reply must hold (workloads.bodies.expected_results), 0 unknown."""
    head = head_class(status, stream, content_type, first)
    if head == "not_streamed" and not parsed.chunks and not parsed.finished:
        return head, NOT_STREAMED.format(type=content_type)
    if status != 200:
        return head, ""
    if parsed.error:
        return parsed.error, parsed.error_detail
    if not parsed.finished:
        return "stream_truncated", "the stream ended without [DONE] or a finish_reason"
    if not parsed.chunks and not parsed.inputs:
        return "no_tokens", "the stream carried no generated output (content, reasoning or tool call)"
    if parsed.inputs < expected:
        return "missing_results", f"the reply held {parsed.inputs} results for {expected} inputs or documents"
    return "", ""


def fill_record(
    rec: RequestRecord,
    status: int,
    parsed: ParsedStream,
    count_tokens: TokenCounter | None,
    stream: bool = True,
    content_type: str = "",
    first: bytes = b"",
) -> None:
    """Set every timing and token field of `rec` from one finished exchange (`content_type` and
    `first`, the body's first bytes, as `classify` takes them). `rec.inputs` comes in as the results
    the request asked for (0 unknown) and leaves as the results the reply held."""
    rec.status = status
    rec.error, rec.error_detail = classify(status, parsed, stream, content_type, first, rec.inputs)
    rec.ok = not rec.error
    rec.finish_reason = parsed.finish_reason
    chunks = parsed.chunks
    rec.n_chunks = len(chunks)
    rec.chunk_times = [c.t - rec.t_send for c in chunks]
    rec.chunk_tokens = chunk_token_counts(parsed)
    if parsed.usage and parsed.usage.get("prompt_tokens") is not None:
        rec.prompt_tokens = int(parsed.usage["prompt_tokens"])
    rec.output_tokens, rec.tokens_source = output_tokens(parsed, count_tokens)
    rec.reasoning_tokens, rec.reasoning_source = reasoning_tokens(parsed, count_tokens)
    if rec.output_tokens >= 0 and rec.reasoning_tokens >= 0 and (chunks or rec.output_tokens):
        rec.answer_tokens = max(0, rec.output_tokens - rec.reasoning_tokens)
    rec.tool_calls = len(parsed.tool_calls)
    rec.inputs = parsed.inputs
    for name, value in server_timing(parsed).items():  # the server's own report, where it sent one
        setattr(rec, name, value)
    if chunks:
        rec.ttft_s = rec.chunk_times[0]
        rec.ttfa_s = next((t for t, c in zip(rec.chunk_times, chunks) if c.answer), NAN)
        rec.e2e_s = rec.chunk_times[-1]
        if stream and rec.output_tokens > 1:
            rec.tpot_s = (rec.e2e_s - rec.ttft_s) / (rec.output_tokens - 1)
    elif parsed.t_end == parsed.t_end:  # not nan: time until the exchange ended
        rec.e2e_s = parsed.t_end - rec.t_send


def itl_gaps(chunk_times: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The ITL: every gap between consecutive token-bearing chunks of each request, in seconds,
    and the row (position in `chunk_times`, the records' Arrow list column) each gap belongs to."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(chunk_times, pa.ChunkedArray):
        gaps, rows, offset = [], [], 0
        for part in chunk_times.chunks:
            g, r = itl_gaps(part)
            gaps.append(g)
            rows.append(r + offset)
            offset += len(part)
        if not gaps:
            return np.empty(0), np.empty(0, dtype=np.int64)
        return np.concatenate(gaps), np.concatenate(rows)
    values = pc.list_flatten(chunk_times).to_numpy(zero_copy_only=False)
    lengths = pc.list_value_length(chunk_times).fill_null(0).to_numpy(zero_copy_only=False)
    owner = np.repeat(np.arange(len(chunk_times), dtype=np.int64), lengths)
    within = owner[1:] == owner[:-1]  # a gap between two chunks of the same request
    return np.diff(values)[within], owner[1:][within]


def pooled_itl(chunk_times: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """All gaps between consecutive chunks within each request, in seconds (ITL, pooled)."""
    return itl_gaps(chunk_times)[0]


# Endings decided by the client at a moment of its choosing: E2E is censored there.
CENSORED_ENDINGS = ("timeout", "cancelled")


def end_early(rec: RequestRecord, error: str, detail: str, t_end: float, cause: str = "") -> None:
    """A transport-level ending (the run stopped, a --timeout-* limit struck, a cancel, a broken
    connection) overrides what the bytes alone suggest: `rec` fails with `error`. Its E2E is
    censored where the request ended (`t_end` - t_send) when `cause` is a limit or a cancel, or
    when no token-bearing chunk timed it."""
    rec.error, rec.error_detail, rec.ok = error, detail, False
    if cause in CENSORED_ENDINGS or not rec.n_chunks or rec.e2e_s != rec.e2e_s:
        rec.e2e_s = t_end - rec.t_send


def arrived_tokens(
    edges, wall_send, ttft_s, e2e_s, prompt_tokens, output_tokens, chunk_times, mask
) -> tuple[np.ndarray, np.ndarray]:
    """Output and prompt tokens of the records in `mask` that arrived in each interval between
    consecutive `edges` (wall-clock seconds; the last interval includes its end).

    An output token arrives with its chunk (`wall_send + chunk_times`; a record's output tokens
    are spread evenly over its token-bearing chunks; no chunks: all at `wall_send + e2e_s`); a
    prompt token when its prefill ended, at the first token (`wall_send + ttft_s`).
    So a reply longer than a load step counts in each step for what it delivered there. Arrays
    are per record; `chunk_times` the records' Arrow list column (chunked or not)."""
    import pyarrow as pa

    edges = np.asarray(edges, dtype=float)
    k = edges.size - 1
    wall = np.asarray(wall_send, dtype=float)
    out_tok = np.clip(np.nan_to_num(np.asarray(output_tokens, dtype=float)), 0, None)
    prompt = np.clip(np.nan_to_num(np.asarray(prompt_tokens, dtype=float)), 0, None)
    done = wall + np.asarray(e2e_s, dtype=float)
    mask = np.asarray(mask, dtype=bool)

    def add(totals: np.ndarray, t: np.ndarray, w: np.ndarray) -> None:
        b = np.searchsorted(edges, t, side="right") - 1
        b[t == edges[-1]] = k - 1
        inside = (b >= 0) & (b < k)
        totals += np.bincount(b[inside], weights=w[inside], minlength=k)

    out, pre = np.zeros(k), np.zeros(k)
    prefill = wall + np.asarray(ttft_s, dtype=float)  # NaN (no token came): never counted
    add(pre, prefill[mask], prompt[mask])
    chunks = chunk_times.chunks if isinstance(chunk_times, pa.ChunkedArray) else [chunk_times]
    row = 0
    for part in chunks:
        rows = np.arange(row, row + len(part))
        row += len(part)
        off = part.offsets.to_numpy(zero_copy_only=False)
        values = part.values.to_numpy(zero_copy_only=False)
        lengths = np.diff(off)
        sel = mask[rows]
        none = sel & (lengths == 0)  # non-streaming, or no token arrived: the tokens came with the body
        add(out, done[rows[none]], out_tok[rows[none]])
        has = sel & (lengths > 0)
        r, starts, n = rows[has], off[:-1][has], lengths[has]
        first, last = wall[r] + values[starts], wall[r] + values[starts + n - 1]
        one = np.searchsorted(edges, first, side="right") == np.searchsorted(edges, last, side="right")
        add(out, first[one], out_tok[r[one]])  # every chunk in one interval (most records)
        r, starts, n = r[~one], starts[~one], n[~one]  # the few that straddle an edge: chunk by chunk
        if r.size:
            pos = np.repeat(starts - np.cumsum(n) + n, n) + np.arange(n.sum())
            add(out, np.repeat(wall[r], n) + values[pos], np.repeat(out_tok[r] / n, n))
    return out, pre


ARRIVAL_COLUMNS = ("wall_send", "ttft_s", "e2e_s", "prompt_tokens", "output_tokens")


def arrival_inputs(df) -> tuple[list[np.ndarray], np.ndarray]:
    """From a records frame: `arrived_tokens`' per-record arrays, and which records' tokens count
    for throughput: the successful ones and those still streaming when the run ended (`stopped`)."""
    ok = df["ok"].to_numpy(dtype=bool)
    counted = ok | (df["error"] == "stopped").to_numpy()
    arrays = [df[c].to_numpy(dtype=float) for c in ARRIVAL_COLUMNS]
    ttft, e2e = arrays[1], arrays[2]
    arrays[1] = np.where(ok & np.isnan(ttft), e2e, ttft)  # embeddings: the input was read when the answer came
    return arrays, counted


__all__ = [
    "DEFINITIONS",
    "NAN",
    "fill_record",
    "end_early",
    "classify",
    "head_class",
    "pooled_itl",
    "itl_gaps",
    "output_tokens",
    "reasoning_tokens",
    "arrived_tokens",
    "arrival_inputs",
]
