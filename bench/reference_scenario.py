"""The reference scenario end to end: the suite's step ramp against the built-in simulator's
`v100-7b-tp8` profile, compared with the published 8xV100 measurement
(docs/reference-scenario.md), plus a capacity search for "P95 TTFT < 5 s".

    python bench/reference_scenario.py                      # full: 60 s steps, ~10 min
    python bench/reference_scenario.py --step-time 30s      # quicker, noisier

It runs the real suite (locust headless, no --host: the simulator starts on its own) and prints
one table: per step the measured figures next to the published ones, and the verdict for the
fitted points (+-25 %). The published E2E at 80+ users contradicts its own throughput (Little's
law), so E2E is shown but not judged.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = (5, 10, 20, 50, 80, 120, 160)
# users: (mean TTFT ms, P95 TTFT ms, mean E2E ms, total tokens/s, per-stream tokens/s)
PUBLISHED = {
    5: (385, 620, 4200, 1200, 55),
    10: (501, 840, 5800, 1800, 48),
    20: (680, 1100, 7600, 2600, None),
    50: (1020, 2300, 12400, 4200, None),
    80: (1890, 4600, 18900, 5300, None),
    120: (3120, 8200, 30800, 6100, None),
    160: (4820, 13600, 46700, 6500, None),
}
# the points the simulator profile is fitted to (the foundation issue's acceptance points)
JUDGED = {
    5: ("ttft_mean", "stream_tps"),
    50: ("ttft_mean", "total_tps"),
    80: ("ttft_p95",),
    120: ("ttft_p95",),
    160: ("ttft_mean", "ttft_p95", "total_tps"),
}
TOLERANCE = 0.25


def run(args: list[str], timeout: float) -> dict:
    out = tempfile.mkdtemp(prefix="refscen-")
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        os.path.join(ROOT, "locustfile.py"),
        "--headless",
        "--results-dir",
        out,
        "--run-id",
        "r",
        *args,
    ]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if proc.returncode not in (0, 1, 3, 6):  # done, request failures, SLO missed or undecided: the run ran
        sys.exit(f"the suite failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    with open(os.path.join(out, "r", "summary.json")) as f:
        summary = json.load(f)
    summary["_wall_s"] = time.monotonic() - t0
    summary["_dir"] = os.path.join(out, "r")
    return summary


def figures(step: dict) -> dict:
    return {
        "ttft_mean": step["ttft_ms"]["mean"],
        "ttft_p95": step["ttft_ms"]["p95"],
        "e2e_mean": step["e2e_ms"]["mean"],
        "total_tps": step["throughput"]["total_tokens_per_s"],
        "stream_tps": step["stream_tokens_per_s"]["mean"],
    }


def cell(measured, published, judged: bool) -> tuple[str, bool]:
    if measured is None:
        return "-", not judged
    if published is None:
        return f"{measured:,.0f}", True
    off = measured / published - 1
    ok = abs(off) <= TOLERANCE
    mark = ("ok" if ok else "MISS") if judged else ""
    return f"{measured:,.0f} / {published:,} ({off:+.0%}){' ' + mark if mark else ''}", ok or not judged


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--step-time", default="60s")
    ap.add_argument("--step-warmup", default="15s")
    ap.add_argument("--seed", default="1")
    ap.add_argument("--skip-capacity", action="store_true")
    a = ap.parse_args()
    steps = ",".join(map(str, STEPS))
    print(
        f"step ramp {steps} users, --step-time {a.step_time}, --step-warmup {a.step_warmup}, profile v100-7b-tp8",
        flush=True,
    )
    s = run(
        [
            "--steps",
            steps,
            "--step-time",
            a.step_time,
            "--step-warmup",
            a.step_warmup,
            "--seed",
            a.seed,
            "--slo",
            "ttft.p95<5s",
            "--stop-timeout",
            "120",
        ],
        timeout=3600,
    )
    names = ("ttft_mean", "ttft_p95", "e2e_mean", "total_tps", "stream_tps")
    heads = ("mean TTFT ms", "P95 TTFT ms", "mean E2E ms", "total tokens/s", "tokens/s per stream")
    print("\nmeasured / published (difference); judged points marked ok or MISS (+-25 %)")
    print(f"{'users':>5} | " + " | ".join(f"{h:>28}" for h in heads))
    all_ok = True
    for step in s["by_step"]:
        users = step["users"]
        got = figures(step)
        pub = dict(zip(names, PUBLISHED[users]))
        cells = []
        for name in names:
            judged = name in JUDGED.get(users, ())
            text, ok = cell(got[name], pub[name] if name != "e2e_mean" or users < 80 else None, judged)
            all_ok &= ok
            cells.append(f"{text:>28}")
        print(f"{users:>5} | " + " | ".join(cells))
    if "capacity" in s:
        print("\nfrom the step ramp: " + s["capacity"]["sentence"])
    if not a.skip_capacity:
        # doubling then bisection, independent of the ramp's levels
        c = run(
            [
                "--find-capacity",
                "--slo",
                "ttft.p95<5s",
                "--step-time",
                a.step_time,
                "--step-warmup",
                a.step_warmup,
                "--seed",
                a.seed,
                "--stop-timeout",
                "120",
                "-t",
                "30m",
            ],
            timeout=3600,
        )
        print("capacity search: " + c["capacity"]["sentence"] + f" ({c['_wall_s']:.0f} s)")
    print("\npublished: capacity at P95 TTFT < 5 s about 80-100 users, 5,000-6,000 tokens/s")
    print(f"verdict: {'all judged points within 25 %' if all_ok else 'some judged points off by more than 25 %'}")
    print(f"results: {s['_dir']}")
    sys.exit(0 if all_ok else 1)


if __name__ == "__main__":
    main()
