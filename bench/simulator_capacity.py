"""How many concurrent streams can one simulator core carry?

Starts the simulator pinned to core 1 (``taskset -c 1``) with a ``fixed``
profile (TTFT ``--ttft``, ITL ``--itl``) and drives ``--streams`` closed-loop
streams (each its own keep-alive connection, request after request, no think
time) from a lean asyncio client pinned to core 0.  The client only counts
``data:`` lines; one stream in ``--sample-every`` asks for ``X-Sim-Timestamps``
and keeps its raw bytes, so that afterwards the lateness of every sampled
chunk against the fixed schedule can be computed::

    lateness = sim_t(chunk i) - (arrival + ttft + i * itl)

(``arrival`` from the simulator's truth log; chunk 0 is the first content
chunk).  Reports achieved content tokens/s in the measurement window,
simulator and client CPU (from /proc/PID/stat) and lateness percentiles.

    /work/venv/bin/python bench/simulator_capacity.py --streams 1000 --itl 0.033 --duration 30

Bounded: every run stops after ``--warmup + --duration`` seconds plus a short
drain; traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / CLK


class Stats:
    def __init__(self):
        self.data_lines = 0
        self.responses = 0
        self.started = 0
        self.errors = 0


class StreamProto(asyncio.Protocol):
    """One closed-loop user on one keep-alive connection."""

    def __init__(self, stats, request, sample, deadline, samples, idx):
        self.stats = stats
        self.request = request
        self.sample = sample
        self.deadline = deadline
        self.samples = samples
        self.idx = idx
        self.n = 0
        self.tail = b""
        self.raw = []
        self.transport = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport):
        self.transport = transport
        self._send()

    def _send(self):
        self.n += 1
        self.stats.started += 1
        req = self.request
        if self.sample:
            rid = f"cap-{self.idx}-{self.n}"
            req = req.replace(b"X-Request-Id: x\r\n", b"X-Request-Id: %s\r\nX-Sim-Timestamps: 1\r\n" % rid.encode())
            self.raw = [rid]
        self.transport.write(req)

    def data_received(self, data):
        st = self.stats
        st.data_lines += data.count(b"data:")
        if self.sample:
            self.raw.append(data)
        buf = self.tail + data[-5:] if len(data) < 5 else data[-5:]
        self.tail = buf[-5:]
        if self.tail == b"0\r\n\r\n":
            st.responses += 1
            self.tail = b""
            if self.sample:
                self.samples.append((self.raw[0], b"".join(self.raw[1:])))
            if time.perf_counter() < self.deadline:
                self._send()
            else:
                self.transport.close()

    def connection_lost(self, exc):
        if not self.closed.done():
            self.closed.set_result(None)


async def client(port, args, sim_pid):
    loop = asyncio.get_running_loop()
    stats = Stats()
    body = json.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hello " * 20}],
            "max_tokens": args.max_tokens,
            "stream": True,
        }
    ).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"X-Request-Id: x\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)
    )
    t0 = time.perf_counter()
    deadline = t0 + args.warmup + args.duration
    samples = []
    protos = []
    rng = random.Random(1)
    starts = sorted(rng.uniform(0, args.ramp) for _ in range(args.streams))
    for i, s in enumerate(starts):
        d = t0 + s - time.perf_counter()
        if d > 0:
            await asyncio.sleep(d)
        try:
            _, p = await loop.create_connection(
                lambda i=i: StreamProto(stats, request, i % args.sample_every == 0, deadline, samples, i),
                "127.0.0.1",
                port,
            )
            protos.append(p)
        except OSError:
            stats.errors += 1
    await asyncio.sleep(max(0.0, t0 + args.warmup - time.perf_counter()))
    w0 = (
        time.perf_counter(),
        stats.data_lines,
        stats.responses,
        stats.started,
        cpu_seconds(sim_pid),
        cpu_seconds(os.getpid()),
    )
    await asyncio.sleep(max(0.0, deadline - time.perf_counter()))
    w1 = (
        time.perf_counter(),
        stats.data_lines,
        stats.responses,
        stats.started,
        cpu_seconds(sim_pid),
        cpu_seconds(os.getpid()),
    )
    # drain: the streams stop sending at the deadline; wait for in-flight ones (bounded)
    try:
        await asyncio.wait_for(asyncio.gather(*(p.closed for p in protos)), args.max_tokens * args.itl + 5)
    except TimeoutError:
        pass
    for p in protos:
        if p.transport is not None:
            p.transport.abort()
    wall = w1[0] - w0[0]
    # content chunks = data lines - role chunk - [DONE] per response (approximately, in the window)
    started = w1[3] - w0[3]
    content = (w1[1] - w0[1]) - 2 * started
    return {
        "streams": args.streams,
        "connect_errors": stats.errors,
        "tokens_per_s": content / wall,
        "responses_per_s": (w1[2] - w0[2]) / wall,
        "sim_cpu_pct": 100 * (w1[4] - w0[4]) / wall,
        "client_cpu_pct": 100 * (w1[5] - w0[5]) / wall,
        "window_s": wall,
    }, samples


def lateness(samples, truth_path, ttft, itl):
    arrivals = {}
    with open(truth_path) as f:
        for line in f:
            r = json.loads(line)
            arrivals[r["request_id"]] = r["arrival"]
    late = []
    for rid, raw in samples:
        if rid not in arrivals:
            continue
        a = arrivals[rid]
        i = 0
        for line in raw.split(b"\n"):
            if not line.startswith(b"data: {"):
                continue
            j = json.loads(line[6:])
            if not j.get("choices") or "content" not in j["choices"][0]["delta"]:
                continue
            late.append(j["sim_t"] - (a + ttft + i * itl))
            i += 1
    late.sort()

    def q(x):
        return late[min(len(late) - 1, int(x * len(late)))] * 1000 if late else float("nan")

    return {
        "chunks_sampled": len(late),
        "late_ms_p50": q(0.5),
        "late_ms_p99": q(0.99),
        "late_ms_p999": q(0.999),
        "late_ms_max": late[-1] * 1000 if late else float("nan"),
        "early_ms_min": late[0] * 1000 if late else float("nan"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--itl", type=float, default=0.033)
    ap.add_argument("--ttft", type=float, default=0.1)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=8.0)
    ap.add_argument("--ramp", type=float, default=2.0, help="stream starts spread over this many seconds")
    ap.add_argument("--sample-every", type=int, default=20)
    ap.add_argument("--sim-core", default="1")
    ap.add_argument("--client-core", type=int, default=0)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="simcap-")
    prof = os.path.join(tmp, "cap.yaml")
    with open(prof, "w") as f:
        f.write(f"kind: fixed\nttft_s: {args.ttft}\nitl_s: {args.itl}\nmax_model_len: 1000000\n")
    truth = os.path.join(tmp, "truth.jsonl")
    cmd = [
        "taskset",
        "-c",
        args.sim_core,
        sys.executable,
        "-m",
        "simulator",
        "--port",
        "0",
        "--profile",
        prof,
        "--truth-log",
        truth,
    ]
    sim = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        line = sim.stdout.readline()
        port = int(line.split(":")[2].split()[0])
        os.sched_setaffinity(0, {args.client_core})
        import uvloop

        res, samples = uvloop.run(client(port, args, sim.pid))
    finally:
        sim.terminate()
        sim.wait(10)
    res.update(lateness(samples, truth, args.ttft, args.itl))
    res["target_tokens_per_s"] = args.streams / args.itl
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in res.items()}))


if __name__ == "__main__":
    main()
