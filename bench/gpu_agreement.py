"""The suite against a reference client written like `vllm bench serve`, on one GPU server.

Same server (`transformers serve --continuous-batching`, the random 0.96 B Llama of
bench/gpu_ramp.py, bf16), same workload (chat, a fixed ~640-character English prompt class of the
suite's own templates, 128 output tokens, temperature 0), same concurrency (a closed loop of C,
N requests per run); each client pinned to a free core of its own, the server to others. The
clients alternate, in rounds, each round in a rotated order, and every run is reported:

  ref-vllm/<conn>         bench/ref_vllm_chat.py --body vllm: vllm bench's payload and headers
  ref-suite-body/<conn>   bench/ref_vllm_chat.py --body suite: the suite's exact bytes and headers
  suite/<conn>            the suite (bench/vllm_agreement_locustfile.py, its own users), --connection <conn>

with <conn> per-request (a new connection per request) or keep-alive (one reused per stream), and

  pair/<conn>             both at once on the one server, each with half the streams and requests,
                          the reference starting its requests with the suite's first: one server
                          state for both (some servers change speed between runs on their own,
                          which alternated runs cannot tell from the client); table.md then lists
                          each round's difference

Both clients send the same prompts: the reference takes them from the suite's sampler with the
same workload and seed. The suite's figures come from its requests.parquet with vllm bench's
definitions (bench/vllm_agreement.py `suite_figures`). The server's CPU time per run (all its
threads, from /proc) is kept too: a client that makes the server work harder shows there.

    python bench/gpu_agreement.py prepare        # wheels + tokenizer -> .gpu-ramp/ (carried)
    python bench/gpu_agreement.py smoke          # the same flow here, against the simulator
    # on the device (one command):
    python3 bench/gpu_agreement.py device --out $OUT --tokenizer .gpu-ramp/tokenizer

Results: results.json (every run: figures, per-request numbers, server CPU), table.md (one line
per run, then medians per variant).
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

CARRY = ROOT / ".gpu-ramp"
VARIANTS = [
    "ref-vllm/per-request",
    "suite/keep-alive",
    "ref-vllm/keep-alive",
    "suite/per-request",
    "ref-suite-body/keep-alive",
    "ref-suite-body/per-request",
]


def log(msg: str) -> None:
    print(f"[gpu_agreement {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def prepare() -> None:
    """The wheels bench/gpu_ramp.py lists (kept if already there) and the tiny model's tokenizer
    (built with `tokenizers` alone: no torch needed here)."""
    import gpu_ramp

    from bench.servers.model import build_tokenizer

    wheels = CARRY / "wheels"
    if not wheels.is_dir() or len(list(wheels.glob("*.whl"))) < len(gpu_ramp.WHEELS):
        wheels.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            "3.12",
            "--implementation",
            "cp",
            "-d",
            str(wheels),
        ]
        for p in gpu_ramp.PLATFORMS:
            cmd += ["--platform", p]
        subprocess.run(cmd + ["--platform", "any"] + gpu_ramp.WHEELS, check=True)
    tok = CARRY / "tokenizer"
    shutil.rmtree(tok, ignore_errors=True)
    build_tokenizer(ROOT, tok)
    exclude = ROOT / ".git" / "info" / "exclude"
    text = exclude.read_text() if exclude.exists() else ""
    if "/.gpu-ramp/" not in text:
        exclude.parent.mkdir(exist_ok=True)
        with open(exclude, "a") as f:
            f.write("/.gpu-ramp/\n")
    size = sum(p.stat().st_size for p in CARRY.rglob("*") if p.is_file())
    log(f"{len(list(wheels.glob('*.whl')))} wheels and the tokenizer in {CARRY} ({size / 2**20:.1f} MiB)")


# --------------------------------------------------------------------------- workload


def write_prompts(out: Path, a) -> Path:
    """The workload file both clients use, and the first prompts of the suite's sampler with it."""
    from bench.servers.workload import write_workload
    from workloads import Sampler, load_spec

    workload = write_workload(
        out / "workload.yaml", input_chars=a.input_chars, output_tokens=a.output_len, langs=["en"]
    )
    sampler = Sampler(load_spec(str(workload)), a.seed)  # the suite's process 0 draws the same sequence
    prompts = [sampler.next().messages() for _ in range(a.requests)]
    path = out / "prompts.json"
    path.write_text(json.dumps(prompts))
    return workload


# --------------------------------------------------------------------------- server CPU


def cpu_of(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of every thread of a process, by thread name and id."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[f"{name}:{task.name}"] = (int(fields[11]) + int(fields[12])) / tick
    return out


def cpu_delta(before: dict, after: dict) -> dict:
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    top = sorted(d.items(), key=lambda kv: -kv[1])[:4]
    return {"total_s": round(sum(d.values()), 2), "top_threads": [(k, round(v, 2)) for k, v in top]}


# --------------------------------------------------------------------------- one run of each client


def run_ref(url: str, a, conn: str, body: str, tag: str, out: Path, start_when: str = "") -> dict:
    path = out / "runs" / f"{tag}.json"
    cmd = [
        "taskset",
        "-c",
        a.ref_cpu,
        sys.executable,
        str(ROOT / "bench" / "ref_vllm_chat.py"),
        "--url",
        url,
        "--model",
        a.model,
        "--prompts",
        str(out / "prompts.json"),
        "--requests",
        str(a.requests),
        "--concurrency",
        str(a.concurrency),
        "--max-tokens",
        str(a.output_len),
        "--connection",
        conn,
        "--body",
        body,
        "--out",
        str(path),
    ]
    if body == "suite":
        cmd += ["--extra-body", a.extra_body]
    if start_when:
        cmd += ["--start-when", start_when]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=a.run_timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"reference client failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    run = json.loads(path.read_text())
    reqs = [r for r in run["requests"] if r["ok"]]
    t_first = min(r["st"] for r in reqs)
    per_request = [
        [round(r["st"] - t_first, 4), round(r["ttft"], 4), round(r["latency"], 4), r["output_tokens"]] for r in reqs
    ]
    return {"figures": run["figures"], "wall_s": round(time.monotonic() - t0, 2), "per_request": per_request}


def run_suite(url: str, a, conn: str, tag: str, out: Path, workload: Path, started_file: str = "") -> dict:
    import pandas as pd
    from vllm_agreement import suite_figures

    results = out / "suite"
    cmd = [
        "taskset",
        "-c",
        a.suite_cpu,
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(ROOT / "bench" / "vllm_agreement_locustfile.py"),
        "--headless",
        "--host",
        url,
        "-u",
        str(a.concurrency),
        "-r",
        "10000",
        "-t",
        "30m",
        "--only-summary",
        "--endpoint",
        "chat",
        "--model",
        a.model,
        "--workload",
        str(workload),
        "--max-tokens-override",
        str(a.output_len),
        "--seed",
        str(a.seed),
        "--extra-body",
        a.extra_body,
        "--connection",
        conn,
        "--results-dir",
        str(results),
        "--run-id",
        tag,
    ]
    env = {**os.environ, "AGREEMENT_REQUESTS": str(a.requests), "AGREEMENT_STARTED_FILE": started_file}
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=a.run_timeout)
    path = results / tag / "requests.parquet"
    if not path.exists():
        raise RuntimeError(
            f"the suite wrote no records (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}"
        )
    rec = pd.read_parquet(path)
    fig = suite_figures(rec)
    ok = rec[rec["ok"]]
    t_first = float(ok["t_send"].min())
    per_request = [
        [round(float(r.t_send) - t_first, 4), round(float(r.ttft_s), 4), round(float(r.e2e_s), 4), int(r.output_tokens)]
        for r in ok.itertuples()
    ]
    if "connect_s" in rec:
        c = rec["connect_s"].dropna()
        fig["connections_opened"] = int(len(c))
        fig["p50_connect_ms"] = float(c.median() * 1e3) if len(c) else None
    shutil.rmtree(results / tag, ignore_errors=True)
    return {"figures": fig, "wall_s": round(time.monotonic() - t0, 2), "per_request": per_request}


# --------------------------------------------------------------------------- the rounds


KEYS = [
    ("output tok/s", "output_throughput", "{:.0f}"),
    ("TPOT p50", "p50_tpot_ms", "{:.1f}"),
    ("E2E p50", "p50_e2el_ms", "{:.0f}"),
    ("TTFT p50", "p50_ttft_ms", "{:.0f}"),
    ("ITL p50", "p50_itl_ms", "{:.1f}"),
    ("duration s", "duration", "{:.1f}"),
    ("ok", "completed", "{}"),
]


def tables(runs: list[dict]) -> str:
    import numpy as np

    head = "| round | variant | " + " | ".join(k[0] for k in KEYS) + " | server CPU s | server CPU per 1k tokens |"
    lines = [head, "|" + " --- |" * (len(KEYS) + 4)]
    for r in runs:
        f = r["figures"]
        cells = [fmt.format(f[key]) if f.get(key) is not None else "-" for _, key, fmt in KEYS]
        cpu = r["server_cpu"]["total_s"]
        per_k = cpu / max(1, f.get("total_output_tokens") or 1) * 1e3
        lines.append(f"| {r['round']} | {r['variant']} | " + " | ".join(cells) + f" | {cpu:.1f} | {per_k:.2f} |")
    lines += [
        "",
        "Medians per variant:",
        "",
        "| variant | runs | " + " | ".join(k[0] for k in KEYS[:5]) + " |",
        "|" + " --- |" * 7,
    ]
    for v in dict.fromkeys(r["variant"] for r in runs):
        sel = [r["figures"] for r in runs if r["variant"] == v]
        cells = [
            fmt.format(float(np.median([f[key] for f in sel if f.get(key) is not None]))) for _, key, fmt in KEYS[:5]
        ]
        lines.append(f"| {v} | {len(sel)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def agreement(runs: list[dict], pairs: list[tuple[str, str]]) -> str:
    """Median of each figure per variant and the difference suite - reference, per pair."""
    import numpy as np

    lines = [
        "| suite variant | reference variant | figure | suite (median) | reference (median) | difference | per round (suite / reference) |",
        "| --- | --- | --- | ---: | ---: | ---: | --- |",
    ]
    for s_v, r_v in pairs:
        s = [r["figures"] for r in runs if r["variant"] == s_v]
        b = [r["figures"] for r in runs if r["variant"] == r_v]
        if not s or not b:
            continue
        for label, key, fmt in KEYS[:3]:
            ms, mb = float(np.median([f[key] for f in s])), float(np.median([f[key] for f in b]))
            each = ", ".join(fmt.format(f[key]) for f in s) + " / " + ", ".join(fmt.format(f[key]) for f in b)
            lines.append(
                f"| {s_v} | {r_v} | {label} | {fmt.format(ms)} | {fmt.format(mb)} | {(ms - mb) / mb * 100:+.1f} % | {each} |"
            )
    return "\n".join(lines)


def rounds(url: str, a, out: Path, workload: Path, server_pid: int | None, t_end: float) -> list[dict]:
    runs: list[dict] = []
    variants = a.variants.split(",")
    (out / "runs").mkdir(parents=True, exist_ok=True)
    longest = 0.0
    for i in range(a.rounds):
        order = variants[i % len(variants) :] + variants[: i % len(variants)]
        for v in order:
            if time.monotonic() + max(longest * 1.3, 20.0) > t_end:
                log(f"no time left for {v} in round {i}: stopping")
                return runs
            who, conn = v.split("/")
            tag = f"r{i}-{who}-{conn}"
            before = cpu_of(server_pid) if server_pid else {}
            t0 = time.monotonic()
            if who == "pair":
                for r in pair(url, a, conn, tag, out, workload):
                    r["server_cpu"] = (
                        cpu_delta(before, cpu_of(server_pid)) if server_pid else {"total_s": 0.0, "top_threads": []}
                    )
                    r.update(round=i, variant=r.pop("variant") + "/" + conn)
                    runs.append(r)
                    f = r["figures"]
                    log(
                        f"round {i} {r['variant']}: {f['completed']} ok, {f['output_throughput']:.0f} output tok/s, TPOT p50 "
                        f"{f['p50_tpot_ms']:.1f} ms, E2E p50 {f['p50_e2el_ms']:.0f} ms, TTFT p50 {f['p50_ttft_ms']:.0f} ms"
                    )
                longest = max(longest, time.monotonic() - t0)
                (out / "results.json").write_text(
                    json.dumps({"args": {k: v for k, v in vars(a).items()}, "runs": runs})
                )
                continue
            if who == "suite":
                r = run_suite(url, a, conn, tag, out, workload)
            else:
                r = run_ref(url, a, conn, "suite" if who == "ref-suite-body" else "vllm", tag, out)
            longest = max(longest, time.monotonic() - t0)
            r["server_cpu"] = (
                cpu_delta(before, cpu_of(server_pid)) if server_pid else {"total_s": 0.0, "top_threads": []}
            )
            r.update(round=i, variant=v)
            runs.append(r)
            f = r["figures"]
            log(
                f"round {i} {v}: {f['completed']} ok, {f['output_throughput']:.0f} output tok/s, TPOT p50 {f['p50_tpot_ms']:.1f} ms, "
                f"E2E p50 {f['p50_e2el_ms']:.0f} ms, TTFT p50 {f['p50_ttft_ms']:.0f} ms, wall {r['wall_s']} s, "
                f"server CPU {r['server_cpu']['total_s']} s"
            )
            (out / "results.json").write_text(json.dumps({"args": {k: v for k, v in vars(a).items()}, "runs": runs}))
    return runs


def pair(url: str, a, conn: str, tag: str, out: Path, workload: Path) -> list[dict]:
    """Both clients at once, each with half the streams and half the requests: the server is in one
    state for both, so their TPOT and E2E medians compare the clients' measurement alone (the
    alternating runs compare the server's speed under each client's traffic too). The reference
    starts its requests when the suite's first request starts (a file the suite's locustfile
    writes), so that the two overlap from the first wave to the last."""
    import threading

    half = argparse.Namespace(**{**vars(a), "concurrency": a.concurrency // 2, "requests": a.requests // 2})
    res: dict = {}

    started = out / "runs" / f"{tag}.started"
    started.unlink(missing_ok=True)

    def ref():
        res["ref"] = run_ref(url, half, conn, "vllm", f"{tag}-ref", out, start_when=str(started))

    def suite():
        res["suite"] = run_suite(url, half, conn, f"{tag}-suite", out, workload, started_file=str(started))

    threads = [threading.Thread(target=suite), threading.Thread(target=ref)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if set(res) != {"ref", "suite"}:
        raise RuntimeError(f"a client of the pair failed: {sorted(res)}")
    return [{**res["suite"], "variant": "pair-suite"}, {**res["ref"], "variant": "pair-ref"}]


def paired(runs: list[dict]) -> str:
    """Pair rounds, round by round: the suite's half against the reference's half of one run (one
    server state), the difference per figure, then over the rounds its median and how many rounds
    were within 3 %."""
    import numpy as np

    lines = [
        "| round | connection | " + " | ".join(f"{k[0]} suite / ref (diff)" for k in KEYS[:3]) + " |",
        "|" + " --- |" * 5,
    ]
    diffs: dict[str, list[float]] = {k[1]: [] for k in KEYS[:3]}
    for r in runs:
        if not r["variant"].startswith("pair-suite/"):
            continue
        conn = r["variant"].split("/")[1]
        ref = next((x for x in runs if x["round"] == r["round"] and x["variant"] == f"pair-ref/{conn}"), None)
        if ref is None:
            continue
        cells = []
        for _, key, fmt in KEYS[:3]:
            s_v, r_v = r["figures"][key], ref["figures"][key]
            d = (s_v - r_v) / r_v * 100
            diffs[key].append(d)
            cells.append(f"{fmt.format(s_v)} / {fmt.format(r_v)} ({d:+.1f} %)")
        lines.append(f"| {r['round']} | {conn} | " + " | ".join(cells) + " |")
    if diffs[KEYS[0][1]]:
        lines.append(
            "| all | | "
            + " | ".join(
                f"median {np.median(diffs[k]):+.1f} %, {sum(abs(d) <= 3 for d in diffs[k])} of {len(diffs[k])} within 3 %"
                for _, k, _ in KEYS[:3]
            )
            + " |"
        )
    return "\n".join(lines)


PAIRS = [
    ("suite/keep-alive", "ref-vllm/keep-alive"),
    ("suite/per-request", "ref-vllm/per-request"),
    ("suite/keep-alive", "ref-suite-body/keep-alive"),
    ("suite/per-request", "ref-suite-body/per-request"),
    ("pair-suite/keep-alive", "pair-ref/keep-alive"),
    ("pair-suite/per-request", "pair-ref/per-request"),
]


def flow(a) -> int:
    import gpu_ramp

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    t_end = t_start + a.budget_s
    info: dict = {"nproc": os.cpu_count()}
    server = None
    pid = None
    if a.host:
        url = a.host
    else:
        model = Path(a.model_dir)
        build = subprocess.run(
            [a.server_python, str(ROOT / "bench" / "gpu_ramp.py"), "build", str(model), a.tokenizer, a.size, a.device],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if build.returncode != 0:
            raise RuntimeError(f"building the model failed:\n{(build.stdout + build.stderr)[-4000:]}")
        info.update(json.loads(build.stdout.strip().splitlines()[-1]))
        log(f"model: {info}")
        t0 = time.monotonic()
        server = gpu_ramp.serve(a.server_python, model, 18123, a.device, out / "server.log", cpus=a.server_cpus)
        pid = server.pid
        info["server_ready_s"] = round(time.monotonic() - t0, 1)
        url = "http://127.0.0.1:18123"
        a.model = str(model)
        log(f"server ready in {info['server_ready_s']} s")
    try:
        workload = write_prompts(out, a)
        (out / "runs").mkdir(parents=True, exist_ok=True)
        if (
            not a.host
        ):  # the first request fixes the server's shared sampling settings: greedy, like every request after it
            info["warmup"] = gpu_ramp.warm_up(url, a.model, out / "server.log")
        # one short run of each client before measuring (connections, first-request paths)
        warm = argparse.Namespace(**{**vars(a), "requests": a.concurrency})
        run_ref(url, warm, "keep-alive", "vllm", "warm-ref", out)
        run_suite(url, warm, "keep-alive", "warm-suite", out, workload)
        log("clients warmed up")
        runs = rounds(url, a, out, workload, pid, t_end - 15)
    finally:
        if server is not None:
            server.stop()
    info["total_s"] = round(time.monotonic() - t_start, 1)
    text = tables(runs) + "\n\n" + agreement(runs, PAIRS) + "\n\n" + paired(runs)
    (out / "table.md").write_text(text + "\n")
    (out / "info.json").write_text(json.dumps(info, indent=2))
    if (out / "server.log").exists():
        (out / "server_tail.log").write_text(gpu_ramp.tail(out / "server.log", 150))
        (out / "server.log").unlink()
    shutil.rmtree(out / "runs", ignore_errors=True)
    shutil.rmtree(out / "suite", ignore_errors=True)
    print(text)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("prepare")
    for name in ("device", "smoke"):
        p = sub.add_parser(name)
        dev = name == "device"
        p.add_argument("--out", default=str(ROOT / "results" / f"gpu-agreement-{name}"))
        p.add_argument("--host", default="", help="a running server instead of starting transformers serve")
        p.add_argument("--model", default="sim-model")
        p.add_argument("--tokenizer", default=str(CARRY / "tokenizer"))
        p.add_argument("--model-dir", default="/tmp/llama-1b")
        p.add_argument("--size", default="1b")
        p.add_argument("--device", default="cuda")
        p.add_argument("--server-python", default=sys.executable)
        p.add_argument("--server-cpus", default="0-11" if dev else "")
        p.add_argument("--ref-cpu", default="13" if dev else "0")
        p.add_argument("--suite-cpu", default="14" if dev else "1")
        p.add_argument("--requests", type=int, default=128 if dev else 32)
        p.add_argument("--concurrency", type=int, default=32 if dev else 8)
        p.add_argument("--input-chars", type=int, default=640)
        p.add_argument("--output-len", type=int, default=128 if dev else 32)
        p.add_argument("--extra-body", default='{"temperature": 0}')
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--rounds", type=int, default=3 if dev else 2)
        p.add_argument("--variants", default=",".join(VARIANTS))
        p.add_argument("--run-timeout", type=float, default=200.0)
        p.add_argument(
            "--budget-s",
            type=float,
            default=560.0,
            help="seconds the whole flow may take (the device allows 600 per command)",
        )
    a = ap.parse_args()
    if a.cmd == "prepare":
        prepare()
        return 0
    if a.cmd == "smoke" and not a.host:  # against the simulator: the clients, the rounds and the tables, not the GPU
        from core.server_process import ServerProcess

        port = 18124
        argv = [sys.executable, "-m", "simulator", "--port", str(port), "--profile", "fixed"]
        with tempfile.TemporaryDirectory(prefix="gpu-agreement-") as tmp:
            sim = ServerProcess(
                argv,
                os.path.join(tmp, "simulator.log"),
                name="the simulator",
                cwd=ROOT,
                ready_line=r"listening on (?P<url>\S+)",
                stop_timeout=10,
            )
            with sim.start(timeout=30):
                a.host = f"http://127.0.0.1:{port}"
                return flow(a)
    return flow(a)


if __name__ == "__main__":
    sys.exit(main())
