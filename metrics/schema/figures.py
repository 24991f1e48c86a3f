"""summary.json's figures of a set of requests: a `Block` (requests, latency distributions, stream
speed, throughput, goodput, tokens, SLO verdict) for the run, each class and turn, a `Step` for each
load level (its block, window and verdict), and the run's window, records and concurrency."""

from __future__ import annotations

from pydantic import Field

from metrics.record import NOT_SERVER_FAILURES
from metrics.schema.base import Model, Num
from metrics.schema.verdicts import SloVerdict


class Distribution(Model):
    """P = {count, mean, min, p50, p90, p95, p99, p99.9, max} in milliseconds; None when count is 0."""

    count: int = 0
    mean: Num = None
    min: Num = None
    p50: Num = None
    p90: Num = None
    p95: Num = None
    p99: Num = None
    p99_9: Num = Field(default=None, alias="p99.9")
    max: Num = None

    def stat(self, name: str) -> float | None:
        """A statistic by its published name: 'mean', 'p95', 'p99.9', ..."""
        return getattr(self, name.replace(".", "_"))


class Requests(Model):
    sent: int  # the requests sent inside the window (their outcome below)
    ok: int
    failed: int  # server failures: neither stopped nor cancelled
    stopped: int  # in flight when the run ended: not a server failure
    cancelled: int  # aborted on purpose by the client (--cancel-rate): not a server failure
    retries: int  # attempts after the first (--retry)
    resent: int  # sent again after a stale kept-alive connection
    by_error: dict[str, int]  # server failures by class
    # successful replies by the server's finish_reason (stop, length, tool_calls, ...), and the tool
    # calls they made (parallel calls each count)
    by_finish_reason: dict[str, int] = {}
    tool_calls: int = 0

    def count(self, error: str) -> int:
        """The requests of one failure class: server failures from by_error, or stopped, or cancelled."""
        if error in NOT_SERVER_FAILURES:  # each counted in a field of its own
            return getattr(self, error)
        return self.by_error.get(error, 0)

    @property
    def ended(self) -> int:
        """Requests that ended with a server outcome: the good fraction's and error rate's denominator."""
        return self.ok + self.failed


class StreamSpeed(Model):
    mean: Num = None  # tokens per second of one stream (1 / TPOT)
    p50: Num = None


class Throughput(Model):
    sent_per_s: Num = None
    requests_per_s: Num = None
    output_tokens_per_s: Num = None
    total_tokens_per_s: Num = None
    # conversations (workload classes with `session`) begun per second: their successful first turns
    # completed inside the window, counted as requests_per_s counts requests; None without conversations
    sessions_per_s: Num = None


class Goodput(Model):
    requests_per_s: Num = None
    good_fraction: Num = None  # succeeded and met every SLO, of the requests that ended


class Tokens(Model):
    prompt: int
    output: int
    prompt_known: int
    source: dict[str, int]
    # of `output`: reasoning tokens and the answer (content and tool calls), of the successful
    # replies whose split is known (`split_known` of them)
    reasoning: int = 0
    answer: int = 0
    split_known: int = 0


class Embeddings(Model):
    """/v1/embeddings and /v1/rerank: what applies instead of TTFT and tokens out (the latency is e2e_ms)."""

    inputs: int  # vectors (embeddings) or ranked documents (rerank) returned by the successful requests
    batch_size_mean: Num = None  # inputs per request
    inputs_per_s: Num = None  # of the requests completed inside the window
    input_tokens_per_s: Num = None  # prompt tokens per second (by arrival, as throughput counts them)


class TtftSplit(Model):
    """The client's TTFT split by the server's own report of each request (metrics/ttft_split.py),
    over the successful requests it reported on: means in milliseconds that add up,
    ttft_ms = queue_ms + prefill_ms + rest_ms (None where no request had its timing, only its cached
    tokens). The block has no split where no server sent either."""

    requests: int  # successful requests whose server sent its queue time and its TTFT
    ttft_ms: Num = None  # the client's TTFT, mean over those requests
    queue_ms: Num = None  # the server's queue: waiting to be scheduled (vLLM queue_time_ms)
    prefill_ms: Num = None  # the server's TTFT: scheduled to first token (vLLM time_to_first_token_ms)
    rest_ms: Num = None  # the client's TTFT less both: front end (API server, tokenizer), network and client
    rest_p95_ms: Num = None  # the rest's own p95 over the same requests (a tail the server cannot show)
    # prompt tokens the server took from its prefix cache (usage.prompt_tokens_details.cached_tokens),
    # over the successful requests that said (`cached_known`), and their share of those requests' prompts
    cached_tokens: int = 0
    cached_known: int = 0
    cached_share: Num = None


class Block(Model):
    """The statistics of one scope: the run, a request class, a conversation turn or a load step."""

    requests: Requests
    ttft_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    e2e_ms: Distribution
    # time to first answer token (content or tool call) of the successful replies that had one
    ttfa_ms: Distribution = Distribution()
    stream_tokens_per_s: StreamSpeed
    throughput: Throughput
    goodput: Goodput
    tokens: Tokens
    # open loop only: lateness of the sends, and latency counted from the intended send time
    schedule_lag_ms: Distribution | None = None
    ttft_from_intended_ms: Distribution | None = None
    e2e_from_intended_ms: Distribution | None = None
    slo: SloVerdict | None = None  # with --slo: the block's verdict (metrics/verdict.py)
    embeddings: Embeddings | None = None  # --endpoint embeddings or rerank
    ttft_split: TtftSplit | None = None  # where the server reported each request's own timing

    def latency(self, metric: str) -> Distribution:
        """ttft | tpot | itl | e2e | ttfa -> its distribution."""
        return getattr(self, f"{metric}_ms")


class Span(Model):
    start: float
    end: float


class Step(Block):
    """A load level's block, over its declared set: the requests sent in its window (its warm-up
    excluded) and, for a capacity search, ended by its cut (metrics/verdict.py)."""

    step: int  # index of the level's first step (an extended level holds several)
    users: int
    rate: float | None = (
        None  # an open loop in steps (--rate-steps): the requests/s asked for; `users` is its in-flight cap
    )
    window: Span
    steps: int = 1  # steps the level was held for (a capacity search extends an undecided level)
    cut: float | None = None  # requests that ended after this (wall clock) are not in the set
    verdict: SloVerdict | None = None  # with --slo
    # a step of a ramp that the run's end (-t, a stop) cut before half its window had passed
    # (metrics/summary.py by_step): requests and latencies of the part that ran, no per-second rate
    partial: bool = False


class Window(Model):
    start: float
    end: float
    seconds: float


class Records(Model):
    total: int
    outside_window: int
    # every record's failure class, inside the window or not, stopped and cancelled included
    by_error: dict[str, int] = {}
    # replies with more output tokens than the max_tokens they asked for (every record; tokens the
    # server's usage or the stream's chunks counted, not a client-side tokenizer's estimate): a
    # server that ignores max_tokens applies another load than the workload states
    over_max_tokens: int = 0


class Concurrency(Model):
    mean_in_flight: Num = None
