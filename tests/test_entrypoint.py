"""deploy/entrypoint.py, the image's entry point: whom it runs the command as, its wait for the
target and its wait for the master to go, on real processes and sockets on 127.0.0.1.
(tests/test_containers.py runs it inside the image on a real engine.)"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.process

PATH = os.path.join(ROOT, "deploy", "entrypoint.py")
spec = importlib.util.spec_from_file_location("suite_entrypoint", PATH)
ep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ep)

ROOTFUL = "0 0 4294967295\n"
ROOTLESS = "0 1000 1\n1 100000 65536\n"


def test_host_port():
    assert ep.host_port("http://simulator:8000") == ("simulator", 8000)
    assert ep.host_port("https://api.example.com/v1") == ("api.example.com", 443)
    assert ep.host_port("http://gpu-box") == ("gpu-box", 80)
    assert ep.host_port("master:5557") == ("master", 5557)
    assert ep.host_port(" 10.0.0.5:5557 ") == ("10.0.0.5", 5557)
    for bad in ("master", "http://:80", ""):
        with pytest.raises(ValueError):
            ep.host_port(bad)


def test_run_as_the_owner_of_the_results_folder():
    assert ep.run_as((1234, 1234), ROOTFUL) == (1234, 1234, False)  # a user's ./results: that user
    assert ep.run_as((1234, 1234), ROOTFUL, (0, 0)) == (1234, 1234, False)
    assert ep.run_as((1000, 1000), ROOTFUL) == (1000, 1000, False)
    assert ep.run_as((0, 0), ROOTFUL, (1234, 1235)) == (1234, 1235, True)  # made by the engine in a user's checkout
    assert ep.run_as((0, 0), ROOTFUL, (0, 0)) == (1000, 1000, True)  # root's checkout: the image's user
    assert ep.run_as((0, 0), ROOTFUL) == (1000, 1000, True)
    assert ep.run_as((0, 0), "", None) == (1000, 1000, True)  # no user namespace at all
    assert ep.run_as((0, 0), ROOTLESS, (0, 0)) == (0, 0, False)  # rootless: container root is the host user
    assert ep.run_as((1234, 1234), ROOTLESS) == (1234, 1234, False)
    assert ep.identity_user_map(ROOTFUL) and not ep.identity_user_map(ROOTLESS)
    assert not ep.identity_user_map("0 231072 65536\n")  # a remapped rootful engine


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def test_wait_for_and_outlive_are_bounded():
    clock = FakeClock()
    answers = iter([False, False, True])
    assert ep.wait_for(["http://simulator:8000"], 10, 0, clock, clock.sleep, lambda h, p: next(answers)) is None
    assert clock.t == 2.0
    clock = FakeClock()
    assert ep.wait_for(["a:1", "b:2"], 5, 0, clock, clock.sleep, lambda h, p: h == "a") == "b:2"
    assert clock.t == 5.0
    # settling: up at 1, a failed lookup at 3, steady from 4 for 3 s
    clock = FakeClock()
    up = lambda h, p: clock.t >= 1 and clock.t != 3  # noqa: E731
    assert ep.wait_for(["a:1"], 30, 3, clock, clock.sleep, up) is None
    assert clock.t == 7.0
    clock = FakeClock()
    assert ep.wait_for(["a:1"], 5, 10, clock, clock.sleep, lambda h, p: True) == "a:1"  # never steady long enough
    assert clock.t == 5.0
    clock = FakeClock()
    assert ep.outlive("master:5557", 30, clock, clock.sleep, lambda h, p: clock.t < 12) is True
    assert clock.t == 12.0
    clock = FakeClock()
    assert ep.outlive("master:5557", 30, clock, clock.sleep, lambda h, p: True) is False
    assert clock.t == 30.0


@pytest.fixture
def workdir():
    """A folder every user can enter (pytest's tmp_path is private to root)."""
    path = tempfile.mkdtemp(prefix="llm-entrypoint-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def entrypoint(cmd: list, workdir: str, **env) -> subprocess.Popen:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SUITE_")}
    full.update(env, SUITE_RESULTS_DIR=os.path.join(workdir, "results"))
    return subprocess.Popen(
        [sys.executable, PATH, *cmd], cwd=workdir, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def listener() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s


def test_waits_for_the_target_then_runs_the_command(workdir):
    sock = listener()
    port = sock.getsockname()[1]
    proc = entrypoint(
        ["/bin/sh", "-c", "echo started; exit 7"],
        workdir,
        SUITE_WAIT_FOR=f"http://127.0.0.1:{port}/v1",
        SUITE_WAIT_TIMEOUT="10",
    )
    out, err = proc.communicate(timeout=30)
    sock.close()
    assert proc.returncode == 7 and out == "started\n", err


def test_gives_up_on_a_target_that_never_answers(workdir):
    sock = listener()
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    t0 = time.monotonic()
    proc = entrypoint(
        ["/bin/sh", "-c", "echo started"], workdir, SUITE_WAIT_FOR=f"127.0.0.1:{port}", SUITE_WAIT_TIMEOUT="2"
    )
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and out == ""
    assert f"127.0.0.1:{port} accepted no connection within 2s" in err
    assert 1.5 < time.monotonic() - t0 < 10


def test_outlives_the_master_then_exits_with_the_commands_code(workdir):
    sock = listener()
    port = sock.getsockname()[1]
    proc = entrypoint(
        ["/bin/sh", "-c", "exit 3"], workdir, SUITE_OUTLIVE=f"127.0.0.1:{port}", SUITE_OUTLIVE_TIMEOUT="60"
    )
    time.sleep(2.5)
    assert proc.poll() is None, "exited while the master still accepted connections"
    sock.close()
    t0 = time.monotonic()
    proc.communicate(timeout=30)
    assert proc.returncode == 3 and time.monotonic() - t0 < 5


def test_forwards_a_stop_to_the_command(workdir):
    sock = listener()
    port = sock.getsockname()[1]
    proc = entrypoint(["/bin/sh", "-c", "echo up; exec sleep 60"], workdir, SUITE_OUTLIVE=f"127.0.0.1:{port}")
    assert proc.stdout.readline() == "up\n"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    sock.close()
    assert proc.returncode == 128 + signal.SIGTERM and time.monotonic() - t0 < 5


@pytest.mark.skipif(os.geteuid() != 0, reason="giving up root needs root")
@pytest.mark.parametrize(
    "results_owner,checkout_owner,expected", [(0, 0, 1000), (1234, 0, 1234), (0, 1234, 1234), (1234, 1000, 1234)]
)
def test_root_gives_up_root_for_the_owner_of_the_results_folder(workdir, results_owner, checkout_owner, expected):
    results = os.path.join(workdir, "results")
    os.mkdir(results)
    os.chown(results, results_owner, results_owner)
    os.mkdir(os.path.join(workdir, "workloads"))
    os.chown(os.path.join(workdir, "workloads"), checkout_owner, checkout_owner)
    proc = entrypoint(["/bin/sh", "-c", 'id -u; id -g; id -G; echo x > "$SUITE_RESULTS_DIR/file"'], workdir)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.split() == [str(expected)] * 3  # uid, gid, and no supplementary group (root's are dropped)
    st = os.stat(os.path.join(results, "file"))
    assert (st.st_uid, st.st_gid) == (expected, expected)
    assert os.stat(results).st_uid == expected
    assert ("handed to uid" in err) == (results_owner == 0)
