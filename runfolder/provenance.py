"""What run.json records of the process that ran: the command line (secrets blanked) and the
versions of the suite and of the packages that measured, read as the run starts.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata

from core.urls import without_credentials

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("locust", "geventhttpclient", "gevent", "pyarrow", "pandas", "numpy", "transformers", "orjson")


def suite_version() -> str:
    """The suite's checkout as `git describe` names it; "unknown" outside a git checkout. Read once
    as a run starts (plugin/run.py: run.json `versions.suite`, which summary.json's setup states)."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty", "--tags"], capture_output=True,
                             text=True, timeout=5)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown" if out.returncode == 0 else "unknown"


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
