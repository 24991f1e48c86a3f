"""The image's entry point: runs the command it is given (`locust ...`, `python -m simulator ...`,
`python -m reports ...`) as a user who is not root, after the waits the environment asks for.

    SUITE_WAIT_FOR=URL|HOST:PORT[,...]  before the command: wait until each accepts a TCP connection
                                        (the master waits for its target: compose's healthcheck
                                        conditions are not honoured by every engine)
    SUITE_WAIT_TIMEOUT=120              ... at most this many seconds, then exit 2 with one line
    SUITE_WAIT_SETTLE=0                 ... and until they have kept accepting for this many seconds
                                        (podman's DNS server, aardvark-dns 1.4, may fail a lookup
                                        while containers are still joining the network)
    SUITE_OUTLIVE=HOST:PORT             after the command: stay until HOST:PORT stops accepting
                                        connections, then exit with the command's code (workers
                                        outlive the master, so `up --exit-code-from master` ends on
                                        the master's exit, not on the first worker's)
    SUITE_OUTLIVE_TIMEOUT=600           ... at most this many seconds
    SUITE_RESULTS_DIR=results           the folder the master writes (relative to the working dir)
    SUITE_CHECKOUT_DIR=workloads        a folder mounted from the same checkout, whose owner is the
                                        checkout's

Started as root (docker-compose.yml does so for the master only), it first gives up root: the
command runs as the owner of the results folder, so the files land on the host owned by whoever
owns `./results`. A results folder owned by root is handed first to the checkout's owner (an
engine makes a missing ./results as root, in anyone's checkout), or to uid 1000, the image's
user, when root owns the checkout too. Under a rootless engine, where the container's root is the
unprivileged host user who owns the folder, it stays that user. Started as anyone else, it
changes no user.
"""

from __future__ import annotations

import encodings.idna  # noqa: F401  loaded before root is given up: name lookups need it
import os
import signal
import socket
import subprocess
import sys
import time
from urllib.parse import urlsplit

DEFAULT_UID = DEFAULT_GID = 1000  # the image's user (deploy/Dockerfile)


def log(msg: str) -> None:
    sys.stderr.write(f"entrypoint: {msg}\n")
    sys.stderr.flush()


def host_port(target: str) -> tuple[str, int]:
    """'http://simulator:8000/v1' -> ('simulator', 8000); 'master:5557' -> ('master', 5557)."""
    target = target.strip()
    if "://" not in target:
        target = "tcp://" + target
    parts = urlsplit(target)
    if not parts.hostname:
        raise ValueError(f"no host in {target!r}")
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    if port is None:
        raise ValueError(f"no port in {target!r}")
    return parts.hostname, port


def accepts(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:  # refused, unreachable, or the name does not resolve (yet, or any more)
        return False


def wait_for(
    targets: list[str], timeout_s: float, settle_s: float = 0.0, clock=time.monotonic, sleep=time.sleep, probe=accepts
) -> str | None:
    """Wait until every target accepts a connection, and has kept accepting them (a probe a second)
    for settle_s; None when all do, else the first that did not within timeout_s."""
    deadline = clock() + timeout_s
    addresses = [(target, *host_port(target)) for target in targets]
    steady_since = None
    while True:
        failed = next((target for target, host, port in addresses if not probe(host, port)), None)
        now = clock()
        if failed is None:
            steady_since = now if steady_since is None else steady_since
            if now - steady_since >= settle_s:
                return None
        else:
            steady_since = None
        if now >= deadline:
            return failed if failed is not None else addresses[0][0]
        sleep(1.0)


def outlive(target: str, timeout_s: float, clock=time.monotonic, sleep=time.sleep, probe=accepts) -> bool:
    """Wait until target stops accepting connections; True when it did within timeout_s."""
    host, port = host_port(target)
    deadline = clock() + timeout_s
    while probe(host, port):
        if clock() >= deadline:
            return False
        sleep(1.0)
    return True


def identity_user_map(uid_map: str) -> bool:
    """True when container uid 0 is host uid 0 (a rootful engine without user-namespace remapping)."""
    for line in uid_map.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0] == "0":
            return fields[1] == "0"
    return True  # no map (no user namespace): ids are the host's


def run_as(owner: tuple[int, int], uid_map: str, checkout: tuple[int, int] | None = None) -> tuple[int, int, bool]:
    """(uid, gid, hand the folder to them first) for a root process whose results folder has this
    owner; `checkout` is the owner of a folder mounted from the same checkout (./workloads)."""
    if owner[0] != 0:
        return owner[0], owner[1], False
    if not identity_user_map(uid_map):
        return 0, 0, False  # rootless: the container's root is the host user who owns the folder
    if checkout is not None and checkout[0] != 0:
        return checkout[0], checkout[1], True  # the engine made ./results as root in a user's checkout
    return DEFAULT_UID, DEFAULT_GID, True


def drop_root(results_dir: str, checkout_dir: str) -> None:
    os.makedirs(results_dir, exist_ok=True)
    st = os.stat(results_dir)
    try:
        with open("/proc/self/uid_map", encoding="ascii") as f:
            uid_map = f.read()
    except OSError:
        uid_map = ""
    try:
        co = os.stat(checkout_dir)
        checkout = (co.st_uid, co.st_gid)
    except OSError:
        checkout = None
    uid, gid, hand_over = run_as((st.st_uid, st.st_gid), uid_map, checkout)
    if hand_over:
        os.chown(results_dir, uid, gid)
        log(f"{os.path.abspath(results_dir)} belonged to root: handed to uid {uid}")
    if uid == 0:
        return
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    home = os.environ.get("HOME", "")
    if not home or not os.access(home, os.W_OK):
        os.environ["HOME"] = "/tmp"


def env_seconds(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    try:
        return float(text) if text else default
    except ValueError:
        log(f"{name}={text!r} is not a number of seconds")
        sys.exit(2)


def main(argv: list[str]) -> int:
    if not argv:
        log("no command given (e.g. locust -f locustfile.py ...)")
        return 2
    if os.geteuid() == 0:
        results_dir = os.environ.get("SUITE_RESULTS_DIR", "results")
        try:
            drop_root(results_dir, os.environ.get("SUITE_CHECKOUT_DIR", "workloads"))
        except OSError as e:
            log(f"cannot prepare {os.path.abspath(results_dir)} for a non-root user: {e.strerror or e}")
            return 2
    targets = [t for t in os.environ.get("SUITE_WAIT_FOR", "").split(",") if t.strip()]
    timeout_s = env_seconds("SUITE_WAIT_TIMEOUT", 120.0)
    try:
        missing = wait_for(targets, timeout_s, env_seconds("SUITE_WAIT_SETTLE", 0.0))
    except ValueError as e:
        log(f"SUITE_WAIT_FOR: {e}")
        return 2
    if missing is not None:
        log(f"{missing} accepted no connection within {timeout_s:g}s (SUITE_WAIT_TIMEOUT)")
        return 2
    peer = os.environ.get("SUITE_OUTLIVE", "").strip()
    if not peer:
        os.execvp(argv[0], argv)  # no return: signals go straight to the command
    try:
        host_port(peer)  # a bad value fails before the command starts
    except ValueError as e:
        log(f"SUITE_OUTLIVE: {e}")
        return 2
    stop = {"now": False, "signal": None, "child": None}  # a stop signal: pass it on, and outlive nothing after it

    def on_signal(signum, _frame):
        stop.update(now=True, signal=signum)
        child = stop["child"]
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # before the command starts: no stop is lost
        signal.signal(sig, on_signal)
    child = stop["child"] = subprocess.Popen(argv)
    if stop["signal"] is not None:
        child.send_signal(stop["signal"])  # it came while the command was being started
    code = child.wait()
    if not outlive(
        peer,
        env_seconds("SUITE_OUTLIVE_TIMEOUT", 600.0),
        sleep=lambda s: stop["now"] or time.sleep(s),
        probe=lambda h, p: not stop["now"] and accepts(h, p),
    ):
        log(f"{peer} still accepts connections after SUITE_OUTLIVE_TIMEOUT; exiting")
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
