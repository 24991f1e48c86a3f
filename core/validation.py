"""One formatter for every typed contract: a pydantic validation error becomes the one-line
`InputError` the suite prints (`--option: problem (fix)` or `classes.short.input_chars.max: ...`).

Models raise `InputError` from their validators when they know the whole line (the field and the
fix), or `FieldError` when they know the problem and the fix but not where the field sits (the
location is pydantic's, plus `at` for a model validator pointing at one of its own fields).
Anything pydantic finds itself (a missing field, a wrong type, an unknown key) is worded here,
prefixed with the field's location as `field_name` names it; the fix comes from the model: the
allowed fields for an unknown key, the required ones for a missing key, else the field's `Fix`.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, RootModel, ValidationError
from pydantic.fields import FieldInfo

from core.errors import InputError

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Fix:
    """Field metadata: the fix shown after a problem pydantic finds with the field's value (a wrong
    type, out of range): ``weight: Annotated[float, Fix("give the weight as a number")]``."""

    text: str


class FieldError(ValueError):
    """A validator's problem and fix. ``at`` names a field below the one validated (a model
    validator pointing at one of its fields): ``FieldError("min 5 is above max 3", "swap them", at="min")``."""

    def __init__(self, problem: str, fix: str = "", at: str | Sequence[Any] = ()):
        super().__init__(f"{problem} ({fix})" if fix else problem)
        self.problem, self.fix = problem, fix
        self.at = (at,) if isinstance(at, str) else tuple(at)


_WORDING = {  # pydantic's error type -> the problem; {name} is a key of the error's context
    "missing": "is required",
    "extra_forbidden": "unknown field",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "int_type": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "finite_number": "must be a finite number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "literal_error": "must be {expected}",
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
}


def dotted(loc: Sequence[Any]) -> str:
    """('classes', 'short', 'input_chars', 'max') -> 'classes.short.input_chars.max'."""
    return ".".join(str(part) for part in loc)


def _bare(tp: Any) -> Any:
    """`tp` without Annotated and without `| None`."""
    while True:
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
        elif get_origin(tp) in (Union, types.UnionType) and sum(a is not type(None) for a in get_args(tp)) == 1:
            tp = next(a for a in get_args(tp) if a is not type(None))
        else:
            return tp


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _field(model: type[BaseModel], part: Any) -> FieldInfo | None:
    fields = model.model_fields
    return fields.get(part) or next((f for f in fields.values() if f.alias is not None and f.alias == part), None)


def _resolve(model: Any, loc: Sequence[Any]) -> tuple[list[Any], type[BaseModel] | None, FieldInfo | None, Any]:
    """`loc` without the parts that name no field (a tagged union's tag, a mapping key's '[key]'),
    the model holding the last part, that part's field (None for a key the model lacks) and the
    type expected there."""
    tp, owner, info, clean = model, None, None, []
    for part in loc:
        tp = _bare(tp)
        while _is_model(tp) and issubclass(tp, RootModel):  # its locations skip 'root'
            tp = _bare(tp.model_fields["root"].annotation)
        if part == "[key]":
            continue
        if get_origin(tp) in (Union, types.UnionType):
            named = [m for m in map(_bare, get_args(tp)) if getattr(m, "__name__", None) == part]
            if named:  # a plain union names the member that failed
                tp = named[0]
                continue
            members = [m for m in map(_bare, get_args(tp)) if _is_model(m)]
            tagged = [
                m
                for m in members
                if any(
                    get_origin(_bare(f.annotation)) is Literal and part in get_args(_bare(f.annotation))
                    for f in m.model_fields.values()
                )
            ]
            if tagged:
                tp = tagged[0]
                continue
            tp = next((m for m in members if _field(m, part) is not None), None)
        clean.append(part)
        if _is_model(tp):
            owner, info = tp, _field(tp, part)
            tp = info.annotation if info is not None else None
            continue
        owner = info = None
        args = get_args(tp)
        origin = get_origin(tp)
        tp = (
            args[-1]
            if isinstance(origin, type) and issubclass(origin, Mapping) and args
            else args[0]
            if origin in (list, tuple, set, frozenset) and args
            else None
        )
    return clean, owner, info, _bare(tp)


def _fix(kind: str, owner: type[BaseModel] | None, info: FieldInfo | None, expected: Any) -> str:
    if owner is not None and kind == "extra_forbidden":
        return "allowed fields: " + ", ".join(f.alias or n for n, f in owner.model_fields.items())
    if owner is not None and kind == "missing":
        return "required fields: " + ", ".join(f.alias or n for n, f in owner.model_fields.items() if f.is_required())
    for meta in info.metadata if info is not None else ():
        if isinstance(meta, Fix):
            return meta.text
    if _is_model(expected) and not issubclass(expected, RootModel):
        return "give a mapping of " + ", ".join(f.alias or n for n, f in expected.model_fields.items())
    return ""


def describe(
    error: ValidationError, field_name: Callable[[Sequence[Any]], str] = dotted, model: type[BaseModel] | None = None
) -> str:
    """The first problem of `error` as one line; with `model` (the one validated), locations lose
    union tags and the fix comes from the model (see the module's docstring)."""
    errors = error.errors(include_url=False)
    # an unknown key explains a missing one (a misspelt field name): name it first
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    kind, ctx = first["type"], first.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, InputError):
        return str(cause)
    loc = [p for p in first["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
    if isinstance(cause, FieldError):
        loc += cause.at
    if kind == "union_tag_invalid":  # the tag names a kind that does not exist: point at the tag's field
        loc.append(str(ctx.get("discriminator", "")).strip("'"))
    loc, owner, info, expected = _resolve(model, loc)
    where = field_name(loc) if loc else "input"
    got = first.get("input")
    if isinstance(cause, FieldError):
        problem, fix = cause.problem, cause.fix
    elif kind == "union_tag_invalid":
        problem = f"unknown {loc[-1]} {ctx.get('tag')!r}"
        fix = "use one of " + ", ".join(t.strip().strip("'") for t in str(ctx.get("expected_tags", "")).split(","))
    else:
        problem = _WORDING.get(kind)
        problem = problem.format_map(ctx) if problem is not None else str(cause) if cause is not None else first["msg"]
        fix = _fix(kind, owner, info, expected)
        if kind != "missing" and isinstance(got, (str, int, float, bool)):
            if problem.startswith(("is ", "must ")):
                problem = f"{got!r} {problem}"
            elif problem.startswith("expected "):
                problem = f"{problem}, got {got!r}"
    return f"{where}: {problem} ({fix})" if fix else f"{where}: {problem}"


def build(model: type[M], data: Any, field_name: Callable[[Sequence[Any]], str] = dotted, **context: Any) -> M:
    """`model` validated from `data`, or an `InputError` with the one-line message."""
    try:
        return model.model_validate(data, context=context or None)
    except ValidationError as e:
        raise InputError(describe(e, field_name, model)) from None
