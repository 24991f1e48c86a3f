"""Workload spec: YAML file -> validated, immutable :class:`WorkloadSpec`.

The file's contract is the pydantic models below (:class:`WorkloadFile` and what it holds),
validated once at load through ``core.validation.build``: a mistake is one line naming the file and
the field (``spec.yaml: classes.short.input_chars.max: ...``). The file's classes are then resolved
against the template library into :class:`ClassSpec` (the eligible templates), what the sampler reads.

Schema (every field other than ``classes`` is optional)::

    name: reference-mix               # default: the file's stem
    description: free text
    templates: templates.jsonl        # relative to this file; default: the built-in library
    # or: templates: {file: templates.jsonl, domains: [finance], langs: [en]}
    system_prompt: {share: 0.3}       # probability that a request gets a system prompt
    # or: system_prompt: {share: 1.0, text: "You are ..."}   # one fixed system prompt
    classes:
      short:
        weight: 0.4                   # weights of all classes sum to 1.0
        input_chars: {min: 20, max: 200, dist: uniform}   # whole input, system prompt included
        output_tokens: {min: 20, max: 200, dist: uniform} # -> max_tokens
        system_prompt: {share: 0.5}   # optional per-class override
        templates: {domains: [finance], langs: [zh]}      # optional per-class filter
        prompts: verbatim             # optional: send imported prompts (kind "prompt") as they are
        session: {turns: {min: 2, max: 6}, think_time_s: {min: 2, max: 20}}   # optional: conversations
        shared_prefix: {share: 0.5}   # optional per-class override
        tools: {count: 3, choice: auto}                 # optional: tool definitions (workloads/attachments.py)
        images: {count: 1, width: 512, height: 512}     # optional: images in the user message
        batch: {min: 1, max: 32}      # optional, --endpoint embeddings/rerank: texts or documents per request (default 1)
    shared_prefix: {share: 0.5, count: 4, chars: 1500}   # top level: long shared system prompts

Distributions (``dist`` defaults to ``uniform``; values are clipped to [min, max]):

    uniform:   min, max
    normal:    min, max, mean, stddev
    lognormal: min, max, median, sigma
    fixed:     value (min and max optional, default to value)
    empirical: values (observed values, drawn with equal probability; min/max default to theirs).
               Without values only for input_chars of a ``prompts: verbatim`` class: the lengths
               of the class's imported prompts (each drawn as often as it was logged).

A bare integer (``output_tokens: 256``) is shorthand for ``fixed``.

``prompts: verbatim``: the class draws whole imported prompts (library kind ``prompt``, written by
``python -m workloads import``) whose input length (logged system prompt + history + text) lies in
input_chars [min, max]; with ``dist: empirical`` (no values) each prompt as often as it was logged,
otherwise the prompt nearest to the drawn length. Nothing is spliced or cut; the logged system
prompt goes with its prompt (``system_prompt`` does not apply).

``session``: one draw of the class is a conversation of ``turns`` requests (an integer
distribution, >= 1) sent one after another by the same user, ``think_time_s`` seconds apart (a
distribution in seconds, fractions allowed), each carrying the previous turns (user messages and
the assistant replies actually received). Every turn's new user message is drawn from the class
(input_chars, output_tokens); only the first may carry a system prompt. The class weight is the
share of draws (conversations), not of requests.

``shared_prefix``: a share of requests gets one of ``count`` long system prompts of ``chars``
characters (replacing any other system prompt), the same texts in every process and run, to
measure prefix caching. The class's input_chars then applies to the rest of the input. Off unless
a spec asks for it: the default stays randomised so caching does not inflate results.

``tools`` and ``images`` (chat only): tool definitions sent with every request of the class (with
``tool_choice``), and images in its user messages, as described in workloads/attachments.py. A
conversation class answers a reply's tool calls with tool results before its next turn.

``batch`` (``--endpoint embeddings`` or ``rerank``): the texts each request embeds, or the documents
it ranks against its query, each drawn from the class like a request's input (system prompt and
history left out); without it one text per request.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import re
import time
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Generic, Literal, TypeVar, Union

import yaml
from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, field_validator,
                      model_validator)

from core.errors import InputError
from core.validation import FieldError, Fix, build, dotted

from .attachments import ToolsSpec, image_urls
from .library import Library, Template, load_library

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SPEC_PATH = os.path.join(PACKAGE_DIR, "default.yaml")
DEFAULT_TEMPLATES_PATH = os.path.join(PACKAGE_DIR, "templates.jsonl")

WEIGHT_TOLERANCE = 1e-6
EMPIRICAL_MAX = 2**31 - 1  # max of an empirical distribution without values or max
CLASS_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _error(path: str, where: str, problem: str, fix: str = "") -> InputError:
    """``FILE: FIELD: PROBLEM (FIX)``, the line every mistake in a spec gives."""
    return InputError(f"{path}: {where}: {problem}" + (f" ({fix})" if fix else ""))


# --------------------------------------------------------------------------- values


def _length(v: int) -> int:
    if v < 1:
        raise FieldError(f"negative length {v}" if v < 0 else f"{v} is below 1", "lengths are whole numbers >= 1")
    return v


def _seconds(v: float) -> float:
    if not math.isfinite(v) or v < 0:
        raise FieldError(f"{v:g} is not a duration", "give seconds >= 0")
    return v


def _within(name: str, lo: float, hi: float, fix: str):
    def check(v: float) -> float:
        if not lo <= v <= hi:
            raise FieldError(f"{name} {v} is outside [{lo}, {hi}]", fix)
        return v
    return AfterValidator(check)


def _names(v: Any) -> Any:
    """``finance`` is short for ``[finance]``; a list needs at least one non-empty name."""
    v = [v] if isinstance(v, str) else v
    if not isinstance(v, (list, tuple)) or not v or not all(isinstance(x, str) and x for x in v):
        raise FieldError("expected a non-empty list of names", "write e.g. [finance, e-commerce]")
    return v


def _nonblank(v: str | None) -> str | None:
    if v is not None and not v.strip():
        raise FieldError("expected a non-empty string", "give a text, or drop the field")
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
Names = Annotated[tuple[str, ...], BeforeValidator(_names)]
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
            raise FieldError(f"stddev {self.stddev:g} must be > 0", "use a positive stddev, or dist: fixed", at="stddev")
        if not self.min <= self.mean <= self.max:
            raise FieldError(f"mean {self.mean:g} is outside [{self.min}, {self.max}]",
                             "move mean inside min..max", at="mean")
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
            raise FieldError(f"median {self.median:g} is outside [{self.min}, {self.max}] or not > 0",
                             "move median inside min..max", at="median")
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
            raise FieldError(f"value {self.value} is outside [{self.min}, {self.max}]",
                             "move value inside min..max", at="value")
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
            raise FieldError("expected a non-empty list of values",
                             "write values: [12, 40, 40, 95, ...] (the observed values)", at="values")
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
            raise FieldError(f"value {bad} is outside [{self.min}, {self.max}]",
                             "drop min/max (they default to the values' range) or fix the values", at="values")
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
Distribution = Annotated[Union[Uniform[Length], Normal[Length], LogNormal[Length], Fixed[Length], Empirical[Length]],
                         Field(discriminator="dist"), BeforeValidator(_shorthand)]
SecondsDistribution = Annotated[Union[Uniform[Seconds], Normal[Seconds], LogNormal[Seconds], Fixed[Seconds],
                                      Empirical[Seconds]], Field(discriminator="dist"), BeforeValidator(_shorthand)]


def _needs_values(d: Any, at: str, fix: str) -> None:
    if d.dist == "empirical" and d.values is None:
        raise FieldError("missing values of the empirical distribution", fix, at=(at, "values"))


# --------------------------------------------------------------------------- the file's parts


class TemplateFilter(_Model):
    domains: Names | None = None
    langs: Names | None = None

    def match(self, t: Template) -> bool:
        return ((self.domains is None or t.domain in self.domains)
                and (self.langs is None or t.lang in self.langs))

    def to_dict(self) -> dict:
        return {k: list(v) for k, v in (("domains", self.domains), ("langs", self.langs)) if v is not None}

    def merged(self, other: "TemplateFilter") -> "TemplateFilter":
        """This filter narrowed by ``other`` (other's lists win where set)."""
        return TemplateFilter(domains=other.domains if other.domains is not None else self.domains,
                              langs=other.langs if other.langs is not None else self.langs)


class TemplatesSource(_Model):
    """``templates:`` at the top level: the library file (``templates: FILE`` is short for
    ``{file: FILE}``) and a filter for every class."""

    file: Annotated[str, AfterValidator(_nonblank), Fix("give the JSONL file, relative to the spec")] = DEFAULT_TEMPLATES_PATH
    domains: Names | None = None
    langs: Names | None = None

    def filter(self) -> TemplateFilter:
        return TemplateFilter(domains=self.domains, langs=self.langs)


class SystemPromptSpec(_Model):
    share: Annotated[Number, _within("share", 0, 1, "give the fraction of requests with a system prompt, 0 to 1"),
                     Fix("give share as a number in [0, 1]")] = 0.0
    text: Annotated[str | None, Fix("give the system prompt text, or drop text to use the library")] = None

    @field_validator("text")
    @classmethod
    def _text(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise FieldError("text must be a non-empty string", "give the system prompt text, or drop text to use the library")
        return v.strip() if v is not None else None

    def to_dict(self) -> dict:
        return {"share": self.share, **({"text": self.text} if self.text is not None else {})}


class SessionSpec(_Model):
    """A conversation: `turns` requests, `think_time_s` seconds apart."""

    turns: Annotated[Distribution | None, Fix("give the number of turns, e.g. 4 or {min: 2, max: 6}")] = None
    think_time_s: Annotated[SecondsDistribution, Fix("write {min: 1, max: 10, dist: uniform} in seconds, or a number")] = \
        Field(default=0, validate_default=True)

    @model_validator(mode="after")
    def _check(self):
        if self.turns is None:
            raise FieldError("missing turns", "give the number of turns, e.g. 4 or {min: 2, max: 6}", at="turns")
        _needs_values(self.turns, "turns", "give values: [...] (the observed numbers of turns)")
        _needs_values(self.think_time_s, "think_time_s", "give values: [...] in seconds")
        return self

    def to_dict(self) -> dict:
        return {"turns": self.turns.to_dict(), "think_time_s": self.think_time_s.to_dict()}


class SharedPrefixSpec(_Model):
    """A `share` of requests gets one of `count` long system prompts of `chars` characters; `texts`
    are those prompts, made once when the spec is loaded."""

    share: Annotated[Number, _within("share", 0, 1, "give the fraction of requests with a shared prefix, 0 to 1"),
                     Fix("give share as a number in [0, 1]")] = 0.0
    count: Annotated[Whole, _within("count", 1, 1000, "give 1 to 1000 prefixes"),
                     Fix("give the number of distinct prefixes")] = 4
    chars: Annotated[Whole, _within("chars", 20, 1_000_000, "give e.g. 1500"),
                     Fix("give the prefix length in characters")] = 1500
    _texts: tuple[str, ...] = PrivateAttr(default=())

    @property
    def texts(self) -> tuple[str, ...]:
        return self._texts

    def with_texts(self, texts: tuple[str, ...]) -> "SharedPrefixSpec":
        out = self.model_copy()
        out._texts = tuple(texts)
        return out

    def to_dict(self) -> dict:
        return {"share": self.share, "count": self.count, "chars": self.chars}


class ImagesSpec(_Model):
    """Images in a class's user messages (workloads/attachments.py)."""

    count: Annotated[Distribution, Field(validate_default=True), Fix("give the images per request, e.g. 1 or {min: 1, max: 3}")] = 1
    width: Annotated[int, Field(strict=True, ge=1, le=8192), Fix("give pixels, 1 to 8192")] = 512
    height: Annotated[int, Field(strict=True, ge=1, le=8192), Fix("give pixels, 1 to 8192")] = 512
    share: Annotated[float, Field(strict=True, ge=0, le=1), Fix("give the fraction of requests with images, 0 to 1")] = 1.0
    files: Annotated[tuple[str, ...] | None, Fix("give a list of image files, relative to the spec")] = None

    @model_validator(mode="after")
    def _check(self):
        _needs_values(self.count, "count", "give values: [...] (images per request)")
        return self

    def to_dict(self) -> dict:
        d = self.model_dump(exclude_none=True)
        d["count"] = self.count.to_dict()
        return d


def _negative_weight(v: float) -> float:
    if not math.isfinite(v) or v < 0:
        raise FieldError(f"negative weight {v:g}" if v < 0 else f"weight {v:g} is not a number",
                         "weights are >= 0 and sum to 1.0")
    return v


def _override(base: _Model | None, over: _Model | None) -> Any:
    """A class-level ``system_prompt`` or ``shared_prefix``: the top level's, with the keys the class gives."""
    if over is None:
        return base
    if base is None:
        return over
    return base.model_copy(update={k: getattr(over, k) for k in over.model_fields_set})


class ClassEntry(_Model):
    """One class as the file writes it."""

    weight: Annotated[Number, AfterValidator(_negative_weight), Fix("give the weight as a number")]
    input_chars: Annotated[Distribution, Fix("write {min: ..., max: ..., dist: uniform} in characters")]
    output_tokens: Annotated[Distribution, Fix("write {min: ..., max: ..., dist: uniform} in tokens, or a number")]
    system_prompt: Annotated[SystemPromptSpec | None, Fix("write {share: 0.3} (and optionally text: ...)")] = None
    templates: Annotated[TemplateFilter | None, Fix("write {domains: [...], langs: [...]}")] = None
    prompts: Annotated[Literal["verbatim"] | None,
                       Fix("write prompts: verbatim (whole imported prompts), or drop it")] = None
    session: Annotated[SessionSpec | None,
                       Fix("write {turns: {min: 2, max: 6}, think_time_s: {min: 2, max: 20}}")] = None
    shared_prefix: Annotated[SharedPrefixSpec | None, Fix("write {share: 0.5, count: 4, chars: 1500}")] = None
    tools: Annotated[ToolsSpec | None, Fix("write {count: 3} or {definitions: [...], choice: auto}")] = None
    images: Annotated[ImagesSpec | None, Fix("write {count: 1, width: 512, height: 512}")] = None
    batch: Annotated[Distribution | None, Fix("give the texts per embeddings or rerank request, e.g. 8 or {min: 1, max: 32}")] = None

    @model_validator(mode="after")
    def _check(self):
        if self.prompts is not None and self.system_prompt is not None:
            raise FieldError("verbatim prompts keep the system prompt they were logged with",
                             "drop system_prompt from this class, or drop prompts: verbatim", at="system_prompt")
        ic = self.input_chars
        if ic.dist == "empirical" and ic.values is None and self.prompts is None:
            raise FieldError("empirical without values needs prompts: verbatim",
                             "give values: [...], or add prompts: verbatim to draw the imported prompts' lengths",
                             at=("input_chars", "values"))
        _needs_values(self.output_tokens, "output_tokens", "give values: [...] (the observed output lengths)")
        if self.batch is not None:
            _needs_values(self.batch, "batch", "give values: [...] (texts per request)")
        return self


def _class_names(v: Any) -> Any:
    for name in v if isinstance(v, dict) else ():
        if not isinstance(name, str) or not CLASS_NAME_RE.match(name):
            raise FieldError(f"bad class name {name!r}",
                             "use letters, digits, '_', '-' or '.', starting with a letter or digit", at=(name,))
    return v


class WorkloadFile(_Model):
    """A workload spec file, as written (see the module's docstring)."""

    name: Annotated[str | None, AfterValidator(_nonblank), Fix("give the spec a name")] = None
    description: Annotated[str | None, Fix("quote the text")] = None
    templates: Annotated[TemplatesSource | None, BeforeValidator(lambda v: {"file": v} if isinstance(v, str) else v),
                         Fix("write templates: templates.jsonl")] = None
    system_prompt: Annotated[SystemPromptSpec | None, Fix("write {share: 0.3} (and optionally text: ...)")] = None
    shared_prefix: Annotated[SharedPrefixSpec | None, Fix("write {share: 0.5, count: 4, chars: 1500}")] = None
    classes: Annotated[dict[str, ClassEntry] | None, BeforeValidator(_class_names),
                       Fix("write classes: {short: {weight: ..., input_chars: ..., output_tokens: ...}}")] = None

    @model_validator(mode="after")
    def _check(self):
        if self.system_prompt is not None and "share" not in self.system_prompt.model_fields_set:
            raise FieldError("missing share", "give share as a number in [0, 1]", at=("system_prompt", "share"))
        if not self.classes:
            raise FieldError("no classes defined", "add at least one class with weight, input_chars and output_tokens",
                             at="classes")
        total = math.fsum(c.weight for c in self.classes.values())
        if abs(total - 1.0) > WEIGHT_TOLERANCE:
            raise FieldError(f"weights sum to {total:g}, must sum to 1.0", "adjust the weights",
                             at=("classes", next(iter(self.classes)), "weight"))
        return self


# --------------------------------------------------------------------------- the resolved spec


@dataclass(frozen=True)
class ClassSpec:
    name: str
    weight: float
    input_chars: Any  # a Distribution
    output_tokens: Any  # a Distribution
    system_prompt: SystemPromptSpec
    filter: TemplateFilter
    # templates eligible for this class (after filters and length rules)
    questions: tuple[Template, ...] = field(repr=False, default=())
    contexts: tuple[Template, ...] = field(repr=False, default=())
    systems: tuple[str, ...] = field(repr=False, default=())
    system_templates: tuple[Template, ...] = field(repr=False, default=())
    prompts_mode: str | None = None  # "verbatim": whole imported prompts
    prompts: tuple[Template, ...] = field(repr=False, default=())  # eligible imported prompts
    session: SessionSpec | None = None
    shared_prefix: SharedPrefixSpec | None = None
    tools: ToolsSpec | None = None
    images: ImagesSpec | None = None
    image_urls: tuple[str, ...] = field(repr=False, default=())  # what images are drawn from
    batch: Any = None  # a Distribution: texts per /v1/embeddings request, documents per /v1/rerank request

    def to_dict(self) -> dict:
        d = {
            "weight": self.weight,
            "input_chars": self.input_chars.to_dict(),
            "output_tokens": self.output_tokens.to_dict(),
            "system_prompt": self.system_prompt.to_dict(),
            "templates": self.filter.to_dict(),
            "eligible": {"questions": len(self.questions), "contexts": len(self.contexts),
                         "system_prompts": len(self.systems)},
        }
        if self.prompts_mode:
            d["prompts"] = self.prompts_mode
            d["eligible"]["prompts"] = len(self.prompts)
        if self.session is not None:
            d["session"] = self.session.to_dict()
        if self.shared_prefix is not None and self.shared_prefix.share > 0:
            d["shared_prefix"] = self.shared_prefix.to_dict()
        if self.tools is not None:
            d["tools"] = self.tools.to_dict()
        if self.images is not None:
            d["images"] = self.images.to_dict()
        if self.batch is not None:
            d["batch"] = self.batch.to_dict()
        return d


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    path: str
    description: str
    templates_path: str
    library: Library = field(repr=False)
    classes: dict[str, ClassSpec] = field(repr=False)
    system_prompt: SystemPromptSpec
    spec_hash: str
    load_seconds: float = 0.0
    shared_prefix: SharedPrefixSpec | None = None
    # the files it is made of, as read (SPEC_SOURCE, TEMPLATES_SOURCE, IMAGE_SOURCE + name): the workload itself
    sources: dict[str, bytes] = field(repr=False, default_factory=dict)

    def class_weights(self) -> list[tuple[str, float]]:
        """``[(class name, weight), ...]`` in spec order, for display."""
        return [(c.name, c.weight) for c in self.classes.values()]

    def describe_classes(self) -> list[str]:
        """One human-readable line per class."""
        lines = []
        for c in self.classes.values():
            line = (f"{c.name}: {c.weight:.0%} input {c.input_chars.describe()} chars, "
                    f"output {c.output_tokens.describe()} tokens, ")
            if c.prompts_mode:
                line += f"{len(c.prompts)} verbatim prompts"
            else:
                line += f"system prompt {c.system_prompt.share:.0%}"
            if c.session is not None:
                line += (f", conversations of {c.session.turns.describe()} turns, think "
                         f"{c.session.think_time_s.describe()} s")
            if c.shared_prefix is not None and c.shared_prefix.share > 0:
                sp = c.shared_prefix
                line += f", shared prefix {sp.share:.0%} ({sp.count} x {sp.chars} chars)"
            if c.tools is not None:
                line += f", {len(c.tools.tools())} tools (tool_choice {c.tools.choice})"
            if c.images is not None:
                im = c.images
                line += (f", {im.share:.0%} with {im.count.describe()} images "
                         + (f"from {len(im.files)} files" if im.files else f"of {im.width}x{im.height}"))
            lines.append(line)
        return lines

    def to_dict(self) -> dict:
        """JSON-serialisable description for run metadata."""
        return {
            "name": self.name,
            "path": self.path,
            "description": self.description,
            "spec_hash": self.spec_hash,
            "templates": {"path": self.templates_path, "counts": self.library.counts()},
            "system_prompt": self.system_prompt.to_dict(),
            **({"shared_prefix": self.shared_prefix.to_dict()} if self.shared_prefix is not None else {}),
            "classes": {n: c.to_dict() for n, c in self.classes.items()},
        }


# --------------------------------------------------------------------------- loading


def _type_name(v: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number"}.get(type(v), type(v).__name__)


def _yaml_error(path: str, exc: yaml.YAMLError) -> InputError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "YAML"
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    return _error(path, where, f"malformed YAML: {context + ', ' if context else ''}{problem}",
                  "fix the YAML syntax at that line")


SPEC_SOURCE, TEMPLATES_SOURCE, IMAGE_SOURCE = "spec", "templates", "image:"  # keys of WorkloadSpec.sources


def load_spec(path: str | None = None, *, sources: dict[str, bytes] | None = None) -> WorkloadSpec:
    """Load and validate a workload spec; ``None`` loads the built-in default.

    ``sources``: the files the spec is made of, as ``WorkloadSpec.sources`` keeps them (the spec,
    its template library, its image files), instead of reading them (a worker gets those its
    master read); ``path`` then only names them in messages.

    Raises :class:`core.errors.InputError` (one line: ``FILE: FIELD: PROBLEM (FIX)``) on any mistake.
    """
    t0 = time.perf_counter()
    path = os.fspath(DEFAULT_SPEC_PATH if path is None else path)
    if sources is None:
        if not os.path.exists(path):
            raise _error(path, "file", "spec file not found", "check the path")
        with open(path, "rb") as fh:
            spec_bytes = fh.read()
    else:
        spec_bytes = sources[SPEC_SOURCE]
    kept = {SPEC_SOURCE: spec_bytes}

    def read_image(name: str, file: str) -> bytes:
        key = IMAGE_SOURCE + name
        if sources is not None:
            data = sources[key]
        else:
            with open(file, "rb") as fh:  # an OSError is worded where the class's images are read
                data = fh.read()
        kept[key] = data
        return data

    try:
        doc = yaml.load(spec_bytes, Loader=_YAML_LOADER)  # libyaml when present: long empirical lists load fast
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc) from None
    if doc is None:
        raise _error(path, "file", "the spec is empty", "write a mapping with at least 'classes:'")
    if not isinstance(doc, dict):
        raise _error(path, "file", f"the spec must be a mapping, got {_type_name(doc)}",
                     "write 'name: ...' and 'classes: ...' at the top level")
    f = build(WorkloadFile, doc, field_name=lambda loc: f"{path}: {dotted(loc)}")

    spec_dir = os.path.dirname(os.path.abspath(path))
    source = f.templates or TemplatesSource()
    tpath = os.path.normpath(source.file if os.path.isabs(source.file) else os.path.join(spec_dir, source.file))
    tfield = "templates.file" if isinstance(doc.get("templates"), dict) and "file" in doc["templates"] else "templates"
    library = load_library(tpath, origin=path, field_name=tfield, data=None if sources is None else sources[TEMPLATES_SOURCE])
    kept[TEMPLATES_SOURCE] = library.data
    top_filter = source.filter()
    _check_filter_known(path, "templates", top_filter, library)
    top_system = f.system_prompt or SystemPromptSpec()

    classes: dict[str, ClassSpec] = {}
    prefix_texts: dict[tuple[int, int], tuple[str, ...]] = {}
    for cname, c in (f.classes or {}).items():
        flt = top_filter
        if c.templates is not None:
            _check_filter_known(path, f"classes.{cname}.templates", c.templates, library)
            flt = top_filter.merged(c.templates)
        if c.prompts is not None:
            cs = _resolve_verbatim(path, cname, c, flt, library)
        else:
            cs = _resolve_class(path, cname, c, _override(top_system, c.system_prompt), flt, library)
        prefix = _override(f.shared_prefix, c.shared_prefix)
        if prefix is not None and prefix.share > 0:
            key = (prefix.count, prefix.chars)
            if key not in prefix_texts:
                prefix_texts[key] = shared_prefix_texts(library, *key)
            prefix = prefix.with_texts(prefix_texts[key])
        urls: tuple[str, ...] = ()
        if c.images is not None:
            try:
                urls = image_urls(c.images, spec_dir, read_image)
            except OSError as e:
                raise _error(path, f"classes.{cname}.images.files", f"cannot read {e.filename}: {e.strerror}",
                             "give image files that exist, relative to the spec") from None
        classes[cname] = replace(cs, session=c.session, shared_prefix=prefix, tools=c.tools, images=c.images,
                                 image_urls=urls, batch=c.batch)

    h = hashlib.sha256()
    h.update(spec_bytes)
    h.update(library.data)
    for key in sorted(k for k in kept if k.startswith(IMAGE_SOURCE)):  # image files are content too
        h.update(b"\0%s\0%d\0" % (key.encode(), len(kept[key])))  # named and sized: no two files read alike
        h.update(kept[key])
    name = f.name if f.name is not None else os.path.splitext(os.path.basename(path))[0]
    return WorkloadSpec(name=name.strip(), path=path, description=(f.description or "").strip(), sources=kept,
                        templates_path=tpath, library=library, classes=classes,
                        system_prompt=top_system, spec_hash=h.hexdigest(),
                        load_seconds=time.perf_counter() - t0, shared_prefix=f.shared_prefix)


def _check_filter_known(path: str, fp: str, flt: TemplateFilter, lib: Library) -> None:
    known_d = sorted({t.domain for t in lib.all()})
    known_l = sorted({t.lang for t in lib.all()})
    for key, names, known in (("domains", flt.domains, known_d), ("langs", flt.langs, known_l)):
        for n in names or ():
            if n not in known:
                raise _error(path, f"{fp}.{key}", f"{n!r} is not in the template library",
                             f"known {key}: {', '.join(known)}")


def shared_prefix_texts(lib: Library, count: int, chars: int) -> tuple[str, ...]:
    """`count` distinct system prompts of exactly `chars` characters, built from the library with a
    fixed seed: every process and every run gets the same texts (their prefixes are what a server
    caches). Each starts with its own number, so two of them share no prefix."""
    pool = sorted({t.text for t in lib.contexts + lib.systems} or {t.text for t in lib.questions + lib.prompts})
    out = []
    for i in range(count):
        rng = random.Random(f"shared-prefix:{i}:{chars}")
        parts = [f"[Profile {i + 1}] You are assistant number {i + 1} of this service. Follow these notes."]
        n = len(parts[0])
        while n < chars:
            parts.append(pool[rng.randrange(len(pool))])
            n += len(parts[-1]) + 2
        out.append("\n\n".join(parts)[:chars].rstrip().ljust(chars, "."))
    return tuple(out)


def _resolve_verbatim(path: str, cname: str, c: ClassEntry, flt: TemplateFilter, lib: Library) -> ClassSpec:
    """A class of whole imported prompts: those matching the filter whose input length lies in
    input_chars [min, max]."""
    fp, ic = f"classes.{cname}", c.input_chars
    if not lib.prompts:
        raise _error(path, f"{fp}.prompts", "the template library has no imported prompts (kind prompt)",
                     "import a log with python -m workloads import, or drop prompts: verbatim")
    cands = [t for t in lib.prompts if flt.match(t)]
    if not cands:
        raise _error(path, f"{fp}.templates", f"no imported prompts match the filter {flt.to_dict() or '{}'}",
                     "widen domains/langs")
    prompts = tuple(t for t in cands if ic.min <= t.input_chars <= ic.max)
    if not prompts:
        lens = sorted(t.input_chars for t in cands)
        raise _error(path, f"{fp}.input_chars", f"no imported prompt has an input length in [{ic.min}, {ic.max}] "
                     f"(they have {lens[0]} to {lens[-1]} chars)", "widen the range")
    return ClassSpec(name=cname, weight=c.weight, input_chars=ic, output_tokens=c.output_tokens,
                     system_prompt=SystemPromptSpec(), filter=flt, prompts_mode=c.prompts, prompts=prompts)


def _resolve_class(path: str, cname: str, c: ClassEntry, sp: SystemPromptSpec, flt: TemplateFilter,
                   lib: Library) -> ClassSpec:
    """Select the templates a class can use and check its input range is reachable.

    Rules: at least one question matches the filter; the shortest such
    question fits under input_chars.max; with a system-prompt share > 0 at
    least one system prompt fits together with the shortest question; if no
    context passage matches, input_chars.min must be reachable by a question
    alone.
    """
    fp, ic = f"classes.{cname}", c.input_chars
    qs = [t for t in lib.questions if flt.match(t)]
    if not qs:
        raise _error(path, f"{fp}.templates", f"no questions match the filter {flt.to_dict() or '{}'}",
                     "widen domains/langs or add matching questions to the library")
    shortest_q = min(len(t.text) for t in qs)
    if shortest_q > ic.max:
        raise _error(path, f"{fp}.input_chars.max", f"max {ic.max} is below the shortest question ({shortest_q} chars)",
                     f"raise max to at least {shortest_q} or add shorter questions")
    qs = [t for t in qs if len(t.text) <= ic.max]
    ctxs = tuple(t for t in lib.contexts if flt.match(t))
    if not ctxs:
        longest_q = max(len(t.text) for t in qs)
        if ic.min > longest_q:
            raise _error(path, f"{fp}.input_chars.min",
                         f"min {ic.min} cannot be reached: no context passages match and the "
                         f"longest question has {longest_q} chars",
                         f"lower min to {longest_q} or add context passages")
    systems: tuple[str, ...] = ()
    sys_templates: tuple[Template, ...] = ()
    if sp.share > 0:
        if sp.text is not None:
            cands = [sp.text]
        else:
            sys_templates = tuple(t for t in lib.systems if flt.match(t)) or \
                tuple(t for t in lib.systems if flt.langs is None or t.lang in flt.langs)
            cands = [t.text for t in sys_templates]
        if not cands:
            raise _error(path, f"{fp}.system_prompt.share",
                         f"share {sp.share:g} but the library has no system prompts for this class",
                         "add system prompts to the library, give system_prompt.text, or set share to 0")
        fitting = tuple(s for s in cands if len(s) + shortest_q <= ic.max)
        if not fitting:
            need = min(len(s) for s in cands) + shortest_q
            raise _error(path, f"{fp}.input_chars.max",
                         f"max {ic.max} leaves no room for a system prompt (the shortest system "
                         f"prompt plus the shortest question need {need} chars)",
                         f"raise max to at least {need} or set system_prompt.share: 0 for this class")
        systems = fitting
    return ClassSpec(name=cname, weight=c.weight, input_chars=ic, output_tokens=c.output_tokens, system_prompt=sp,
                     filter=flt, questions=tuple(qs), contexts=ctxs, systems=systems,
                     system_templates=tuple(t for t in sys_templates if t.text in systems))
