"""What run.json records of the process that ran: the command line (secrets blanked) and the
versions of the packages that measured.
"""

from __future__ import annotations

import platform
import sys
from importlib import metadata

from plugin.server_metrics import without_credentials

PACKAGES = ("locust", "geventhttpclient", "gevent", "pyarrow", "pandas", "numpy", "transformers", "orjson")


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
