"""Agreement with the peer tool: this suite and `vllm bench serve` against one vLLM server.

    python bench/vllm_agreement.py                       # starts vLLM (CPU build, tiny model) itself
    python bench/vllm_agreement.py --requests 400 --concurrency 16 --rounds 3
    python bench/vllm_agreement.py --host http://127.0.0.1:8000 --model NAME --tokenizer DIR

Both tools run the same fixed workload against the same server, one after the other, alternating
for --rounds rounds after a warm-up of each: chat completions, --input-len prompt tokens, exactly
--output-len output tokens (max_tokens with ignore_eos), --concurrency requests in flight (a
closed loop), --requests requests in all, then stop.

  vllm bench serve   --backend openai-chat --dataset-name random --random-input-len I
                     --random-output-len O --random-range-ratio 0 --ignore-eos --max-concurrency C
                     --num-prompts N --request-rate inf  (vllm.benchmarks.serve, imported: the CPU
                     build's `vllm` command fails on package metadata)
  the suite          bench/vllm_agreement_locustfile.py (the suite's users, stopped after N requests)
                     -u C, a one-class workload of English template text with input_chars chosen so
                     that the prompt has I tokens on average, --max-tokens-override O --ignore-eos

The figures side by side: mean, P50 and P99 of TTFT, TPOT, ITL and E2E, and request, output-token
and total-token throughput. The suite's figures are computed from its requests.parquet with the
definitions vllm bench uses (it reports TPOT and ITL the same way: per-request
(E2E - TTFT) / (N - 1), and pooled gaps between chunks); throughput over the span from the first
send to the last completion, as vllm bench's duration. Differences that remain are explained in
bench/RESULTS.md ("Real servers").

Needs .cache/venv-vllm and the tiny model (bench/servers/venvs.py builds both).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.processes import free_port  # noqa: E402
from bench.servers import launch, venvs  # noqa: E402
from bench.servers.workload import write_workload  # noqa: E402

OUT = ROOT / "results" / "vllm-agreement"
VLLM_BENCH = (
    "import argparse, json, sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "p = argparse.ArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))\n"
)


# --------------------------------------------------------------------------- workload


def calibrate_input_chars(tokenizer_dir: Path, target_tokens: int, seed: int = 1) -> tuple[int, float]:
    """input_chars whose chat prompts have `target_tokens` prompt tokens on average (English text).

    vllm bench's random dataset makes prompts of exactly I tokens and the chat template adds its
    own few; the suite's workloads are measured in characters, so the length is matched here with
    the served tokenizer and chat template (tokenizers only, no torch)."""
    from tokenizers import Tokenizer

    from workloads import Sampler, load_spec

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    overhead = len(tok.encode("<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n").ids)
    lo, hi = 50, 20000
    best = (lo, float("inf"))
    tmp = OUT / "calibrate.yaml"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(20):
        mid = (lo + hi) // 2
        write_workload(tmp, input_chars=mid, output_tokens=1, langs=["en"])
        sampler = Sampler(load_spec(str(tmp)), seed)
        mean = float(np.mean([len(tok.encode(sampler.next().user).ids) + overhead for _ in range(200)]))
        if abs(mean - target_tokens - overhead) < abs(best[1] - target_tokens - overhead):
            best = (mid, mean)
        if mean < target_tokens + overhead:
            lo = mid + 1
        else:
            hi = mid
        if lo >= hi:
            break
    return best


# --------------------------------------------------------------------------- the two runs


def run_vllm_bench(url: str, model: str, tokenizer: Path, a, tag: str) -> dict:
    out_dir = OUT / "vllm-bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    filename = f"{tag}.json"
    cmd = [
        *a.client_pin,
        str(venvs.venv_python("vllm")),
        "-c",
        VLLM_BENCH,
        "--backend",
        "openai-chat",
        "--base-url",
        url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        model,
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(a.input_len),
        "--random-output-len",
        str(a.output_len),
        "--random-range-ratio",
        "0",
        "--ignore-eos",
        "--max-concurrency",
        str(a.concurrency),
        "--num-prompts",
        str(a.requests),
        "--request-rate",
        "inf",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--seed",
        str(a.seed),
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(out_dir),
        "--result-filename",
        filename,
    ]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=venvs.venv_env("vllm"), capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
    result = json.loads((out_dir / filename).read_text())
    result["_wall_s"] = time.monotonic() - t0
    return result


def run_suite(url: str, model: str, workload: Path, a, tag: str) -> pd.DataFrame:
    results = OUT / "suite"
    cmd = [
        *a.client_pin,
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
        model,
        "--workload",
        str(workload),
        "--max-tokens-override",
        str(a.output_len),
        "--ignore-eos",
        "--seed",
        str(a.seed),
        "--results-dir",
        str(results),
        "--run-id",
        tag,
    ]
    env = {**os.environ, "AGREEMENT_REQUESTS": str(a.requests)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    path = results / tag / "requests.parquet"
    if not path.exists():
        raise RuntimeError(
            f"the suite wrote no records (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}"
        )
    return pd.read_parquet(path)


# --------------------------------------------------------------------------- figures


def suite_figures(rec: pd.DataFrame) -> dict:
    """The suite's records in vllm bench's terms (ms; throughput per second)."""
    ok = rec[rec["ok"]]
    ttft, e2e, tpot = ok["ttft_s"] * 1e3, ok["e2e_s"] * 1e3, ok["tpot_s"].dropna() * 1e3
    itl = np.concatenate([np.diff(np.asarray(t)) for t in ok["chunk_times"] if len(t) > 1]) * 1e3
    span = float((ok["t_send"] + ok["e2e_s"]).max() - ok["t_send"].min())
    out = {
        "completed": len(ok),
        "failed": int((~rec["ok"]).sum()),
        "duration": span,
        "total_input_tokens": int(ok["prompt_tokens"].sum()),
        "total_output_tokens": int(ok["output_tokens"].sum()),
    }
    for name, v in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2e)):
        v = np.asarray(v, dtype=float)
        out[f"mean_{name}_ms"] = float(v.mean())
        out[f"p50_{name}_ms"] = float(np.percentile(v, 50))
        out[f"p99_{name}_ms"] = float(np.percentile(v, 99))
    out["request_throughput"] = len(ok) / span
    out["output_throughput"] = out["total_output_tokens"] / span
    out["total_token_throughput"] = (out["total_input_tokens"] + out["total_output_tokens"]) / span
    return out


def bench_figures(r: dict) -> dict:
    out = {
        k: r.get(k)
        for k in (
            "completed",
            "duration",
            "total_input_tokens",
            "total_output_tokens",
            "request_throughput",
            "output_throughput",
            "total_token_throughput",
        )
    }
    out["failed"] = int(r.get("failed", 0) or 0)
    for name in ("ttft", "tpot", "itl", "e2el"):
        out[f"mean_{name}_ms"] = r.get(f"mean_{name}_ms")
        out[f"p50_{name}_ms"] = r.get(f"p50_{name}_ms", r.get(f"median_{name}_ms"))
        out[f"p99_{name}_ms"] = r.get(f"p99_{name}_ms")
    return out


ROWS = [
    (f"{stat} {name.upper().replace('E2EL', 'E2E')} (ms)", f"{stat}_{name}_ms")
    for name in ("ttft", "tpot", "itl", "e2el")
    for stat in ("mean", "p50", "p99")
]
ROWS += [
    ("requests/s", "request_throughput"),
    ("output tokens/s", "output_throughput"),
    ("total tokens/s", "total_token_throughput"),
    ("duration (s)", "duration"),
    ("input tokens", "total_input_tokens"),
    ("output tokens", "total_output_tokens"),
    ("completed", "completed"),
]


def table(suite_runs: list[dict], bench_runs: list[dict]) -> str:
    """Medians over the rounds (robust to a round disturbed by other work on the machine), the
    median of the per-round paired differences (round i of each tool ran back to back), and the
    spread of each tool's rounds."""

    def vals(runs, key):
        return np.array([r[key] for r in runs if r.get(key) is not None], dtype=float)

    lines = [
        "| figure | this suite | vllm bench serve | difference of medians | median paired difference | "
        "spread of rounds (suite / bench) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, key in ROWS:
        s, b = vals(suite_runs, key), vals(bench_runs, key)
        if not len(s) or not len(b):
            continue
        ms, mb = float(np.median(s)), float(np.median(b))
        paired = float(np.median((s[: len(b)] - b[: len(s)]) / b[: len(s)] * 100)) if mb else float("nan")
        spread = lambda v: (v.max() - v.min()) / np.median(v) * 100 if len(v) > 1 and np.median(v) else float("nan")  # noqa: E731
        fmt = "{:.0f}" if key.startswith("total_") or key == "completed" else "{:.2f}"
        lines.append(
            f"| {label} | {fmt.format(ms)} | {fmt.format(mb)} | {(ms - mb) / mb * 100 if mb else float('nan'):+.1f} % | "
            f"{paired:+.1f} % | {spread(s):.0f} % / {spread(b):.0f} % |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="", help="a running vLLM server; default: start one (CPU build, tiny model)")
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--tokenizer", default="", help="tokenizer folder (default: the tiny model's)")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="vLLM CPU threads (OMP) when this script starts the server")
    ap.add_argument("--server-cpus", default="0", help="cores for the vLLM this script starts (taskset); empty = any")
    ap.add_argument("--client-cpus", default="1", help="cores for both clients (taskset); empty = any")
    a = ap.parse_args()
    a.client_pin = ["taskset", "-c", a.client_cpus] if a.client_cpus else []

    model_dir = Path(a.tokenizer) if a.tokenizer else venvs.ensure_model()
    venvs.ensure_venv("vllm")
    OUT.mkdir(parents=True, exist_ok=True)
    chars, tokens = calibrate_input_chars(model_dir, a.input_len, a.seed)
    workload = write_workload(OUT / "workload.yaml", input_chars=chars, output_tokens=a.output_len, langs=["en"])
    print(
        f"workload: {chars} input chars = {tokens:.1f} prompt tokens on average (target {a.input_len} + template)",
        flush=True,
    )

    server = None
    url = a.host
    if not url:
        # no prefix caching: vllm bench's random prompts share no prefix, the suite's template text does
        server = launch.vllm(
            model_dir,
            free_port(),
            threads=a.threads,
            max_num_seqs=max(16, a.concurrency),
            cpus=a.server_cpus,
            extra=["--no-enable-prefix-caching"],
        ).start(timeout=600)
        url = server.url
        print(f"vLLM ready in {server.ready_s:.1f} s at {url}", flush=True)
    try:
        warm = argparse.Namespace(**{**vars(a), "requests": 2 * a.concurrency})
        run_vllm_bench(url, a.model, model_dir, warm, "warmup")
        run_suite(url, a.model, workload, warm, f"warmup-{int(time.time())}")
        suite_runs, bench_runs = [], []
        for i in range(a.rounds):
            order = ("suite", "bench") if i % 2 == 0 else ("bench", "suite")
            for who in order:
                tag = f"round{i}-{int(time.time())}"
                if who == "suite":
                    suite_runs.append(suite_figures(run_suite(url, a.model, workload, a, tag)))
                    print(f"round {i}: suite done ({suite_runs[-1]['completed']} requests)", flush=True)
                else:
                    bench_runs.append(bench_figures(run_vllm_bench(url, a.model, model_dir, a, tag)))
                    print(f"round {i}: vllm bench done ({bench_runs[-1]['completed']} requests)", flush=True)
    finally:
        if server is not None:
            server.stop()
    text = table(suite_runs, bench_runs)
    print(
        f"\nchat, {a.requests} requests, concurrency {a.concurrency}, {a.input_len} input / {a.output_len} output tokens, "
        f"medians of {a.rounds} rounds\n\n{text}"
    )
    (OUT / "agreement.json").write_text(
        json.dumps(
            {
                "args": {k: v for k, v in vars(a).items() if k != "client_pin"},
                "input_chars": chars,
                "suite": suite_runs,
                "vllm_bench": bench_runs,
            },
            indent=2,
        )
    )
    (OUT / "agreement.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
