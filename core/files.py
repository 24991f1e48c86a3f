"""Files written whole or not at all: a reader (a pipeline, the web UI, a report build) never sees
half a results file, even when the writer is killed mid-write.

The text goes to `<path>.tmp` in the same folder, then `os.replace` swaps it in: on POSIX a
rename within one file system is atomic, so the path holds the old content or the new, never a mix.
"""

from __future__ import annotations

import json
import os
from typing import Any


def write_atomic(path: str, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:  # a full disk, say: no half-written .tmp left beside the results
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _jsonable(x: Any):
    if hasattr(x, "item"):  # numpy scalars
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def write_json(path: str, data: Any) -> None:
    """`data` as indented JSON, atomically. NaN and infinities are refused (JSON has none): write
    None for a missing value."""
    write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False, default=_jsonable) + "\n")


def file_digest(path: str) -> dict:
    """A file's size and SHA-256, read in blocks: what a results folder records of its records file
    so that a reader can refuse a damaged copy instead of reading wrong values (runfolder/reading.py)."""
    import hashlib

    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
            size += len(block)
    return {"bytes": size, "sha256": h.hexdigest()}
