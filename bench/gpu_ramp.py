"""A step ramp of the reference scenario against `transformers serve` on one GPU.

Three steps, the first two here, the last on the lent GPU machine (python 3.12, torch, transformers
5.17; nothing can be downloaded there):

    python bench/gpu_ramp.py prepare     # wheels for the serving extras and the suite -> .gpu-ramp/
    python bench/gpu_ramp.py smoke       # the device flow on this CPU: tiny model, two short steps
    # on the device (one command; see bench/RESULTS.md "Real servers" for the exact one used):
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu-ramp/wheels/*.whl
    PYTHONPATH=/tmp/site python3 bench/gpu_ramp.py device --out $OUT

`device` builds a random-weight Llama of about 1 B parameters (hidden 2048, 20 layers, GQA 16/8
heads of 128, MLP 5632, bf16) with the tiny model's byte-level BPE tokenizer, shaped like the tiny
model so that it never ends a reply early (bench/servers/model.py): every reply runs to its
max_tokens, so the reference mix's output lengths are what the GPU generates. It serves it with
`transformers serve --continuous-batching` on the GPU, then runs the suite from the machine's CPUs:

    locust -f locustfile.py --headless --host http://127.0.0.1:PORT --model MODEL_DIR \
        --steps 16,32,64,128,256 --step-time 60s --step-warmup 10s --slo "ttft.p95<5s" --seed 1

and writes the per-step table, summary.json, requests.parquet, report.md and the server's log tail to
--out. On the GPU the suite reads the GPU itself (`--gpu-telemetry nvidia-smi`: one nvidia-smi -lms
process, readings in gpu_telemetry.parquet, per level utilisation, memory, power and energy per
token in summary.json `gpu` and in steps.md). `--find-capacity --slo "tpot.p50<100ms"` makes it a
capacity search walking --steps.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.server_process import ServerProcess  # noqa: E402

CARRY = ROOT / ".gpu-ramp"  # ignored through .git/info/exclude; carried to the device
STEPS = "16,32,64,128,256"
# Seen working on the device image (transformers 5.17, torch 2.11, Python 3.12) for `transformers serve`,
# plus the suite's own packages that the image lacks (requirements.txt pins).
WHEELS = [
    "openai==1.109.1",
    "pydantic==2.11.9",
    "pydantic-core==2.33.2",
    "fastapi==0.118.0",
    "starlette==0.48.0",
    "uvicorn==0.35.0",
    "jiter==0.11.0",
    "distro==1.9.0",
    "sniffio==1.3.1",
    "annotated-types==0.7.0",
    "typing-inspection==0.4.1",
    "locust==2.47.0",
    "gevent==26.9.0",
    "greenlet==3.5.6",
    "zope.event==6.2",
    "zope.interface==8.7",
    "geventhttpclient==2.6.1",
    "brotli==1.2.1",
    "flask==3.1.3",
    "flask-cors==6.0.5",
    "flask-login==0.6.3",
    "werkzeug==3.1.9",
    "blinker==1.9.0",
    "itsdangerous==2.2.0",
    "python-socketio==5.18.1",
    "python-engineio==4.15.1",
    "simple-websocket==1.1.0",
    "wsproto==1.3.2",
    "bidict==0.24.1",
    "configargparse==1.9.0",
    "pyzmq==27.3.0",
    "orjson==3.13.0",
    "pandas==3.1.1",
    "tzdata==2026.6",
]
PLATFORMS = [
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_34_x86_64",
    "manylinux_2_35_x86_64",
    "manylinux_2_5_x86_64",
]


def log(msg: str) -> None:
    print(f"[gpu_ramp {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------- here


def prepare() -> None:
    from bench.servers import venvs

    wheels = CARRY / "wheels"
    shutil.rmtree(CARRY, ignore_errors=True)
    wheels.mkdir(parents=True)
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
    for p in PLATFORMS:
        cmd += ["--platform", p]
    subprocess.run(cmd + ["--platform", "any"] + WHEELS, check=True)
    model = venvs.ensure_model()
    tok = CARRY / "tokenizer"
    tok.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (model / name).exists():
            shutil.copy(model / name, tok / name)
    exclude = ROOT / ".git" / "info" / "exclude"
    if exclude.parent.parent.is_dir() and "/.gpu-ramp/" not in (exclude.read_text() if exclude.exists() else ""):
        exclude.parent.mkdir(exist_ok=True)
        with open(exclude, "a") as f:
            f.write("/.gpu-ramp/\n")
    size = sum(p.stat().st_size for p in CARRY.rglob("*") if p.is_file())
    log(f"{len(list(wheels.glob('*.whl')))} wheels and the tokenizer in {CARRY} ({size / 2**20:.1f} MiB)")


# --------------------------------------------------------------------------- the model


def build_model(out: Path, tokenizer_dir: Path, size: str, device: str) -> dict:
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    from bench.servers.model import BAN, banned_ids

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    if size == "1b":
        dims = dict(
            hidden_size=2048,
            intermediate_size=5632,
            num_hidden_layers=20,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
        )
        dtype, anchor = torch.bfloat16, 64.0
    else:  # the CPU smoke test
        dims = dict(
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
        )
        dtype, anchor = torch.float32, 16.0
    config = LlamaConfig(
        vocab_size=len(tok),
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **dims,
    )
    torch.manual_seed(1234)
    t0 = time.monotonic()
    with torch.device(device):
        model = LlamaForCausalLM(config)
    hidden = dims["hidden_size"]
    banned = banned_ids(tok)
    with torch.no_grad():  # the tiny model's shaping (bench/servers/model.py), scaled to this width
        emb = model.model.embed_tokens.weight
        emb.normal_(0.0, 1.0)
        emb[:, 0] = anchor
        head = model.lm_head.weight
        head.normal_(0.0, 2.0 / hidden**0.5)
        head[:, 0] = 0.0
        head[banned, 0] = -BAN
    model = model.to(dtype)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, do_sample=False
    ).save_pretrained(out)
    params = sum(p.numel() for p in model.parameters())
    # the shaping holds: the end-of-sequence token is never the best choice
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "hello"}], add_generation_prompt=True, return_tensors="pt"
    )
    ids = ids["input_ids"] if not torch.is_tensor(ids) else ids
    with torch.no_grad():
        logits = model(ids.to(device)).logits[0, -1].float()
    info = {
        "params": params,
        "dtype": str(dtype),
        "build_s": round(time.monotonic() - t0, 1),
        "eos_logit": float(logits[tok.eos_token_id]),
        "max_logit": float(logits.max()),
        **dims,
    }
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return info


# --------------------------------------------------------------------------- the server and the ramp


CLI = "import sys; from transformers.cli.transformers import main; sys.argv[0] = 'transformers'; sys.exit(main())"


def serve(python: str, model: Path, port: int, device: str, log_path: Path, cpus: str = "") -> ServerProcess:
    """transformers serve, ready when /health (or, in a version without it, /v1/models) answers 200."""
    exe = [python, "-c", CLI]
    help_text = subprocess.run([*exe, "serve", "--help"], capture_output=True, text=True, timeout=120).stdout
    args = (["taskset", "-c", cpus] if cpus else []) + [*exe, "serve"]
    args += ["--force-model", str(model)] if "--force-model" in help_text else [str(model)]
    args += ["--continuous-batching", "--host", "127.0.0.1", "--port", str(port)]
    if "--device" in help_text:
        args += ["--device", device]
    dtype = "bfloat16" if device == "cuda" else "float32"
    if "--dtype" in help_text:
        args += ["--dtype", dtype]
    elif "--torch-dtype" in help_text:
        args += ["--torch-dtype", dtype]
    if device == "cpu" and "--cb-num-blocks" in help_text:
        args += ["--cb-num-blocks", "256", "--cb-block-size", "32"]
    log(" ".join(a for a in args if a != CLI))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    return ServerProcess(args, log_path, name="transformers serve", url=f"http://127.0.0.1:{port}", env=env).start(300)


def tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def warm_up(url: str, model: str, log_path: Path) -> dict:
    """One short streamed chat request: loads the model if the server loads lazily, and checks the
    served model id before any load (a 4xx here ends the run at once, with the server's answer)."""
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "Hello there"}],
            "max_tokens": 8,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            text = r.read().decode(errors="replace")
            status = r.status
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"warm-up request answered {e.code}: {e.read()[:500]!r}\n{tail(log_path)}") from None
    usage = [line for line in text.splitlines() if '"usage"' in line]
    return {
        "status": status,
        "s": round(time.monotonic() - t0, 2),
        "events": text.count("data:"),
        "usage_line": usage[-1][:300] if usage else None,
    }


def ramp(
    url: str,
    model: Path,
    out: Path,
    steps: str,
    step_time: str,
    warmup: str,
    stop_timeout: int,
    extra: list[str],
    slo: str = "ttft.p95<5s",
    seconds: float | None = None,
) -> int:
    """The suite's run: -t is one step each (a ramp) unless `seconds` gives it (a capacity search
    holds undecided levels for more steps: it gets what is left of the budget)."""
    if seconds is None:
        seconds = len(steps.split(",")) * float(step_time.rstrip("s"))
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(ROOT / "locustfile.py"),
        "--headless",
        "--host",
        url,
        "--model",
        str(model),
        "--steps",
        steps,
        "--step-time",
        step_time,
        "--step-warmup",
        warmup,
        "--slo",
        slo,
        "--seed",
        "1",
        "--results-dir",
        str(out),
        "--run-id",
        "ramp",
        "-t",
        f"{int(seconds) + 5}s",
        "--stop-timeout",
        str(stop_timeout),
        "--only-summary",
        *extra,
    ]
    log("suite: " + " ".join(cmd[2:]))
    with open(out / "suite.log", "w") as f:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=seconds + stop_timeout + 60)
    return proc.returncode


def step_table(summary: dict) -> str:
    lines = [
        "| users | requests ok | failed | stopped | TTFT mean (ms) | TTFT P95 (ms) | E2E P50 (ms) | TPOT P50 (ms) | ITL P50 (ms) | "
        "tokens/s per stream (P50) | output tokens/s | total tokens/s |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in summary.get("by_step", []):
        r, t = s["requests"], s["throughput"]

        def f(block, key, s=s):
            v = s[block][key]
            return "-" if v is None else f"{v:.0f}"

        speed = s["stream_tokens_per_s"]["p50"]
        lines.append(
            f"| {s['users']} | {r['ok']} | {r['failed']} | {r['stopped']} | {f('ttft_ms', 'mean')} | {f('ttft_ms', 'p95')} | "
            f"{f('e2e_ms', 'p50')} | {f('tpot_ms', 'p50')} | {f('itl_ms', 'p50')} | "
            f"{'-' if speed is None else f'{speed:.1f}'} | {t['output_tokens_per_s'] or 0:.0f} | {t['total_tokens_per_s'] or 0:.0f} |"
        )
    return "\n".join(lines)


def gpu_table(summary: dict) -> str:
    """Per level: the suite's own GPU figures (--gpu-telemetry nvidia-smi; summary.json gpu.by_step)."""
    gpu = summary.get("gpu") or {}
    lines = [
        "| users | verdict | readings | GPU util mean % | GPU util P95 % | memory peak MiB | power mean W | J/output token | "
        "out tok/s per GPU |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def f(x, digits=0):
        return "-" if x is None else f"{x:,.{digits}f}"

    for s, g in zip(summary.get("by_step") or [], gpu.get("by_step") or []):
        v = (s.get("verdict") or {}).get("state", "-")
        lines.append(
            f"| {g['users']} | {v} | {g['readings']} | {f(g['utilization_pct_mean'])} | {f(g['utilization_pct_p95'])} | "
            f"{f(g['memory_used_mib_peak'])} | {f(g['power_w_mean'])} | {f(g['joules_per_output_token'], 3)} | "
            f"{f(g['output_tokens_per_s_per_gpu'])} |"
        )
    return "\n".join(lines) + (f"\n\n{gpu['sentence']}" if gpu.get("sentence") else "")


def device_flow(a) -> int:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    model = Path(a.model_dir)
    build = subprocess.run(
        [a.server_python, __file__, "build", str(model), a.tokenizer, a.size, a.device],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if build.returncode != 0:
        raise RuntimeError(f"building the model failed:\n{(build.stdout + build.stderr)[-4000:]}")
    info = json.loads(build.stdout.strip().splitlines()[-1])
    log(f"environment and model: {info}")
    port = 18123
    t0 = time.monotonic()
    server = serve(a.server_python, model, port, a.device, out / "server.log")
    info["server_ready_s"] = round(time.monotonic() - t0, 1)
    log(f"server ready in {info['server_ready_s']} s")
    try:
        info["warmup"] = warm_up(f"http://127.0.0.1:{port}", str(model), out / "server.log")
        log(f"warm-up request: {info['warmup']}")
        # one command has 10 minutes on the device: fit the steps into what is left of a.budget_s
        left = a.budget_s - (time.monotonic() - t_start) - a.stop_timeout - 45
        n_steps = len(a.steps.split(","))
        step_s = min(float(a.step_time.rstrip("s")), max(20.0, left / n_steps))
        info["step_time_s"] = step_s
        extra = [*a.extra, *(["--find-capacity"] if a.find_capacity else [])]
        if a.device == "cuda":  # the suite reads the GPU itself, aligned to its levels (plugin/gpu.py)
            extra += ["--gpu-telemetry", "nvidia-smi"]
        seconds = max(left, n_steps * step_s) if a.find_capacity else None
        rc = ramp(
            f"http://127.0.0.1:{port}",
            model,
            out,
            a.steps,
            f"{step_s:g}s",
            a.step_warmup,
            a.stop_timeout,
            extra,
            a.slo,
            seconds,
        )
    except subprocess.TimeoutExpired:
        rc = "timeout"
    finally:
        server.stop()
    info["suite_exit_code"] = rc
    info["total_s"] = round(time.monotonic() - t_start, 1)
    run = out / "ramp"
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    table = step_table(summary)
    if summary.get("gpu"):
        table += "\n\nGPU (the suite's --gpu-telemetry nvidia-smi, each level's window):\n\n" + gpu_table(summary)
    capacity = summary.get("capacity")
    (out / "steps.md").write_text(table + "\n\ncapacity: " + json.dumps(capacity) + "\n")
    (out / "info.json").write_text(json.dumps(info, indent=2))
    for name in ("summary.json", "requests.parquet", "report.md", "gpu_telemetry.parquet"):
        if (run / name).exists():
            shutil.copy(run / name, out / name)
    shutil.rmtree(run, ignore_errors=True)
    (out / "server_tail.log").write_text(tail(out / "server.log", 200))
    (out / "server.log").unlink(missing_ok=True)
    print(table)
    print("capacity:", json.dumps(capacity, indent=1))
    print(tail(out / "suite.log", 40))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("prepare")
    b = sub.add_parser("build")
    for name in ("out", "tokenizer", "size", "device"):
        b.add_argument(name)
    for name in ("device", "smoke"):
        p = sub.add_parser(name)
        p.add_argument("--out", default=str(ROOT / "results" / f"gpu-ramp-{name}"))
        p.add_argument("--tokenizer", default=str(CARRY / "tokenizer"))
        p.add_argument("--model-dir", default="/tmp/llama-1b" if name == "device" else "/tmp/llama-smoke")
        p.add_argument("--size", default="1b" if name == "device" else "tiny")
        p.add_argument("--device", default="cuda" if name == "device" else "cpu")
        p.add_argument("--steps", default=STEPS if name == "device" else "2,4")
        p.add_argument("--step-time", default="60s" if name == "device" else "12s")
        p.add_argument("--step-warmup", default="10s" if name == "device" else "2s")
        p.add_argument("--stop-timeout", type=int, default=10)
        p.add_argument("--slo", default="ttft.p95<5s")
        p.add_argument("--find-capacity", action="store_true", help="a capacity search over --steps (walked in order)")
        p.add_argument(
            "--budget-s",
            type=float,
            default=540.0,
            help="seconds the whole flow may take (the device allows 600 for the command)",
        )
        p.add_argument("--server-python", default=sys.executable, help="python with torch and transformers[serving]")
        p.add_argument("extra", nargs="*", help="more suite options, after --")
    a = ap.parse_args()
    if a.cmd == "prepare":
        prepare()
        return 0
    if a.cmd == "build":
        import torch
        import transformers

        env = {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": sys.version.split()[0],
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        }
        print(json.dumps({**env, "model": build_model(Path(a.out), Path(a.tokenizer), a.size, a.device)}))
        return 0
    if a.cmd == "smoke":
        a.extra = a.extra or ["--max-tokens-override", "16"]
        if a.server_python == sys.executable:
            from bench.servers import venvs

            a.server_python = str(venvs.ensure_venv("servers"))
    return device_flow(a)


if __name__ == "__main__":
    sys.exit(main())
