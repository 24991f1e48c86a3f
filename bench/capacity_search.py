"""Capacity-search policies side by side on the built-in simulator: today's doubling (or walk of
--steps) with fixed holds against the adaptive search, over a few seeds. Not run by CI.

    python bench/capacity_search.py                                   # v100-7b-tp8, ttft.p95<5s, seeds 1-3
    python bench/capacity_search.py --profile scheduler-bound --slo "ttft.p95<1s" --seeds 1,2

Each run is the real suite, headless, its simulator started by it (--sim-profile), with the same
--step-time, --step-warmup and -t for every policy (the web form's defaults of a new user: no
--steps, 30 s levels, -t 300s). Per run: the answer (highest level met, lowest missed), the
interval's width (a share of the answer), whether the policy finished before -t, the search's wall
time (the run's window: from its start to its last level's end), the requests it sent, and the
levels in the order tried. The rows, and the median per policy, print as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(profile: str, policy: str, seed: int, a) -> dict:
    out = tempfile.mkdtemp(prefix="capsearch-")
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        os.path.join(ROOT, "locustfile.py"),
        "--headless",
        "--sim-profile",
        profile,
        "--find-capacity",
        "--capacity-policy",
        policy,
        "--slo",
        a.slo,
        "--step-time",
        a.step_time,
        "--step-warmup",
        a.step_warmup,
        "-t",
        a.run_time,
        "--seed",
        str(seed),
        "--stop-timeout",
        "10",
        "--results-dir",
        out,
        "--run-id",
        "r",
        *a.extra,
    ]
    if a.steps and policy != "doubling":
        cmd += ["--steps", a.steps]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode not in (0, 3, 6):
        sys.exit(f"{policy} seed {seed}: the suite failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    with open(os.path.join(out, "r", "summary.json")) as f:
        s = json.load(f)
    cap = s["capacity"]
    lo, hi = cap["users"], cap["next_failing_users"]
    levels = cap.get("levels") or [{"users": st["users"], "state": st["verdict"]["state"]} for st in s["by_step"]]
    return {
        "policy": policy,
        "seed": seed,
        "users": lo,
        "missed": hi,
        "width": cap.get("width"),
        "timed_out": cap.get("timed_out"),
        "search_s": s["window"]["seconds"],
        "process_s": wall,
        "requests": s["records"]["total"],
        "levels": " ".join(
            f"{lv['users']}{lv['state'][:2]}{'/pl' if lv.get('ended') == 'placed' else ''}" for lv in levels
        ),
        "crossing": cap.get("crossing"),
        "sentence": cap["sentence"],
    }


def crossing_text(c: dict | None) -> str:
    """'87.3 [84.1, 90.2]' (an open end: '-'), or '-' without a crossing."""
    if not c:
        return "-"
    end = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    return f"{c['users']:.1f} [{end(c['lower'])}, {end(c['upper'])}]"


def crossing_width(c: dict | None) -> float | None:
    """The crossing's interval, upper less lower, a share of its estimate (None: open or none)."""
    if not c or c["lower"] is None or c["upper"] is None:
        return None
    return (c["upper"] - c["lower"]) / c["users"]


def table(rows: list[dict], profile: str) -> str:
    fmt = lambda x, f: "-" if x is None else f.format(x)  # noqa: E731
    lines = [
        "| profile | policy | seed | answer | missed at | width | curve's crossing [80 % interval] | its width | -t ended it | search s | requests | levels (me met, mi missed, un undecided, /pl placed) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {profile} | {r['policy']} | {r['seed']} | {fmt(r['users'], '{}')} | {fmt(r['missed'], '{}')} | "
            f"{fmt(r['width'], '{:.0%}')} | {crossing_text(r.get('crossing'))} | {fmt(crossing_width(r.get('crossing')), '{:.1%}')} | "
            f"{'yes' if r['timed_out'] else 'no'} | {r['search_s']:.0f} | "
            f"{r['requests']:,} | {r['levels']} |"
        )
    for r in rows:
        r["curve_width"] = crossing_width(r.get("crossing"))
    for policy in dict.fromkeys(r["policy"] for r in rows):
        mine = [r for r in rows if r["policy"] == policy]

        def med(k, mine=mine):
            values = [r[k] for r in mine if r[k] is not None]
            return statistics.median(values) if values else None

        lines.append(
            f"| {profile} | **{policy} median** | | {fmt(med('users'), '{:g}')} | {fmt(med('missed'), '{:g}')} | "
            f"{fmt(med('width'), '{:.0%}')} | | {fmt(med('curve_width'), '{:.1%}')} | "
            f"{sum(bool(r['timed_out']) for r in mine)}/{len(mine)} | "
            f"{med('search_s'):.0f} | {med('requests'):,.0f} | |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="v100-7b-tp8")
    ap.add_argument("--slo", default="ttft.p95<5s")
    ap.add_argument("--policies", default="doubling,adaptive")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--steps", default="", help="levels for the walk and adaptive policies (doubling ignores them)")
    ap.add_argument("--step-time", default="30s")
    ap.add_argument("--step-warmup", default="10s")
    ap.add_argument("-t", "--run-time", default="300s")
    ap.add_argument("--json", default="", help="also write the rows to this file")
    ap.add_argument("extra", nargs="*", help="more suite options, after --")
    a = ap.parse_args()
    rows = []
    for seed in [int(s) for s in a.seeds.split(",")]:
        for policy in a.policies.split(","):
            r = run(a.profile, policy, seed, a)
            print(
                f"{policy} seed {seed}: {r['sentence'][:300]} ({r['search_s']:.0f} s, {r['requests']} requests)",
                flush=True,
            )
            rows.append(r)
            if a.json:
                with open(a.json, "w") as f:
                    json.dump(rows, f, indent=1)
    print(table(rows, a.profile))


if __name__ == "__main__":
    main()
