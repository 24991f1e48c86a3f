"""Template library: questions, context passages and system prompts (JSONL).

One JSON object per line::

    {"kind": "question"|"context"|"system", "domain": "finance", "lang": "en", "text": "..."}

Optional keys ``id``, ``source`` and ``tags`` are accepted and kept out of the
way (for libraries imported from logs). Blank lines are skipped.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field

from .errors import WorkloadError

KINDS = ("question", "context", "system")
REQUIRED_KEYS = ("kind", "domain", "lang", "text")
OPTIONAL_KEYS = ("id", "source", "tags")


@dataclass(frozen=True, slots=True)
class Template:
    kind: str
    domain: str
    lang: str
    text: str


@dataclass(frozen=True)
class Library:
    """The parsed library. ``data`` holds the file bytes (for the spec hash)."""

    path: str
    questions: tuple[Template, ...]
    contexts: tuple[Template, ...]
    systems: tuple[Template, ...]
    data: bytes = field(repr=False, default=b"")

    def all(self) -> tuple[Template, ...]:
        return self.questions + self.contexts + self.systems

    def counts(self) -> dict:
        """Counts by kind, by kind and language, by kind and domain."""
        out: dict = {"total": 0, "by_kind": {}, "by_lang": {}, "by_domain": {}}
        for kind, items in (("question", self.questions), ("context", self.contexts),
                            ("system", self.systems)):
            out["by_kind"][kind] = len(items)
            out["by_lang"][kind] = dict(sorted(Counter(t.lang for t in items).items()))
            out["by_domain"][kind] = dict(sorted(Counter(t.domain for t in items).items()))
            out["total"] += len(items)
        return out

    def duplicates(self) -> list[str]:
        """Texts that appear more than once (any kind)."""
        c = Counter(t.text for t in self.all())
        return [t for t, n in c.items() if n > 1]


def load_library(path: str, *, origin: str | None = None, field_name: str = "templates") -> Library:
    """Read and validate a JSONL template library.

    ``origin`` is the file named first in error messages (the spec file that
    points to this library); by default the library itself.
    """
    origin = origin or path

    def fail(problem: str, fix: str) -> WorkloadError:
        return WorkloadError(origin, field_name, problem, fix)

    if not os.path.exists(path):
        raise fail(f"template file {path} not found",
                   "fix the path; it is relative to the spec file")
    if os.path.isdir(path):
        raise fail(f"template file {path} is a directory", "point to a .jsonl file")
    with open(path, "rb") as fh:
        data = fh.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(f"{path} is not UTF-8 ({exc.reason} at byte {exc.start})",
                   "save the file as UTF-8") from None
    if text.startswith("\ufeff"):
        text = text[1:]

    buckets: dict[str, list[Template]] = {k: [] for k in KINDS}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path} line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise fail(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})",
                       "write one JSON object per line") from None
        if not isinstance(obj, dict):
            raise fail(f"{where}: expected a JSON object, got {type(obj).__name__}",
                       'write {"kind": ..., "domain": ..., "lang": ..., "text": ...}')
        unknown = sorted(set(obj) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
        if unknown:
            raise fail(f"{where}: unknown key {unknown[0]!r}",
                       f"allowed keys: {', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)}")
        for key in REQUIRED_KEYS:
            if key not in obj:
                raise fail(f"{where}: missing key {key!r}",
                           f"every line needs {', '.join(REQUIRED_KEYS)}")
            if not isinstance(obj[key], str) or not obj[key].strip():
                raise fail(f"{where}: {key} must be a non-empty string",
                           f"give {key} a text value")
        kind = obj["kind"]
        if kind not in KINDS:
            raise fail(f"{where}: unknown kind {kind!r}", f"kind is one of {', '.join(KINDS)}")
        buckets[kind].append(Template(kind, obj["domain"].strip(), obj["lang"].strip(),
                                      obj["text"].strip()))

    if not any(buckets.values()):
        raise fail(f"template file {path} is empty",
                   "add question, context and system lines, one JSON object per line")
    if not buckets["question"]:
        raise fail(f"template file {path} has no questions",
                   'add lines with "kind": "question"')
    return Library(path=path, questions=tuple(buckets["question"]),
                   contexts=tuple(buckets["context"]), systems=tuple(buckets["system"]),
                   data=data)
