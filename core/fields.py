"""Reusable annotated types for values people type: durations, sizes, shares, ports, counts.

Each parses the text an option, a form field or a file holds (or a number already parsed) and
raises `FieldError` with the problem and the fix; `core.validation.build` puts the field's name
in front (`--step-time: 'soon' is not a duration; give e.g. 30s, ...`). An empty text is the
option left unset: None for the optional types, 0 for a share or a port.
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from core.durations import duration_s
from core.sizes import size_bytes
from core.validation import FieldError


def _blank(value) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _seconds(value) -> float:
    if _blank(value):
        raise FieldError("empty duration; give e.g. 30s, 500ms, 2m")
    try:
        return duration_s(value)
    except ValueError as e:
        raise FieldError(str(e)) from None


def _above_zero_duration(value: float) -> float:
    if value <= 0:
        raise FieldError("must be above 0", "give e.g. 30s")
    return value


def _bytes(value) -> int:
    try:
        return size_bytes(value)
    except ValueError as e:
        raise FieldError(str(e)) from None


def _number(value, what: str = "a number") -> float:
    if isinstance(value, bool):
        raise FieldError(f"'{value}' is not {what}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise FieldError(f"'{value}' is not {what}") from None
    if math.isnan(number) or math.isinf(number):
        raise FieldError(f"'{value}' is not a finite number")
    return number


def _whole(value, minimum: int) -> int | None:
    if _blank(value):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise FieldError(f"'{value}' is not an integer; give a whole number") from None
    if number < minimum:
        raise FieldError(f"{number} is below the minimum {minimum}")
    return number


def _positive(value) -> float | None:
    if _blank(value):
        return None
    number = _number(value)
    if number <= 0:
        raise FieldError(f"{value} must be above 0")
    return number


def _share(value) -> float:
    if _blank(value):
        return 0.0
    number = _number(value)
    if not 0 <= number <= 1:
        raise FieldError(f"{value} is a share", "give a number from 0 to 1, e.g. 0.1")
    return number


def _port(value) -> int:
    if _blank(value):
        return 0
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise FieldError(f"'{value}' is not a port number", "1-65535, 0 = off") from None
    if not 0 <= port <= 65535:
        raise FieldError(f"{port} is not a port number", "1-65535, 0 = off")
    return port


def _percent(value) -> float:
    number = _number(value, "a number (percent of one core)")
    if not 0 < number <= 1000:
        raise FieldError(f"{value} must be above 0", "percent of one core, e.g. 70")
    return number


def _names(value) -> tuple[str, ...]:
    if _blank(value):
        return ()
    if isinstance(value, str):
        return tuple(dict.fromkeys(part.strip() for part in value.split(",") if part.strip()))
    return tuple(value)


def _text(value) -> str:
    return "" if value is None else str(value)


Duration = Annotated[float, BeforeValidator(_seconds)]  # '250ms', '1.5s', '2m', '1h30m' -> seconds, >= 0
PositiveDuration = Annotated[float, BeforeValidator(_seconds), AfterValidator(_above_zero_duration)]
Size = Annotated[int, BeforeValidator(_bytes)]  # '64MB', '512KB', bytes -> bytes, > 0
Share = Annotated[float, BeforeValidator(_share)]  # 0..1, empty = 0
Port = Annotated[int, BeforeValidator(_port)]  # 0..65535, empty = 0 (off)
Percent = Annotated[float, BeforeValidator(_percent)]  # percent of one core, (0, 1000]
Count = Annotated[int | None, BeforeValidator(lambda v: _whole(v, 0))]  # whole number >= 0, empty = None
PositiveCount = Annotated[int | None, BeforeValidator(lambda v: _whole(v, 1))]  # whole number >= 1, empty = None
Rate = Annotated[float | None, BeforeValidator(_positive)]  # a number above 0, empty = None
Names = Annotated[tuple[str, ...], BeforeValidator(_names)]  # 'a, b,a' -> ('a', 'b')
Text = Annotated[str, BeforeValidator(_text)]  # None (an option Locust left unset) -> ''

__all__ = [
    "Count",
    "Duration",
    "Names",
    "Percent",
    "Port",
    "PositiveCount",
    "PositiveDuration",
    "Rate",
    "Share",
    "Size",
    "Text",
]
