"""Workload spec: YAML file -> validated, immutable :class:`WorkloadSpec`.

The file is read and validated as a :class:`workloads.spec_file.WorkloadFile` (its schema and
contract are described there); its classes are then resolved against the template library into
:class:`ClassSpec` (the eligible templates), what the sampler reads.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from core.errors import InputError
from core.validation import build, dotted

from .attachments import ToolsSpec, image_urls
from .library import Library, Template, load_library
from .spec_file import (
    DEFAULT_SPEC_PATH,
    ClassEntry,
    ImagesSpec,
    SessionSpec,
    SharedPrefixSpec,
    SystemPromptSpec,
    TemplateFilter,
    TemplatesSource,
    WorkloadFile,
    _override,
)

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _error(path: str, where: str, problem: str, fix: str = "") -> InputError:
    """``FILE: FIELD: PROBLEM (FIX)``, the line every mistake in a spec gives."""
    return InputError(f"{path}: {where}: {problem}" + (f" ({fix})" if fix else ""))


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
            "eligible": {
                "questions": len(self.questions),
                "contexts": len(self.contexts),
                "system_prompts": len(self.systems),
            },
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
            line = (
                f"{c.name}: {c.weight:.0%} input {c.input_chars.describe()} chars, "
                f"output {c.output_tokens.describe()} tokens, "
            )
            if c.prompts_mode:
                line += f"{len(c.prompts)} verbatim prompts"
            else:
                line += f"system prompt {c.system_prompt.share:.0%}"
            if c.session is not None:
                line += (
                    f", conversations of {c.session.turns.describe()} turns, think "
                    f"{c.session.think_time_s.describe()} s"
                )
            if c.shared_prefix is not None and c.shared_prefix.share > 0:
                sp = c.shared_prefix
                line += f", shared prefix {sp.share:.0%} ({sp.count} x {sp.chars} chars)"
            if c.tools is not None:
                line += f", {len(c.tools.tools())} tools (tool_choice {c.tools.choice})"
            if c.images is not None:
                im = c.images
                line += f", {im.share:.0%} with {im.count.describe()} images " + (
                    f"from {len(im.files)} files" if im.files else f"of {im.width}x{im.height}"
                )
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
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
    }.get(type(v), type(v).__name__)


def _yaml_error(path: str, exc: yaml.YAMLError) -> InputError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "YAML"
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    return _error(
        path, where, f"malformed YAML: {context + ', ' if context else ''}{problem}", "fix the YAML syntax at that line"
    )


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
        raise _error(
            path,
            "file",
            f"the spec must be a mapping, got {_type_name(doc)}",
            "write 'name: ...' and 'classes: ...' at the top level",
        )
    f = build(WorkloadFile, doc, field_name=lambda loc: f"{path}: {dotted(loc)}")

    spec_dir = os.path.dirname(os.path.abspath(path))
    source = f.templates or TemplatesSource()
    tpath = os.path.normpath(source.file if os.path.isabs(source.file) else os.path.join(spec_dir, source.file))
    tfield = "templates.file" if isinstance(doc.get("templates"), dict) and "file" in doc["templates"] else "templates"
    library = load_library(
        tpath, origin=path, field_name=tfield, data=None if sources is None else sources[TEMPLATES_SOURCE]
    )
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
                raise _error(
                    path,
                    f"classes.{cname}.images.files",
                    f"cannot read {e.filename}: {e.strerror}",
                    "give image files that exist, relative to the spec",
                ) from None
        classes[cname] = replace(
            cs, session=c.session, shared_prefix=prefix, tools=c.tools, images=c.images, image_urls=urls, batch=c.batch
        )

    h = hashlib.sha256()
    h.update(spec_bytes)
    h.update(library.data)
    for key in sorted(k for k in kept if k.startswith(IMAGE_SOURCE)):  # image files are content too
        h.update(b"\0%s\0%d\0" % (key.encode(), len(kept[key])))  # named and sized: no two files read alike
        h.update(kept[key])
    name = f.name if f.name is not None else os.path.splitext(os.path.basename(path))[0]
    return WorkloadSpec(
        name=name.strip(),
        path=path,
        description=(f.description or "").strip(),
        sources=kept,
        templates_path=tpath,
        library=library,
        classes=classes,
        system_prompt=top_system,
        spec_hash=h.hexdigest(),
        load_seconds=time.perf_counter() - t0,
        shared_prefix=f.shared_prefix,
    )


def _check_filter_known(path: str, fp: str, flt: TemplateFilter, lib: Library) -> None:
    known_d = sorted({t.domain for t in lib.all()})
    known_l = sorted({t.lang for t in lib.all()})
    for key, names, known in (("domains", flt.domains, known_d), ("langs", flt.langs, known_l)):
        for n in names or ():
            if n not in known:
                raise _error(
                    path, f"{fp}.{key}", f"{n!r} is not in the template library", f"known {key}: {', '.join(known)}"
                )


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
        raise _error(
            path,
            f"{fp}.prompts",
            "the template library has no imported prompts (kind prompt)",
            "import a log with python -m workloads import, or drop prompts: verbatim",
        )
    cands = [t for t in lib.prompts if flt.match(t)]
    if not cands:
        raise _error(
            path,
            f"{fp}.templates",
            f"no imported prompts match the filter {flt.to_dict() or '{}'}",
            "widen domains/langs",
        )
    prompts = tuple(t for t in cands if ic.min <= t.input_chars <= ic.max)
    if not prompts:
        lens = sorted(t.input_chars for t in cands)
        raise _error(
            path,
            f"{fp}.input_chars",
            f"no imported prompt has an input length in [{ic.min}, {ic.max}] (they have {lens[0]} to {lens[-1]} chars)",
            "widen the range",
        )
    return ClassSpec(
        name=cname,
        weight=c.weight,
        input_chars=ic,
        output_tokens=c.output_tokens,
        system_prompt=SystemPromptSpec(),
        filter=flt,
        prompts_mode=c.prompts,
        prompts=prompts,
    )


def _resolve_class(
    path: str, cname: str, c: ClassEntry, sp: SystemPromptSpec, flt: TemplateFilter, lib: Library
) -> ClassSpec:
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
        raise _error(
            path,
            f"{fp}.templates",
            f"no questions match the filter {flt.to_dict() or '{}'}",
            "widen domains/langs or add matching questions to the library",
        )
    shortest_q = min(len(t.text) for t in qs)
    if shortest_q > ic.max:
        raise _error(
            path,
            f"{fp}.input_chars.max",
            f"max {ic.max} is below the shortest question ({shortest_q} chars)",
            f"raise max to at least {shortest_q} or add shorter questions",
        )
    qs = [t for t in qs if len(t.text) <= ic.max]
    ctxs = tuple(t for t in lib.contexts if flt.match(t))
    if not ctxs:
        longest_q = max(len(t.text) for t in qs)
        if ic.min > longest_q:
            raise _error(
                path,
                f"{fp}.input_chars.min",
                f"min {ic.min} cannot be reached: no context passages match and the "
                f"longest question has {longest_q} chars",
                f"lower min to {longest_q} or add context passages",
            )
    systems: tuple[str, ...] = ()
    sys_templates: tuple[Template, ...] = ()
    if sp.share > 0:
        if sp.text is not None:
            cands = [sp.text]
        else:
            sys_templates = tuple(t for t in lib.systems if flt.match(t)) or tuple(
                t for t in lib.systems if flt.langs is None or t.lang in flt.langs
            )
            cands = [t.text for t in sys_templates]
        if not cands:
            raise _error(
                path,
                f"{fp}.system_prompt.share",
                f"share {sp.share:g} but the library has no system prompts for this class",
                "add system prompts to the library, give system_prompt.text, or set share to 0",
            )
        fitting = tuple(s for s in cands if len(s) + shortest_q <= ic.max)
        if not fitting:
            need = min(len(s) for s in cands) + shortest_q
            raise _error(
                path,
                f"{fp}.input_chars.max",
                f"max {ic.max} leaves no room for a system prompt (the shortest system "
                f"prompt plus the shortest question need {need} chars)",
                f"raise max to at least {need} or set system_prompt.share: 0 for this class",
            )
        systems = fitting
    return ClassSpec(
        name=cname,
        weight=c.weight,
        input_chars=ic,
        output_tokens=c.output_tokens,
        system_prompt=sp,
        filter=flt,
        questions=tuple(qs),
        contexts=ctxs,
        systems=systems,
        system_templates=tuple(t for t in sys_templates if t.text in systems),
    )
