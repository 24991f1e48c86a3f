"""The workload spec file as written: the pydantic models below (:class:`WorkloadFile` and what it
holds), validated once at load (workloads/spec.py) through ``core.validation.build``: a mistake is one line
naming the file and the field (``spec.yaml: classes.short.input_chars.max: ...``).

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

import math
import os
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, PrivateAttr, field_validator, model_validator

from core.validation import FieldError, Fix

from .attachments import ToolsSpec
from .distributions import Distribution, Number, SecondsDistribution, Whole, _Model, _needs_values
from .library import Template

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SPEC_PATH = os.path.join(PACKAGE_DIR, "default.yaml")
DEFAULT_TEMPLATES_PATH = os.path.join(PACKAGE_DIR, "templates.jsonl")

WEIGHT_TOLERANCE = 1e-6
CLASS_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


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


Names = Annotated[tuple[str, ...], BeforeValidator(_names)]


# --------------------------------------------------------------------------- the file's parts


class TemplateFilter(_Model):
    domains: Names | None = None
    langs: Names | None = None

    def match(self, t: Template) -> bool:
        return (self.domains is None or t.domain in self.domains) and (self.langs is None or t.lang in self.langs)

    def to_dict(self) -> dict:
        return {k: list(v) for k, v in (("domains", self.domains), ("langs", self.langs)) if v is not None}

    def merged(self, other: TemplateFilter) -> TemplateFilter:
        """This filter narrowed by ``other`` (other's lists win where set)."""
        return TemplateFilter(
            domains=other.domains if other.domains is not None else self.domains,
            langs=other.langs if other.langs is not None else self.langs,
        )


class TemplatesSource(_Model):
    """``templates:`` at the top level: the library file (``templates: FILE`` is short for
    ``{file: FILE}``) and a filter for every class."""

    file: Annotated[str, AfterValidator(_nonblank), Fix("give the JSONL file, relative to the spec")] = (
        DEFAULT_TEMPLATES_PATH
    )
    domains: Names | None = None
    langs: Names | None = None

    def filter(self) -> TemplateFilter:
        return TemplateFilter(domains=self.domains, langs=self.langs)


class SystemPromptSpec(_Model):
    share: Annotated[
        Number,
        _within("share", 0, 1, "give the fraction of requests with a system prompt, 0 to 1"),
        Fix("give share as a number in [0, 1]"),
    ] = 0.0
    text: Annotated[str | None, Fix("give the system prompt text, or drop text to use the library")] = None

    @field_validator("text")
    @classmethod
    def _text(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise FieldError(
                "text must be a non-empty string", "give the system prompt text, or drop text to use the library"
            )
        return v.strip() if v is not None else None

    def to_dict(self) -> dict:
        return {"share": self.share, **({"text": self.text} if self.text is not None else {})}


class SessionSpec(_Model):
    """A conversation: `turns` requests, `think_time_s` seconds apart."""

    turns: Annotated[Distribution | None, Fix("give the number of turns, e.g. 4 or {min: 2, max: 6}")] = None
    think_time_s: Annotated[
        SecondsDistribution, Fix("write {min: 1, max: 10, dist: uniform} in seconds, or a number")
    ] = Field(default=0, validate_default=True)

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

    share: Annotated[
        Number,
        _within("share", 0, 1, "give the fraction of requests with a shared prefix, 0 to 1"),
        Fix("give share as a number in [0, 1]"),
    ] = 0.0
    count: Annotated[
        Whole, _within("count", 1, 1000, "give 1 to 1000 prefixes"), Fix("give the number of distinct prefixes")
    ] = 4
    chars: Annotated[
        Whole, _within("chars", 20, 1_000_000, "give e.g. 1500"), Fix("give the prefix length in characters")
    ] = 1500
    _texts: tuple[str, ...] = PrivateAttr(default=())

    @property
    def texts(self) -> tuple[str, ...]:
        return self._texts

    def with_texts(self, texts: tuple[str, ...]) -> SharedPrefixSpec:
        out = self.model_copy()
        out._texts = tuple(texts)
        return out

    def to_dict(self) -> dict:
        return {"share": self.share, "count": self.count, "chars": self.chars}


class ImagesSpec(_Model):
    """Images in a class's user messages (workloads/attachments.py)."""

    count: Annotated[
        Distribution, Field(validate_default=True), Fix("give the images per request, e.g. 1 or {min: 1, max: 3}")
    ] = 1
    width: Annotated[int, Field(strict=True, ge=1, le=8192), Fix("give pixels, 1 to 8192")] = 512
    height: Annotated[int, Field(strict=True, ge=1, le=8192), Fix("give pixels, 1 to 8192")] = 512
    share: Annotated[
        float, Field(strict=True, ge=0, le=1), Fix("give the fraction of requests with images, 0 to 1")
    ] = 1.0
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
        raise FieldError(
            f"negative weight {v:g}" if v < 0 else f"weight {v:g} is not a number", "weights are >= 0 and sum to 1.0"
        )
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
    prompts: Annotated[
        Literal["verbatim"] | None, Fix("write prompts: verbatim (whole imported prompts), or drop it")
    ] = None
    session: Annotated[SessionSpec | None, Fix("write {turns: {min: 2, max: 6}, think_time_s: {min: 2, max: 20}}")] = (
        None
    )
    shared_prefix: Annotated[SharedPrefixSpec | None, Fix("write {share: 0.5, count: 4, chars: 1500}")] = None
    tools: Annotated[ToolsSpec | None, Fix("write {count: 3} or {definitions: [...], choice: auto}")] = None
    images: Annotated[ImagesSpec | None, Fix("write {count: 1, width: 512, height: 512}")] = None
    batch: Annotated[
        Distribution | None, Fix("give the texts per embeddings or rerank request, e.g. 8 or {min: 1, max: 32}")
    ] = None

    @model_validator(mode="after")
    def _check(self):
        if self.prompts is not None and self.system_prompt is not None:
            raise FieldError(
                "verbatim prompts keep the system prompt they were logged with",
                "drop system_prompt from this class, or drop prompts: verbatim",
                at="system_prompt",
            )
        ic = self.input_chars
        if ic.dist == "empirical" and ic.values is None and self.prompts is None:
            raise FieldError(
                "empirical without values needs prompts: verbatim",
                "give values: [...], or add prompts: verbatim to draw the imported prompts' lengths",
                at=("input_chars", "values"),
            )
        _needs_values(self.output_tokens, "output_tokens", "give values: [...] (the observed output lengths)")
        if self.batch is not None:
            _needs_values(self.batch, "batch", "give values: [...] (texts per request)")
        return self


def _class_names(v: Any) -> Any:
    for name in v if isinstance(v, dict) else ():
        if not isinstance(name, str) or not CLASS_NAME_RE.match(name):
            raise FieldError(
                f"bad class name {name!r}",
                "use letters, digits, '_', '-' or '.', starting with a letter or digit",
                at=(name,),
            )
    return v


class WorkloadFile(_Model):
    """A workload spec file, as written (see the module's docstring)."""

    name: Annotated[str | None, AfterValidator(_nonblank), Fix("give the spec a name")] = None
    description: Annotated[str | None, Fix("quote the text")] = None
    templates: Annotated[
        TemplatesSource | None,
        BeforeValidator(lambda v: {"file": v} if isinstance(v, str) else v),
        Fix("write templates: templates.jsonl"),
    ] = None
    system_prompt: Annotated[SystemPromptSpec | None, Fix("write {share: 0.3} (and optionally text: ...)")] = None
    shared_prefix: Annotated[SharedPrefixSpec | None, Fix("write {share: 0.5, count: 4, chars: 1500}")] = None
    classes: Annotated[
        dict[str, ClassEntry] | None,
        BeforeValidator(_class_names),
        Fix("write classes: {short: {weight: ..., input_chars: ..., output_tokens: ...}}"),
    ] = None

    @model_validator(mode="after")
    def _check(self):
        if self.system_prompt is not None and "share" not in self.system_prompt.model_fields_set:
            raise FieldError("missing share", "give share as a number in [0, 1]", at=("system_prompt", "share"))
        if not self.classes:
            raise FieldError(
                "no classes defined", "add at least one class with weight, input_chars and output_tokens", at="classes"
            )
        total = math.fsum(c.weight for c in self.classes.values())
        if abs(total - 1.0) > WEIGHT_TOLERANCE:
            raise FieldError(
                f"weights sum to {total:g}, must sum to 1.0",
                "adjust the weights",
                at=("classes", next(iter(self.classes)), "weight"),
            )
        return self
