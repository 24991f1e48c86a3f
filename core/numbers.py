"""Formatting: the one place the report's numbers become text (no number is formatted in a template)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np


def fmt(v, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        return f"{float(v):,.{digits}f}"
    return str(v)


def auto(v) -> str:
    """A number with sensible digits for its size (sections we have no view for)."""
    if isinstance(v, (float, np.floating)) and math.isfinite(v) and not float(v).is_integer():
        a = abs(float(v))
        return fmt(v, 0 if a >= 100 else (2 if a >= 1 else 4))
    text = fmt(v)
    return text if len(text) <= 300 else text[:297] + "..."


def utc(ts) -> str:
    try:
        return datetime.fromtimestamp(float(ts), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return "-"
