"""Workload spec: YAML file -> validated, immutable :class:`WorkloadSpec`.

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
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from .errors import WorkloadError
from .library import Library, Template, load_library

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SPEC_PATH = os.path.join(PACKAGE_DIR, "default.yaml")
DEFAULT_TEMPLATES_PATH = os.path.join(PACKAGE_DIR, "templates.jsonl")

WEIGHT_TOLERANCE = 1e-6
DISTS = ("uniform", "normal", "lognormal", "fixed", "empirical")
DIST_FIELDS = {
    "uniform": ("min", "max"),
    "normal": ("min", "max", "mean", "stddev"),
    "lognormal": ("min", "max", "median", "sigma"),
    "fixed": ("value",),
    "empirical": (),
}
DIST_OPTIONAL = {"fixed": ("min", "max"), "empirical": ("values", "min", "max")}
EMPIRICAL_MAX = 2**31 - 1  # max of an empirical distribution without values or max
TOP_FIELDS = ("name", "description", "templates", "system_prompt", "shared_prefix", "classes")
CLASS_FIELDS = ("weight", "input_chars", "output_tokens", "system_prompt", "templates", "prompts",
                "session", "shared_prefix")
SESSION_FIELDS = ("turns", "think_time_s")
SHARED_PREFIX_FIELDS = ("share", "count", "chars")
PROMPT_MODES = ("verbatim",)
SYSTEM_FIELDS = ("share", "text")
TEMPLATES_FIELDS = ("file", "domains", "langs")
FILTER_FIELDS = ("domains", "langs")
CLASS_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class Distribution:
    """An integer-valued distribution clipped to [min, max]."""

    dist: str
    min: int
    max: int
    mean: float | None = None
    stddev: float | None = None
    median: float | None = None
    sigma: float | None = None
    value: int | None = None
    values: tuple[int, ...] | None = None  # empirical: the observed values, sorted

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"dist": self.dist}
        for k in ("min", "max", "mean", "stddev", "median", "sigma", "value"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        if self.values is not None:
            d["values"] = list(self.values)
        return d

    def describe(self) -> str:
        if self.dist == "fixed":
            return f"fixed {self.value}"
        if self.dist == "empirical":
            if self.values is None:
                return "empirical (logged prompts)" + (f" {self.min}-{self.max}" if self.max < EMPIRICAL_MAX else "")
            v = self.values
            return f"{self.min}-{self.max} empirical ({len(v)} values, median {v[len(v) // 2]:g})"
        base = f"{self.min}-{self.max} {self.dist}"
        if self.dist == "normal":
            base += f" (mean {self.mean:g}, sd {self.stddev:g})"
        elif self.dist == "lognormal":
            base += f" (median {self.median:g}, sigma {self.sigma:g})"
        return base


@dataclass(frozen=True)
class TemplateFilter:
    domains: tuple[str, ...] | None = None
    langs: tuple[str, ...] | None = None

    def match(self, t: Template) -> bool:
        return ((self.domains is None or t.domain in self.domains)
                and (self.langs is None or t.lang in self.langs))

    def to_dict(self) -> dict:
        d = {}
        if self.domains is not None:
            d["domains"] = list(self.domains)
        if self.langs is not None:
            d["langs"] = list(self.langs)
        return d

    def merged(self, other: "TemplateFilter") -> "TemplateFilter":
        """This filter narrowed by ``other`` (other's lists win where set)."""
        return TemplateFilter(other.domains if other.domains is not None else self.domains,
                              other.langs if other.langs is not None else self.langs)


@dataclass(frozen=True)
class SystemPromptSpec:
    share: float = 0.0
    text: str | None = None

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"share": self.share}
        if self.text is not None:
            d["text"] = self.text
        return d


@dataclass(frozen=True)
class SessionSpec:
    """A conversation: `turns` requests, `think_time_s` seconds apart."""

    turns: Distribution
    think_time_s: Distribution

    def to_dict(self) -> dict:
        return {"turns": self.turns.to_dict(), "think_time_s": self.think_time_s.to_dict()}


@dataclass(frozen=True)
class SharedPrefixSpec:
    """A `share` of requests gets one of `count` long system prompts of `chars` characters."""

    share: float = 0.0
    count: int = 4
    chars: int = 1500
    texts: tuple[str, ...] = field(repr=False, default=())

    def to_dict(self) -> dict:
        return {"share": self.share, "count": self.count, "chars": self.chars}


@dataclass(frozen=True)
class ClassSpec:
    name: str
    weight: float
    input_chars: Distribution
    output_tokens: Distribution
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


# --------------------------------------------------------------------------- parsing


class _Ctx:
    def __init__(self, label: str):
        self.label = label

    def err(self, fieldpath: str, problem: str, fix: str = "") -> WorkloadError:
        return WorkloadError(self.label, fieldpath, problem, fix)


def _type_name(v: Any) -> str:
    if v is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number"}.get(type(v), type(v).__name__)


def _check_fields(ctx: _Ctx, fp: str, obj: dict, allowed: tuple[str, ...]) -> None:
    for key in obj:
        if key not in allowed:
            where = f"{fp}.{key}" if fp else str(key)
            raise ctx.err(where, "unknown field", f"allowed fields: {', '.join(allowed)}")


def _mapping(ctx: _Ctx, fp: str, v: Any, what: str) -> dict:
    if not isinstance(v, dict):
        raise ctx.err(fp, f"expected a mapping, got {_type_name(v)}", what)
    return v


def _number(ctx: _Ctx, fp: str, v: Any, fix: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ctx.err(fp, f"expected a number, got {_type_name(v)} {v!r}", fix)
    return float(v)


def _integer(ctx: _Ctx, fp: str, v: Any, fix: str) -> int:
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ctx.err(fp, f"expected an integer, got {_type_name(v)} {v!r}", fix)
    return v


def _parse_dist(ctx: _Ctx, fp: str, raw: Any, unit: str, floor: int) -> Distribution:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        raw = {"dist": "fixed", "value": raw}
    raw = _mapping(ctx, fp, raw, f"write {{min: ..., max: ..., dist: uniform}} in {unit}")
    dist = raw.get("dist", "uniform")
    if dist not in DISTS:
        raise ctx.err(f"{fp}.dist", f"unknown distribution {dist!r}",
                      f"use one of {', '.join(DISTS)}")
    allowed = ("dist",) + DIST_FIELDS[dist] + DIST_OPTIONAL.get(dist, ())
    _check_fields(ctx, fp, raw, allowed)
    for key in DIST_FIELDS[dist]:
        if key not in raw:
            raise ctx.err(f"{fp}.{key}", f"missing parameter {key!r} of the {dist} distribution",
                          f"{dist} needs {', '.join(DIST_FIELDS[dist])}")
    vals: dict[str, Any] = {}
    for key in ("min", "max", "value"):
        if key in raw:
            vals[key] = _integer(ctx, f"{fp}.{key}", raw[key], f"give {key} as a whole number of {unit}")
            if vals[key] < 0:
                raise ctx.err(f"{fp}.{key}", f"negative length {vals[key]}",
                              f"lengths are >= {floor}")
            if vals[key] < floor:
                raise ctx.err(f"{fp}.{key}", f"{key} {vals[key]} is below {floor}",
                              f"lengths are >= {floor}")
    for key in ("mean", "stddev", "median", "sigma"):
        if key in raw:
            vals[key] = _number(ctx, f"{fp}.{key}", raw[key], f"give {key} as a number")
    if dist == "fixed":
        vals.setdefault("min", vals["value"])
        vals.setdefault("max", vals["value"])
    if dist == "empirical":
        return _parse_empirical(ctx, fp, raw, vals, unit, floor)
    lo, hi = vals["min"], vals["max"]
    if lo > hi:
        raise ctx.err(f"{fp}.min", f"min {lo} is above max {hi}", "swap them or fix one")
    if dist == "fixed" and not lo <= vals["value"] <= hi:
        raise ctx.err(f"{fp}.value", f"value {vals['value']} is outside [{lo}, {hi}]",
                      "move value inside min..max")
    if dist == "normal":
        if vals["stddev"] <= 0:
            raise ctx.err(f"{fp}.stddev", f"stddev {vals['stddev']:g} must be > 0",
                          "use a positive stddev, or dist: fixed")
        if not lo <= vals["mean"] <= hi:
            raise ctx.err(f"{fp}.mean", f"mean {vals['mean']:g} is outside [{lo}, {hi}]",
                          "move mean inside min..max")
    if dist == "lognormal":
        if vals["sigma"] <= 0:
            raise ctx.err(f"{fp}.sigma", f"sigma {vals['sigma']:g} must be > 0",
                          "use a positive sigma, or dist: fixed")
        if not lo <= vals["median"] <= hi or vals["median"] <= 0:
            raise ctx.err(f"{fp}.median", f"median {vals['median']:g} is outside [{max(lo, 1)}, {hi}]",
                          "move median inside min..max")
    return Distribution(dist=dist, **vals)


def _parse_empirical(ctx: _Ctx, fp: str, raw: dict, vals: dict, unit: str, floor: int) -> Distribution:
    values = raw.get("values")
    if values is None:
        lo, hi = vals.get("min", floor), vals.get("max", EMPIRICAL_MAX)
        if lo > hi:
            raise ctx.err(f"{fp}.min", f"min {lo} is above max {hi}", "swap them or fix one")
        return Distribution(dist="empirical", min=lo, max=hi)
    if not isinstance(values, list) or not values:
        raise ctx.err(f"{fp}.values", f"expected a non-empty list of {unit}, got {_type_name(values)}",
                      "write values: [12, 40, 40, 95, ...] (the observed values)")
    out = []
    for i, v in enumerate(values):
        v = _integer(ctx, f"{fp}.values[{i}]", v, f"give every value as a whole number of {unit}")
        if v < floor:
            raise ctx.err(f"{fp}.values[{i}]", f"value {v} is below {floor}", f"lengths are >= {floor}")
        out.append(v)
    out.sort()
    lo, hi = vals.get("min", out[0]), vals.get("max", out[-1])
    if out[0] < lo or out[-1] > hi:
        bad = out[0] if out[0] < lo else out[-1]
        raise ctx.err(f"{fp}.values", f"value {bad} is outside [{lo}, {hi}]",
                      "drop min/max (they default to the values' range) or fix the values")
    return Distribution(dist="empirical", min=lo, max=hi, values=tuple(out))


def _parse_seconds(ctx: _Ctx, fp: str, raw: Any) -> Distribution:
    """A distribution of durations in seconds (fractions allowed), e.g. think times."""
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        raw = {"dist": "fixed", "value": raw}
    raw = _mapping(ctx, fp, raw, "write {min: 1, max: 10, dist: uniform} in seconds, or a number")
    dist = raw.get("dist", "uniform")
    if dist not in DISTS:
        raise ctx.err(f"{fp}.dist", f"unknown distribution {dist!r}", f"use one of {', '.join(DISTS)}")
    _check_fields(ctx, fp, raw, ("dist",) + DIST_FIELDS[dist] + DIST_OPTIONAL.get(dist, ()))
    for key in DIST_FIELDS[dist]:
        if key not in raw:
            raise ctx.err(f"{fp}.{key}", f"missing parameter {key!r} of the {dist} distribution",
                          f"{dist} needs {', '.join(DIST_FIELDS[dist])}")
    vals: dict[str, Any] = {}
    for key in ("min", "max", "value", "mean", "stddev", "median", "sigma"):
        if key in raw:
            vals[key] = _number(ctx, f"{fp}.{key}", raw[key], f"give {key} as a number of seconds")
            if key in ("min", "max", "value") and (vals[key] < 0 or not math.isfinite(vals[key])):
                raise ctx.err(f"{fp}.{key}", f"{key} {vals[key]:g} is not a duration", "give seconds >= 0")
    if dist == "empirical":
        values = raw.get("values")
        if not isinstance(values, list) or not values:
            raise ctx.err(f"{fp}.values", "expected a non-empty list of seconds", "write values: [1.5, 3, 8]")
        vs = sorted(_number(ctx, f"{fp}.values[{i}]", v, "give seconds") for i, v in enumerate(values))
        if vs[0] < 0:
            raise ctx.err(f"{fp}.values", f"value {vs[0]:g} is negative", "give seconds >= 0")
        return Distribution(dist="empirical", min=vals.get("min", vs[0]), max=vals.get("max", vs[-1]),
                            values=tuple(vs))
    if dist == "fixed":
        vals.setdefault("min", vals["value"])
        vals.setdefault("max", vals["value"])
    if vals["min"] > vals["max"]:
        raise ctx.err(f"{fp}.min", f"min {vals['min']:g} is above max {vals['max']:g}", "swap them or fix one")
    if dist == "normal" and vals["stddev"] <= 0:
        raise ctx.err(f"{fp}.stddev", "stddev must be > 0", "use a positive stddev, or dist: fixed")
    if dist == "lognormal" and (vals["sigma"] <= 0 or vals["median"] <= 0):
        raise ctx.err(f"{fp}.median", "median and sigma must be > 0", "use positive values, or dist: fixed")
    return Distribution(dist=dist, **vals)


def _parse_session(ctx: _Ctx, fp: str, raw: Any) -> SessionSpec:
    raw = _mapping(ctx, fp, raw, "write {turns: {min: 2, max: 6}, think_time_s: {min: 2, max: 20}}")
    _check_fields(ctx, fp, raw, SESSION_FIELDS)
    if "turns" not in raw:
        raise ctx.err(f"{fp}.turns", "missing turns", "give the number of turns, e.g. 4 or {min: 2, max: 6}")
    turns = _parse_dist(ctx, f"{fp}.turns", raw["turns"], "turns", 1)
    think = _parse_seconds(ctx, f"{fp}.think_time_s", raw.get("think_time_s", 0))
    return SessionSpec(turns=turns, think_time_s=think)


def _parse_shared_prefix(ctx: _Ctx, fp: str, raw: Any, base: SharedPrefixSpec | None) -> SharedPrefixSpec:
    raw = _mapping(ctx, fp, raw, "write {share: 0.5, count: 4, chars: 1500}")
    _check_fields(ctx, fp, raw, SHARED_PREFIX_FIELDS)
    base = base or SharedPrefixSpec()
    share, count, chars = base.share, base.count, base.chars
    if "share" in raw:
        share = _number(ctx, f"{fp}.share", raw["share"], "give share as a number in [0, 1]")
        if not 0.0 <= share <= 1.0:
            raise ctx.err(f"{fp}.share", f"share {share:g} is outside [0, 1]",
                          "give the fraction of requests with a shared prefix, 0 to 1")
    if "count" in raw:
        count = _integer(ctx, f"{fp}.count", raw["count"], "give the number of distinct prefixes")
        if not 1 <= count <= 1000:
            raise ctx.err(f"{fp}.count", f"count {count} is outside [1, 1000]", "give 1 to 1000 prefixes")
    if "chars" in raw:
        chars = _integer(ctx, f"{fp}.chars", raw["chars"], "give the prefix length in characters")
        if not 20 <= chars <= 1_000_000:
            raise ctx.err(f"{fp}.chars", f"chars {chars} is outside [20, 1000000]", "give e.g. 1500")
    return SharedPrefixSpec(share=share, count=count, chars=chars)


def shared_prefix_texts(lib: Library, count: int, chars: int) -> tuple[str, ...]:
    """`count` distinct system prompts of exactly `chars` characters, built from the library with a
    fixed seed: every process and every run gets the same texts (their prefixes are what a server
    caches). Each starts with its own number, so two of them share no prefix."""
    import random

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


def _parse_system(ctx: _Ctx, fp: str, raw: Any, base: SystemPromptSpec | None) -> SystemPromptSpec:
    raw = _mapping(ctx, fp, raw, "write {share: 0.3} (and optionally text: ...)")
    _check_fields(ctx, fp, raw, SYSTEM_FIELDS)
    share = base.share if base is not None else 0.0
    text = base.text if base is not None else None
    if "share" in raw:
        share = _number(ctx, f"{fp}.share", raw["share"], "give share as a number in [0, 1]")
        if not 0.0 <= share <= 1.0:
            raise ctx.err(f"{fp}.share", f"share {share:g} is outside [0, 1]",
                          "give the fraction of requests with a system prompt, 0 to 1")
    elif base is None:
        raise ctx.err(f"{fp}.share", "missing share", "give share as a number in [0, 1]")
    if "text" in raw:
        text = raw["text"]
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise ctx.err(f"{fp}.text", "text must be a non-empty string",
                          "give the system prompt text, or drop text to use the library")
        text = text.strip() if text is not None else None
    return SystemPromptSpec(share=share, text=text)


def _str_list(ctx: _Ctx, fp: str, v: Any) -> tuple[str, ...]:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
        raise ctx.err(fp, f"expected a non-empty list of names, got {_type_name(v)}",
                      "write e.g. [finance, e-commerce]")
    return tuple(v)


def _parse_filter(ctx: _Ctx, fp: str, raw: dict, allowed: tuple[str, ...]) -> TemplateFilter:
    _check_fields(ctx, fp, raw, allowed)
    domains = _str_list(ctx, f"{fp}.domains", raw["domains"]) if "domains" in raw else None
    langs = _str_list(ctx, f"{fp}.langs", raw["langs"]) if "langs" in raw else None
    return TemplateFilter(domains, langs)


def _check_filter_known(ctx: _Ctx, fp: str, flt: TemplateFilter, lib: Library) -> None:
    known_d = sorted({t.domain for t in lib.all()})
    known_l = sorted({t.lang for t in lib.all()})
    for key, names, known in (("domains", flt.domains, known_d), ("langs", flt.langs, known_l)):
        for n in names or ():
            if n not in known:
                raise ctx.err(f"{fp}.{key}", f"{n!r} is not in the template library",
                              f"known {key}: {', '.join(known)}")


def _yaml_error(ctx: _Ctx, exc: yaml.YAMLError) -> WorkloadError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "YAML"
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    text = f"malformed YAML: {context + ', ' if context else ''}{problem}"
    return ctx.err(where, text, "fix the YAML syntax at that line")


def load_spec(path: str | None = None) -> WorkloadSpec:
    """Load and validate a workload spec; ``None`` loads the built-in default.

    Raises :class:`WorkloadError` (one-line message) on any mistake.
    """
    import time

    t0 = time.perf_counter()
    if path is None:
        path = DEFAULT_SPEC_PATH
    path = os.fspath(path)
    label = path
    ctx = _Ctx(label)
    if not os.path.exists(path):
        raise ctx.err("file", "spec file not found", "check the path")
    with open(path, "rb") as fh:
        spec_bytes = fh.read()
    try:
        doc = yaml.load(spec_bytes, Loader=_YAML_LOADER)  # libyaml when present: long empirical lists load fast
    except yaml.YAMLError as exc:
        raise _yaml_error(ctx, exc) from None
    if doc is None:
        raise ctx.err("file", "the spec is empty", "write a mapping with at least 'classes:'")
    if not isinstance(doc, dict):
        raise ctx.err("file", f"the spec must be a mapping, got {_type_name(doc)}",
                      "write 'name: ...' and 'classes: ...' at the top level")
    _check_fields(ctx, "", doc, TOP_FIELDS)

    name = doc.get("name", os.path.splitext(os.path.basename(path))[0])
    if not isinstance(name, str) or not name.strip():
        raise ctx.err("name", f"expected a non-empty string, got {_type_name(name)}", "give the spec a name")
    description = doc.get("description", "") or ""
    if not isinstance(description, str):
        raise ctx.err("description", f"expected a string, got {_type_name(description)}", "quote the text")

    # ---- templates
    spec_dir = os.path.dirname(os.path.abspath(path))
    traw = doc.get("templates", None)
    top_filter = TemplateFilter()
    if traw is None:
        tfile = DEFAULT_TEMPLATES_PATH
    elif isinstance(traw, str):
        tfile = traw
    elif isinstance(traw, dict):
        top_filter = _parse_filter(ctx, "templates", traw, TEMPLATES_FIELDS)
        tfile = traw.get("file", DEFAULT_TEMPLATES_PATH)
        if not isinstance(tfile, str) or not tfile:
            raise ctx.err("templates.file", f"expected a path, got {_type_name(tfile)}",
                          "give the JSONL file, relative to the spec")
    else:
        raise ctx.err("templates", f"expected a path or a mapping, got {_type_name(traw)}",
                      "write templates: templates.jsonl")
    tpath = tfile if os.path.isabs(tfile) else os.path.join(spec_dir, tfile)
    tpath = os.path.normpath(tpath)
    tfield = "templates.file" if isinstance(traw, dict) and "file" in traw else "templates"
    library = load_library(tpath, origin=label, field_name=tfield)
    _check_filter_known(ctx, "templates", top_filter, library)

    # ---- system prompt (top level)
    sysraw = doc.get("system_prompt", None)
    top_system = SystemPromptSpec() if sysraw is None else _parse_system(ctx, "system_prompt", sysraw, None)
    spraw = doc.get("shared_prefix", None)
    top_prefix = None if spraw is None else _parse_shared_prefix(ctx, "shared_prefix", spraw, None)

    # ---- classes
    if "classes" not in doc or doc["classes"] is None:
        raise ctx.err("classes", "no classes defined",
                      "add at least one class with weight, input_chars and output_tokens")
    craw = _mapping(ctx, "classes", doc["classes"], "write classes: {short: {weight: ..., ...}}")
    if not craw:
        raise ctx.err("classes", "no classes defined",
                      "add at least one class with weight, input_chars and output_tokens")

    parsed: list[tuple] = []
    for cname, c in craw.items():
        fp = f"classes.{cname}"
        if not isinstance(cname, str) or not CLASS_NAME_RE.match(cname):
            raise ctx.err(fp, f"bad class name {cname!r}",
                          "use letters, digits, '_', '-' or '.', starting with a letter or digit")
        c = _mapping(ctx, fp, c, "write {weight: ..., input_chars: ..., output_tokens: ...}")
        _check_fields(ctx, fp, c, CLASS_FIELDS)
        for key in ("weight", "input_chars", "output_tokens"):
            if key not in c:
                raise ctx.err(f"{fp}.{key}", f"missing {key}",
                              "every class needs weight, input_chars and output_tokens")
        w = _number(ctx, f"{fp}.weight", c["weight"], "give the weight as a number")
        if w < 0:
            raise ctx.err(f"{fp}.weight", f"negative weight {w:g}", "weights are >= 0 and sum to 1.0")
        ic = _parse_dist(ctx, f"{fp}.input_chars", c["input_chars"], "characters", 1)
        ot = _parse_dist(ctx, f"{fp}.output_tokens", c["output_tokens"], "tokens", 1)
        sp = top_system if c.get("system_prompt") is None else \
            _parse_system(ctx, f"{fp}.system_prompt", c["system_prompt"], top_system)
        flt = top_filter
        if c.get("templates") is not None:
            fraw = _mapping(ctx, f"{fp}.templates", c["templates"], "write {domains: [...], langs: [...]}")
            cf = _parse_filter(ctx, f"{fp}.templates", fraw, FILTER_FIELDS)
            _check_filter_known(ctx, f"{fp}.templates", cf, library)
            flt = top_filter.merged(cf)
        mode = c.get("prompts")
        if mode is not None and mode not in PROMPT_MODES:
            raise ctx.err(f"{fp}.prompts", f"unknown prompts mode {mode!r}",
                          "write prompts: verbatim (whole imported prompts), or drop it")
        if mode is not None and c.get("system_prompt") is not None:
            raise ctx.err(f"{fp}.system_prompt", "verbatim prompts keep the system prompt they were logged with",
                          "drop system_prompt from this class, or drop prompts: verbatim")
        if ic.dist == "empirical" and ic.values is None and mode is None:
            raise ctx.err(f"{fp}.input_chars.values", "empirical without values needs prompts: verbatim",
                          "give values: [...], or add prompts: verbatim to draw the imported prompts' lengths")
        if ot.dist == "empirical" and ot.values is None:
            raise ctx.err(f"{fp}.output_tokens.values", "missing values of the empirical distribution",
                          "give values: [...] (the observed output lengths)")
        session = _parse_session(ctx, f"{fp}.session", c["session"]) if c.get("session") is not None else None
        prefix = top_prefix
        if c.get("shared_prefix") is not None:
            prefix = _parse_shared_prefix(ctx, f"{fp}.shared_prefix", c["shared_prefix"], top_prefix)
        parsed.append((cname, w, ic, ot, sp, flt, mode, session, prefix))

    total = math.fsum(p[1] for p in parsed)
    if abs(total - 1.0) > WEIGHT_TOLERANCE:
        first = parsed[0][0]
        raise ctx.err(f"classes.{first}.weight", f"weights sum to {total:g}, must sum to 1.0",
                      "adjust the weights")

    classes: dict[str, ClassSpec] = {}
    prefix_texts: dict[tuple[int, int], tuple[str, ...]] = {}
    for cname, w, ic, ot, sp, flt, mode, session, prefix in parsed:
        if mode is not None:
            cs = _resolve_verbatim(ctx, cname, w, ic, ot, flt, library, mode)
        else:
            cs = _resolve_class(ctx, cname, w, ic, ot, sp, flt, library)
        if prefix is not None and prefix.share > 0:
            key = (prefix.count, prefix.chars)
            if key not in prefix_texts:
                prefix_texts[key] = shared_prefix_texts(library, *key)
            prefix = replace(prefix, texts=prefix_texts[key])
        classes[cname] = replace(cs, session=session, shared_prefix=prefix)

    h = hashlib.sha256()
    h.update(spec_bytes)
    h.update(library.data)
    return WorkloadSpec(name=name.strip(), path=path, description=description.strip(),
                        templates_path=tpath, library=library, classes=classes,
                        system_prompt=top_system, spec_hash=h.hexdigest(),
                        load_seconds=time.perf_counter() - t0, shared_prefix=top_prefix)


def _resolve_verbatim(ctx: _Ctx, cname: str, w: float, ic: Distribution, ot: Distribution,
                      flt: TemplateFilter, lib: Library, mode: str) -> ClassSpec:
    """A class of whole imported prompts: those matching the filter whose input length lies in
    input_chars [min, max]."""
    fp = f"classes.{cname}"
    if not lib.prompts:
        raise ctx.err(f"{fp}.prompts", "the template library has no imported prompts (kind prompt)",
                      "import a log with python -m workloads import, or drop prompts: verbatim")
    cands = [t for t in lib.prompts if flt.match(t)]
    if not cands:
        raise ctx.err(f"{fp}.templates", f"no imported prompts match the filter {flt.to_dict() or '{}'}",
                      "widen domains/langs")
    prompts = tuple(t for t in cands if ic.min <= t.input_chars <= ic.max)
    if not prompts:
        lens = sorted(t.input_chars for t in cands)
        raise ctx.err(f"{fp}.input_chars", f"no imported prompt has an input length in [{ic.min}, {ic.max}] "
                      f"(they have {lens[0]} to {lens[-1]} chars)", "widen the range")
    return ClassSpec(name=cname, weight=w, input_chars=ic, output_tokens=ot, system_prompt=SystemPromptSpec(),
                     filter=flt, prompts_mode=mode, prompts=prompts)


def _resolve_class(ctx: _Ctx, cname: str, w: float, ic: Distribution, ot: Distribution,
                   sp: SystemPromptSpec, flt: TemplateFilter, lib: Library) -> ClassSpec:
    """Select the templates a class can use and check its input range is reachable.

    Rules: at least one question matches the filter; the shortest such
    question fits under input_chars.max; with a system-prompt share > 0 at
    least one system prompt fits together with the shortest question; if no
    context passage matches, input_chars.min must be reachable by a question
    alone.
    """
    fp = f"classes.{cname}"
    qs = [t for t in lib.questions if flt.match(t)]
    if not qs:
        raise ctx.err(f"{fp}.templates", f"no questions match the filter {flt.to_dict() or '{}'}",
                      "widen domains/langs or add matching questions to the library")
    shortest_q = min(len(t.text) for t in qs)
    if shortest_q > ic.max:
        raise ctx.err(f"{fp}.input_chars.max",
                      f"max {ic.max} is below the shortest question ({shortest_q} chars)",
                      f"raise max to at least {shortest_q} or add shorter questions")
    qs = [t for t in qs if len(t.text) <= ic.max]
    ctxs = tuple(t for t in lib.contexts if flt.match(t))
    if not ctxs:
        longest_q = max(len(t.text) for t in qs)
        if ic.min > longest_q:
            raise ctx.err(f"{fp}.input_chars.min",
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
            raise ctx.err(f"{fp}.system_prompt.share",
                          f"share {sp.share:g} but the library has no system prompts for this class",
                          "add system prompts to the library, give system_prompt.text, or set share to 0")
        fitting = tuple(s for s in cands if len(s) + shortest_q <= ic.max)
        if not fitting:
            need = min(len(s) for s in cands) + shortest_q
            raise ctx.err(f"{fp}.input_chars.max",
                          f"max {ic.max} leaves no room for a system prompt (the shortest system "
                          f"prompt plus the shortest question need {need} chars)",
                          f"raise max to at least {need} or set system_prompt.share: 0 for this class")
        systems = fitting
    return ClassSpec(name=cname, weight=w, input_chars=ic, output_tokens=ot, system_prompt=sp,
                     filter=flt, questions=tuple(qs), contexts=ctxs, systems=systems,
                     system_templates=tuple(t for t in sys_templates if t.text in systems))
