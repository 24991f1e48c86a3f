"""A sweep of `transformers serve` settings on one GPU, ranked by the suite's own sweep.

The server and model of bench/gpu_ramp.py (a random-weight Llama of about 1 B parameters, bf16,
`transformers serve --continuous-batching`), one server per point of a grid of its settings, each
started by `python -m sweeps run --server TEMPLATE` and loaded the same way, with the GPU read by
the suite (`--gpu-telemetry nvidia-smi`). The sweep's table, report (its charts: the Pareto front of
throughput per GPU against P95 TTFT, with each point's interval) and log are copied to --out.

    python bench/gpu_ramp.py prepare     # here: wheels and the tokenizer -> .gpu-ramp/ (carried)
    python bench/gpu_sweep.py smoke      # here, on the CPU: the tiny model, two short points
    # on the device (one command):
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu-ramp/wheels/*.whl
    PYTHONPATH=/tmp/site python3 bench/gpu_sweep.py device --out $OUT

The grid is `--param NAME=V1,V2` (repeatable), each NAME a `transformers serve` option written with
underscores (`cb_max_batch_tokens` is `--cb-max-batch-tokens {cb_max_batch_tokens}` in the
template). A setting this version of `transformers serve` does not have is refused before the
model is built. Everything after `--` is the load of every point (default: 128 users, started at 32 a second, for 60 s
after a 15 s warm-up).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.gpu_ramp import CARRY, CLI  # noqa: E402

DEFAULT_LOAD = ["-u", "128", "-r", "32", "-t", "60s", "--warmup", "15s"]
SMOKE_LOAD = ["-u", "4", "-t", "20s", "--warmup", "5s", "--max-tokens-override", "16"]


def log(msg: str) -> None:
    print(f"[gpu_sweep {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def template(python: str, model: Path, device: str, params: list[str], help_text: str) -> str:
    """The server command of every point: `{port}` and one `{NAME}` per swept setting."""
    exe = [python, "-c", CLI, "serve"]
    args = [*exe, str(model), "--continuous-batching", "--host", "127.0.0.1", "--port", "{port}"]
    if "--device" in help_text:
        args += ["--device", device]
    if "--dtype" in help_text:
        args += ["--dtype", "bfloat16" if device == "cuda" else "float32"]
    if device == "cpu" and "--cb-num-blocks" in help_text and not any(p.startswith("cb_num_blocks") for p in params):
        args += ["--cb-num-blocks", "256", "--cb-block-size", "32"]
    for p in params:
        name = p.split("=", 1)[0]
        option = "--" + name.replace("_", "-")
        if option not in help_text:
            raise SystemExit(
                f"--param {name}: this transformers serve has no {option} (see `transformers serve --help`)"
            )
        args += [option, "{" + name + "}"]
    return shlex.join(args[:2]) + " " + shlex.quote(CLI) + " " + shlex.join(args[3:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["device", "smoke"])
    ap.add_argument("--out", default="")
    ap.add_argument("--param", action="append", default=[], help="NAME=V1,V2 (repeatable)")
    ap.add_argument("--tokenizer", default=str(CARRY / "tokenizer"))
    ap.add_argument("--server-python", default="", help="python with torch and transformers[serving]")
    ap.add_argument("--start-timeout", default="300s")
    ap.add_argument("load", nargs="*", help="the load of every point, after --")
    a = ap.parse_args()
    device = "cuda" if a.mode == "device" else "cpu"
    out = Path(a.out or ROOT / "results" / f"gpu-sweep-{a.mode}")
    out.mkdir(parents=True, exist_ok=True)
    python = a.server_python or sys.executable
    if a.mode == "smoke" and not a.server_python:
        from bench.servers import venvs

        python = str(venvs.ensure_venv("servers"))
    params = a.param or (
        ["cb_max_batch_tokens=256,1024,4096"] if a.mode == "device" else ["cb_max_batch_tokens=64,512"]
    )
    load = a.load or (DEFAULT_LOAD if a.mode == "device" else SMOKE_LOAD)
    help_text = subprocess.run(
        [python, "-c", CLI, "serve", "--help"], capture_output=True, text=True, timeout=120
    ).stdout
    model = Path("/tmp/llama-1b" if a.mode == "device" else "/tmp/llama-smoke")
    server = template(python, model, device, params, help_text)  # refuses an unknown setting first
    t0 = time.monotonic()
    size = "1b" if a.mode == "device" else "tiny"
    build = subprocess.run(
        [python, str(ROOT / "bench" / "gpu_ramp.py"), "build", str(model), a.tokenizer, size, device],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if build.returncode != 0:
        raise SystemExit(f"building the model failed:\n{(build.stdout + build.stderr)[-4000:]}")
    log(f"model built in {time.monotonic() - t0:.1f} s: {build.stdout.strip().splitlines()[-1]}")
    sweep = out / "sweep"
    shutil.rmtree(sweep, ignore_errors=True)
    cmd = [sys.executable, "-m", "sweeps", "run", "--out", str(sweep), "--gpus", "1"]
    cmd += ["--start-timeout", a.start_timeout, "--server", server]
    for p in params:
        cmd += ["--param", p]
    cmd += ["--", *load, "--model", str(model)]
    if device == "cuda":
        cmd += ["--gpu-telemetry", "nvidia-smi"]
    log("sweep: " + shlex.join(cmd[2:]))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    with open(out / "sweep.log", "w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for line in proc.stdout:
            sys.stdout.write(line)
            f.write(line)
        rc = proc.wait()
    log(f"sweep exit code {rc}, {time.monotonic() - t0:.0f} s in all")
    for name in ("table.csv", "table.json", "report.html", "report.md"):
        if (sweep / name).exists():
            shutil.copy(sweep / name, out / name)
    # the whole sweep folder (each point's results, server log and locust log) as one file: the
    # device hands back files at most two folders down
    shutil.make_archive(str(out / "sweep"), "gztar", root_dir=out, base_dir="sweep")
    if (sweep / "report.md").exists():
        print((sweep / "report.md").read_text()[:6000])
    return rc


if __name__ == "__main__":
    sys.exit(main())
