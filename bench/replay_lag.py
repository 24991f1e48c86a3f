"""How closely does `--replay` keep to a trace's times? Master + N workers replay a Poisson trace
against the simulator (`fixed` profile) and the schedule lag (t_send - t_intended) is printed.

    python bench/replay_lag.py [--seconds 120] [--rate 10] [--workers 2] [--out DIR]

The trace begins 3 s after the run's start (the workers' own start is not measured). Prints one
JSON line: lag percentiles in ms, requests, workers, CPU count, 1-minute load average.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from processes import ROOT, free_port, simulator

LOCUST = [sys.executable, "-m", "locust", "-f", os.path.join(ROOT, "locustfile.py")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--out", default=None, help="results folder (default: a temporary one)")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="replay-lag-")
    os.makedirs(out, exist_ok=True)
    rng = random.Random(args.seed)
    trace = os.path.join(out, "trace.jsonl")
    t, n = 3.0, 0
    with open(trace, "w") as f:
        while t < 3.0 + args.seconds:
            f.write(
                json.dumps(
                    {
                        "t": round(t, 6),
                        "class": rng.choice(["short", "long"]),
                        "text": f"q{n} " + "x" * rng.randint(5, 300),
                        "max_tokens": rng.randint(2, 6),
                    }
                )
                + "\n"
            )
            n += 1
            t += rng.expovariate(args.rate)
    procs = []
    with simulator("--profile", "fixed") as url:
        try:
            port = free_port()
            master = subprocess.Popen(
                [
                    *LOCUST,
                    "--master",
                    "--headless",
                    "--master-bind-port",
                    str(port),
                    "--expect-workers",
                    str(args.workers),
                    "--host",
                    url,
                    "--replay",
                    trace,
                    "--results-dir",
                    out,
                    "--run-id",
                    "lag",
                    "--stop-timeout",
                    "10",
                ],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs = [
                subprocess.Popen(
                    [*LOCUST, "--worker", "--master-port", str(port)],
                    cwd=ROOT,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for _ in range(args.workers)
            ]
            rc = master.wait(timeout=args.seconds + 180)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
    with open(os.path.join(out, "lag", "summary.json")) as f:
        summary = json.load(f)
    table = pq.read_table(os.path.join(out, "lag", "requests.parquet"), columns=["t_send", "t_intended", "ok"])
    lag = summary["overall"]["schedule_lag_ms"]
    print(
        json.dumps(
            {
                "exit_code": rc,
                "trace_requests": n,
                "records": table.num_rows,
                "ok": sum(table.column("ok").to_pylist()),
                "workers": args.workers,
                "rate": args.rate,
                "seconds": args.seconds,
                "lag_ms": {k: round(lag[k], 3) for k in ("p50", "p90", "p95", "p99", "p99.9", "max")},
                "target_rate": summary["open_loop"]["target_rate"],
                "sent_per_s": summary["open_loop"]["sent_per_s"],
                "cpus": os.cpu_count(),
                "load_1min": round(os.getloadavg()[0], 2),
            }
        )
    )
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
