"""Does memory stay flat over a long run? RSS of the master and of a worker, sampled as they run.

Records leave a worker as the master acknowledges them (plugin/shipping.py) and the master
streams them to disk in row groups (plugin/results.py), so neither process should grow with the
number of requests. This benchmark runs a master and one worker against the simulator at a high
request rate with short replies (default: 50 streams, 16 tokens at 2 ms ITL after a 10 ms TTFT,
about 1,000 requests/s) for a few minutes, samples the RSS of both every few seconds
(psutil), and prints the slope of a least-squares line over the samples after the warm-up, in
MB per minute and per 100,000 requests.

    /work/venv/bin/python bench/client_memory.py                       # 4 minutes
    /work/venv/bin/python bench/client_memory.py --duration 60 --users 20

Traffic stays on 127.0.0.1; every process is bounded in time and stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_common import machine_pressure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
WORKLOAD = """\
name: client-memory
description: short prompts; replies fixed by --max-tokens-override
classes:
  only: {weight: 1, input_chars: {min: 50, max: 200}, output_tokens: {min: 16, max: 16}}
"""


def slope(ts: list[float], ys: list[float]) -> float:
    """Least-squares slope dy/dt."""
    n = len(ts)
    if n < 2:
        return float("nan")
    mt, my = sum(ts) / n, sum(ys) / n
    var = sum((t - mt) ** 2 for t in ts)
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / var if var else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=240.0, help="run time, s")
    ap.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="samples before this are left out of the slope, s (default: the first half of the run: "
        "allocators reach their working size in steps during the first minute)",
    )
    ap.add_argument("--interval", type=float, default=5.0, help="RSS sample interval, s")
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--ttft", type=float, default=0.01)
    ap.add_argument("--itl", type=float, default=0.002)
    ap.add_argument("--json", default="", help="write the samples and slopes here")
    args = ap.parse_args(argv)
    if args.warmup is None:
        args.warmup = args.duration / 2
    tmp = tempfile.mkdtemp(prefix="client-memory-")
    prof = os.path.join(tmp, "mem.yaml")
    with open(prof, "w") as f:
        f.write(f"kind: fixed\nmodel: sim-model\nttft_s: {args.ttft}\nitl_s: {args.itl}\nmax_model_len: 1048576\n")
    spec = os.path.join(tmp, "workload.yaml")
    with open(spec, "w") as f:
        f.write(WORKLOAD)
    sim = subprocess.Popen(
        [PY, "-m", "simulator", "--host", "127.0.0.1", "--port", "0", "--profile", prof],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = sim.stdout.readline()
    if "listening on " not in line:
        raise SystemExit(f"simulator did not start: {line!r}")
    url = line.split("listening on ", 1)[1].split()[0]
    port = _free_port()
    log = open(os.path.join(tmp, "locust.log"), "w")
    common = [
        "--host",
        url,
        "--endpoint",
        "completions",
        "--max-tokens-override",
        str(args.max_tokens),
        "--workload",
        spec,
        "--model",
        "sim-model",
        "--loglevel",
        "WARNING",
    ]
    master = subprocess.Popen(
        [
            PY,
            "-m",
            "locust",
            "-f",
            "locustfile.py",
            "--headless",
            "--master",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(port),
            "--expect-workers",
            "1",
            "-u",
            str(args.users),
            "-r",
            str(args.users),
            "-t",
            f"{args.duration:g}s",
            "--results-dir",
            os.path.join(tmp, "results"),
            "--run-id",
            "mem",
            "--stop-timeout",
            "5",
            "--only-summary",
            *common,
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    worker = subprocess.Popen(
        [
            PY,
            "-m",
            "locust",
            "-f",
            "locustfile.py",
            "--worker",
            "--master-host",
            "127.0.0.1",
            "--master-port",
            str(port),
            "--loglevel",
            "WARNING",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    procs = {"master": psutil.Process(master.pid), "worker": psutil.Process(worker.pid)}
    print(
        f"master pid {master.pid}, worker pid {worker.pid}, simulator {url}; {args.users} streams, {args.max_tokens} tokens "
        f"at {args.itl * 1000:g} ms ITL; {args.duration:g} s; machine {machine_pressure()}",
        flush=True,
    )
    print(f"{'t s':>6} {'master MB':>10} {'worker MB':>10}", flush=True)
    t0 = time.monotonic()
    samples = []
    try:
        while master.poll() is None and time.monotonic() - t0 < args.duration + 120:
            t = time.monotonic() - t0
            try:
                row = {"t": t, **{k: p.memory_info().rss / 2**20 for k, p in procs.items()}}
            except psutil.NoSuchProcess:
                break
            samples.append(row)
            print(f"{t:6.0f} {row['master']:10.1f} {row['worker']:10.1f}", flush=True)
            time.sleep(args.interval)
        master.wait(max(1.0, args.duration + 150 - (time.monotonic() - t0)))
    finally:
        for p in (worker, master, sim):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
        log.close()
    with open(os.path.join(tmp, "results", "mem", "summary.json")) as f:
        summary = json.load(f)
    requests = summary["overall"]["requests"]
    total = requests.get("total") or requests.get("ok", 0)
    rate = total / args.duration
    steady = [s for s in samples if args.warmup <= s["t"] <= args.duration]
    out = {"requests": total, "requests_per_s": rate, "samples": samples, "pressure_after": machine_pressure()}
    print(
        f"\n{total} requests in {args.duration:g} s ({rate:.0f}/s); slope over {len(steady)} samples from "
        f"{args.warmup:g} s to the end:"
    )
    for k in ("master", "worker"):
        ts, ys = [s["t"] for s in steady], [s[k] for s in steady]
        mb_per_s = slope(ts, ys)
        per_100k = mb_per_s / rate * 1e5 if rate else float("nan")
        growth = (ys[-1] - ys[0]) if ys else float("nan")
        out[k] = {
            "first_mb": ys[0] if ys else None,
            "last_mb": ys[-1] if ys else None,
            "min_mb": min(ys, default=None),
            "max_mb": max(ys, default=None),
            "mb_per_min": mb_per_s * 60,
            "mb_per_100k_requests": per_100k,
        }
        print(f"  {k:6s}  {ys[0]:7.1f} -> {ys[-1]:7.1f} MB ({growth:+.1f}; range {min(ys):.1f}-{max(ys):.1f})  "
              f"slope {mb_per_s * 60:+.2f} MB/min  {per_100k:+.2f} MB per 100k requests")  # fmt: skip
    print(f"machine after: {out['pressure_after']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
