"""The end of a process once Locust's `quit` has fired (plugin/quick_exit.py): Locust's exit code,
everything printed and logged on disk, a message queued for the master delivered, and an error
raised after `quit` still ends the process the usual way."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.process

SCRIPT = """
import logging, sys, types
import zmq
from plugin import quick_exit

logging.basicConfig(filename={log!r}, level=logging.INFO)
quick_exit.install()

# a worker's RPC socket, with a message queued for a master that reads it after we are gone
ctx = zmq.Context()
pull = ctx.socket(zmq.PULL)
port = pull.bind_to_random_port("tcp://127.0.0.1")
push = zmq.Context().socket(zmq.PUSH)
push.connect(f"tcp://127.0.0.1:{{port}}")
environment = types.SimpleNamespace(runner=types.SimpleNamespace(client=types.SimpleNamespace(socket=push)))

quick_exit.arm(environment, {code})
import atexit
atexit.register(lambda: print("a later exit handler ran", flush=True))  # registered after: runs first
for i in range(20000):
    print("line", i)  # buffered: it must be flushed
logging.getLogger("t").info("the last log line")
push.send(b"the final report")
if {fail}:
    raise RuntimeError("after quit")
"""


def run(tmp_path, code: int, fail: bool = False) -> tuple[subprocess.CompletedProcess, str]:
    log = tmp_path / "log.txt"
    script = SCRIPT.format(log=str(log), code=code, fail=fail)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    return out, log.read_text() if log.exists() else ""


def test_the_process_ends_with_locusts_code_and_loses_nothing(tmp_path):
    out, log = run(tmp_path, 3)
    assert out.returncode == 3, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[:2] == ["line 0", "line 1"] and "line 19999" in lines, out.stdout[-500:]
    assert lines[-1] == "a later exit handler ran", lines[-3:]
    assert "the last log line" in log


def test_an_error_after_quit_ends_the_process_as_python_does(tmp_path):
    out, _ = run(tmp_path, 0, fail=True)
    assert out.returncode == 1 and "RuntimeError: after quit" in out.stderr, (out.returncode, out.stderr[-2000:])


DELIVERY = """
import sys, types, zmq
from plugin import quick_exit

port = int(sys.argv[1])
push = zmq.Context().socket(zmq.PUSH)
push.connect(f"tcp://127.0.0.1:{port}")
quick_exit.install()
quick_exit.arm(types.SimpleNamespace(runner=types.SimpleNamespace(client=types.SimpleNamespace(socket=push))), 0)
for i in range(200):
    push.send(b"x" * 10000)  # 2 MB queued as the process ends
push.send(b"the last one")
"""


def test_messages_queued_at_the_end_reach_the_peer(tmp_path):
    import zmq

    pull = zmq.Context().socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    try:
        out = subprocess.run(
            [sys.executable, "-c", DELIVERY, str(port)], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr[-2000:]
        got = []
        while pull.poll(2000):
            got.append(pull.recv())
        assert len(got) == 201 and got[-1] == b"the last one", len(got)
    finally:
        pull.close(linger=0)
