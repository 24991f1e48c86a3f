"""What every client in the client-speed benchmark writes, and how the benchmark reads it.

A client under test (the suite through bench/client_probe.py, or bench/ref_aiohttp.py) measures
itself over one window and saves one `.npz` file:

  window     [w0, w1]        perf_counter() at the start and end of the measurement window
  cpu        [c0, c1]        its own CPU seconds (utime + stime from /proc/<pid>/stat) at w0 and w1
  chunk_t    float64[n]      arrival time of every content chunk (perf_counter)
  chunk_lag  float64[n]      arrival time minus the simulator's `sim_t` of that chunk (seconds)
  req_id     str[m]          X-Request-Id of every request that got a first content chunk
  req_send   float64[m]      its t_send
  req_first  float64[m]      arrival of its first content chunk

Both processes read CLOCK_MONOTONIC through perf_counter(), so the client's times and the
simulator's `sim_t` and truth log are on one clock (same machine).
"""

from __future__ import annotations

import codecs
import json
import math
import os
import time

CLK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | str = "self") -> float:
    """utime + stime of a process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / CLK


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """utime + stime of each of a process's threads with its name (the main thread's is "main"), by
    thread id, from /proc/<pid>/task: which of its threads the CPU went to."""
    out: dict[int, tuple[str, float]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                head, rest = f.read().rsplit(")", 1)
        except OSError:  # the thread ended meanwhile
            continue
        name = "main" if int(tid) == pid else head.split("(", 1)[1]
        parts = rest.split()
        out[int(tid)] = (name, (int(parts[11]) + int(parts[12])) / CLK)
    return out


def machine_pressure() -> dict:
    """CPU pressure (PSI 'some avg10/avg60', %) and the load average: how disturbed timings are."""
    out = {}
    try:
        with open("/proc/pressure/cpu") as f:
            for line in f:
                if line.startswith("some"):
                    kv = dict(p.split("=") for p in line.split()[1:])
                    out["cpu_some_avg10"] = float(kv["avg10"])
                    out["cpu_some_avg60"] = float(kv["avg60"])
    except OSError:
        pass
    try:
        out["load1"] = os.getloadavg()[0]
    except OSError:
        pass
    return out


def save(path: str, window, cpu, chunk_t, chunk_lag, req_id, req_send, req_first) -> None:
    import numpy as np

    np.savez(
        path,
        window=np.asarray(window, dtype=float),
        cpu=np.asarray(cpu, dtype=float),
        chunk_t=np.asarray(chunk_t, dtype=float),
        chunk_lag=np.asarray(chunk_lag, dtype=float),
        req_id=np.asarray(req_id, dtype=str),
        req_send=np.asarray(req_send, dtype=float),
        req_first=np.asarray(req_first, dtype=float),
    )


def read_truth(path: str) -> dict[str, tuple[float, float]]:
    """request_id -> (arrival, first_token) from the simulator's truth log."""
    out = {}
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("request_id") and r.get("first_token") is not None:
                out[r["request_id"]] = (r["arrival"], r["first_token"])
    return out


def analyse(npz_path: str, truth: dict) -> dict:
    """Tokens/s, CPU per token, TTFT error and per-token lag over the client's window."""
    import numpy as np

    d = np.load(npz_path)
    w0, w1 = d["window"]
    c0, c1 = d["cpu"]
    wall = w1 - w0
    t, lag = d["chunk_t"], d["chunk_lag"]
    sel = (t >= w0) & (t <= w1)
    tokens = int(sel.sum())
    lag_ms = lag[sel] * 1000
    first = d["req_first"]
    rsel = (first >= w0) & (first <= w1)
    errs, deliver, first_late = [], [], []
    for rid, send, f in zip(d["req_id"][rsel], d["req_send"][rsel], first[rsel]):
        tr = truth.get(str(rid))
        if tr is not None:
            errs.append(((f - send) - (tr[1] - tr[0])) * 1000)  # client TTFT - simulator TTFT
            # the error's two halves (both processes stamp with perf_counter, one clock per host):
            # the request's way in (written -> the simulator's handler saw it) and the first token's
            # way out (sent -> the client's read); the second is the client's, the first the server's
            deliver.append((tr[0] - send) * 1000)
            first_late.append((f - tr[1]) * 1000)
    errs, deliver, first_late = np.asarray(errs), np.asarray(deliver), np.asarray(first_late)

    def pct(a, q):
        return float(np.percentile(a, q)) if a.size else math.nan

    cpu = c1 - c0
    return {
        "tokens_per_s": tokens / wall if wall > 0 else math.nan,
        "cpu_pct": 100 * cpu / wall if wall > 0 else math.nan,
        "cpu_us_per_token": 1e6 * cpu / tokens if tokens else math.nan,
        "ttft_err_ms_p50": pct(errs, 50),
        "ttft_err_ms_p99": pct(errs, 99),
        "ttft_err_ms_mean": float(errs.mean()) if errs.size else math.nan,
        "deliver_ms_p50": pct(deliver, 50),
        "deliver_ms_p99": pct(deliver, 99),
        "first_late_ms_p99": pct(first_late, 99),
        "lag_ms_p50": pct(lag_ms, 50),
        "lag_ms_p99": pct(lag_ms, 99),
        "lag_ms_max": float(lag_ms.max()) if lag_ms.size else math.nan,
        "requests": int(errs.size),
        "window_s": float(wall),
    }


def accurate(r: dict, ttft_limit_ms: float = 10.0, lag_limit_ms: float = 5.0) -> bool:
    """The issue's accuracy: p99 TTFT error < 10 ms and p99 per-token lag < 5 ms."""
    return r.get("requests", 0) > 0 and abs(r["ttft_err_ms_p99"]) < ttft_limit_ms and r["lag_ms_p99"] < lag_limit_ms


class SSEBuffer:
    """Accumulates bytes and returns complete SSE messages (vLLM's handler, same semantics)."""

    def __init__(self):
        self.buffer = ""
        self.decoder = codecs.getincrementaldecoder("utf-8")()

    def add_chunk(self, chunk_bytes: bytes) -> list[str]:
        self.buffer += self.decoder.decode(chunk_bytes)
        out = []
        while "\n\n" in self.buffer:
            message, self.buffer = self.buffer.split("\n\n", 1)
            message = message.strip()
            if message:
                out.append(message)
        # the read was stripped, so a final message may be complete without its blank line
        if self.buffer.startswith("data: "):
            rest = self.buffer[6:].strip()
            if rest == "[DONE]":
                out.append(self.buffer.strip())
                self.buffer = ""
            elif rest:
                try:
                    json.loads(rest)
                except json.JSONDecodeError:
                    pass
                else:
                    out.append(self.buffer.strip())
                    self.buffer = ""
        return out


async def sse_events(response):
    """(arrival time, parsed JSON) of every data event of an aiohttp SSE response, read the way
    `vllm bench serve` reads it (whole reads, split at blank lines, the time taken per message)."""
    handler = SSEBuffer()
    async for chunk_bytes in response.content.iter_any():
        chunk_bytes = chunk_bytes.strip()
        if not chunk_bytes:
            continue
        for message in handler.add_chunk(chunk_bytes):
            if message.startswith(":"):
                continue
            chunk = message.removeprefix("data: ")
            if chunk == "[DONE]":
                continue
            timestamp = time.perf_counter()
            yield timestamp, json.loads(chunk)
