"""The real servers' command lines, each a `ServerProcess` on 127.0.0.1 at a given port, with its
log in .cache/server-logs/NAME-PORT.log. The venv each runs from is built first when missing."""

from __future__ import annotations

from pathlib import Path

from bench.servers import venvs
from core.server_process import ServerProcess

LOG_DIR = venvs.CACHE / "server-logs"


def server(name: str, argv: list[str], env: dict[str, str], port: int) -> ServerProcess:
    """Ready when its /health answers 200; run from the repository root."""
    return ServerProcess(
        argv,
        LOG_DIR / f"{name}-{port}.log",
        name=name,
        url=f"http://127.0.0.1:{port}",
        env=env,
        cwd=venvs.REPO,
        ready_paths=("/health",),
    )


def llamacpp(model_dir: Path, port: int, parallel: int = 4, threads: int = 1) -> ServerProcess:
    py = venvs.ensure_venv("servers")
    argv = [
        str(py),
        str(venvs.HERE / "llamacpp_server.py"),
        str(model_dir / "model-f32.gguf"),
        str(port),
        "--parallel",
        str(parallel),
        "--threads",
        str(threads),
        "--alias",
        "tiny-llama",
    ]
    env = venvs.venv_env("servers")
    env["OMP_NUM_THREADS"] = str(threads)
    return server("llamacpp", argv, env, port)


def transformers_serve(
    model_dir: Path, port: int, blocks: int = 256, block_size: int = 32, threads: int = 1
) -> ServerProcess:
    venvs.ensure_venv("servers")
    argv = [
        str(venvs.venv_dir("servers") / "bin" / "transformers"),
        "serve",
        str(model_dir),
        "--continuous-batching",
        "--cb-num-blocks",
        str(blocks),
        "--cb-block-size",
        str(block_size),
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    env = venvs.venv_env("servers")
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return server("transformers-serve", argv, env, port)


def vllm(
    model_dir: Path,
    port: int,
    threads: int = 1,
    max_num_seqs: int = 64,
    kv_cache_gib: int = 1,
    extra: list[str] | None = None,
    cpus: str = "",
) -> ServerProcess:
    """vLLM's CPU build; `cpus` (e.g. "0") pins all its processes to those cores (taskset)."""
    py = venvs.ensure_venv("vllm")
    pin = ["taskset", "-c", cpus] if cpus else []
    argv = [
        *pin,
        str(py),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        "tiny-llama",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enforce-eager",
        "--dtype",
        "float32",
        "--max-model-len",
        "4096",
        "--max-num-seqs",
        str(max_num_seqs),
        "--disable-uvicorn-access-log",
        "--generation-config",
        "vllm",
        *(extra or []),
    ]
    env = venvs.venv_env("vllm")
    env.update(
        VLLM_CPU_KVCACHE_SPACE=str(kv_cache_gib),
        VLLM_CPU_OMP_THREADS_BIND="nobind",
        VLLM_CPU_NUM_OF_RESERVED_CPU="0",
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
    )
    return server("vllm", argv, env, port)
