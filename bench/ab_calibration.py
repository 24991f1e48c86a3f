"""Calibration of `python -m sweeps ab` on the built-in simulator: how often it says "better" or
"worse" when nothing changed (A/A pairs), and how often it finds a change that is there (power).

Each pair is one whole `python -m sweeps ab` (its rounds, its own seeds), run as a child process;
`--jobs` pairs run side by side (each pair is a simulator and a Locust process at a time: give
about two cores per job, or the machine's load itself becomes the difference measured).

    python bench/ab_calibration.py aa --pairs 40 --jobs 8 --rounds 2 --out /tmp/aa -- -u 24 -r 24 -t 15s --max-tokens-override 64
    python bench/ab_calibration.py power --change 10 --pairs 20 --jobs 8 --rounds 2 --out /tmp/pw -- -u 24 ...

`aa`: A and B are the same profile (--profile, a name or a file; default v100-7b-tp8) with
`--max-num-seqs` slots. `power`: B's engine is `--change` % slower in every step cost (step_base_s,
per_seq_s, per_prefill_token_s, per_context_token_s, prefill_step_base_s scaled by 1 / (1 -
change/100)), so it carries that much less at saturation: its capacity at an SLO is about
`--change` % lower; or B is A with `--b-set NAME=VALUE` over it, e.g. one slot more on a profile
whose capacity is its slot count:

    python bench/ab_calibration.py power --profile slots.yaml --max-num-seqs 10 --b-set max_num_seqs=11 \
        --pairs 20 --jobs 10 --rounds 2 --out /tmp/cap -- --find-capacity --steps 8,16 --slo "ttft.p95<150ms" ... The summary (printed and
written to OUT/calibration.json) gives, per metric, the share of pairs with each verdict, the
median smallest detectable change, and for A/A the share of pairs with any false verdict on the
gated (primary) metric. Not run by CI: it takes minutes to hours.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from simulator.profiles import profile_fields  # noqa: E402

COSTS = ("step_base_s", "per_seq_s", "per_prefill_token_s", "per_context_token_s", "prefill_step_base_s")


def slower(profile: str, change_pct: float) -> list[str]:
    """--b-set arguments that make the profile's engine `change_pct` % lower in throughput."""
    fields, _ = profile_fields(profile)
    scale = 1 / (1 - change_pct / 100)
    return [f"{k}={fields.get(k, 0.0) * scale!r}" for k in COSTS if fields.get(k)]


def one_pair(i: int, args, load: list[str]) -> dict:
    folder = os.path.join(args.out, f"pair-{i:03d}")
    a_sets = [f"max_num_seqs={args.max_num_seqs}"]
    b_sets = list(a_sets)
    if args.kind == "power":
        change = args.b_set or slower(args.profile, args.change)
        named = {s.split("=", 1)[0] for s in change}
        b_sets = [s for s in a_sets if s.split("=", 1)[0] not in named] + change
    cmd = [
        sys.executable,
        "-m",
        "sweeps",
        "ab",
        "--profile",
        args.profile,
        "--out",
        folder,
        "--seed",
        str(1000 + 100 * i),
    ]
    for s in a_sets:
        cmd += ["--a-set", s]
    for s in b_sets:
        cmd += ["--b-set", s]
    cmd += ["--rounds", str(args.rounds)] if args.rounds else ["--max-rounds", str(args.max_rounds)]
    if args.primary:
        cmd += ["--primary", args.primary]
    cmd += ["--", *load]
    t0 = time.monotonic()
    with open(os.path.join(args.out, f"pair-{i:03d}.log"), "w") as log:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=args.pair_timeout)
    try:
        with open(os.path.join(folder, "ab.json")) as f:
            result = json.load(f)
    except (OSError, json.JSONDecodeError):
        result = None
    return {
        "pair": i,
        "exit_code": proc.returncode,
        "seconds": round(time.monotonic() - t0, 1),
        "capacities": capacities(folder),
        "result": result,
    }


def capacities(folder: str) -> dict[str, list]:
    """Each round's capacity answer per side, [level met, level missed] (empty without a search)."""
    out: dict[str, list] = {"A": [], "B": []}
    for r in range(1, 100):
        for side in out:
            try:
                with open(os.path.join(folder, f"round-{r:02d}", side, "run", "summary.json")) as f:
                    cap = json.load(f).get("capacity")
            except (OSError, json.JSONDecodeError):
                return out
            if cap:
                out[side].append([cap.get("users"), cap.get("next_failing_users")])
    return out


def summarize(pairs: list[dict], kind: str) -> dict:
    done = [p for p in pairs if p["result"]]
    metrics = sorted({m for p in done for m in p["result"]["metrics"]})
    out = {"kind": kind, "pairs": len(pairs), "measured": len(done), "metrics": {}}
    for m in metrics:
        rows = [p["result"]["metrics"][m] for p in done if m in p["result"]["metrics"]]
        verdicts = [r["verdict"] for r in rows]
        det = sorted(r["detectable_pct"] for r in rows if r.get("detectable_pct") is not None)
        out["metrics"][m] = {
            "n": len(rows),
            "better": verdicts.count("better"),
            "worse": verdicts.count("worse"),
            "no_difference": verdicts.count("no difference measured"),
            "median_detectable_pct": det[len(det) // 2] if det else None,
            "median_diff_pct": sorted(r["diff_pct"] for r in rows if r.get("diff_pct") is not None)[len(rows) // 2]
            if rows
            else None,
        }
    if done:
        primary = done[0]["result"]["primary"]
        out["primary"] = primary
        gated = [p["result"]["metrics"].get(primary, {}).get("verdict") for p in done]
        out["primary_false_or_found"] = sum(v in ("better", "worse") for v in gated)
        out["any_metric_better_or_worse"] = sum(
            any(m["verdict"] in ("better", "worse") for m in p["result"]["metrics"].values()) for p in done
        )
        out["rounds"] = sorted(p["result"]["rounds"] for p in done)
        out["exit_codes"] = sorted(p["exit_code"] for p in pairs)
    return out


def main() -> int:
    argv = sys.argv[1:]
    load = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=("aa", "power"))
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="rounds per pair (0: the sequential rule)")
    ap.add_argument("--max-rounds", type=int, default=6)
    ap.add_argument("--primary", default=None)
    ap.add_argument("--profile", default="v100-7b-tp8")
    ap.add_argument("--max-num-seqs", type=int, default=128)
    ap.add_argument("--change", type=float, default=10.0, help="power: B's engine is this %% slower")
    ap.add_argument(
        "--b-set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="power: B's change as profile fields over A's, in place of --change (e.g. max_num_seqs=11)",
    )
    ap.add_argument("--pair-timeout", type=float, default=1800)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(own)
    if not load:
        ap.error("give the load after --, e.g. -- -u 24 -r 24 -t 15s --max-tokens-override 64")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        pairs = list(pool.map(lambda i: one_pair(i, args, load), range(1, args.pairs + 1)))
    summary = summarize(pairs, args.kind)
    summary.update(
        command=" ".join(["python", "bench/ab_calibration.py", *argv]),
        seconds=round(time.monotonic() - t0, 1),
        jobs=args.jobs,
    )
    with open(os.path.join(args.out, "calibration.json"), "w") as f:
        json.dump(
            {"summary": summary, "pairs": [{k: v for k, v in p.items() if k != "result"} for p in pairs]}, f, indent=2
        )
    print(yaml.safe_dump(summary, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
