"""The suite's client beside vLLM's Rust benchmark client (`vllm-rs bench serve`), both against the
simulator's truth log.

One simulator process (`fixed` profile: TTFT 100 ms, ITL 20 ms; 128 tokens a request, `ignore_eos`)
pinned to `--sim-core`; each client pinned to `--client-core` in turn, N concurrent streams and
`--per-stream` x N requests, every one started at once (`-r` = `-u`; `--spawn-rate` picks another
rate for the suite). Every request is joined to the simulator's truth log by its request id:

  TTFT error   the client's TTFT minus the simulator's (first_token - arrival), per request
  E2E error    the client's E2E minus the simulator's (last_token - arrival)
  tokens/s     output tokens over the traffic's span (first arrival to last token, truth log)
  CPU/token    the client's CPU (utime + stime, sampled every 50 ms) over that span, per output token;
               and its whole process's (start-up, dataset, results and report included) per output token
  flagged      the suite's records a loop stall may have skewed (summary.json client_bound.stamp_suspect)

The clients' TTFT definitions: the suite's is the first chunk that carries a token (content,
reasoning or a tool call), stamped by the kernel's receive time of its read; vllm-rs's is the first
chunk of the stream, whatever it carries (a role chunk sent before prefill counts), stamped when its
runtime reads it. The simulator's completions carry no role chunk, so both measure the same event here.

The binary is taken from the `vllm` wheel (`pip download vllm==VERSION --no-deps`, the member
`vllm/vllm-rs`), kept under `--bin-dir` (ignored by git); never a dependency of the project. A wheel
without it: said so, and the suite is measured alone. vllm-rs needs a tokenizer: a word-level one
is written for it (the simulator counts tokens its own way; only the timings are compared).

    .venv/bin/python bench/vllm_rs.py --levels 256,1024                 # both clients, cores 0/1
    .venv/bin/python bench/vllm_rs.py --levels 1024 --clients suite,suite-nogate --repeats 2
    .venv/bin/python bench/vllm_rs.py --levels 2048 --sim-core 2 --client-core 3

`before` is the suite of another checkout (`--before DIR`, e.g. `git worktree add DIR COMMIT`): a
change measured in one run, alternated with the current suite (`before-worker`: that checkout as
`suite-worker` runs the current one). `suite-nogate` is the suite with its start gate off (LLM_START_GATE=0: every user's first request at
once, as before the gate), `suite-nostamp` without kernel receive stamps (LLM_KERNEL_TIMESTAMPS=0), `suite-nowatch` without
the first-token watch's thread (LLM_FIRST_TOKEN_WATCH=0). `floor` is bench/read_floor.py, the least
a Python client spends per token at the suite's timing method (`floor-nostamp`: without kernel
stamps): the floor under the suite, in the same run. `suite-worker` is the suite as a master
(on `--master-core`) and one worker on the client core, the worker's CPU measured: the load without
the results, the report and the modules only they need.
Traffic stays on 127.0.0.1; every process is bounded in time.
"""

from __future__ import annotations

import argparse
import compileall
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_common import cpu_seconds, machine_pressure, thread_cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
WORKLOAD = """\
name: vllm-rs-side-by-side
description: one class of short prompts; replies fixed by --max-tokens-override
classes:
  only: {weight: 1, input_chars: {min: 100, max: 200}, output_tokens: {min: 128, max: 128}}
"""
SUITE_ENV = {
    "suite": {},
    "suite-nogate": {"LLM_START_GATE": "0"},
    "suite-nostamp": {"LLM_KERNEL_TIMESTAMPS": "0"},
    "suite-nowatch": {"LLM_FIRST_TOKEN_WATCH": "0"},
    "suite-worker": {},  # a master on --master-core, one worker on the client core: the worker measured
    "suite-nowatch-worker": {"LLM_FIRST_TOKEN_WATCH": "0"},  # that worker without the first-token watch
}
FLOORS = ("floor", "floor-nostamp")  # bench/read_floor.py, with and without kernel receive stamps


def vllm_rs_binary(version: str, bin_dir: str) -> tuple[str | None, str]:
    """The path of vllm-rs from the vllm wheel of `version` (downloaded once), or None and why not."""
    path = os.path.join(bin_dir, f"vllm-rs-{version}")
    if os.path.exists(path):
        return path, ""
    os.makedirs(bin_dir, exist_ok=True)
    wheels = [f for f in os.listdir(bin_dir) if f.startswith(f"vllm-{version}-") and f.endswith(".whl")]
    if not wheels:
        r = subprocess.run(
            [PY, "-m", "pip", "download", f"vllm=={version}", "--no-deps", "-d", bin_dir],
            capture_output=True,
            text=True,
        )
        wheels = [f for f in os.listdir(bin_dir) if f.startswith(f"vllm-{version}-") and f.endswith(".whl")]
        if not wheels:
            return None, f"pip download vllm=={version} failed: {r.stderr.strip()[-300:]}"
    with zipfile.ZipFile(os.path.join(bin_dir, wheels[0])) as z:
        member = next((n for n in z.namelist() if n.endswith("/vllm-rs")), None)
        if member is None:
            return None, f"the vllm {version} wheel holds no vllm-rs binary"
        with z.open(member) as src, open(path + ".part", "wb") as dst:
            dst.write(src.read())
    os.chmod(path + ".part", 0o755)
    os.replace(path + ".part", path)
    return path, ""


def word_tokenizer(d: str) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["[UNK]"] + [f"w{i}" for i in range(1000)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}, f)
    return d


# The suite starts from compiled bytecode, as an installed one does (pip compiles at install, the
# container image at build, Python itself on a first import): its checkouts are compiled here, and
# its processes may write the caches of the packages they import (the warm-up run's do). Where
# PYTHONDONTWRITEBYTECODE is set and nothing was compiled (an install with `--no-compile`), every
# start would compile some 2,700 modules from source: 1.4 s of CPU on a 2-core machine, counted in
# the whole process's figure and in no client's work.
BYTECODE_SKIP = (".venv", ".cache", ".git")  # folders of a checkout that are not its code


def compile_checkout(root: str) -> None:
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [d for d in subfolders if d not in BYTECODE_SKIP]
        for name in files:
            if name.endswith(".py"):
                compileall.compile_file(os.path.join(folder, name), quiet=1)


def pin(core: str) -> list[str]:
    return ["taskset", "-c", core] if core and core != "any" else []


def start_simulator(tmp: str, args) -> tuple[list[subprocess.Popen], str, str]:
    """One simulator process per core of --sim-core, sharing one port (--reuse-port: the kernel spreads
    the connections) and appending to one truth log: 2,048 streams at ITL 20 ms are more tokens/s
    than one simulator core writes."""
    prof = os.path.join(tmp, "fixed.yaml")
    with open(prof, "w") as f:
        f.write(
            f"kind: fixed\nmodel: sim-model\nttft_s: {args.ttft}\nitl_s: {args.itl}\nstream_interval: 1\nmax_model_len: 1048576\n"
        )
    truth = os.path.join(tmp, "truth.jsonl")
    cores = args.sim_core.split(",")
    procs: list[subprocess.Popen] = []
    port = "0"
    url = ""
    for core in cores:
        cmd = [*pin(core), PY, "-m", "simulator", "--host", "127.0.0.1", "--port", port]
        cmd += ["--profile", prof, "--truth-log", truth, *(["--reuse-port"] if len(cores) > 1 else [])]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        line = proc.stdout.readline()
        if "listening on " not in line:
            for q in procs:
                q.kill()
            raise SystemExit(f"simulator did not start: {line!r} {proc.stderr.read()[-2000:]}")
        url = url or line.split("listening on ", 1)[1].split()[0]
        port = url.rsplit(":", 1)[1].strip("/")
    return procs, url, truth


def read_truth(path: str) -> dict[str, dict]:
    out = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                if r.get("request_id"):
                    out[r["request_id"]] = r
    return out


class CpuSampler:
    """A process's CPU seconds every 50 ms (CLOCK_MONOTONIC, the clock of the truth log)."""

    def __init__(self, pid: int):
        self.pid, self.t, self.cpu = pid, [], []
        self.whole = math.nan  # the process's CPU seconds from start to exit (run_proc)
        self.by_thread: dict[int, tuple[str, float]] = {}  # each thread's name and CPU s, when last seen
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                c = cpu_seconds(self.pid)
                self.by_thread.update(thread_cpu(self.pid))
            except (OSError, IndexError, ValueError):
                return
            self.t.append(time.monotonic())
            self.cpu.append(c)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join()

    @property
    def threads(self) -> dict[str, float]:
        """The CPU seconds of the process's threads by name, each as last seen (a thread's last
        50 ms, and those shorter than 50 ms, are missed)."""
        out: dict[str, float] = {}
        for name, s in self.by_thread.values():
            out[name] = out.get(name, 0.0) + s
        return out

    def over(self, t0: float, t1: float) -> float:
        if len(self.t) < 2:
            return math.nan
        return float(np.interp(t1, self.t, self.cpu) - np.interp(t0, self.t, self.cpu))


def reap(p: subprocess.Popen, limit: float, sampler: CpuSampler) -> int:
    """Waits for the client (killed past `limit` s) and sets its whole process's CPU, start-up and
    end included, from its own rusage (wait4; taskset execs the client in its own process)."""
    deadline = time.monotonic() + limit
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            p.kill()
            pid, status, usage = os.wait4(p.pid, 0)
            break
        time.sleep(0.05)
    p.returncode = os.waitstatus_to_exitcode(status)
    sampler.stop()
    sampler.whole = usage.ru_utime + usage.ru_stime
    return p.returncode


def run_proc(cmd: list[str], env: dict, log: str, limit: float, cwd: str = ROOT) -> tuple[int, CpuSampler]:
    """The client's exit status, and its CPU: sampled over the run, and its whole process's."""
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env})
        sampler = CpuSampler(p.pid)
        rc = reap(p, limit, sampler)
    return rc, sampler


def run_suite(kind: str, n: int, url: str, tmp: str, args) -> dict:
    tag = f"{kind}-{n}-{int(time.time() * 1000) % 10**8}"
    spec = os.path.join(tmp, "workload.yaml")
    with open(spec, "w") as f:
        f.write(WORKLOAD)
    total = args.per_stream * n
    run_s = math.ceil(args.per_stream * (args.ttft + args.itl * args.max_tokens) * 3 + 30)
    cmd = [
        *pin(args.client_core),
        PY,
        "-m",
        "locust",
        "-f",
        "locustfile.py",
        "--headless",
        "-u",
        str(n),
        "-r",
        str(args.spawn_rate or n),
        "-t",
        f"{run_s}s",
        "--num-requests",
        str(total),
        "--host",
        url,
        "--endpoint",
        "completions",
        "--max-tokens-override",
        str(args.max_tokens),
        "--ignore-eos",
        "--workload",
        spec,
        "--results-dir",
        os.path.join(tmp, "results"),
        "--run-id",
        tag,
        "--model",
        "sim-model",
        "--stop-timeout",
        str(math.ceil(args.ttft + args.itl * args.max_tokens + 5)),
        "--loglevel",
        "WARNING",
        *args.suite_args.split(),
    ]
    cwd = args.before if kind.startswith("before") else ROOT
    env = {**SUITE_ENV.get(kind, {}), "PYTHONDONTWRITEBYTECODE": ""}  # see BYTECODE
    log = os.path.join(tmp, f"{tag}.log")
    if kind.endswith("-worker"):
        rc, cpu = run_master_and_worker(cmd, env, log, run_s + 120, args, cwd, profiled(args, tag))
    else:
        client = pin(args.client_core)
        rc, cpu = run_proc([*client, *profiled(args, tag), *cmd[len(client) :]], env, log, run_s + 120, cwd)
    folder = os.path.join(tmp, "results", tag)
    try:
        import pyarrow.parquet as pq

        df = pq.read_table(os.path.join(folder, "requests.parquet")).to_pandas()
        with open(os.path.join(folder, "summary.json")) as f:
            health = json.load(f).get("client_bound") or {}
    except OSError as e:
        return {"error": f"{kind} wrote no results (rc {rc}): {e}; log {tmp}/{tag}.log"}
    df = df[df["ok"]]
    rows = list(zip(df["request_id"], df["ttft_s"], df["e2e_s"], df["output_tokens"], df["t_send"]))
    out = measure(rows, cpu, args, first_wave=n)
    out["flagged"] = health.get("stamp_suspect")
    out["skew_max_ms"] = health.get("stamp_skew_max_ms")
    out["bound"] = health.get("bound")
    return out


def profiled(args, tag: str) -> list[str]:
    """The prefix that runs a load process under py-spy (--py-spy), or none."""
    if not args.py_spy:
        return []
    os.makedirs(args.py_spy, exist_ok=True)
    out = os.path.join(args.py_spy, f"{tag}.txt")
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(PY), "py-spy")
    return [spy, "record", "--nonblocking", "--rate", "250", "--format", "speedscope", "--output", out, "--"]


def run_master_and_worker(
    cmd: list[str], env: dict, log: str, limit: float, args, cwd: str, prefix: list[str]
) -> tuple[int, CpuSampler]:
    """`cmd` as a master on --master-core and one worker on --client-core: the worker's CPU (the load
    alone: no results, no report, no pandas), the master's exit status."""
    port = str(free_port())
    client = pin(args.client_core)
    master = pin(args.master_core) + cmd[len(client) :]
    master += ["--master", "--expect-workers", "1", "--master-bind-host", "127.0.0.1", "--master-bind-port", port]
    worker = [*client, *prefix, PY, "-m", "locust", "-f", "locustfile.py", "--worker", "--master-port", port]
    full = {**os.environ, **env}
    with open(log, "w") as out, open(log + ".worker", "w") as wout:
        m = subprocess.Popen(master, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=full)
        w = subprocess.Popen(worker, cwd=cwd, stdout=wout, stderr=subprocess.STDOUT, env=full)
        sampler = CpuSampler(w.pid)
        reap(w, limit, sampler)
        try:
            rc = m.wait(30)
        except subprocess.TimeoutExpired:
            m.kill()
            rc = m.wait()
    return rc, sampler


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_vllm_rs(binary: str, n: int, url: str, tmp: str, args) -> dict:
    tag = f"rs{n}x{int(time.time() * 1000) % 10**8}"
    total = args.per_stream * n
    res = os.path.join(tmp, f"{tag}-result")
    cmd = [
        *pin(args.client_core),
        binary,
        "bench",
        "serve",
        "--backend",
        "openai",
        "--base-url",
        url,
        "--model",
        "sim-model",
        "--tokenizer",
        word_tokenizer(os.path.join(tmp, "tok")),
        "--dataset-name",
        "random",
        "--random-input-len",
        "32",
        "--random-output-len",
        str(args.max_tokens),
        "--num-prompts",
        str(total),
        "--max-concurrency",
        str(n),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--request-id-prefix",
        f"{tag}-",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        res,
        "--result-filename",
        "r.json",
        "--disable-tqdm",
    ]
    limit = args.per_stream * (args.ttft + args.itl * args.max_tokens) * 3 + 150
    rc, cpu = run_proc(cmd, {}, os.path.join(tmp, f"{tag}.log"), limit)
    try:
        with open(os.path.join(res, "r.json")) as f:
            d = json.load(f)
    except OSError as e:
        return {"error": f"vllm-rs wrote no results (rc {rc}): {e}; log {tmp}/{tag}.log"}
    # its per-request arrays are in the order of its prompts, whose ids are PREFIX0, PREFIX1, ...
    rows = [
        (f"{tag}-{i}", ttft, lat, out_len, math.nan)
        for i, (ttft, lat, out_len, err) in enumerate(zip(d["ttfts"], d["latencies"], d["output_lens"], d["errors"]))
        if not err
    ]
    return measure(rows, cpu, args)


def run_floor(kind: str, n: int, url: str, tmp: str, args) -> dict:
    """bench/read_floor.py: the least a Python client spends per token at the suite's timing method."""
    tag = f"{kind}-{n}-{int(time.time() * 1000) % 10**8}"
    rows_file = os.path.join(tmp, f"{tag}.json")
    cmd = [*pin(args.client_core), PY, os.path.join(ROOT, "bench", "read_floor.py"), "--url", url]
    cmd += ["--streams", str(n), "--per-stream", str(args.per_stream), "--max-tokens", str(args.max_tokens)]
    cmd += ["--prefix", tag, "--out", rows_file, *(["--no-stamp"] if kind == "floor-nostamp" else [])]
    limit = args.per_stream * (args.ttft + args.itl * args.max_tokens) * 3 + 150
    rc, cpu = run_proc(cmd, {"PYTHONDONTWRITEBYTECODE": ""}, os.path.join(tmp, f"{tag}.log"), limit)
    try:
        with open(rows_file) as f:
            rows = [tuple(r) for r in json.load(f)]
    except OSError as e:
        return {"error": f"{kind} wrote no rows (rc {rc}): {e}; log {tmp}/{tag}.log"}
    return measure(rows, cpu, args, first_wave=n)


def measure(rows, cpu: CpuSampler, args, first_wave: int = 0) -> dict:
    deadline = time.monotonic() + 5  # the simulator writes its truth log once a second
    truth = read_truth(args.truth)
    while any(r[0] not in truth for r in rows) and time.monotonic() < deadline:
        time.sleep(0.5)
        truth = read_truth(args.truth)
    ttft_err, e2e_err, way_in, sends, tokens, t0, t1 = [], [], [], [], 0, math.inf, -math.inf
    for rid, ttft, e2e, n_out, t_send in rows:
        tr = truth.get(rid)
        if tr is None or tr.get("first_token") is None:
            continue
        ttft_err.append((ttft - (tr["first_token"] - tr["arrival"])) * 1000)
        e2e_err.append((e2e - (tr["last_token"] - tr["arrival"])) * 1000)
        # the request's way in (written -> the simulator saw it): the server's share of the error
        way_in.append((tr["arrival"] - t_send) * 1000)
        sends.append(t_send)
        tokens += int(tr.get("output_tokens") or n_out)
        t0, t1 = min(t0, tr["arrival"]), max(t1, tr["last_token"])
    if not ttft_err:
        return {"error": "no request joined to the truth log"}
    a, b = np.asarray(ttft_err), np.asarray(e2e_err)
    waves = {}
    if first_wave:  # the client's share (first token late) of the start burst's requests, and of the rest
        late = a - np.asarray(way_in)
        order = np.argsort(np.asarray(sends))
        first, rest = late[order[:first_wave]], late[order[first_wave:]]
        waves = {
            "first_wave_late_p99": float(np.percentile(first, 99)) if first.size else math.nan,
            "rest_late_p99": float(np.percentile(rest, 99)) if rest.size else math.nan,
        }
    cpu_s = cpu.over(t0, t1)
    w = np.asarray(way_in)
    w = w[np.isfinite(w)]
    return {
        "way_in_p99": float(np.percentile(w, 99)) if w.size else math.nan,
        "first_late_p99": float(np.percentile(a - w, 99)) if w.size else math.nan,
        "requests": len(a),
        "ttft_err_p50": float(np.percentile(a, 50)),
        "ttft_err_p99": float(np.percentile(a, 99)),
        "ttft_err_max": float(a.max()),
        "e2e_err_p50": float(np.percentile(b, 50)),
        "e2e_err_p99": float(np.percentile(b, 99)),
        "tokens_per_s": tokens / (t1 - t0),
        "cpu_pct": 100 * cpu_s / (t1 - t0),
        "cpu_us_per_token": 1e6 * cpu_s / tokens,
        "cpu_us_per_token_whole": 1e6 * cpu.whole / tokens,
        # the whole process's CPU outside the traffic's span: to its first arrival (start-up, the
        # connects) and after its last token (the last records, the results, the exit)
        "cpu_before_s": cpu.over(cpu.t[0], t0) + float(cpu.cpu[0]) if cpu.t else math.nan,
        "cpu_after_s": cpu.whole - float(np.interp(t1, cpu.t, cpu.cpu)) if cpu.t else math.nan,
        "threads": cpu.threads,
        **waves,
    }


def fmt(kind: str, n: int, r: dict) -> str:
    if "error" in r:
        return f"| {n:,} | {kind} | {r['error']} ||||||||"
    flag = "" if r.get("flagged") is None else f"{r['flagged']:,}"
    return (
        f"| {n:,} | {kind} | {r['requests']:,} | {r['ttft_err_p50']:.2f} / {r['ttft_err_p99']:.2f} / {r['ttft_err_max']:.1f} "
        f"| {r['e2e_err_p50']:.2f} / {r['e2e_err_p99']:.2f} | {r['tokens_per_s']:,.0f} | {r['cpu_pct']:.0f} "
        f"| {r['cpu_us_per_token']:.1f} / {r['cpu_us_per_token_whole']:.1f} | {flag} | {r['way_in_p99']:.2f} / {r['first_late_p99']:.2f} "
        f"| {r.get('first_wave_late_p99', math.nan):.2f} / {r.get('rest_late_p99', math.nan):.2f} "
        f"| {r.get('cpu_before_s', math.nan):.2f} / {r.get('cpu_after_s', math.nan):.2f} |"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="256,1024", help="concurrent streams, comma-separated")
    ap.add_argument(
        "--clients",
        default="suite,vllm-rs",
        help=f"of {', '.join([*SUITE_ENV, *FLOORS, 'vllm-rs', 'before', 'before-worker'])}",
    )
    ap.add_argument(
        "--before",
        default="",
        help="the client `before`: the suite run from this other checkout (e.g. a git "
        "worktree of an older commit), to measure a change",
    )
    ap.add_argument("--per-stream", type=int, default=3, help="requests per stream (N streams send this x N)")
    ap.add_argument("--spawn-rate", type=float, default=0, help="the suite's -r (default: all users at once)")
    ap.add_argument("--repeats", type=int, default=1, help="every client this many times per level, alternated")
    ap.add_argument("--ttft", type=float, default=0.1)
    ap.add_argument("--itl", type=float, default=0.02)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--sim-core", default="0", help="one simulator process per core named (comma-separated)")
    ap.add_argument("--client-core", default="1")
    ap.add_argument("--master-core", default="any", help="the master of the client suite-worker")
    ap.add_argument("--vllm-version", default="0.33.0")
    ap.add_argument(
        "--bin-dir", default=os.path.join(ROOT, ".cache", "vllm-rs"), help="where the wheel and the binary are kept"
    )
    ap.add_argument("--suite-args", default="", help="extra options for the suite's locust command (quoted)")
    ap.add_argument(
        "--warm-up",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one suite run at the first level before any is measured (default on)",
    )
    ap.add_argument(
        "--py-spy",
        default="",
        help="profile each suite client's load process (the worker of a -worker client) with py-spy into this "
        "folder (speedscope files, samples in time order; its CPU figures then include py-spy's)",
    )
    ap.add_argument("--json", default="", help="write every result here")
    ap.add_argument(
        "--keep", default="", help="keep the simulator's truth log, the clients' results and logs in this folder"
    )
    args = ap.parse_args(argv)
    clients = [c for c in args.clients.split(",") if c]
    binary = None
    if "vllm-rs" in clients:
        binary, why = vllm_rs_binary(args.vllm_version, args.bin_dir)
        if binary is None:
            print(f"vllm-rs not measured: {why}", flush=True)
            clients.remove("vllm-rs")
    results = []
    print(
        f"machine: {os.cpu_count()} cores, {machine_pressure()}; simulator core {args.sim_core}, client core {args.client_core}"
    )
    print(
        "| streams | client | requests | TTFT error p50 / p99 / max (ms) | E2E error p50 / p99 (ms) | tokens/s | CPU % | CPU µs/token: the run / the whole process | flagged | way in / first token late p99 (ms) | first token late p99: first wave / the rest (ms) | CPU s outside the traffic: before / after |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vllm-rs-", dir=args.keep or None) as tmp:
        sims, url, args.truth = start_simulator(tmp, args)
        try:
            for root in {ROOT, args.before or ROOT}:
                compile_checkout(root)
            if args.warm_up:  # the simulators' first thousands of connections are slow (way in 10-15 ms late)
                warm = run_suite("suite", int(args.levels.split(",")[0]), url, tmp, args)
                print(f"(warm-up run, not counted: way in p99 {warm.get('way_in_p99', math.nan):.2f} ms)", flush=True)
            for n in (int(x) for x in args.levels.split(",")):
                for _ in range(args.repeats):
                    for kind in clients:
                        if kind == "vllm-rs":
                            r = run_vllm_rs(binary, n, url, tmp, args)
                        elif kind in FLOORS:
                            r = run_floor(kind, n, url, tmp, args)
                        else:
                            r = run_suite(kind, n, url, tmp, args)
                        results.append({"streams": n, "client": kind, **r})
                        print(fmt(kind, n, r), flush=True)
                        if r.get("threads"):  # under the table: where the process's CPU went, by thread
                            by = sorted(r["threads"].items(), key=lambda kv: -kv[1])
                            print("  threads (CPU s): " + ", ".join(f"{k} {v:.2f}" for k, v in by), flush=True)
        finally:
            for sim in sims:
                sim.terminate()
                sim.wait(10)
            if args.keep:  # out of the temporary folder before it goes
                os.replace(tmp, os.path.join(args.keep, f"run-{int(time.time())}"))
                os.makedirs(tmp)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
