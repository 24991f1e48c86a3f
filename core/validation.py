"""One formatter for every typed contract: a pydantic validation error becomes the one-line
`InputError` the suite prints (`--option: problem (fix)` or `classes.short.input_chars.max: ...`).

Models raise `InputError` from their validators when they know the whole line (the field and the
fix); anything pydantic finds itself (a missing field, a wrong type, an unknown key) is worded
here, prefixed with the field's location as `field_name` names it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from core.errors import InputError

M = TypeVar("M", bound=BaseModel)

_WORDING = {
    "missing": "is required",
    "extra_forbidden": "is not a known field",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
}


def dotted(loc: Sequence[Any]) -> str:
    """('classes', 'short', 'input_chars', 'max') -> 'classes.short.input_chars.max'."""
    return ".".join(str(part) for part in loc)


def describe(error: ValidationError, field_name: Callable[[Sequence[Any]], str] = dotted) -> str:
    """The first problem of `error` as one line."""
    first = error.errors(include_url=False)[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, InputError):
        return str(cause)
    # a tagged union adds the tag to the location ('input_chars', 'uniform', 'max'): not a field
    loc = [p for p in first["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
    where = field_name(loc) if loc else "input"
    problem = _WORDING.get(first["type"])
    if problem is None:
        problem = str(cause) if cause is not None else first["msg"]
    got = first.get("input")
    if first["type"] not in ("missing",) and isinstance(got, (str, int, float, bool)):
        return f"{where}: {got!r} {problem}" if problem.startswith(("is ", "must ")) else f"{where}: {problem}"
    return f"{where}: {problem}"


def build(model: type[M], data: Any, field_name: Callable[[Sequence[Any]], str] = dotted, **context: Any) -> M:
    """`model` validated from `data`, or an `InputError` with the one-line message."""
    try:
        return model.model_validate(data, context=context or None)
    except ValidationError as e:
        raise InputError(describe(e, field_name)) from None
