"""Fit check of the ``v100-7b-tp8`` profile, in virtual time.

Runs the engine's virtual-time closed loop (``simulator.virtual``: the
suite's default mix, no think time, the same step arithmetic as the real
server) at 5, 10, 20, 50, 80, 120 and 160 users and prints a table next to
the published 8xV100 measurement (docs/reference-scenario.md; `PUBLISHED` below),
with a +-25 % verdict on the fitted figures:

* 5 users: mean TTFT 385 ms, ~55 output tokens/s per stream;
* 50 users: mean TTFT 1,020 ms, ~4,200 total tokens/s;
* 80 and 120 users: P95 TTFT 4.6 s and 8.2 s (the capacity at P95 TTFT < 5 s
  falls between them, where the published deployment put it);
* 160 users: mean TTFT 4,820 ms, P95 TTFT 13.6 s, ~6,500 total tokens/s.

Per-stream speed = (output_tokens - 1) / (last_token - first_token), mean
over requests; total tokens/s = (prompt + output tokens of requests finished
in the window) / window.  The published E2E at high load contradicts its own
throughput (Little's law), so E2E is shown but not fitted.

    python bench/fit_v100.py [--profile v100-7b-tp8] [--duration 900] [--seeds 3]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.profiles import load_profile
from simulator.virtual import simulate_closed_loop

# users: (mean TTFT s, P95 TTFT s, mean E2E s, per-stream tok/s, total tok/s)
PUBLISHED = {
    5: (0.385, 0.62, 4.2, 55, 1200),
    10: (0.501, 0.84, 5.8, 48, 1800),
    20: (0.680, 1.1, 7.6, None, 2600),
    50: (1.020, 2.3, 12.4, None, 4200),
    80: (1.890, 4.6, 18.9, None, 5300),
    120: (3.120, 8.2, 30.8, None, 6100),
    160: (4.820, 13.6, 46.7, None, 6500),
}
FITTED = {
    (5, "ttft_mean"),
    (5, "stream_tps"),
    (50, "ttft_mean"),
    (50, "total_tps"),
    (80, "ttft_p95"),
    (120, "ttft_p95"),
    (160, "ttft_mean"),
    (160, "ttft_p95"),
    (160, "total_tps"),
}
COLS = (("ttft_mean", 0, 1), ("ttft_p95", 1, 1), ("e2e_mean", 2, 1), ("stream_tps", 3, 1), ("total_tps", 4, 1))


def run(profile, users, duration, warmup, seeds):
    acc = {}
    for seed in range(seeds):
        r = simulate_closed_loop(profile, users, duration_s=duration, warmup_s=warmup, seed=seed)
        for k, v in r.items():
            acc[k] = acc.get(k, 0.0) + v / seeds
    return acc


def main():
    ap = argparse.ArgumentParser(description="virtual-time fit check of a batch profile")
    ap.add_argument("--profile", default="v100-7b-tp8")
    ap.add_argument("--duration", type=float, default=900.0, help="virtual seconds per run")
    ap.add_argument("--warmup", type=float, default=120.0)
    ap.add_argument("--seeds", type=int, default=3, help="runs averaged per level")
    args = ap.parse_args()
    p = load_profile(args.profile)
    print(
        f"profile {p.name}: virtual closed loop, {args.duration:.0f} s per level ({args.warmup:.0f} s warm-up "
        f"excluded), mean of {args.seeds} seeds\n"
    )
    hdr = f"{'users':>5} | {'TTFT mean s':>17} | {'TTFT P95 s':>17} | {'E2E mean s':>17} | {'stream tok/s':>17} | {'total tok/s':>19} | running waiting"
    print(hdr)
    print("-" * len(hdr))
    verdicts = []
    for users, pub in PUBLISHED.items():
        r = run(p, users, args.duration, args.warmup, args.seeds)
        cells = []
        for key, idx, _ in COLS:
            sim = r[key]
            ref = pub[idx]
            mark = ""
            if (users, key) in FITTED:
                err = sim / ref - 1
                ok = abs(err) <= 0.25
                verdicts.append((users, key, ref, sim, err, ok))
                mark = "*" if ok else "!"
            if key == "total_tps":
                cells.append(f"{sim:7.0f} / {ref if ref else '-':>6}{mark:1}  ")
            else:
                refs = f"{ref:.3g}" if ref else "-"
                cells.append(f"{sim:7.3g} / {refs:>6}{mark:1}  ")
        print(f"{users:5d} | " + "| ".join(cells) + f"| {r['mean_running']:6.1f} {r['mean_waiting']:6.1f}")
    print(
        "\n(simulated / published; * fitted figure within +-25 %, ! outside; "
        f"mean prompt {r['mean_prompt']:.0f} tokens, mean output {r['mean_output']:.0f} tokens)\n"
    )
    print("verdict on the fitted figures:")
    for users, key, ref, sim, err, ok in verdicts:
        print(
            f"  {users:4d} users {key:11s} published {ref:>8.3f}  simulated {sim:>9.3f}  {err:+6.1%}  "
            f"{'OK' if ok else 'OUTSIDE +-25%'}"
        )
    n_ok = sum(v[5] for v in verdicts)
    print(f"\n{n_ok}/{len(verdicts)} fitted figures within +-25 %")
    return 0 if n_ok == len(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
