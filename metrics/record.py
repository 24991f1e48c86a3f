"""The request record: one row per request, the only thing users produce and reports read.

Times on the record are seconds. `t_send`/`t_intended` are `time.perf_counter()` values of
the process that sent the request (CLOCK_MONOTONIC on Linux, so comparable with a simulator
on the same machine); `wall_send` is `time.time()` at the same moment and places the request
on the run's wall clock, which is what windows and steps are cut on (workers on several hosts
share no monotonic clock). Latencies are differences of one process's perf_counter values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from functools import cache
from typing import TYPE_CHECKING

from core.arrow import rows_to_arrow

if TYPE_CHECKING:
    import pyarrow as pa

NAN = math.nan

# Failure classes. A request is "ok" only if none applies (README.md, "Metric definitions").
ERROR_CLASSES = (
    "http_429",  # rate limited
    "http_4xx",  # any other 4xx
    "http_5xx",
    "connect_error",  # could not connect / connection refused / reset before the response
    "timeout",  # a --timeout-* limit was reached; timings are censored at the limit
    "stream_truncated",  # the connection ended before [DONE] or a finish_reason
    "mid_stream_error",  # an in-stream {"error": ...} event
    "malformed_chunk",  # an SSE event whose JSON did not parse
    "no_tokens",  # the stream ended properly but carried no generated text
    "missing_results",  # an embeddings or rerank reply with fewer results than the request's inputs or documents
    "not_streamed",  # a streaming request answered 200 with one JSON body (no events): nothing to time
    "cancelled",  # aborted on purpose by the client (--cancel-rate)
    "stopped",  # still in flight when the run ended; not a server failure
    "response_too_large",  # the body passed --max-response-size and was cut there
)
# Endings that are the client's doing, not the server's: kept in the records, counted apart,
# never in a failure count or the good fraction's denominator.
NOT_SERVER_FAILURES = ("stopped", "cancelled")


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    worker: str
    endpoint: str  # "chat" | "completions" | "responses" | "embeddings" | "rerank"
    request_class: str
    input_chars: int
    max_tokens: int
    stream: bool = True
    step: int = -1  # load-shape step index, -1 when no step shape
    t_intended: float = NAN  # open loop: scheduled send time (perf_counter)
    t_send: float = NAN
    wall_send: float = NAN
    status: int = 0
    ok: bool = False
    error: str = ""
    error_detail: str = ""
    ttft_s: float = NAN
    e2e_s: float = NAN  # last token-bearing chunk - t_send (failures: time until the failure)
    tpot_s: float = NAN
    prompt_tokens: int = -1  # from usage; -1 unknown
    output_tokens: int = -1
    tokens_source: str = ""  # "usage" | "tokenizer" | "chunks"
    n_chunks: int = 0  # token-bearing chunks
    finish_reason: str = ""
    # Seconds after t_send of every token-bearing chunk; the ITL is their consecutive gaps.
    chunk_times: list[float] = field(default_factory=list)
    # Tokens each token-bearing chunk carried, when the server said (continuous usage stats).
    chunk_tokens: list[int] = field(default_factory=list)
    # Conversations (workload classes with `session`): turn number from 1, -1 for a single request,
    # and the id shared by the turns of one conversation.
    turn: int = -1
    session_id: str = ""
    # Sent a second time on a new connection because the server closed a kept-alive connection
    # the instant the request arrived, before running it (users/stream.py, STALE_CLOSE_S).
    resent: bool = False
    # Seconds spent opening a new connection (TCP connect and the server's accept; TLS handshake)
    # before the request was written; NaN when the request went out on a kept-alive connection.
    # Not part of TTFT or E2E, which start at t_send, when the request is written.
    connect_s: float = NAN
    # Time to first answer token: the first chunk carrying content or a tool call, minus t_send.
    # Equal to ttft_s unless reasoning came first; NaN when the reply was only reasoning.
    ttfa_s: float = NAN
    # Output tokens that were reasoning, and the rest (the answer: content and tool calls); -1
    # unknown. `reasoning_source` says where the reasoning count came from (metrics/timing.py).
    reasoning_tokens: int = -1
    answer_tokens: int = -1
    reasoning_source: str = ""  # "usage" | "tokenizer" | "chunks" | "" (no reasoning text)
    tool_calls: int = 0  # tool calls in the reply (parallel calls counted one by one)
    inputs: int = (
        0  # embeddings: the vectors returned (the request's batch size); rerank: the documents ranked; 0 for generation
    )
    # The server's own timing of this request, where it sent one (vLLM's per-request `metrics`
    # object in the final usage chunk, --enable-per-request-metrics), in seconds; NaN where it sent
    # none. Queue: waiting for the scheduler; TTFT: from being scheduled to the first token (its
    # prefill); generation: first token to last; ITL: its mean gap between tokens. The client's
    # ttft_s less queue and server TTFT is the front end, the network and the client (metrics/ttft_split.py).
    server_queue_s: float = NAN
    server_ttft_s: float = NAN
    server_generation_s: float = NAN
    server_itl_s: float = NAN
    # Prompt tokens the server took from its prefix cache (usage.prompt_tokens_details.cached_tokens); -1 unknown.
    cached_tokens: int = -1
    # The backend that served the request: the URL the suite sent it to when --host names several
    # (targets/), or the value of --backend-header in the reply of one load balancer; "" for one plain host.
    backend: str = ""
    # How far a stall of the client's event loop may have moved the first-token stamp, at most (ms):
    # the longest stall inside the wait from t_send to the first token (plugin/health_stalls.py);
    # 0 for none, NaN where there was no first token or no self-health.
    stamp_skew_ms: float = NAN

    def as_row(self) -> tuple:
        return tuple(getattr(self, name) for name in FIELD_NAMES)


FIELD_NAMES = tuple(f.name for f in fields(RequestRecord))


@cache
def arrow_schema() -> pa.Schema:
    """The records' columns in Arrow (requests.parquet). pyarrow loads here, at first use: a process
    that only drives load (a worker) never loads it, a tenth of a second of CPU per start."""
    import pyarrow as pa

    schema = pa.schema(
        [
            ("request_id", pa.string()),
            ("worker", pa.string()),
            ("endpoint", pa.string()),
            ("request_class", pa.string()),
            ("input_chars", pa.int32()),
            ("max_tokens", pa.int32()),
            ("stream", pa.bool_()),
            ("step", pa.int32()),
            ("t_intended", pa.float64()),
            ("t_send", pa.float64()),
            ("wall_send", pa.float64()),
            ("status", pa.int16()),
            ("ok", pa.bool_()),
            ("error", pa.string()),
            ("error_detail", pa.string()),
            ("ttft_s", pa.float64()),
            ("e2e_s", pa.float64()),
            ("tpot_s", pa.float64()),
            ("prompt_tokens", pa.int32()),
            ("output_tokens", pa.int32()),
            ("tokens_source", pa.string()),
            ("n_chunks", pa.int32()),
            ("finish_reason", pa.string()),
            ("chunk_times", pa.list_(pa.float64())),
            ("chunk_tokens", pa.list_(pa.int32())),
            ("turn", pa.int16()),
            ("session_id", pa.string()),
            ("resent", pa.bool_()),
            ("connect_s", pa.float64()),
            ("ttfa_s", pa.float64()),
            ("reasoning_tokens", pa.int32()),
            ("answer_tokens", pa.int32()),
            ("reasoning_source", pa.string()),
            ("tool_calls", pa.int16()),
            ("inputs", pa.int32()),
            ("server_queue_s", pa.float64()),
            ("server_ttft_s", pa.float64()),
            ("server_generation_s", pa.float64()),
            ("server_itl_s", pa.float64()),
            ("cached_tokens", pa.int32()),
            ("backend", pa.string()),
            ("stamp_skew_ms", pa.float64()),
        ]
    )
    assert tuple(schema.names) == FIELD_NAMES, "record fields and Arrow schema must agree"
    return schema


# The per-request scalars the statistics read (metrics/summary.py, webui/live.py).
SCALAR_COLUMNS = (
    "request_class",
    "step",
    "wall_send",
    "t_send",
    "t_intended",
    "ok",
    "error",
    "ttft_s",
    "e2e_s",
    "tpot_s",
    "prompt_tokens",
    "output_tokens",
    "tokens_source",
    "worker",
    "resent",
    "ttfa_s",
    "reasoning_tokens",
    "answer_tokens",
    "tool_calls",
    "finish_reason",
    "inputs",
    "turn",
    "server_queue_s",
    "server_ttft_s",
    "cached_tokens",
    "backend",
)


def with_all_columns(table: pa.Table) -> pa.Table:
    """`table` with every record column, in the schema's order: a column an older results file lacks
    is added, each row holding the field's default (NaN, -1, 0, "")."""
    import pyarrow as pa

    schema = arrow_schema()
    defaults = {f.name: f for f in fields(RequestRecord)}
    for f in schema:
        if f.name not in table.column_names:
            field_ = defaults[f.name]
            value = field_.default_factory() if callable(field_.default_factory) else field_.default
            value = value if isinstance(value, (int, float, str, bool, list)) else None
            table = table.append_column(f, pa.array([value] * table.num_rows, type=f.type))
    return table.select(list(schema.names))


def rows_to_table(rows: list[tuple]) -> pa.Table:
    """Rows as produced by `RequestRecord.as_row` (possibly after a msgpack round trip)."""
    return rows_to_arrow(rows, arrow_schema())
