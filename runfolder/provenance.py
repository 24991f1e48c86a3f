"""What run.json records of the process that ran: the command line (secrets blanked) and the
versions of the suite and of the packages that measured, read as the run starts (the suite's once
per process).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import subprocess
import sys
from importlib import metadata

from core.urls import without_credentials

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("locust", "geventhttpclient", "gevent", "pyarrow", "pandas", "numpy", "transformers", "orjson")


# the packages a load process measures and records with (with locustfile.py): two trees that differ
# only elsewhere (the simulator, the reports, the web UI, tests, benches, docs) run the same load
LOAD_SOURCE = ("core", "metrics", "plugin", "runfolder", "shapes", "stats", "targets", "users", "workloads")


@functools.cache
def suite_version() -> str:
    """The suite this process runs: `git describe` of its checkout; where the checkout is modified
    ("-dirty") or there is none, with the hash of its source (`source_hash`) added, so two trees
    that differ in one line never name the same version. Read once per process (its code is loaded
    once): run.json `versions.suite` (which summary.json's setup states), and what a master and its
    workers exchange (plugin/suite_match.py)."""
    try:
        out = subprocess.run(
            ["git", "-C", ROOT, "describe", "--always", "--dirty", "--tags"], capture_output=True, text=True, timeout=5
        )
        described = out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        described = ""
    if described and not described.endswith("-dirty"):
        return described
    return f"{described or 'no git checkout'}, source {source_hash()}"


def source_hash(root: str = ROOT) -> str:
    """A hash of the suite's Python source under `root` that a load process runs: every .py file of
    LOAD_SOURCE and the locustfile, by path and content."""
    digest = hashlib.sha256()
    for path in _source_files(root):
        digest.update(os.path.relpath(path, root).encode() + b"\0")
        with open(path, "rb") as f:
            digest.update(f.read() + b"\0")
    return digest.hexdigest()[:12]


def _source_files(root: str) -> list[str]:
    files = [os.path.join(root, "locustfile.py")] if os.path.isfile(os.path.join(root, "locustfile.py")) else []
    for top in LOAD_SOURCE:
        for folder, dirs, names in os.walk(os.path.join(root, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
            files += [os.path.join(folder, n) for n in names if n.endswith(".py")]
    return sorted(files)


def package_versions() -> dict:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def public_argv() -> list[str]:
    """The command line with secret values blanked (an API key may be given as a flag, also
    abbreviated as argparse allows: --api-k KEY; a URL's user:password@ is left out)."""
    out, hide = [], False
    for arg in map(without_credentials, sys.argv):
        flag, eq, _ = arg.partition("=")
        secret = len(flag) > 2 and "--api-key".startswith(flag)
        if hide:
            out.append("***")
            hide = False
        elif secret and eq:
            out.append(f"{flag}=***")
        else:
            out.append(arg)
            hide = secret
    return out
