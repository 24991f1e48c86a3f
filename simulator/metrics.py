"""Prometheus metrics with vLLM's names, rendered by hand (text format 0.0.4).

A hand-written histogram costs a bisect and two additions per observation;
the inter-token histogram is observed for every chunk, tens of thousands of
times per second, so the generic client library is not used on this path.
"""

from __future__ import annotations

from bisect import bisect_left

from . import __version__

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)  # also the request phases', as vLLM's
STEP_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def token_buckets(max_model_len: int) -> tuple:
    """vLLM's 1-2-5 buckets up to the model's length (request prompt and generation tokens)."""
    out, k = [], 1
    while True:
        for m in (1, 2, 5):
            if m * k > max_model_len:
                return tuple(out)
            out.append(m * k)
        k *= 10


class Histogram:
    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float) -> None:
        self.counts[bisect_left(self.bounds, v)] += 1
        self.sum += v
        self.count += 1


def _fmt(v) -> str:
    return repr(float(v))


class Metrics:
    """The counters and histograms a server keeps; ``render`` adds the gauges of the moment.

    Per finished request (outcome ok), from the engine's times as the truth log records them:
    ``vllm:request_queue_time_seconds`` (queued to first admitted), ``_prefill_time_`` (admitted
    to first token), ``_decode_time_`` (first to last token), ``_inference_time_`` (admitted to
    last token), and its prompt and generation tokens; per engine step, its tokens
    (``vllm:iteration_tokens_total``).
    """

    def __init__(self, model: str, profile=None, num_gpu_blocks: int = 0):
        self.model = model
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.success = {"length": 0, "stop": 0, "abort": 0}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.queue = Histogram(E2E_BUCKETS)
        self.prefill = Histogram(E2E_BUCKETS)
        self.decode = Histogram(E2E_BUCKETS)
        self.inference = Histogram(E2E_BUCKETS)
        tokens = token_buckets(profile.max_model_len if profile is not None else 4096)
        self.req_prompt = Histogram(tokens)
        self.req_generation = Histogram(tokens)
        self.iteration = Histogram(STEP_TOKEN_BUCKETS)
        self.config = self._config(profile, num_gpu_blocks) if profile is not None and profile.kind == "batch" else ""

    def request_done(self, queued, scheduled, first, last, prompt_tokens: int, output_tokens: int) -> None:
        self.req_prompt.observe(prompt_tokens)
        self.req_generation.observe(output_tokens)
        if scheduled is None or first is None or last is None:
            return  # no engine (fixed profile): no phases
        if queued is not None:
            self.queue.observe(scheduled - queued)
        self.prefill.observe(first - scheduled)
        self.decode.observe(last - first)
        self.inference.observe(last - scheduled)

    def _config(self, p, blocks: int) -> str:
        """vLLM's ``vllm:cache_config_info`` (its cache settings as labels, Python's spelling), and
        the scheduler's limits, which vLLM does not export, in the simulator's own info gauge."""
        cache = (
            f'block_size="{p.block_size}",cache_dtype="auto",enable_prefix_caching="{p.enable_prefix_caching}",'
            f'gpu_memory_utilization="{p.gpu_memory_utilization}",num_cpu_blocks="None",'
            f'num_gpu_blocks="{blocks}",num_gpu_blocks_override="{p.num_gpu_blocks_override}"'
        )
        sched = (
            f'max_model_len="{p.max_model_len}",max_num_batched_tokens="{p.max_num_batched_tokens}",'
            f'max_num_seqs="{p.max_num_seqs}",scheduler="{p.scheduler}"'
        )
        return (
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info gauge\n"
            f"vllm:cache_config_info{{{cache}}} 1.0\n"
            "# HELP llm_simulator_scheduler_config_info The simulated engine's scheduler limits.\n"
            "# TYPE llm_simulator_scheduler_config_info gauge\n"
            f"llm_simulator_scheduler_config_info{{{sched}}} 1.0\n"
        )

    def render(
        self,
        running: int,
        waiting: int,
        kv_usage: float,
        preemptions: int = 0,
        prefix_queries: int = 0,
        prefix_hits: int = 0,
    ) -> bytes:
        escaped = self.model.replace("\\", "\\\\").replace('"', '\\"')
        lbl = f'model_name="{escaped}"'
        out = []

        def gauge(name, help_, v):
            out.append(f"# HELP {name} {help_}\n# TYPE {name} gauge\n{name}{{{lbl}}} {_fmt(v)}\n")

        def counter(name, help_, v):
            out.append(f"# HELP {name} {help_}\n# TYPE {name} counter\n{name}{{{lbl}}} {_fmt(v)}\n")

        def hist(name, help_, h):
            lines = [f"# HELP {name} {help_}\n# TYPE {name} histogram\n"]
            acc = 0
            for b, c in zip(h.bounds, h.counts):
                acc += c
                lines.append(f'{name}_bucket{{le="{float(b)}",{lbl}}} {_fmt(acc)}\n')
            lines.append(f'{name}_bucket{{le="+Inf",{lbl}}} {_fmt(h.count)}\n')
            lines.append(f"{name}_count{{{lbl}}} {_fmt(h.count)}\n{name}_sum{{{lbl}}} {_fmt(h.sum)}\n")
            out.append("".join(lines))

        out.append(
            f"# HELP llm_simulator_build_info The simulator's version.\n# TYPE llm_simulator_build_info gauge\n"
            f'llm_simulator_build_info{{version="{__version__}"}} 1.0\n'
        )
        out.append(self.config)
        gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running)
        gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting)
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv_usage)
        counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", preemptions)
        counter(
            "vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.",
            prefix_queries,
        )
        counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", prefix_hits)
        counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", self.prompt_tokens)
        counter("vllm:generation_tokens_total", "Number of generation tokens processed.", self.generation_tokens)
        name = "vllm:request_success_total"
        out.append(f"# HELP {name} Count of successfully processed requests.\n# TYPE {name} counter\n")
        for reason, v in self.success.items():
            out.append(f'{name}{{finished_reason="{reason}",{lbl}}} {_fmt(v)}\n')
        hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft)
        hist("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", self.e2e)
        hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self.itl)
        hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", self.queue)
        hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", self.prefill)
        hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", self.decode)
        hist(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            self.inference,
        )
        hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", self.req_prompt)
        hist("vllm:request_generation_tokens", "Number of generation tokens processed.", self.req_generation)
        hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", self.iteration)
        return "".join(out).encode()
