"""The replica planner against measured replicas: one simulator replica's capacity, the planner's
prediction for N replicas (targets/planner.py), and N replicas measured behind the suite's own
spread (--host with N URLs, --balance) and behind nginx (targets/nginx.py, --backend-header
X-Upstream). Not run by CI; its table is in bench/RESULTS.md ("Replicas").

    python bench/replicas.py                                   # 1, 2 and 4 replicas, scheduler-bound
    python bench/replicas.py --replicas 1,2 --slo "ttft.p95<250ms"

Every measurement is the real suite, headless: a capacity search (--find-capacity, adaptive) at the
SLO, whose answer is the highest level below the lowest missed that did not miss it (met, or
passed on far under the threshold) and that level's requests/s. The replicas are
simulator processes on 127.0.0.1 (the scheduler-bound profile: max_num_seqs 8, so one replica's
capacity is a known 8 users; a request that finds its replica's 8 slots full waits a whole request
for one). The prediction is the planner's with linear scaling (efficiency 1.0): N x one replica's
users and requests/s; the table gives measured / predicted, the scaling efficiency the planner is
then told (SCALING_EFFICIENCY). Bounded: each search ends by -t; traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from core.server_process import ServerProcess  # noqa: E402
from targets import nginx  # noqa: E402
from targets.planner import Assumptions, capacity_of  # noqa: E402


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def replicas(n: int, profile: str, folder: str) -> list[ServerProcess]:
    out = []
    for i in range(n):
        cmd = [sys.executable, "-m", "simulator", "--host", "127.0.0.1", "--port", "0", "--profile", profile]
        out.append(
            ServerProcess(
                cmd,
                os.path.join(folder, f"replica{i}.log"),
                name=f"replica {i}",
                cwd=ROOT,
                ready_line=r"listening on (?P<url>\S+)",
            ).start()
        )
    return out


def search(host: str, folder: str, run_id: str, a, *more: str) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        os.path.join(ROOT, "locustfile.py"),
        "--headless",
        "--host",
        host,
        "--find-capacity",
        "--capacity-policy",
        "adaptive",
        "--capacity-precision",
        a.precision,
        "--slo",
        a.slo,
        "--step-time",
        a.step_time,
        "--step-warmup",
        a.step_warmup,
        "-t",
        a.run_time,
        "--seed",
        "3",
        "--max-tokens-override",
        str(a.max_tokens),
        "--stop-timeout",
        "15",
        "--results-dir",
        folder,
        "--run-id",
        run_id,
        *more,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode not in (0, 1, 3, 6):
        sys.exit(f"{run_id}: the suite failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    with open(os.path.join(folder, run_id, "summary.json")) as f:
        s = json.load(f)
    cap = s["capacity"]
    flagged = (s.get("backends") or {}).get("flagged") or []
    # the answer: the highest level below the lowest missed that did not miss. An adaptive search
    # passes a level far under the threshold on without deciding it (too few values in its short
    # look): such a level holds the SLO as surely as a met one for this comparison
    missed = cap["next_failing_users"]
    held = [
        st for st in s["by_step"] if st["verdict"]["state"] != "missed" and (missed is None or st["users"] < missed)
    ]
    best = max(held, key=lambda st: st["users"]) if held else None
    return {
        "users": best["users"] if best else None,
        "missed": missed,
        "rps": best["throughput"]["requests_per_s"] if best else None,
        "timed_out": cap["timed_out"],
        "flagged": flagged,
    }


def measure(n: int, way: str, a, folder: str) -> dict:
    sims = replicas(n, a.profile, folder)
    balancer = None
    try:
        urls = [s.url for s in sims]
        if way == "one":
            return search(urls[0], folder, f"r{n}-{way}", a)
        if way.startswith("spread"):
            policy = way.split(" ", 1)[1]
            return search(",".join(urls), folder, f"r{n}-{policy}", a, "--balance", policy)
        port = free_port()
        box = tempfile.mkdtemp(prefix="nginx-", dir=folder)
        conf = os.path.join(box, "nginx.conf")
        with open(conf, "w") as f:
            f.write(nginx.config(box, f"127.0.0.1:{port}", [u.split("//", 1)[1] for u in urls], "least-outstanding"))
        balancer = subprocess.Popen(
            [a.nginx, "-p", box, "-c", conf],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while not os.path.exists(os.path.join(box, "nginx.pid")) and time.monotonic() < deadline:
            time.sleep(0.05)
        return search(f"http://127.0.0.1:{port}", folder, f"r{n}-nginx", a, "--backend-header", nginx.HEADER)
    finally:
        if balancer is not None:
            balancer.terminate()
            balancer.wait(10)
        for s in sims:
            s.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", default="1,2,4", help="replica counts, 1 first (default 1,2,4)")
    p.add_argument("--profile", default="scheduler-bound")
    p.add_argument("--slo", default="ttft.p95<250ms")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--step-time", default="15s")
    p.add_argument("--step-warmup", default="3s")
    p.add_argument("--precision", default="0.1")
    p.add_argument("-t", "--run-time", dest="run_time", default="300s")
    a = p.parse_args()
    a.nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    counts = [int(x) for x in a.replicas.split(",")]
    folder = tempfile.mkdtemp(prefix="replicas-")
    one = measure(1, "one", a, folder)
    print(f"one replica: {one['users']} users (missed at {one['missed']}), {one['rps']:.2f} requests/s", flush=True)
    linear = Assumptions(efficiency=1.0)
    rows = [("1", "one replica", one, one["users"], one["rps"])]
    for n in counts:
        if n == 1:
            continue
        for way in ("spread least-outstanding", "spread round-robin", *(("nginx least_conn",) if a.nginx else ())):
            got = measure(n, way, a, folder)
            rows.append((str(n), way, got, capacity_of(n, one["users"], linear), capacity_of(n, one["rps"], linear)))
            print(f"{n} replicas, {way}: {got}", flush=True)
    print(
        f"\n{a.profile}, --slo '{a.slo}', --max-tokens-override {a.max_tokens}, adaptive search, "
        f"--step-time {a.step_time}, precision {a.precision}\n"
    )
    print(
        "| replicas | spread | users met (missed at) | predicted users | users measured / predicted | requests/s at the "
        "answer | predicted requests/s | requests/s measured / predicted | flagged |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n, way, got, pu, pr in rows:
        ru = got["users"] / pu if got["users"] and pu else None
        rr = got["rps"] / pr if got["rps"] and pr else None
        print(
            f"| {n} | {way} | {got['users']} ({got['missed']}) | {pu:g} | {'-' if ru is None else f'{ru:.2f}'} | "
            f"{got['rps'] or 0:.2f} | {pr:.2f} | {'-' if rr is None else f'{rr:.2f}'} | {', '.join(got['flagged']) or '-'} |"
        )
    print(f"\nresults: {folder}")


if __name__ == "__main__":
    main()
