"""The reference deployment's tuning findings, reproduced on the simulator's `v100-7b-tp8` profile.

The deployment (docs/reference-scenario.md) was tuned by hand, and four findings came of it:

1. `--max-num-seqs` 128 was the best balance at `--max-model-len` 4096 (P95 TTFT < 5 s);
2. `--max-model-len` 2048 instead of 4096 raised KV-cache use by more than 30 %;
3. prefix caching cut TTFT by 20-30 % on a shared system prompt;
4. the 20 % long mix at high concurrency timed out or ran out of memory until limits were set.

Each is run here as a user would run it, and its figures are set beside the simulator's truth log
(its own timing of every request) and its `/metrics`. Not run by CI; prints one table per finding.

Designs, chosen so that every run decides something in the time it has:

- 1: fixed loads (`python -m sweeps run --param max_num_seqs=64,128,256`) at two user counts, one
  below the knee and one above it (the knee of this profile at P95 TTFT < 5 s is about 80 users,
  in virtual time `simulator.virtual`), each ranked by throughput among the points that met the SLO
  (at the lower load) or by P95 TTFT (above the knee, where none meets it). A capacity search per
  point needs levels of about a minute each to get enough P95 values per level (a first try at
  210 s per point left every level undecided); a fixed load decides in one window.
- 2: `python -m sweeps run --param max_model_len=4096,2048` at one fixed load, each point's
  simulator scraped by `--server-metrics auto` (the sweep fills in the point's own /metrics): KV-cache
  use from `vllm:kv_cache_usage_perc` and the refused requests, against the truth log.
- 4: the simulator started here with `--server-metrics` on its `/metrics`, a step ramp; preemptions
  from `vllm:num_preemptions_total` against the truth log, and the knee's diagnosis.
- 3: `python -m sweeps ab` with prefix caching off (A) and on (B), 3 rounds, on the default mix
  with one shared system prompt on every request; the truth log's difference per round beside it.

    .venv/bin/python bench/seed_findings.py --out /tmp/seed [--only 1,3] [--time 60s]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from core.server_process import ServerProcess  # noqa: E402
from simulator.profiles import profile_fields  # noqa: E402

PY = sys.executable
PROFILE = "v100-7b-tp8"
SLO = "ttft.p95<5s"


# ----------------------------------------------------------------------------------- the truth log


def read_truth(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def truth_ttft_p95_ms(truth: list[dict]) -> float:
    """P95 of the engine's first token - arrival over the answered requests."""
    vals = [
        (t["first_token"] - t["arrival"]) * 1000 for t in truth if t["outcome"] == "ok" and t["first_token"] is not None
    ]
    return float(np.percentile(vals, 95)) if vals else float("nan")


def in_window(run: str, truth: list[dict]) -> list[dict]:
    """The truth log's lines of the requests the run's statistics cover: sent inside its window."""
    window = json.load(open(os.path.join(run, "summary.json")))["window"]
    rec = pd.read_parquet(os.path.join(run, "requests.parquet"), columns=["request_id", "wall_send"])
    ids = set(rec[(rec["wall_send"] >= window["start"]) & (rec["wall_send"] <= window["end"])]["request_id"])
    return [t for t in truth if t["request_id"] in ids]


# --------------------------------------------------------------------------- running the suite


def suite(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    return subprocess.run([PY, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def write_profile(folder: str, **fields) -> str:
    base = profile_fields(PROFILE)[0]
    path = os.path.join(folder, "profile.yaml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump({**base, **fields}, f, sort_keys=False)
    return path


def run_on_simulator(folder: str, fields: dict, load: list[str]) -> dict:
    """One run against a simulator of the reference profile with `fields` over it, scraped with
    --server-metrics every second: its summary, records, truth log and server metrics."""
    run, truth_path = os.path.join(folder, "run"), os.path.join(folder, "truth.jsonl")
    if not os.path.exists(os.path.join(run, "summary.json")):  # a finished run is read again, not run again
        _run_on_simulator(folder, fields, load)
    return {
        "summary": json.load(open(os.path.join(run, "summary.json"))),
        "records": pd.read_parquet(os.path.join(run, "requests.parquet")),
        "truth": read_truth(truth_path),
        "window_truth": in_window(run, read_truth(truth_path)),
        "metrics": pd.read_parquet(os.path.join(run, "server_metrics.parquet")),
    }


def _run_on_simulator(folder: str, fields: dict, load: list[str]) -> None:
    os.makedirs(folder, exist_ok=True)
    profile = write_profile(folder, **fields)
    truth_path = os.path.join(folder, "truth.jsonl")
    cmd = [PY, "-m", "simulator", "--host", "127.0.0.1", "--port", "0", "--profile", profile, "--truth-log", truth_path]
    server = ServerProcess(
        cmd,
        os.path.join(folder, "simulator.log"),
        name="the simulator",
        cwd=ROOT,
        ready_line=r"listening on (?P<url>\S+)",
        start_timeout=60,
        stop_timeout=10,
    )
    with server.start():
        proc = suite(
            "-m",
            "locust",
            "-f",
            os.path.join(ROOT, "locustfile.py"),
            "--headless",
            "--host",
            server.url,
            "--server-metrics",
            server.url + "/metrics",
            "--server-metrics-interval",
            "1s",
            "--results-dir",
            folder,
            "--run-id",
            "run",
            *load,
        )
    run = os.path.join(folder, "run")
    if not os.path.exists(os.path.join(run, "summary.json")):
        raise SystemExit(f"{folder}: the run left no summary (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    time.sleep(1.5)  # the truth log is flushed once a second


def gauge(metrics: pd.DataFrame, name: str) -> pd.Series:
    return metrics[metrics["metric"] == name].groupby("timestamp")["value"].sum()


def counter_increase(metrics: pd.DataFrame, name: str) -> float:
    s = gauge(metrics, name)
    return float(s.iloc[-1] - s.iloc[0]) if len(s) else float("nan")


def ms(x) -> str:
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:,.0f}"


# ------------------------------------------------------------------------- 1: max_num_seqs


def finding_seqs(out: str, users: list[int], t: str) -> None:
    print("\n## 1. max_num_seqs 64 / 128 / 256 at max_model_len 4096, SLO P95 TTFT < 5 s")
    print(
        "| users | max_num_seqs | P95 TTFT ms [95 % interval] | truth P95 TTFT ms | mean queue s (truth) "
        "| tokens/s per GPU (of 8) [95 % interval] | met SLO | ranking |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for u in users:
        folder = os.path.join(out, f"seqs-u{u}")
        rank = "throughput" if u < 80 else "ttft"
        r = suite(
            "-m",
            "sweeps",
            "run",
            "--param",
            "max_num_seqs=64,128,256",
            "--gpus",
            "8",
            "--rank",
            rank,
            "--out",
            folder,
            "--",
            "-u",
            str(u),
            "-r",
            str(u),
            "-t",
            t,
            "--warmup",
            "15s",
            "--slo",
            SLO,
            "--stop-timeout",
            "10",
        )
        table = json.load(open(os.path.join(folder, "table.json")))
        ranking = table["ranking"]
        verdict = (
            f"{rank}: best {ranking['best']['label']} ({ranking['verdict']})"
            if ranking.get("best")
            else f"{rank}: none (exit {r.returncode})"
        )
        for p in table["points"]:
            k = p["settings"]["max_num_seqs"]
            point = os.path.join(folder, "points", f"max_num_seqs-{k}")
            truth = in_window(os.path.join(point, "run"), read_truth(os.path.join(point, "truth.jsonl")))
            q = [x["queue_time"] for x in truth if x["outcome"] == "ok" and x["queue_time"] is not None]
            met = p["ttft_p95_ms"] < 5000
            print(
                f"| {u} | {k} | {ms(p['ttft_p95_ms'])} [{ms(p['ttft_p95_ms_lo'])}, {ms(p['ttft_p95_ms_hi'])}] "
                f"| {ms(truth_ttft_p95_ms(truth))} | {np.mean(q):.2f} | {ms(p['throughput'])} "
                f"[{ms(p['throughput_lo'])}, {ms(p['throughput_hi'])}] | {'yes' if met else 'no'} | {verdict} |"
            )
        print(f"  (users {u}: {ranking.get('sentence', '')})")


# ------------------------------------------------------------------------- 2: max_model_len


def finding_model_len(out: str, users: int, t: str) -> None:
    print(f"\n## 2. max_model_len 2048 against 4096, {users} users")
    folder = os.path.join(out, "len")
    command = [
        "-m",
        "sweeps",
        "run",
        "--param",
        "max_model_len=4096,2048",
        "--rank",
        "ttft",
        "--out",
        folder,
        "--",
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        t,
        "--warmup",
        "15s",
        "--stop-timeout",
        "10",
        "--server-metrics",
        "auto",
        "--server-metrics-interval",
        "1s",
    ]
    print("python " + " ".join(command))
    suite(*command)
    table = json.load(open(os.path.join(folder, "table.json")))
    print(
        "| max_model_len | KV blocks | KV peak in the window (sweep table) | vllm:kv_cache_usage_perc mean / peak "
        "(whole run) | P95 TTFT ms [95 % interval] | truth P95 TTFT ms | total tokens/s | requests ok "
        "| refused (HTTP 400, client) | refused (truth) |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for p in table["points"]:
        mml = p["settings"]["max_model_len"]
        point = os.path.join(folder, "points", f"max_model_len-{mml}")
        run = os.path.join(point, "run")
        m = pd.read_parquet(os.path.join(run, "server_metrics.parquet"))
        s = json.load(open(os.path.join(run, "summary.json")))
        rec = pd.read_parquet(os.path.join(run, "requests.parquet"))
        truth = read_truth(os.path.join(point, "truth.jsonl"))
        kv = gauge(m, "vllm:kv_cache_usage_perc")
        blocks = json.loads(m[m["metric"] == "vllm:cache_config_info"]["labels"].iloc[0]).get("num_gpu_blocks")
        o = s["overall"]
        refused = int((rec["error"] == "http_4xx").sum())
        peak = p.get("kv_cache_peak")
        print(
            f"| {mml} | {blocks} | {'-' if peak is None else f'{peak:.1%}'} | {kv.mean():.1%} / {kv.max():.1%} "
            f"| {ms(p['ttft_p95_ms'])} [{ms(p['ttft_p95_ms_lo'])}, {ms(p['ttft_p95_ms_hi'])}] "
            f"| {ms(truth_ttft_p95_ms(in_window(run, truth)))} | {ms(o['throughput']['total_tokens_per_s'])} "
            f"| {o['requests']['ok']} | {refused} | {sum(x['outcome'] == 'rejected' for x in truth)} |"
        )
    print(f"  ({table['ranking'].get('sentence', '')})")


# ------------------------------------------------------------------------- 3: prefix caching


def shared_workload(folder: str, chars: int) -> str:
    """The default mix with one shared system prompt of `chars` characters on every request."""
    with open(os.path.join(ROOT, "workloads", "default.yaml"), encoding="utf-8") as f:
        spec = yaml.safe_load(f)
    spec["templates"] = os.path.join(ROOT, "workloads", spec["templates"])  # the copy lives elsewhere
    spec.pop("system_prompt", None)
    spec["shared_prefix"] = {"share": 1.0, "count": 1, "chars": chars}
    path = os.path.join(folder, f"shared-{chars}.yaml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(spec, f, sort_keys=False)
    return path


def finding_prefix(out: str, users: int, t: str, chars: int, rounds: int) -> None:
    print(f"\n## 3. prefix caching off (A) / on (B), one shared {chars}-character system prompt, {users} users")
    os.makedirs(out, exist_ok=True)
    workload = shared_workload(out, chars)
    folder = os.path.join(out, f"prefix-{chars}")
    suite(
        "-m",
        "sweeps",
        "ab",
        "--a-set",
        "enable_prefix_caching=false",
        "--b-set",
        "enable_prefix_caching=true",
        "--rounds",
        str(rounds),
        "--out",
        folder,
        "--",
        "--workload",
        workload,
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        t,
        "--max-tokens-override",
        "64",
        "--stop-timeout",
        "20",
    )
    ab = json.load(open(os.path.join(folder, "ab.json")))
    truth = {}
    for side in "AB":
        truth[side] = [
            read_truth(os.path.join(folder, f"round-{r:02d}", side, "truth.jsonl")) for r in range(1, ab["rounds"] + 1)
        ]
    per_round = [100 * (truth_ttft_p95_ms(b) / truth_ttft_p95_ms(a) - 1) for a, b in zip(truth["A"], truth["B"])]
    cached = [sum(x["cached_tokens"] for x in tr) / max(1, sum(x["prompt_tokens"] for x in tr)) for tr in truth["B"]]
    print("| metric | A (off) | B (on) | B - A | 95 % interval | verdict | smallest detectable |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: |")
    for name, m in ab["metrics"].items():
        a, b = m.get("a"), m.get("b")

        def pct(v, a=a):
            return f"{100 * v / a:+.1f} %" if a else "-"

        print(
            f"| {name} | {a:,.1f} | {b:,.1f} | {pct(m['diff'])} | [{pct(m['lo'])}, {pct(m['hi'])}] | {m['verdict']} "
            f"| ±{m.get('detectable_pct', float('nan')):.1f} % |"
        )
    print(
        f"truth log, P95 TTFT B vs A per round: {', '.join(f'{d:+.1f} %' for d in per_round)} (mean {np.mean(per_round):+.1f} %); "
        f"cached share of B's prompt tokens: {np.mean(cached):.0%}"
    )


# ------------------------------------------------------------------------- 4: a tight KV cache


def finding_tight_kv(out: str, blocks: int, levels: str, step: str) -> None:
    print(
        f"\n## 4. the 20 % long mix against a KV cache of {blocks} blocks, step ramp {levels}, 15 s first-token timeout"
    )
    print(
        "| limits | level (users) | P95 TTFT ms | timeouts (client) | preemptions (/metrics, level) "
        "| KV peak | running / waiting (mean) | diagnosis |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for label, fields in (("none", {}), ("max_num_seqs 8", {"max_num_seqs": 8})):
        res = run_on_simulator(
            os.path.join(out, f"kv-{blocks}-{label.replace(' ', '')}"),
            {"num_gpu_blocks_override": blocks, **fields},
            [
                "--steps",
                levels,
                "--step-time",
                step,
                "--step-warmup",
                "5s",
                "--slo",
                SLO,
                "--timeout-first-token",
                "15s",
                "--stop-timeout",
                "10",
            ],
        )
        d, rec, truth = res["summary"].get("diagnosis") or {}, res["records"], res["truth"]
        for lv in d.get("levels", []):
            u = lv["users"]
            tmo = int((rec[rec["step"] == lv["step"]]["error"] == "timeout").sum())
            p95 = next((b["ttft_ms"]["p95"] for b in res["summary"]["by_step"] if b["step"] == lv["step"]), None)
            print(
                f"| {label} | {u} | {ms(p95)} | {tmo} | {lv.get('preemptions', 0):.0f} "
                f"| {lv.get('kv_cache_peak', float('nan')):.0%} | {lv.get('running', 0):.1f} / {lv.get('waiting', 0):.1f} "
                f"| {d.get('kind') if u == d.get('users') else ''} |"
            )
        total = counter_increase(res["metrics"], "vllm:num_preemptions_total")
        print(
            f"  ({label}: preemptions over the run: /metrics {total:.0f}, truth log {sum(x['preemptions'] for x in truth)}; "
            f"timeouts {int((rec['error'] == 'timeout').sum())}; diagnosis: {d.get('sentence', '')})"
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for every run's results (kept)")
    ap.add_argument("--only", default="1,2,3,4", help="findings to run, e.g. 1,3")
    ap.add_argument(
        "--time", default="45s", help="-t of each fixed-load run of findings 1 and 2 (the first 15 s are warm-up)"
    )
    ap.add_argument("--seqs-users", default="64,96", help="finding 1's user counts (below and above the knee)")
    ap.add_argument("--len-users", type=int, default=96)
    ap.add_argument("--prefix-chars", type=int, default=3500)
    ap.add_argument("--prefix-users", type=int, default=16)
    ap.add_argument("--prefix-time", default="12s")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kv-blocks", type=int, default=800)
    ap.add_argument("--kv-levels", default="4,24,96")
    ap.add_argument("--kv-step", default="30s")
    a = ap.parse_args(argv)
    only = {int(x) for x in a.only.split(",")}
    os.makedirs(a.out, exist_ok=True)
    t0 = time.monotonic()
    if 1 in only:
        finding_seqs(a.out, [int(x) for x in a.seqs_users.split(",")], a.time)
    if 2 in only:
        finding_model_len(a.out, a.len_users, a.time)
    if 3 in only:
        finding_prefix(a.out, a.prefix_users, a.prefix_time, a.prefix_chars, a.rounds)
    if 4 in only:
        finding_tight_kv(a.out, a.kv_blocks, a.kv_levels, a.kv_step)
    print(f"\n({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
