"""The distributions a workload spec draws lengths, turns and think times from: pydantic models told
apart by ``dist`` (the kinds are described in workloads/spec_file.py), clipped to [min, max], and the
strict number types they hold."""

from __future__ import annotations

import math
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from core.validation import FieldError, Fix

EMPIRICAL_MAX = 2**31 - 1  # max of an empirical distribution without values or max


# --------------------------------------------------------------------------- values


def _length(v: int) -> int:
    if v < 1:
        raise FieldError(f"negative length {v}" if v < 0 else f"{v} is below 1", "lengths are whole numbers >= 1")
    return v


def _seconds(v: float) -> float:
    if not math.isfinite(v) or v < 0:
        raise FieldError(f"{v:g} is not a duration", "give seconds >= 0")
    return v


def _integral(v: Any) -> Any:
    """3.0 is 3 (a whole number written as a float)."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


# numbers are numbers: strict, so neither true nor "5" passes for one
Whole = Annotated[int, Field(strict=True), BeforeValidator(_integral)]
Length = Annotated[Whole, AfterValidator(_length), Fix("give a whole number >= 1")]  # characters, tokens, turns
Number = Annotated[float, Field(strict=True)]
Seconds = Annotated[Number, AfterValidator(_seconds), Fix("give seconds as a number >= 0")]
Real = Annotated[float, Field(strict=True, allow_inf_nan=False), Fix("give a number")]
V = TypeVar("V")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- distributions


class _Dist(_Model):
    """A distribution clipped to [min, max]; the kinds below, told apart by ``dist``."""

    def to_dict(self) -> dict:
        return self.model_dump(mode="json", exclude_none=True)

    def describe(self) -> str:
        return f"{self.min}-{self.max} {self.dist}"  # type: ignore[attr-defined]


def _ordered(d: Any) -> None:
    if d.min > d.max:
        raise FieldError(f"min {d.min} is above max {d.max}", "swap them or fix one", at="min")


class Uniform(_Dist, Generic[V]):
    dist: Literal["uniform"] = "uniform"
    min: V
    max: V

    @model_validator(mode="after")
    def _check(self):
        _ordered(self)
        return self


class Normal(_Dist, Generic[V]):
    dist: Literal["normal"] = "normal"
    min: V
    max: V
    mean: Real
    stddev: Real

    @model_validator(mode="after")
    def _check(self):
        _ordered(self)
        if self.stddev <= 0:
            raise FieldError(
                f"stddev {self.stddev:g} must be > 0", "use a positive stddev, or dist: fixed", at="stddev"
            )
        if not self.min <= self.mean <= self.max:
            raise FieldError(
                f"mean {self.mean:g} is outside [{self.min}, {self.max}]", "move mean inside min..max", at="mean"
            )
        return self

    def describe(self) -> str:
        return f"{super().describe()} (mean {self.mean:g}, sd {self.stddev:g})"


class LogNormal(_Dist, Generic[V]):
    dist: Literal["lognormal"] = "lognormal"
    min: V
    max: V
    median: Real
    sigma: Real

    @model_validator(mode="after")
    def _check(self):
        _ordered(self)
        if self.sigma <= 0:
            raise FieldError(f"sigma {self.sigma:g} must be > 0", "use a positive sigma, or dist: fixed", at="sigma")
        if not self.min <= self.median <= self.max or self.median <= 0:
            raise FieldError(
                f"median {self.median:g} is outside [{self.min}, {self.max}] or not > 0",
                "move median inside min..max",
                at="median",
            )
        return self

    def describe(self) -> str:
        return f"{super().describe()} (median {self.median:g}, sigma {self.sigma:g})"


class Fixed(_Dist, Generic[V]):
    """Always ``value``; min and max default to it."""

    dist: Literal["fixed"] = "fixed"
    value: V
    min: V | None = None  # never None once validated
    max: V | None = None

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and "value" in data:
            data = {"min": data["value"], "max": data["value"], **data}
        return data

    @model_validator(mode="after")
    def _check(self):
        _ordered(self)
        if not self.min <= self.value <= self.max:
            raise FieldError(
                f"value {self.value} is outside [{self.min}, {self.max}]", "move value inside min..max", at="value"
            )
        return self

    def describe(self) -> str:
        return f"fixed {self.value}"


class Empirical(_Dist, Generic[V]):
    """The observed ``values`` (kept sorted), each drawn with equal probability; min and max default to
    theirs. Without values (only for a ``prompts: verbatim`` class's input_chars) the lengths of the
    class's imported prompts, each as often as it was logged."""

    dist: Literal["empirical"] = "empirical"
    values: tuple[V, ...] | None = None
    min: V | None = None  # never None once validated
    max: V | None = None

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        values = data.get("values")
        if values is None:
            return {"min": 1, "max": EMPIRICAL_MAX, **data}
        if not isinstance(values, list) or not values:
            raise FieldError(
                "expected a non-empty list of values",
                "write values: [12, 40, 40, 95, ...] (the observed values)",
                at="values",
            )
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            values = sorted(values)
            data = {"min": values[0], "max": values[-1], **data, "values": values}
        return data

    @model_validator(mode="after")
    def _check(self):
        _ordered(self)
        v = self.values
        if v is not None and (v[0] < self.min or v[-1] > self.max):
            bad = v[0] if v[0] < self.min else v[-1]
            raise FieldError(
                f"value {bad} is outside [{self.min}, {self.max}]",
                "drop min/max (they default to the values' range) or fix the values",
                at="values",
            )
        return self

    def describe(self) -> str:
        v = self.values
        if v is None:
            return "empirical (logged prompts)" + (f" {self.min}-{self.max}" if self.max < EMPIRICAL_MAX else "")
        return f"{self.min}-{self.max} empirical ({len(v)} values, median {v[len(v) // 2]:g})"


def _shorthand(raw: Any) -> Any:
    """A bare number is ``fixed``; ``dist`` defaults to ``uniform``."""
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return {"dist": "fixed", "value": raw}
    if isinstance(raw, dict) and "dist" not in raw:
        return {**raw, "dist": "uniform"}
    return raw


# whole numbers >= 1 (characters, tokens, turns), and seconds >= 0 (think times)
Distribution = Annotated[
    Uniform[Length] | Normal[Length] | LogNormal[Length] | Fixed[Length] | Empirical[Length],
    Field(discriminator="dist"),
    BeforeValidator(_shorthand),
]
SecondsDistribution = Annotated[
    Uniform[Seconds] | Normal[Seconds] | LogNormal[Seconds] | Fixed[Seconds] | Empirical[Seconds],
    Field(discriminator="dist"),
    BeforeValidator(_shorthand),
]


def _needs_values(d: Any, at: str, fix: str) -> None:
    if d.dist == "empirical" and d.values is None:
        raise FieldError("missing values of the empirical distribution", fix, at=(at, "values"))
