"""Sizes as people write them ('64MB', '512KB', '1.5GB', '1048576') -> bytes, and back."""

from __future__ import annotations

import re

from core.errors import InputError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)
_UNIT = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def size_bytes(text: str | int) -> int:
    """Bytes of '64MB', '512KB', '1GB', '64MiB' or a plain number of bytes (above 0); K, M, G are
    powers of 1024 whichever way they are written. A ValueError with the fix otherwise."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = _SIZE.match(str(text))
        if not m:
            raise ValueError(f"'{text}' is not a size; give e.g. 64MB, 512KB or a number of bytes")
        value = int(float(m.group(1)) * _UNIT[(m.group(2) or "")[:1].lower()])
    if value <= 0:
        raise ValueError("must be above 0, e.g. 64MB")
    return value


def parse_size(option: str, text: str | int) -> int:
    """size_bytes for the value of --`option`: a mistake is one InputError line naming it."""
    try:
        return size_bytes(text)
    except ValueError as e:
        raise InputError(f"--{option}: {e}") from None


def format_size(n: int) -> str:
    """The way parse_size reads it: '512MB' for a whole number of GB, MB or KB, else '<n> bytes'."""
    for unit, shift in (("GB", 30), ("MB", 20), ("KB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return f"{n} bytes"
