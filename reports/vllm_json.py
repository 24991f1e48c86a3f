"""--save-vllm-json FILE: a run's results in the fields of `vllm bench serve --save-result
--save-detailed`, for dashboards that read vLLM's result JSON, made from the suite's own records.

Read from the results folder (runfolder/reading.py: the records checked before a value is used,
summary.json), never from memory: the file says what the folder says. Its requests are those of the
summary's window (sent inside it, the figures of summary.json `overall`), each of vLLM's per-request
lists in the order they were sent. Where the suite defines a figure differently from vLLM, the
`definitions` key says how (docs/vllm-bench.md maps every field):

  TTFT     to the first chunk that carries generated output (vLLM: the first chunk with content)
  E2EL     to the last token-bearing chunk (vLLM: to the end of the response)
  duration the measurement window, from its start to the moment the run began to stop (vLLM: from
           the first request's send to the last one's end); the throughputs divide by it and count
           what completed (or arrived, for tokens) inside it, as summary.json does
  failed requests: ttft, latency 0.0 and itls [] as vLLM writes them; they are not in the statistics
"""

from __future__ import annotations

import datetime
import json
import math

import numpy as np
import pyarrow.parquet as pq

from core.files import write_atomic
from metrics.timing import itl_gaps
from runfolder.reading import RunData, load_run

# vLLM's backend names for the suite's endpoints (`vllm bench serve --backend`)
BACKENDS = {
    "chat": "openai-chat",
    "completions": "openai",
    "responses": "openai-responses",
    "embeddings": "openai-embeddings",
    "rerank": "vllm-rerank",
}
PERCENTILES = (50, 90, 95, 99)  # vLLM writes the --metric-percentiles asked for (default 99)

DEFINITIONS = {
    "source": "written by the LLM load-test suite from its own records (requests.parquet, summary.json), not by vLLM",
    "requests": "the requests sent inside the measurement window (summary.json overall), in the order they were sent",
    "duration": "seconds of the measurement window: from the run's start (+ --warmup) to the moment the run began to stop "
    "(vLLM: from the first request's send to the last one's end)",
    "completed": "successful requests among them (HTTP 200, a full stream, at least one token); failed: the others that "
    "ended with a server-side failure",
    "request_throughput": "successful requests that completed inside the window, per second of it (summary.json "
    "throughput.requests_per_s; vLLM: completed / duration)",
    "output_throughput": "output tokens that arrived inside the window, per second of it (summary.json "
    "throughput.output_tokens_per_s)",
    "total_token_throughput": "output tokens and prompt tokens (counted at the first token) that arrived inside the window, "
    "per second of it (summary.json throughput.total_tokens_per_s)",
    "total_input_tokens": "prompt tokens of these requests: usage.prompt_tokens (summary.json tokens.prompt)",
    "total_output_tokens": "output tokens of these requests: usage.completion_tokens, else the client tokenizer's count "
    "(summary.json tokens.output)",
    "ttft": "arrival of the first chunk carrying generated output (content, reasoning, a tool call) minus the send; a "
    "role-only first chunk does not count (vLLM: the first chunk with content)",
    "tpot": "(last token-bearing chunk - first) / (output tokens - 1), requests of more than one token",
    "itl": "every gap between consecutive token-bearing chunks, pooled over the successful requests",
    "e2el": "the last token-bearing chunk minus the send (vLLM: the end of the response)",
    "percentiles": "numpy's linear interpolation over the successful requests' values, in ms; std is numpy's (ddof 0)",
    "ttfts, itls, latencies": "seconds; a failed request's are 0.0 and [] as vLLM writes them",
    "start_times": "wall-clock send time (Unix seconds; vLLM: a perf_counter value)",
    "queue_times": "open loop: send - scheduled arrival (the client's lag); 0.0 in a closed loop",
    "generated_texts": "not kept by the suite: empty strings",
    "errors": "the suite's failure class and detail of a failed request; '' for a success",
    "max_output_tokens_per_s": "the most output tokens of these requests that arrived in one whole second, counted from "
    "the window's start",
    "max_concurrent_requests": "the most of these requests in flight at once",
    "date": "the run's start, UTC (vLLM: local time)",
}


def _stats(name: str, values_s: np.ndarray) -> dict:
    """vLLM's mean_/median_/std_/pNN_ fields of one metric, in ms."""
    ms = np.asarray(values_s, dtype=float) * 1000.0
    ms = ms[np.isfinite(ms)]
    if not ms.size:
        return {
            f"mean_{name}_ms": 0.0,
            f"median_{name}_ms": 0.0,
            f"std_{name}_ms": 0.0,
            **{f"p{p}_{name}_ms": 0.0 for p in PERCENTILES},
        }
    return {
        f"mean_{name}_ms": float(np.mean(ms)),
        f"median_{name}_ms": float(np.median(ms)),
        f"std_{name}_ms": float(np.std(ms)),
        **{f"p{p}_{name}_ms": float(np.percentile(ms, p)) for p in PERCENTILES},
    }


def _peaks(sent: np.ndarray, e2e: np.ndarray, chunk_times: list, output: np.ndarray, start: float) -> tuple[float, int]:
    """(the most output tokens that arrived in one whole second from `start` on, the most requests
    in flight at once). `sent`: wall-clock sends; chunk times are seconds after the send; a
    request's output tokens are spread evenly over its chunks (the suite's throughput definition)."""
    arrivals, weights = [], []
    for t0, times, n in zip(sent, chunk_times, output):
        if times and n == n and n > 0:
            arrivals.extend(t0 + t for t in times)
            weights.extend([float(n) / len(times)] * len(times))
    peak_tokens = 0.0
    if arrivals:
        seconds = max(1, math.ceil(max(arrivals) - start))
        counts, _ = np.histogram(
            np.asarray(arrivals), bins=seconds, range=(start, start + seconds), weights=np.asarray(weights)
        )
        peak_tokens = float(counts.max())
    ends = sent + np.nan_to_num(e2e, nan=0.0)
    events = sorted([(t, 1) for t in sent] + [(t, -1) for t in ends], key=lambda x: (x[0], x[1]))
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak_tokens, peak


def vllm_result(run: RunData) -> dict:
    """The run as `vllm bench serve --save-result --save-detailed` writes a result, with the
    suite's `definitions` beside the fields."""
    s, info = run.summary, run.run
    plan = info.plan
    df = run.df
    extra = pq.read_table(run.records_path, columns=["t_send", "t_intended", "error_detail", "chunk_times"]).to_pandas()
    wall = df["wall_send"].to_numpy()
    start, end = s.window.start, s.window.end
    sel = (wall >= start) & (wall <= end)
    order = np.argsort(wall[sel], kind="stable")
    rows = np.flatnonzero(sel)[order]
    ok = df["ok"].to_numpy(dtype=bool)[rows]
    ttft = df["ttft_s"].to_numpy(dtype=float)[rows]
    e2e = df["e2e_s"].to_numpy(dtype=float)[rows]
    tpot = df["tpot_s"].to_numpy(dtype=float)[rows]
    prompt = df["prompt_tokens"].to_numpy(dtype=float)[rows]
    output = df["output_tokens"].to_numpy(dtype=float)[rows]
    error = df["error"].astype(str).to_numpy()[rows]
    detail = extra["error_detail"].fillna("").astype(str).to_numpy()[rows]
    t_send = extra["t_send"].to_numpy(dtype=float)[rows]
    t_intended = extra["t_intended"].to_numpy(dtype=float)[rows]
    chunks = [list(c) if c is not None else [] for c in extra["chunk_times"].to_numpy()[rows]]
    gaps, owner = itl_gaps(run.chunk_times)
    by_row: dict[int, list[float]] = {}
    for g, r in zip(gaps.tolist(), owner.tolist()):
        by_row.setdefault(r, []).append(g)
    itls = [by_row.get(int(r), []) if k else [] for r, k in zip(rows, ok)]
    pooled = np.asarray([g for lst in itls for g in lst], dtype=float)
    o = s.overall
    recorded = plan.model_extra or {}  # the plan's other fields, as run.json wrote them
    load = plan.load
    users = info.closed_loop_users
    rate = load.parameters().get("rate")
    max_concurrency = load.parameters().get("max_concurrency") or users
    peak_tokens, peak_flight = _peaks(wall[rows], e2e, chunks, np.where(ok, output, 0.0), start)
    result = {
        "date": datetime.datetime.fromtimestamp(info.started_at or start, datetime.UTC).strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": BACKENDS.get(recorded.get("endpoint") or "chat", "openai-chat"),
        "label": plan.label or None,
        "model_id": plan.model,
        "tokenizer_id": recorded.get("tokenizer") or plan.model,
        "num_prompts": int(len(rows)),
        "request_rate": float(rate) if rate else "inf",
        "burstiness": float(load.parameters().get("burstiness") or 1.0),
        "max_concurrency": int(max_concurrency) if max_concurrency else None,
        "duration": float(s.window.seconds),
        "completed": int(o.requests.ok),
        "failed": int(o.requests.failed),
        "total_input_tokens": int(o.tokens.prompt),
        "total_output_tokens": int(o.tokens.output),
        "request_throughput": _num(o.throughput.requests_per_s),
        "request_goodput": _num(o.goodput.requests_per_s) if s.slo is not None and o.goodput is not None else None,
        "output_throughput": _num(o.throughput.output_tokens_per_s),
        "total_token_throughput": _num(o.throughput.total_tokens_per_s),
        "input_lens": [int(x) if x == x else 0 for x in prompt],
        "output_lens": [int(x) if x == x and k else 0 for x, k in zip(output, ok)],
        "ttfts": [float(x) if k and x == x else 0.0 for x, k in zip(ttft, ok)],
        "itls": itls,
        "latencies": [float(x) if k and x == x else 0.0 for x, k in zip(e2e, ok)],
        "start_times": [float(x) for x in wall[rows]],
        "queue_times": [float(a - b) if b == b else 0.0 for a, b in zip(t_send, t_intended)],
        "generated_texts": [""] * len(rows),
        "errors": ["" if k else (f"{e}: {d}" if d else e) for k, e, d in zip(ok, error, detail)],
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": int(peak_flight),
    }
    result["backend"] = result["endpoint_type"]
    result.update(_stats("ttft", ttft[ok]))
    result.update(_stats("tpot", tpot[ok]))
    result.update(_stats("itl", pooled))
    result.update(_stats("e2el", e2e[ok]))
    result["definitions"] = DEFINITIONS
    return result


def _num(x) -> float:
    return float(x) if x is not None and math.isfinite(x) else 0.0


def write_vllm_json(folder: str, path: str) -> dict:
    """Write the results folder's vLLM result JSON to `path`; returns it."""
    result = vllm_result(load_run(folder))
    write_atomic(path, json.dumps(result, indent=2) + "\n")
    return result
