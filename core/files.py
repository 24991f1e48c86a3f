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
