"""Durations as people write them ('250ms', '1.5s', '2m', '1h30m') and the request timeouts."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from core.errors import InputError


@dataclass(frozen=True, slots=True)
class Timeouts:
    """A request's time limits, seconds (--timeout-*: their defaults are the options', plugin/options.py)."""

    connect: float
    first_token: float  # headers and first body bytes
    idle: float  # longest gap between reads once the body flows
    total: float


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def duration_s(text: str | float) -> float:
    """'250ms', '1.5s', '10m', '2h', '1h30m' or a plain number of seconds -> seconds (>= 0); a
    ValueError saying what is wrong and the fix otherwise."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        rest = str(text).strip()
        if not rest:
            raise ValueError("empty duration; give e.g. 30s, 500ms, 2m")
        # compound forms like 1h30m
        parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", rest)
        if parts and "".join(n + u for n, u in parts) == rest.replace(" ", ""):
            value = sum(float(n) * _UNIT[u] for n, u in parts)
        else:
            m = _DURATION.match(rest)
            if not m:
                raise ValueError(f"'{text}' is not a duration; give e.g. 30s, 500ms, 2m, 1h30m")
            value = float(m.group(1)) * _UNIT[m.group(2)]
    if value < 0 or math.isnan(value):
        raise ValueError("duration must not be negative; give e.g. 30s")
    return value


def parse_duration(option: str, text: str | float) -> float:
    """duration_s for the value of --`option`: a mistake is one InputError line naming it."""
    try:
        return duration_s(text)
    except ValueError as e:
        raise InputError(f"--{option}: {e}") from None
