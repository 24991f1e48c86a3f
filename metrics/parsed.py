"""A stream as the parser gives it to the metrics (metrics/timing.py): its token-bearing chunks
with their arrival times, usage, finish reason, tool calls and in-stream error, whichever API the
server spoke (metrics/sse.py: chat and completions events, metrics/responses_events.py: the
Responses API's typed events).
"""

from __future__ import annotations

from dataclasses import dataclass, field

NAN = float("nan")


@dataclass(slots=True)
class Chunk:
    """One token-bearing event: it carried content, reasoning or a tool call's name or arguments."""

    t: float  # arrival time (perf_counter)
    text: str  # generated text it carried (content + reasoning + tool-call name and arguments)
    answer: bool  # carried an answer token: content or a tool call (not only reasoning)
    usage_tokens: int  # cumulative completion_tokens when the server sent usage in it, else -1
    sim_t: float  # the simulator's own send time, when asked for (X-Sim-Timestamps), else nan
    reasoning: str = ""  # the part of `text` that was reasoning
    tool: str = ""  # the part of `text` that was a tool call's name or arguments

    @property
    def content(self) -> str:
        """The part of `text` that was content (`text` is content + reasoning + tool, in this order)."""
        return self.text[: len(self.text) - len(self.reasoning) - len(self.tool)]


@dataclass(slots=True)
class ParsedStream:
    chunks: list[Chunk] = field(default_factory=list)
    usage: dict | None = None  # the last usage object seen
    finish_reason: str = ""
    done: bool = False  # saw data: [DONE]
    error: str = ""  # "mid_stream_error" | "malformed_chunk" | ""
    error_detail: str = ""
    t_end: float = NAN  # arrival of the last piece
    # Tool calls of choice 0 by their index, each {"id", "name", "arguments"} with the fragments
    # joined (a server streams the name first, then the arguments in pieces; several calls at once
    # are told apart by index).
    tool_calls: list[dict] = field(default_factory=list)
    _call_index: dict = field(default_factory=dict)  # Responses API: output_index -> position in tool_calls
    inputs: int = 0  # the vectors (/v1/embeddings) or the ranked documents (/v1/rerank) the reply held
    # the server's own timing of the request: vLLM's top-level `metrics` object, sent beside the
    # final usage (--enable-per-request-metrics); None where it sent none
    server_metrics: dict | None = None

    @property
    def finished(self) -> bool:
        """The server ended the stream properly."""
        return self.done or bool(self.finish_reason)


# vLLM's per-request `metrics` keys (milliseconds) -> the record's fields (seconds)
SERVER_TIMING = (
    ("queue_time_ms", "server_queue_s"),
    ("time_to_first_token_ms", "server_ttft_s"),
    ("generation_time_ms", "server_generation_s"),
    ("mean_itl_ms", "server_itl_s"),
)


def server_timing(parsed: ParsedStream) -> dict:
    """The record's fields the server's own report of the request fills: each of SERVER_TIMING's
    figures it sent (a number >= 0), and `cached_tokens` from usage.prompt_tokens_details (the
    Responses API's usage.input_tokens_details). Empty for a server that sent neither."""
    out = {}
    m = parsed.server_metrics
    if type(m) is dict:
        for key, name in SERVER_TIMING:
            v = m.get(key)
            if type(v) in (int, float) and v >= 0:
                out[name] = v / 1000.0
    usage = parsed.usage
    if type(usage) is dict:
        details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
        cached = details.get("cached_tokens") if type(details) is dict else None
        if type(cached) is int and cached >= 0:
            out["cached_tokens"] = cached
    return out


def error_text(error) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)[:200]
    return str(error)[:200]
