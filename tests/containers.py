"""A real container engine for tests: podman (rootful) with podman-compose, images built here.

No image registry is reachable from the test machines, so the base image is made from Debian's
packages: `debootstrap --variant=minbase bookworm` (python3 is 3.11 there, the version the suite is
tested on) imported into podman. The suite's image is deploy/Dockerfile built on it (BASE build
argument), and Prometheus is an image of Debian's `prometheus` package on the same base.

Engine settings for this kind of machine live in a containers.conf of the test's own (CONTAINERS_CONF):
`runc` as the OCI runtime (crun fails with "cgroups in hybrid mode not supported"), and no default
ulimits (the engine's defaults exceed the machine's hard limits, and runc then fails to start).
The suite's image is built as docs/containers.md "Building without a registry" says: by
podman-compose from docker-compose.yml (once for every service), the base as SUITE_BASE and the
host's CA bundle in the clone's deploy/ca/ for pip. The Prometheus image is built with the host's
network. Compose runs inside a network namespace made for the test, so the compose
network, its bridge and the published 127.0.0.1 ports exist there only.

The debootstrapped base is cached as a tarball under .cache/containers/ (git-ignored): a cold run
makes it in about a minute.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

from tests.helpers import ROOT

SUITE = "bookworm"
INCLUDE = ("python3", "python3-venv")
CACHE = os.path.join(ROOT, ".cache", "containers")
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
TAG = "localhost/llm-loadtest-ci"
TOOLS = ("podman", "runc", "debootstrap", "nsenter", "ip", "git")


def compose_command() -> list[str] | None:
    exe = shutil.which("podman-compose") or shutil.which("podman-compose", path=os.path.dirname(sys.executable))
    return [exe] if exe else None


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (rootful podman, network namespaces)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if compose_command() is None:
        missing.append("podman-compose")
    if missing:
        return f"not installed: {', '.join(missing)} (.ci/run installs them)"
    return None


def log(msg: str) -> None:
    sys.stderr.write(f"[containers {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


class Engine:
    """podman with this machine's settings; `ns` runs commands inside a network namespace of the test."""

    def __init__(self, workdir: str):
        self.conf = os.path.join(workdir, "containers.conf")
        with open(self.conf, "w", encoding="utf-8") as f:
            f.write('[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n')
        self.env = {**os.environ, "CONTAINERS_CONF": self.conf}
        self.netns: str | None = None

    def run(
        self,
        args: list,
        timeout: float,
        check: bool = True,
        ns: bool = False,
        env: dict | None = None,
        cwd: str | None = None,
    ) -> subprocess.CompletedProcess:
        cmd = [str(a) for a in args]
        if ns:
            cmd = ["nsenter", f"--net=/run/netns/{self.netns}", *cmd]
        result = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env={**self.env, **(env or {})}, cwd=cwd
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(cmd[:8])} ... exited {result.returncode}:\n{tail(result.stdout + result.stderr)}"
            )
        return result

    def podman(self, *args, timeout: float = 120, check: bool = True, ns: bool = False) -> subprocess.CompletedProcess:
        return self.run(["podman", *args], timeout, check=check, ns=ns)

    def image_exists(self, ref: str) -> bool:
        return self.podman("image", "exists", ref, check=False).returncode == 0

    # --- the network namespace the compose project lives in ---
    def make_netns(self) -> None:
        self.netns = f"llmct{secrets.token_hex(3)}"
        subprocess.run(["ip", "netns", "add", self.netns], check=True, capture_output=True)
        subprocess.run(["ip", "-n", self.netns, "link", "set", "lo", "up"], check=True, capture_output=True)

    def add_address(self, address: str) -> None:
        """Another address of this namespace's "host", e.g. a private network's (on a veth pair whose
        both ends stay in the namespace)."""
        ip = ["ip", "-n", self.netns]
        subprocess.run(
            [*ip, "link", "add", "priv0", "type", "veth", "peer", "name", "priv1"], check=True, capture_output=True
        )
        subprocess.run([*ip, "addr", "add", f"{address}/24", "dev", "priv0"], check=True, capture_output=True)
        for end in ("priv0", "priv1"):
            subprocess.run([*ip, "link", "set", end, "up"], check=True, capture_output=True)

    def remove_netns(self) -> None:
        if self.netns:
            subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
            self.netns = None

    def http_get(self, url: str, timeout: float = 10, form: dict | None = None) -> bytes:
        """GET (or POST a form) from inside the namespace, where compose published its 127.0.0.1 ports."""
        code = (
            "import sys, urllib.parse, urllib.request; o = urllib.request.build_opener(urllib.request.ProxyHandler({}));"
            "data = urllib.parse.urlencode(dict(a.split('=', 1) for a in sys.argv[4:])).encode() if sys.argv[3] == 'POST' else None;"
            "sys.stdout.buffer.write(o.open(sys.argv[1], data, timeout=float(sys.argv[2])).read())"
        )
        cmd = ["nsenter", f"--net=/run/netns/{self.netns}", sys.executable, "-c", code, url, str(timeout)]
        cmd += ["GET"] if form is None else ["POST", *(f"{k}={v}" for k, v in form.items())]
        result = subprocess.run(cmd, capture_output=True, timeout=timeout + 10)
        if result.returncode != 0:
            raise OSError(f"{'GET' if form is None else 'POST'} {url}: {result.stderr.decode(errors='replace')[-500:]}")
        return result.stdout


def tail(text: str, n: int = 4000) -> str:
    return text[-n:]


def debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (one-line and deb822 sources); Debian's own otherwise."""
    uris = []
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*"))]:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split("#", 1)[0].split()
            if path.endswith(".sources") and words[:1] == ["URIs:"]:
                uris += words[1:]
            elif words[:1] == ["deb"]:
                uris += [w for w in words[1:] if "://" in w][:1]
    for uri in uris:
        if uri.rstrip("/").endswith("/debian"):
            return uri.rstrip("/")
    return "http://deb.debian.org/debian"


def base_image(engine: Engine) -> str:
    """The debootstrapped base, imported into podman; from the podman store or the tarball cache when there."""
    key = hashlib.sha256(f"{SUITE} minbase {','.join(INCLUDE)}".encode()).hexdigest()[:12]
    ref = f"{TAG}/base:{SUITE}-{key}"
    if engine.image_exists(ref):
        log(f"base image {ref}: in the podman store")
        return ref
    tarball = os.path.join(CACHE, f"{SUITE}-minbase-{key}.tar")
    if not os.path.exists(tarball):
        os.makedirs(CACHE, exist_ok=True)
        mirror = debian_mirror()
        rootfs = tempfile.mkdtemp(prefix="llm-debootstrap-", dir=CACHE)
        try:
            t0 = time.monotonic()
            cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(INCLUDE)}", SUITE, rootfs, mirror]
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if result.returncode != 0:
                raise AssertionError(
                    f"debootstrap from {mirror} failed (is Debian's mirror reachable?):\n{tail(result.stdout + result.stderr)}"
                )
            log(f"debootstrap {SUITE} from {mirror}: {time.monotonic() - t0:.0f}s")
            shutil.rmtree(os.path.join(rootfs, "var", "cache", "apt", "archives"), ignore_errors=True)
            partial = f"{tarball}.{os.getpid()}.partial"  # another run may be making the same tarball
            with tarfile.open(partial, "w") as tar:
                tar.add(rootfs, arcname=".")
            os.replace(partial, tarball)
        finally:
            shutil.rmtree(rootfs, ignore_errors=True)
    t0 = time.monotonic()
    engine.podman("import", tarball, ref, timeout=300)
    log(f"imported {tarball}: {time.monotonic() - t0:.0f}s")
    return ref


def build(
    engine: Engine, context: str, containerfile: str, ref: str, build_args: dict | None = None, timeout: float = 600
) -> float:
    """podman build with the host's network; returns the seconds it took."""
    args = ["build", "--network", "host", "-f", containerfile, "-t", ref]
    for k, v in (build_args or {}).items():
        args += ["--build-arg", f"{k}={v}"]
    t0 = time.monotonic()
    engine.podman(*args, context, timeout=timeout)
    return time.monotonic() - t0


PROMETHEUS_CONTAINERFILE = """\
FROM {base}
RUN apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \\
 && rm -rf /var/lib/apt/lists/* \\
 && mkdir -p /prometheus && chown prometheus:prometheus /prometheus
USER prometheus
WORKDIR /prometheus
ENTRYPOINT ["/usr/bin/prometheus"]
"""


def prometheus_image(engine: Engine, base: str, workdir: str) -> str:
    ref = f"{TAG}/prometheus:{base.rsplit(':', 1)[1]}"
    path = os.path.join(workdir, "Containerfile.prometheus")
    with open(path, "w", encoding="utf-8") as f:
        f.write(PROMETHEUS_CONTAINERFILE.format(base=base))
    seconds = build(engine, workdir, path, ref, timeout=600)
    log(f"prometheus image: {seconds:.0f}s")
    return ref


def fresh_clone(dest: str) -> str:
    """What a fresh clone of this checkout holds (tracked files and new ones git does not ignore):
    no results/, .cache/, .venv, .git."""
    out = subprocess.run(
        ["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    for rel in sorted(set(p for p in out.decode().split("\0") if p)):
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src):
            continue  # deleted in the work tree
        os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, rel))
    assert os.path.isfile(os.path.join(dest, "docker-compose.yml"))
    assert not os.path.exists(os.path.join(dest, "results"))
    return dest


def tree_key(path: str) -> str:
    """A short hash of a folder's files: the tag of the image built from it (concurrent runs of
    different trees do not overwrite each other's image)."""
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(dirpath, name)
            h.update(os.path.relpath(full, path).encode() + b"\0")
            with open(full, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()[:12]


def compose_build(engine: Engine, clone: str, base: str, ref: str, timeout: float = 900) -> str:
    """The suite's image as a person without a registry builds it (docs/containers.md): the host's
    CA bundle in deploy/ca/, `podman-compose build` with SUITE_BASE; returns the build's output."""
    shutil.copy(HOST_CA, os.path.join(clone, "deploy", "ca", "host.crt"))
    cmd = [*compose_command(), "-f", os.path.join(clone, "docker-compose.yml"), "build"]
    result = engine.run(cmd, timeout, env={"SUITE_BASE": base, "SUITE_IMAGE": ref}, cwd=clone)
    return result.stdout + result.stderr


class Project:
    """One podman-compose project of a clone, inside the engine's network namespace."""

    def __init__(self, engine: Engine, clone: str, files: tuple = ("docker-compose.yml",), env: dict | None = None):
        self.engine = engine
        self.clone = clone
        self.name = f"llmct{secrets.token_hex(3)}"
        self.files = [a for f in files for a in ("-f", os.path.join(clone, f))]
        self.env = env or {}

    def compose(self, *args, timeout: float, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [*compose_command(), "-p", self.name, *self.files, *args]
        return self.engine.run(cmd, timeout, check=check, ns=True, env=self.env, cwd=self.clone)

    def containers(self) -> list[dict]:
        out = self.engine.podman(
            "ps", "-a", "--filter", f"label=io.podman.compose.project={self.name}", "--format", "json"
        ).stdout
        return json.loads(out or "[]")

    def container(self, service: str) -> dict:
        (c,) = [c for c in self.containers() if c["Labels"].get("com.docker.compose.service") == service]
        return c

    def down(self) -> None:
        self.compose("down", "-v", "-t", "5", timeout=120, check=False)
        for c in self.containers():
            self.engine.podman("rm", "-f", "-v", c["Id"], check=False)
        for net in self.engine.podman("network", "ls", "--format", "{{.Name}}", check=False).stdout.split():
            if net.startswith(self.name):
                self.engine.podman("network", "rm", "-f", net, check=False)
