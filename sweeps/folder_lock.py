"""One sweep or A/B at a time in a folder: two would start the same points and write the same
files. The lock is the OS's (flock on the folder's .lock file): it goes with the process that
holds it, so a sweep that was killed leaves nothing to clean up before it is resumed."""

from __future__ import annotations

import fcntl
import os

from core.errors import InputError

LOCK = ".lock"


def lock_folder(folder: str):
    """Holds the folder's lock until the returned file is closed (or the process ends)."""
    os.makedirs(folder, exist_ok=True)
    f = open(os.path.join(folder, LOCK), "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise InputError(
            f"--out {folder}: another sweep or A/B is running in this folder now; wait for it to end, "
            "or give another --out"
        ) from None
    return f
