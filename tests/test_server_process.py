"""core/server_process.py: a server started in a process group of its own, ready by its HTTP
answer or by the line it prints, a failed start told apart (died with its code, or never ready)
with its log's tail, the whole group stopped; and the kind a failed start is classified as."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time

import pytest

from core.server_process import ServerProcess, ServerStartError, classify_start_failure, http_get
from tests.helpers import ROOT, free_port

PY = sys.executable


def gone(pid: int) -> bool:
    """No such process, or a zombie (dead, waiting for a parent that may never reap it here)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.process
def test_the_simulator_is_ready_at_the_address_it_prints(tmp_path):
    server = ServerProcess(
        [PY, "-m", "simulator", "--host", "127.0.0.1", "--port", "0"],
        tmp_path / "sim.log",
        name="the simulator",
        cwd=ROOT,
        ready_line=r"listening on (?P<url>\S+)",
    )
    with server.start(timeout=30):
        assert server.url.startswith("http://127.0.0.1:") and not server.url.endswith(":0")
        status, body = http_get(server.url + "/v1/models")
        assert status == 200 and b'"object"' in body
        pid = server.pid
    assert server.proc.returncode == 0  # it shut down cleanly on SIGTERM, not killed at the bound
    assert gone(pid)
    assert "simulator listening on " + server.url in server.log_tail()  # its stdout went to the log


@pytest.mark.process
def test_ready_once_any_ready_path_answers_200(tmp_path):
    """A server without /health (404 there) is ready when /v1/models answers 200."""
    (tmp_path / "www" / "v1").mkdir(parents=True)
    (tmp_path / "www" / "v1" / "models").write_text('{"data": []}')
    port = free_port()
    argv = [PY, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path / "www")]
    with ServerProcess(argv, tmp_path / "http.log", url=f"http://127.0.0.1:{port}", start_timeout=30) as server:
        assert http_get(server.url + "/health")[0] == 404
        assert http_get(server.url + "/v1/models") == (200, b'{"data": []}')
    assert server.proc.returncode is not None


@pytest.mark.process
@pytest.mark.parametrize(
    "script, code, kind",
    [
        (
            "print('loading weights'); print('RuntimeError: engine core failed', file=sys.stderr); sys.exit(3)",
            3,
            "exited",
        ),
        (
            "print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', file=sys.stderr); sys.exit(1)",
            1,
            "out_of_memory",
        ),
        (
            "import argparse; p = argparse.ArgumentParser(prog='serve'); p.add_argument('--max-num-seqs', type=int); "
            "p.parse_args(['--max-num-seqs', 'many'])",
            2,
            "refused",
        ),
    ],
    ids=["exited", "out_of_memory", "refused"],
)
def test_a_process_that_dies_while_starting(tmp_path, script, code, kind):
    server = ServerProcess(
        [PY, "-c", "import sys; " + script], tmp_path / "s.log", name="srv", url=f"http://127.0.0.1:{free_port()}"
    )
    t0 = time.monotonic()
    with pytest.raises(ServerStartError) as info:
        server.start(timeout=60)
    assert time.monotonic() - t0 < 30  # told at once, not at the deadline
    e = info.value
    assert (e.exit_code, e.kind, e.name) == (code, kind, "srv")
    assert str(e).startswith(f"srv exited with {code} while starting:\n")
    last = {
        "exited": "RuntimeError: engine core failed",
        "out_of_memory": "CUDA out of memory",
        "refused": "serve: error: argument --max-num-seqs: invalid int value: 'many'",
    }[kind]
    assert last in e.log_tail and last in str(e)


@pytest.mark.process
def test_a_start_timeout_stops_the_process(tmp_path):
    port = free_port()  # nobody listens there
    argv = ["sh", "-c", "echo still loading; exec sleep 120"]
    server = ServerProcess(argv, tmp_path / "s.log", name="slow", url=f"http://127.0.0.1:{port}")
    with pytest.raises(ServerStartError) as info:
        server.start(timeout=2)
    e = info.value
    assert (e.exit_code, e.kind) == (None, "start_timeout")
    assert str(e) == "slow not ready after 2 s:\nstill loading"
    assert server.proc.returncode == -signal.SIGTERM  # stopped before the error was raised


@pytest.mark.process
def test_stop_kills_the_whole_group_when_sigterm_is_ignored(tmp_path):
    """Leader and child both ignore SIGTERM: after the stop bound, SIGKILL reaches both."""
    script = textwrap.dedent("""
        import signal, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(f"ready child={child.pid}", flush=True)
        time.sleep(120)
    """)
    server = ServerProcess(
        [PY, "-c", script], tmp_path / "s.log", ready_line=r"ready child=(?P<child>\d+)", stop_timeout=0.5
    )
    server.start(timeout=30)
    child = int(server.ready_match["child"])
    assert os.getpgid(child) == server.pid != os.getpgid(0)  # a group of its own, the child in it
    t0 = time.monotonic()
    server.stop()
    assert server.proc.returncode == -signal.SIGKILL
    assert time.monotonic() - t0 >= 0.5  # SIGTERM was given its bound first
    deadline = time.monotonic() + 10
    while not gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(child)


def test_a_server_needs_something_to_wait_for(tmp_path):
    with pytest.raises(ValueError, match="url to probe or a ready_line"):
        ServerProcess(["true"], tmp_path / "log")


@pytest.mark.parametrize(
    "log",
    [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
        "torch.cuda.OutOfMemoryError: HIP out of memory",
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
        "RuntimeError: insufficient memory to load the model",
        "llama_model_load: error loading model: unable to allocate backend buffer: out of memory",
        "OSError: [Errno 12] Cannot allocate memory",
        "MemoryError",
    ],
)
def test_out_of_memory_whether_it_exited_or_hung(log):
    text = f"INFO loading weights\n{log}\n"
    assert classify_start_failure(1, text) == "out_of_memory"
    assert classify_start_failure(None, text) == "out_of_memory"  # engines often hang after it


@pytest.mark.parametrize(
    "log",
    [
        "usage: api_server.py [-h] ...\napi_server.py: error: argument --max-num-seqs: invalid int value: 'x'",
        "vllm serve: error: unrecognized arguments: --bogus",
        "ValueError: max_model_len (8192) is greater than the derived max_model_len (4096)",
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
    ],
)
def test_a_refused_setting(log):
    assert classify_start_failure(2, log) == "refused"


def test_other_failures_by_exit_code():
    assert classify_start_failure(None, "INFO loading weights") == "start_timeout"
    assert classify_start_failure(None, "ValueError: a warning it survived") == "start_timeout"  # still running
    assert classify_start_failure(1, "RuntimeError: engine core initialization failed") == "exited"
    assert classify_start_failure(-9, "") == "exited"
    assert classify_start_failure(0, "Traceback ...\nImportError: no module named vllm") == "exited"


@pytest.mark.process
def test_the_built_in_simulator_starts_on_the_port_asked_and_shows_its_own_error():
    from plugin.embedded import EmbeddedSimulator

    port = free_port()
    sim = EmbeddedSimulator("fixed", port=port)
    try:
        assert (sim.url, sim.port) == (f"http://127.0.0.1:{port}", port)
        assert http_get(sim.url + "/v1/models")[0] == 200
    finally:
        sim.stop()
    with pytest.raises(RuntimeError) as info:
        EmbeddedSimulator("no-such-profile")
    assert str(info.value).startswith("simulator: error: --profile: unknown profile 'no-such-profile'")  # one line
    assert "\n" not in str(info.value)
