"""What a stepped run's spawn messages cost: bytes on the wire and event-loop time per message.

A master and N workers run a step ramp with a tokenizer against the simulator (`fixed` profile);
bench/spawn_messages_locustfile.py counts each spawn message's bytes and the seconds its encoding
(master) and decoding (worker) took. The run's start, with the tokenizer's files, travels in the
spawn messages (plugin/run_start.py): this shows how often, and what that costs.

    python bench/spawn_messages.py [--tokenizer DIR] [--workers 2] [--steps 1,2,3,4,5,6] [--step-time 3s]

Without --tokenizer a synthetic byte-level BPE of Llama 3's vocabulary size (128,000 tokens, random
merges: it compresses worse than a real one) is built in the output folder; the tiny test model's
tokenizer (`.cache/tiny-llama-*`, 0.27 MB) is a real one. Prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from processes import ROOT, free_port, simulator

LOCUST = [sys.executable, "-m", "locust", "-f", os.path.join(ROOT, "bench", "spawn_messages_locustfile.py")]


def synthetic_tokenizer(folder: str, tokens: int = 128_000, seed: int = 3) -> str:
    """A byte-level BPE with `tokens` tokens, each a merge of two shorter ones, saved as a
    transformers tokenizer folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(seed)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    pieces, merges = list(alphabet), []
    while len(vocab) < tokens:
        a, b = rng.choice(pieces), rng.choice(pieces)
        if a + b in vocab or len(a + b) > 12:
            continue
        vocab[a + b] = len(vocab)
        pieces.append(a + b)
        merges.append((a, b))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=None).save_pretrained(folder)
    return folder


def run(args, tokenizer: str, out: str) -> dict:
    counts = os.path.join(out, "counts")
    os.makedirs(counts, exist_ok=True)
    for f in glob.glob(os.path.join(counts, "*.json")):
        os.remove(f)
    env = dict(os.environ, SPAWN_BENCH_OUT=counts)
    procs = []
    with simulator("--profile", "fixed") as url:
        try:
            port = free_port()
            t0 = time.monotonic()
            master = subprocess.Popen(
                [
                    *LOCUST,
                    "--master",
                    "--headless",
                    "--master-bind-host",
                    "127.0.0.1",
                    "--master-bind-port",
                    str(port),
                    "--expect-workers",
                    str(args.workers),
                    "--host",
                    url,
                    "--steps",
                    args.steps,
                    "--step-time",
                    args.step_time,
                    "--step-warmup",
                    "1s",
                    "--tokenizer",
                    tokenizer,
                    "--results-dir",
                    out,
                    "--run-id",
                    f"spawn-{os.path.basename(tokenizer)}",
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(out, "master.log"), "w"),
            )
            procs.append(master)
            for i in range(args.workers):
                procs.append(
                    subprocess.Popen(
                        [*LOCUST, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
                        cwd=ROOT,
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=open(os.path.join(out, f"worker-{i}.log"), "w"),
                    )
                )
            code = master.wait(timeout=600)
            wall = time.monotonic() - t0
            for p in procs[1:]:
                p.wait(timeout=60)
        finally:  # the master and workers, whatever happened
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    p.wait(timeout=30)
    sent, received = [], []
    for f in sorted(glob.glob(os.path.join(counts, "*.json"))):
        data = json.load(open(f))
        (sent if os.path.basename(f).startswith("master") else received).extend(
            data["sent"] if os.path.basename(f).startswith("master") else data["received"]
        )
    files = os.path.getsize(os.path.join(tokenizer, "tokenizer.json"))
    carrying = [m for m in sent if m["carries_start"]]
    return {
        "tokenizer": tokenizer,
        "tokenizer_json_mb": round(files / 1e6, 2),
        "workers": args.workers,
        "steps": args.steps,
        "exit_code": code,
        "wall_s": round(wall, 1),
        "spawn_messages": len(sent),
        "carrying_the_start": len(carrying),
        "bytes_max": max((m["bytes"] for m in sent), default=0),
        "bytes_min": min((m["bytes"] for m in sent), default=0),
        "bytes_total_mb": round(sum(m["bytes"] for m in sent) / 1e6, 2),
        "master_encode_s_total": round(sum(m["seconds"] for m in sent), 3),
        "master_encode_ms_max": round(1000 * max((m["seconds"] for m in sent), default=0), 1),
        "workers_decode_s_total": round(sum(m["seconds"] for m in received), 3),
        "worker_decode_ms_max": round(1000 * max((m["seconds"] for m in received), default=0), 1),
        "cpus": os.cpu_count(),
        "load_1m": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--tokenizer",
        action="append",
        help="tokenizer folder (repeat for several; default: the "
        "tiny test model's and a synthetic one of Llama 3's size)",
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", default="1,2,3,4,5,6")
    ap.add_argument("--step-time", default="3s")
    ap.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="spawn-messages-")
    tokenizers = args.tokenizer
    if not tokenizers:
        tokenizers = sorted(glob.glob(os.path.join(ROOT, ".cache", "tiny-llama-*")))[:1]
        big = os.path.join(out, "synthetic-128k")
        if not os.path.isdir(big):
            synthetic_tokenizer(big)
        tokenizers.append(big)
    worst = 0
    for tok in tokenizers:
        result = run(args, os.path.abspath(tok), out)
        print(json.dumps(result), flush=True)
        worst = max(worst, result["exit_code"])
    return worst


if __name__ == "__main__":
    sys.exit(main())
