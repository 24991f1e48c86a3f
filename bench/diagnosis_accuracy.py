"""How often does the diagnosis name the right limit? Seeded step ramps with an SLO against the
simulator's five limit profiles (simulator/profiles/{memory,scheduler,prefill,compute,front-end}-bound.yaml,
each built to hit one known limit), each with --server-metrics, and summary.json's diagnosis
checked against the profile's limit.

    .venv/bin/python bench/diagnosis_accuracy.py --seeds 10            # 5 x 10 runs, about 25 s each
    .venv/bin/python bench/diagnosis_accuracy.py --profiles prefill-bound --seeds 3

Each run holds two levels (`--steps 2,24`, judged on the SLO as a capacity search judges its
levels): 2 users, where nothing is near a limit, then 24, past each profile's limit; the knee is
the 24-user level (a 2-user level short of values is undecided, not a knee). RUNS
holds each profile's SLO and reply length (what its limit makes slow), shared with the end-to-end
tests (tests/test_diagnosis_profiles.py). Prints one line per run and a table of the right calls
per profile, at the knee and, from the same figures, at the 2-user level (where the right call is
"no limit reached"); --json writes every run's kinds and sentences, --keep the results folders. Bounded: every run stops after its two
levels (-t) plus Locust's stop timeout; traffic goes to 127.0.0.1 only.
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
sys.path.insert(0, ROOT)

from core.server_process import ServerProcess  # noqa: E402

# What each limit makes slow, and replies short enough for a level of a few seconds to hold many:
# a queue (slots, KV cache, the token budget) delays the first token; a slower batch every token after it.
RUNS = {
    "memory-bound": {"slo": "ttft.p95<300ms", "max_tokens": "60"},
    "scheduler-bound": {"slo": "ttft.p95<300ms", "max_tokens": "30"},
    "prefill-bound": {"slo": "ttft.p95<2s", "max_tokens": "30"},
    "compute-bound": {"slo": "tpot.p95<80ms", "max_tokens": "8"},
    "front-end-bound": {"slo": "ttft.p95<300ms", "max_tokens": "30"},
}
LEVELS = "2,24"
STEP = ("--step-time", "8s", "--step-warmup", "2s", "--server-metrics-interval", "1s", "--stop-timeout", "10")


def locust_args(profile: str, url: str, folder: str, run_id: str, seed: int) -> list[str]:
    """The step ramp against a simulator at `url` with a limit profile's SLO and replies."""
    run = RUNS[profile]
    return [
        "--host",
        url,
        "--steps",
        LEVELS,
        *STEP,
        "--slo",
        run["slo"],
        "--max-tokens-override",
        run["max_tokens"],
        "--server-metrics",
        url + "/metrics",
        "--seed",
        str(seed),
        "--results-dir",
        folder,
        "--run-id",
        run_id,
    ]


def one(profile: str, seed: int, folder: str) -> dict:
    """One seeded step ramp; summary.json's diagnosis with the profile and seed."""
    with tempfile.TemporaryDirectory(prefix="diag-sim-") as tmp:
        cmd = [sys.executable, "-m", "simulator", "--host", "127.0.0.1", "--port", "0", "--profile", profile]
        server = ServerProcess(
            cmd,
            os.path.join(tmp, "simulator.log"),
            name="the simulator",
            cwd=ROOT,
            ready_line=r"listening on (?P<url>\S+)",
            start_timeout=60,
            stop_timeout=10,
        )
        with server.start():
            run_id = f"{profile}-{seed}"
            t = time.monotonic()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "locust",
                    "-f",
                    os.path.join(ROOT, "locustfile.py"),
                    "--headless",
                    *locust_args(profile, server.url, folder, run_id, seed),
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
            )
            took = time.monotonic() - t
    try:
        with open(os.path.join(folder, run_id, "summary.json"), encoding="utf-8") as f:
            d = json.load(f).get("diagnosis") or {}
    except OSError:
        d = {"kind": "no summary", "sentence": proc.stderr[-500:]}
    low = at_lowest(d)
    return {
        "profile": profile,
        "seed": seed,
        "kind": d.get("kind"),
        "users": d.get("users"),
        "right": d.get("kind") == profile,
        "sentence": d.get("sentence", ""),
        "low_kind": low.kind if low else None,
        "low_sentence": low.sentence if low else "",
        "seconds": round(took, 1),
        "rc": proc.returncode,
    }


def at_lowest(d: dict):
    """The same diagnosis at the run's lowest level (2 users, where nothing is near a limit), from
    the levels' figures and the server's configuration summary.json holds; None without levels."""
    from metrics.diagnosis import diagnose
    from metrics.schema.server_side import LevelEvidence

    levels = [LevelEvidence.model_validate(lv) for lv in d.get("levels") or ()]
    if not levels:
        return None
    return diagnose(levels, min(lv.users for lv in levels), d.get("metrics"), config=d.get("config"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", default=",".join(RUNS), help="comma-separated limit profiles")
    ap.add_argument("--seeds", type=int, default=10, help="runs per profile, seeds 1..N")
    ap.add_argument("--json", help="write every run's result here")
    ap.add_argument("--keep", help="keep every run's results folder under this folder (default: removed)")
    args = ap.parse_args()
    results = []
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="diag-runs-") as tmp:
        folder = args.keep or tmp
        for profile in args.profiles.split(","):
            for seed in range(1, args.seeds + 1):
                r = one(profile, seed, folder)
                results.append(r)
                print(
                    f"{profile:16} seed {seed:2}: {'right' if r['right'] else 'WRONG':5} {r['kind']} at {r['users']} "
                    f"users, {r['low_kind']} at 2 ({r['seconds']} s): {r['sentence'][:160]}",
                    flush=True,
                )
    print("\n| profile | limit named at 24 users | no limit reached at 2 users | runs |\n| --- | ---: | ---: | ---: |")
    for profile in args.profiles.split(","):
        mine = [r for r in results if r["profile"] == profile]
        print(
            f"| {profile} | {sum(r['right'] for r in mine)} | {sum(r['low_kind'] == 'no limit reached' for r in mine)} "
            f"| {len(mine)} |"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
