"""Prometheus metrics with vLLM's names, rendered by hand (text format 0.0.4).

A hand-written histogram costs a bisect and two additions per observation;
the inter-token histogram is observed for every chunk, tens of thousands of
times per second, so the generic client library is not used on this path.
"""
from __future__ import annotations

from bisect import bisect_left

from . import __version__

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
               5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


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
    def __init__(self, model: str):
        self.model = model
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.success = {"length": 0, "stop": 0, "abort": 0}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)

    def render(self, running: int, waiting: int, kv_usage: float) -> bytes:
        lbl = 'model_name="%s"' % self.model.replace("\\", "\\\\").replace('"', '\\"')
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
                lines.append(f'{name}_bucket{{le="{b}",{lbl}}} {_fmt(acc)}\n')
            lines.append(f'{name}_bucket{{le="+Inf",{lbl}}} {_fmt(h.count)}\n')
            lines.append(f"{name}_count{{{lbl}}} {_fmt(h.count)}\n{name}_sum{{{lbl}}} {_fmt(h.sum)}\n")
            out.append("".join(lines))

        out.append(f'# HELP llm_simulator_build_info The simulator\'s version.\n# TYPE llm_simulator_build_info gauge\n'
                   f'llm_simulator_build_info{{version="{__version__}"}} 1.0\n')
        gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running)
        gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting)
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv_usage)
        counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", self.prompt_tokens)
        counter("vllm:generation_tokens_total", "Number of generation tokens processed.", self.generation_tokens)
        name = "vllm:request_success_total"
        out.append(f"# HELP {name} Count of successfully processed requests.\n# TYPE {name} counter\n")
        for reason, v in self.success.items():
            out.append(f'{name}{{finished_reason="{reason}",{lbl}}} {_fmt(v)}\n')
        hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft)
        hist("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", self.e2e)
        hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self.itl)
        return "".join(out).encode()
