"""AIPerf's capacity search beside the suite's, against the same simulator process and the same SLO.
Not run by CI: it downloads AIPerf.

    python bench/aiperf_search.py                                     # 16 slots, ttft.p95<150ms
    python bench/aiperf_search.py --only truth --truth 16,17          # the truth log's P95 at 16 and 17
    python bench/aiperf_search.py --profile v100-7b-tp8 --slo "ttft.p95<5s" --input-tokens 512 \\
        --max-tokens 128 --concurrency-max 256

AIPerf (the pinned --aiperf-version) lives in a virtual environment of its own under .cache/, made
on first use with pip, never a dependency of the suite. Its search is `aiperf profile --search-recipe
max-concurrency-under-sla --ttft-sla-ms X` (the smooth-isotonic planner: doubling from 1 to the
first miss, then probes inside the bracket fitted by isotonic regression, until the bracket is
within 5 % of its upper end). Its default probe (a warm-up of max(60 s, 30 s), then 1,000 requests)
takes hours at low concurrency, so every probe here is shortened through AIPerf's own settings:

    AIPERF_SEARCH_PLANNER_FIRST_PROBE_WARMUP_FLOOR, ..._DEFAULT_WARMUP_SECONDS and
    ..._REPLICATE_WARMUP_FLOOR = --warmup     the warm-up of every probe, first or replicate
    AIPERF_SEARCH_PLANNER_SLA_PRECISION_REQUESTS = {"tight"|"normal"|"coarse": --requests}
                                              the request count each probe may reach
    --benchmark-duration --window             the window that ends each probe (reached first)

No model hub is reachable here, so AIPerf's tokenizer is a byte-level BPE trained on the spot on
the Shakespeare text AIPerf ships for its synthetic prompts (8,192 tokens, in .cache/ beside the
venv); token counts in AIPerf's metrics are the server's (--use-server-token-count).

The simulator is started once (core/server_process.py); AIPerf's search runs against it, then the
suite's (bench/capacity_search.py's run: `locust --headless --host URL --find-capacity --slo ...`,
adaptive policy), each with the same reply length and prompt length. The profile `seats16` is a
batch engine with 16 slots and a fixed reply of --max-tokens steps of 20 ms: a 17th user waits a
whole reply for a slot, so the capacity under a TTFT P95 far under one reply is 16 by construction.
Prints one Markdown table: each search's answer, its interval, its probes (levels) and wall time.
With --truth, the given levels are then held longer with the suite's step ramp, and each level's
TTFT P95 is read in the simulator's truth log as well: the truth the two answers are judged by.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.capacity_search import run as suite_search  # noqa: E402
from core.server_process import ServerProcess  # noqa: E402

CACHE = os.path.join(ROOT, ".cache")
SEATS16 = (
    "kind: batch\nmodel: sim-model\nscheduler: chunked\nmax_num_seqs: 16\nnum_gpu_blocks_override: 62500\n"
    "max_num_batched_tokens: 8192\nstep_base_s: 0.02\nper_seq_s: 0.0\nper_prefill_token_s: 0.0\nmax_model_len: 100000\n"
)
# Trains AIPerf's tokenizer, run by the AIPerf venv's Python (tokenizers is its dependency, not the suite's).
TRAIN_TOKENIZER = """
import json, os, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
corpus, out = sys.argv[1], sys.argv[2]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train([corpus], trainers.BpeTrainer(vocab_size=8192, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                        special_tokens=["<|endoftext|>"], show_progress=False))
os.makedirs(out, exist_ok=True)
tok.save(os.path.join(out, "tokenizer.json"))
with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
               "model_max_length": 1000000}, f)
"""


def aiperf_venv(version: str) -> str:
    """The venv's directory, AIPerf `version` installed in it (once)."""
    venv = os.path.join(CACHE, f"aiperf-{version}")
    done = os.path.join(venv, ".installed")
    if os.path.exists(done):
        return venv
    print(f"installing aiperf=={version} into {venv} (pip, a few minutes)", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
    pip = subprocess.run(
        [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q", f"aiperf=={version}"],
        capture_output=True,
        text=True,
    )
    if pip.returncode:
        sys.exit(f"--aiperf-version {version}: pip could not install it:\n{pip.stderr[-2000:]}")
    open(done, "w").close()
    return venv


def aiperf_tokenizer(venv: str) -> str:
    """A local tokenizer for AIPerf's prompts (no hub here), trained once beside the venv."""
    out = venv + "-tokenizer"
    if os.path.exists(os.path.join(out, "tokenizer.json")):
        return out
    python = os.path.join(venv, "bin", "python")
    corpus = subprocess.run(
        [python, "-c", "import aiperf, os; print(os.path.dirname(aiperf.__file__))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    corpus = os.path.join(corpus, "dataset", "generator", "assets", "shakespeare.txt")
    subprocess.run([python, "-c", TRAIN_TOKENIZER, corpus, out], check=True, capture_output=True)
    return out


def ttft_ms(slo: str) -> float:
    """The threshold of a TTFT P95 objective in ms: AIPerf's recipe judges TTFT on its P95 only."""
    m = re.fullmatch(r"\s*ttft\.p95\s*<\s*([0-9.]+)\s*(ms|s)\s*", slo)
    if not m:
        sys.exit(f"--slo {slo!r}: AIPerf's max-concurrency-under-sla judges TTFT on its P95; give ttft.p95<Xms or <Xs")
    return float(m.group(1)) * (1 if m.group(2) == "ms" else 1000)


def run_aiperf(venv: str, tokenizer: str, url: str, a) -> dict:
    out = tempfile.mkdtemp(prefix="aiperf-search-")
    n = str(a.requests)
    env = {
        **os.environ,
        "AIPERF_SEARCH_PLANNER_FIRST_PROBE_WARMUP_FLOOR": str(a.warmup),
        "AIPERF_SEARCH_PLANNER_DEFAULT_WARMUP_SECONDS": str(a.warmup),
        "AIPERF_SEARCH_PLANNER_REPLICATE_WARMUP_FLOOR": str(a.warmup),
        "AIPERF_SEARCH_PLANNER_SLA_PRECISION_REQUESTS": json.dumps(
            {"tight": int(n), "normal": int(n), "coarse": int(n)}
        ),
    }
    cmd = [
        os.path.join(venv, "bin", "aiperf"),
        "profile",
        "--url",
        url,
        "--model",
        "sim-model",
        "--endpoint-type",
        "chat",
        "--streaming",
        "--tokenizer",
        tokenizer,
        "--use-server-token-count",
        "--prompt-input-tokens-mean",
        str(a.input_tokens),
        "--prompt-input-tokens-stddev",
        "0",
        "--prompt-output-tokens-mean",
        str(a.max_tokens),
        "--prompt-output-tokens-stddev",
        "0",
        "--extra-inputs",
        "ignore_eos:true",
        "--search-recipe",
        "max-concurrency-under-sla",
        "--ttft-sla-ms",
        f"{ttft_ms(a.slo):g}",
        "--benchmark-duration",
        str(a.window),
        "--random-seed",
        str(a.seed),
        "--output-artifact-dir",
        out,
        "--ui-type",
        "none",
        "--no-gpu-telemetry",
        "--no-server-metrics",
    ]
    if a.concurrency_max:
        cmd += ["--concurrency-max", str(a.concurrency_max)]
    shown = " ".join(
        f"{k}={v!r}" if k.endswith("REQUESTS") else f"{k}={v}" for k, v in env.items() if k.startswith("AIPERF_")
    )
    print(f"$ {shown} {os.path.relpath(cmd[0], ROOT)} {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    log = os.path.join(out, "aiperf-console.log")
    t0 = time.monotonic()
    with open(log, "w") as f:  # a group of its own: AIPerf runs its services as child processes
        proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=a.aiperf_timeout)
        except subprocess.TimeoutExpired:  # its search did not end in time: what it wrote so far is read below
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rc = None
    wall = time.monotonic() - t0
    with open(log) as f:
        tail = f.read()[-3000:]
    history = os.path.join(out, "search_history.json")
    probes = []
    for d in sorted(glob.glob(os.path.join(out, "search_iter_*"))):
        files = glob.glob(os.path.join(d, "profile_runs", "*", "profile_export_aiperf.json"))
        if not files:
            continue
        with open(files[0]) as f:
            r = json.load(f)
        probes.append(
            {
                "ttft_p95_ms": (r.get("time_to_first_token") or {}).get("p95"),
                "requests": int((r.get("request_count") or {}).get("avg") or 0),
                "prompt_tokens": (r.get("usage_prompt_tokens") or {}).get("avg"),
                "seconds": (r.get("benchmark_duration") or {}).get("avg"),
            }
        )
    row = {"tool": f"AIPerf {a.aiperf_version}", "process_s": wall, "rc": rc, "out": out, "probes": probes}
    if not os.path.exists(history):
        row.update(
            answer=None, missed=None, interval="-", levels="", reason=f"no search_history.json (rc {rc}): {tail}"
        )
        return row
    with open(history) as f:
        h = json.load(f)
    b = h.get("boundary_summary") or {}
    fmax, imin = (b.get("feasible_max") or {}).get("value"), (b.get("infeasible_min") or {}).get("value")
    ci = b.get("boundary_ci")
    interval = f"bracket [{fmax}, {imin}), no confidence" + (
        f"; margin CI [{ci['lo']:.0f}, {ci['hi']:.0f}] ms" if ci else ", no CI (no replicates)"
    )
    if rc is None:  # stopped by --aiperf-timeout: the bracket so far, not an answer it gave
        interval += f"; stopped at {a.aiperf_timeout:g} s, unfinished"
    feasible = {}
    for i, it in enumerate(h.get("iterations") or []):
        c = next(iter(it["variation_values"].values()))
        feasible[i] = (c, it.get("feasible"))
        if i < len(probes):
            probes[i]["concurrency"] = c
    row.update(
        answer=fmax,
        missed=imin,
        interval=interval,
        reason=h.get("convergence_reason"),
        levels=" ".join(f"{c}{'me' if ok else 'mi'}" for c, ok in feasible.values()),
        requests=sum(p["requests"] for p in probes),
    )
    return row


def run_suite(url: str, a) -> dict:
    ns = SimpleNamespace(
        slo=a.slo,
        step_time=a.step_time,
        step_warmup=a.step_warmup,
        run_time=a.run_time,
        steps="",
        extra=["--host", url, "--max-tokens-override", str(a.max_tokens), "--input-tokens", str(a.input_tokens)],
    )
    print(
        f"$ locust -f locustfile.py --headless --host {url} --find-capacity --capacity-policy adaptive --slo {a.slo!r} "
        f"--step-time {a.step_time} --step-warmup {a.step_warmup} -t {a.run_time} --seed {a.seed} "
        f"--max-tokens-override {a.max_tokens} --input-tokens {a.input_tokens} --stop-timeout 10",
        file=sys.stderr,
        flush=True,
    )
    r = suite_search(a.profile, "adaptive", a.seed, ns)
    sure = re.search(r"at (\d+)% confidence", r["sentence"])
    curve = re.search(r"crosses it at ([\d.]+) users \((\d+)% interval ([\d.]+) to ([\d.]+)", r["sentence"])
    return {
        "tool": "this suite (adaptive)",
        "answer": r["users"],
        "missed": r["missed"],
        "interval": (f"[{r['users']}, {r['missed']}) at {sure.group(1)} %" if sure else "no level met")
        + (f"; curve {curve.group(1)} [{curve.group(3)}, {curve.group(4)}] at {curve.group(2)} %" if curve else ""),
        "levels": r["levels"],
        "requests": r["requests"],
        "process_s": r["process_s"],
        "search_s": r["search_s"],
        "reason": r["sentence"],
    }


def run_truth(url: str, truth_log: str, a) -> list[dict]:
    """The levels of --truth held --truth-hold each (the suite's step ramp, in order), and each level's
    TTFT P95 twice: as the suite measured it, and as the server's own truth log has it (first token
    - arrival, over the requests the suite sent in the level's window)."""
    import pyarrow.parquet as pq

    levels = [int(x) for x in a.truth.split(",")]
    out = tempfile.mkdtemp(prefix="aiperf-truth-")
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        os.path.join(ROOT, "locustfile.py"),
        "--headless",
        "--host",
        url,
        "--steps",
        a.truth,
        "--step-time",
        f"{a.truth_hold}s",
        "--step-warmup",
        f"{a.truth_warmup}s",
        "-t",
        f"{a.truth_hold * len(levels)}s",
        "--slo",
        a.slo,
        "--max-tokens-override",
        str(a.max_tokens),
        "--input-tokens",
        str(a.input_tokens),
        "--stop-timeout",
        "10",
        "--results-dir",
        out,
        "--run-id",
        "t",
    ]
    print(f"$ {' '.join(cmd[2:]).replace(ROOT + '/', '')}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode not in (0, 3, 6):
        sys.exit(f"--truth: the suite's step ramp failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    with open(os.path.join(out, "t", "summary.json")) as f:
        summary = json.load(f)
    sent = pq.read_table(os.path.join(out, "t", "requests.parquet"), columns=["request_id", "wall_send"]).to_pydict()
    with open(truth_log) as f:
        truth = {t["request_id"]: t for t in map(json.loads, f) if t.get("first_token") is not None}
    rows = []
    for st in summary["by_step"]:
        w = st["window"]
        ttft = sorted(
            truth[r]["first_token"] - truth[r]["arrival"]
            for r, ws in zip(sent["request_id"], sent["wall_send"])
            if w["start"] <= ws <= w["end"] and r in truth
        )
        server_p95 = ttft[min(len(ttft) - 1, int(0.95 * len(ttft)))] * 1000 if ttft else None
        rows.append(
            {
                "users": st["users"],
                "suite_p95_ms": (st.get("ttft_ms") or {}).get("p95"),
                "server_p95_ms": server_p95,
                "requests": len(ttft),
                "verdict": st["verdict"]["state"],
            }
        )
    return rows


def table(rows: list[dict], a) -> str:
    lines = [
        "| profile, SLO | search | answer | lowest missed | interval | probes | requests | wall s | probes in order (me met, mi missed, un undecided) |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        n = len(r["levels"].split())
        lines.append(
            f"| {a.profile}, {a.slo} | {r['tool']} | {r['answer']} | {r['missed']} | {r['interval']} | {n} | "
            f"{r.get('requests', 0):,} | {r['process_s']:.0f} | {r['levels']} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--profile", default="seats16", help="seats16 (16 slots, built in here) or a simulator profile name or file"
    )
    ap.add_argument("--slo", default="ttft.p95<150ms", help="ttft.p95<X: the one objective both searches judge")
    ap.add_argument("--input-tokens", type=int, default=100, help="prompt tokens of every request, both tools")
    ap.add_argument("--max-tokens", type=int, default=30, help="reply tokens of every request, both tools")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--aiperf-version", default="0.13.0")
    ap.add_argument("--warmup", type=float, default=8, help="AIPerf: warm-up of every probe, s")
    ap.add_argument("--window", type=float, default=20, help="AIPerf: --benchmark-duration of every probe, s")
    ap.add_argument(
        "--requests", type=int, default=100000, help="AIPerf: requests a probe may reach before its window ends"
    )
    ap.add_argument("--concurrency-max", type=int, default=0, help="AIPerf: highest concurrency (0: its default, 1000)")
    ap.add_argument("--aiperf-timeout", type=float, default=600, help="AIPerf: its search is stopped after this many s")
    ap.add_argument("--step-time", default="28s", help="suite: the longest hold of a level (AIPerf's warm-up + window)")
    ap.add_argument("--step-warmup", default="8s", help="suite: the longest warm-up of a level")
    ap.add_argument("-t", "--run-time", default="300s", help="suite: -t, the bound on its whole search")
    ap.add_argument("--only", choices=("aiperf", "suite", "truth"), default="", help="run one part only")
    ap.add_argument(
        "--truth", default="", help="also hold these levels, e.g. 16,17, and read their TTFT P95 in the truth log"
    )
    ap.add_argument("--truth-hold", type=int, default=60, help="--truth: seconds each level is held")
    ap.add_argument("--truth-warmup", type=int, default=15, help="--truth: seconds of each level left out")
    ap.add_argument("--json", default="", help="also write the rows to this file")
    a = ap.parse_args()
    if a.only not in ("suite", "truth"):
        ttft_ms(a.slo)
        venv = aiperf_venv(a.aiperf_version)
        tokenizer = aiperf_tokenizer(venv)
    with tempfile.TemporaryDirectory(prefix="aiperf-bench-") as tmp:
        profile = a.profile
        if profile == "seats16":
            profile = os.path.join(tmp, "seats16.yaml")
            with open(profile, "w") as f:
                f.write(SEATS16)
        server = ServerProcess(
            [sys.executable, "-m", "simulator", "--host", "127.0.0.1", "--port", "0", "--profile", profile]
            + ["--truth-log", os.path.join(tmp, "truth.jsonl")],
            os.path.join(tmp, "simulator.log"),
            name="the simulator",
            cwd=ROOT,
            ready_line=r"listening on (?P<url>\S+)",
            start_timeout=60,
            stop_timeout=10,
        )
        rows = []
        with server.start():
            print(
                f"simulator {a.profile} at {server.url}; load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores",
                file=sys.stderr,
            )
            if a.only in ("", "aiperf"):
                rows.append(run_aiperf(venv, tokenizer, server.url, a))
                r = rows[-1]
                print(
                    f"AIPerf: {r['answer']} (missed {r['missed']}), {r['reason']}, {r['process_s']:.0f} s, probes {r['probes']}",
                    file=sys.stderr,
                    flush=True,
                )
            if a.only in ("", "suite"):
                rows.append(run_suite(server.url, a))
                r = rows[-1]
                print(f"suite: {r['reason'][:400]} ({r['process_s']:.0f} s)", file=sys.stderr, flush=True)
            truth = run_truth(server.url, os.path.join(tmp, "truth.jsonl"), a) if a.truth else []
            print(f"load {os.getloadavg()[0]:.2f} at the end", file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"searches": rows, "truth": truth}, f, indent=1)
    if rows:
        print(table(rows, a))
    if truth:
        print(f"\nLevels held {a.truth_hold} s each ({a.truth_warmup} s left out), TTFT P95:\n")
        print(
            "| users | the suite's | the server's truth log | requests | verdict |\n| ---: | ---: | ---: | ---: | --- |"
        )
        for t in truth:
            print(
                f"| {t['users']} | {t['suite_p95_ms']:.0f} ms | {t['server_p95_ms']:.0f} ms | {t['requests']:,} | {t['verdict']} |"
            )


if __name__ == "__main__":
    main()
