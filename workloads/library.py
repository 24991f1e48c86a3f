"""Template library: questions, context passages and system prompts (JSONL).

One JSON object per line::

    {"kind": "question"|"context"|"system"|"prompt", "domain": "finance", "lang": "en", "text": "..."}

Optional keys ``id``, ``source`` and ``tags`` are accepted and kept out of the
way. Blank lines are skipped.

Kind ``prompt`` is a whole prompt imported from a log (``python -m workloads
import``), sent verbatim by classes with ``prompts: verbatim``. It may carry:

    "system": "s0003"          id of a "system" line of the same file: the system prompt it was logged with
    "history": [{"role": "user"|"assistant", "content": "..."}, ...]   earlier turns sent before ``text``
    "count": 17                how often the prompt occurred in the log (sampling weight, default 1)
    "output_tokens": 212       output length observed in the log (informational)
    "after": [...]             messages after ``text``: an agent's tool calls and their results
    "tools": {"tools": [...], "tool_choice": "auto"}   the tools the request offered
    "images": [[640, 480], ...]   sizes of the images sent with ``text`` (generated at replay)

A history (or ``after``) message is ``{"role": "user"|"assistant", "content": "..."}``, an
assistant's tool calls ``{"role": "assistant", "content": ..., "tool_calls": [...]}`` or a tool
result ``{"role": "tool", "tool_call_id": "...", "content": "..."}``, as the chat API takes them.

Its input length is the system prompt + every history message + ``text``, in characters.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field, replace

from core.errors import InputError

KINDS = ("question", "context", "system", "prompt")
REQUIRED_KEYS = ("kind", "domain", "lang", "text")
OPTIONAL_KEYS = ("id", "source", "tags")
PROMPT_KEYS = ("system", "history", "count", "output_tokens", "after", "tools", "images")  # kind "prompt" only
HISTORY_ROLES = ("user", "assistant")


@dataclass(frozen=True, slots=True)
class Template:
    kind: str
    domain: str
    lang: str
    text: str
    # kind "prompt" only (imported from a log): the logged system prompt (resolved text), earlier
    # turns as (role, content) pairs, and how often the prompt occurred
    id: str = ""
    system: str | None = None
    history: tuple = ()  # (role, content) pairs; tool calls and results as their message dicts
    count: int = 1
    after: tuple = ()  # messages after text (an agent's tool calls and results)
    tools: dict | None = None  # {"tools": [...], "tool_choice": ...}
    images: tuple[tuple[int, int], ...] = ()  # sizes of the images sent with text

    @property
    def input_chars(self) -> int:
        """The whole input this template makes as a prompt: system + history + text (+ after)."""
        return (
            (len(self.system) if self.system else 0)
            + sum(_chars(m) for m in (*self.history, *self.after))
            + len(self.text)
        )


def _chars(m) -> int:
    if isinstance(m, tuple):
        return len(m[1])
    if isinstance(m.get("content"), str):
        return len(m["content"])
    return sum(len(c["function"]["arguments"]) for c in m.get("tool_calls") or ())


def _message(m):
    """A history message as the library file gives it -> a (role, content) pair, or the message
    itself (tool calls, a tool result); None when malformed."""
    if not isinstance(m, dict):
        return None
    if set(m) == {"role", "content"} and m["role"] in HISTORY_ROLES and isinstance(m["content"], str):
        return (m["role"], m["content"])
    if m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str) and isinstance(m.get("content"), str):
        return {"role": "tool", "tool_call_id": m["tool_call_id"], "content": m["content"]}
    calls = m.get("tool_calls")
    if (
        m.get("role") == "assistant"
        and isinstance(calls, list)
        and calls
        and all(
            isinstance(c, dict)
            and isinstance(c.get("id"), str)
            and isinstance(c.get("function"), dict)
            and isinstance(c["function"].get("name"), str)
            and isinstance(c["function"].get("arguments"), str)
            for c in calls
        )
    ):
        return {
            "role": "assistant",
            "content": m.get("content") if isinstance(m.get("content"), str) else None,
            "tool_calls": calls,
        }
    return None


@dataclass(frozen=True)
class Library:
    """The parsed library. ``data`` holds the file bytes (for the spec hash)."""

    path: str
    questions: tuple[Template, ...]
    contexts: tuple[Template, ...]
    systems: tuple[Template, ...]
    data: bytes = field(repr=False, default=b"")
    prompts: tuple[Template, ...] = ()

    def all(self) -> tuple[Template, ...]:
        return self.questions + self.contexts + self.systems + self.prompts

    def counts(self) -> dict:
        """Counts by kind, by kind and language, by kind and domain."""
        out: dict = {"total": 0, "by_kind": {}, "by_lang": {}, "by_domain": {}}
        for kind, items in (
            ("question", self.questions),
            ("context", self.contexts),
            ("system", self.systems),
            ("prompt", self.prompts),
        ):
            out["by_kind"][kind] = len(items)
            out["by_lang"][kind] = dict(sorted(Counter(t.lang for t in items).items()))
            out["by_domain"][kind] = dict(sorted(Counter(t.domain for t in items).items()))
            out["total"] += len(items)
        return out

    def duplicates(self) -> list[str]:
        """Texts that appear more than once (any kind)."""
        c = Counter(t.text for t in self.all())
        return [t for t, n in c.items() if n > 1]


def load_library(
    path: str, *, origin: str | None = None, field_name: str = "templates", data: bytes | None = None
) -> Library:
    """Read and validate a JSONL template library.

    ``origin`` is the file named first in error messages (the spec file that
    points to this library); by default the library itself. ``data``: the file's
    bytes, already read (a worker gets them from its master), instead of reading ``path``.
    """
    origin = origin or path

    def fail(problem: str, fix: str) -> InputError:
        return InputError(f"{origin}: {field_name}: {problem} ({fix})")

    if data is None:
        if not os.path.exists(path):
            raise fail(f"template file {path} not found", "fix the path; it is relative to the spec file")
        if os.path.isdir(path):
            raise fail(f"template file {path} is a directory", "point to a .jsonl file")
        with open(path, "rb") as fh:
            data = fh.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(f"{path} is not UTF-8 ({exc.reason} at byte {exc.start})", "save the file as UTF-8") from None
    if text.startswith("\ufeff"):
        text = text[1:]

    buckets: dict[str, list[Template]] = {k: [] for k in KINDS}
    prompt_refs: list[tuple[str, str | None]] = []
    raw_systems: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path} line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise fail(
                f"{where}: malformed JSON ({exc.msg} at column {exc.colno})", "write one JSON object per line"
            ) from None
        if not isinstance(obj, dict):
            raise fail(
                f"{where}: expected a JSON object, got {type(obj).__name__}",
                'write {"kind": ..., "domain": ..., "lang": ..., "text": ...}',
            )
        allowed = REQUIRED_KEYS + OPTIONAL_KEYS + (PROMPT_KEYS if obj.get("kind") == "prompt" else ())
        unknown = sorted(set(obj) - set(allowed))
        if unknown:
            raise fail(f"{where}: unknown key {unknown[0]!r}", f"allowed keys: {', '.join(allowed)}")
        for key in REQUIRED_KEYS:
            if key not in obj:
                raise fail(f"{where}: missing key {key!r}", f"every line needs {', '.join(REQUIRED_KEYS)}")
            if not isinstance(obj[key], str) or not obj[key].strip():
                raise fail(f"{where}: {key} must be a non-empty string", f"give {key} a text value")
        kind = obj["kind"]
        if kind not in KINDS:
            raise fail(f"{where}: unknown kind {kind!r}", f"kind is one of {', '.join(KINDS)}")
        tid = obj.get("id", "")
        if not isinstance(tid, str):
            raise fail(f"{where}: id must be a string", 'write e.g. "id": "p000001"')
        domain, lang = obj["domain"].strip(), obj["lang"].strip()
        if kind != "prompt":
            buckets[kind].append(Template(kind, domain, lang, obj["text"].strip(), id=tid))
            if kind == "system" and tid:
                raw_systems[tid] = obj["text"]  # referenced by imported prompts: exactly as logged
            continue
        # verbatim prompts keep their text exactly as logged (no strip): lengths must match the log
        messages = {}
        for key in ("history", "after"):
            raw = obj.get(key, [])
            parsed = [_message(m) for m in raw] if isinstance(raw, list) else [None]
            if any(m is None for m in parsed):
                raise fail(
                    f'{where}: {key} must be a list of chat messages ({{"role": "user"|"assistant", '
                    f'"content": "..."}}, an assistant\'s tool_calls or a tool result)',
                    f"fix or drop the {key} of this prompt",
                )
            messages[key] = tuple(parsed)
        tools = obj.get("tools")
        if tools is not None and not (isinstance(tools, dict) and isinstance(tools.get("tools"), list)):
            raise fail(f'{where}: tools must be {{"tools": [...], "tool_choice": ...}}', "fix or drop tools")
        images = obj.get("images", [])
        if not isinstance(images, list) or not all(
            isinstance(i, list) and len(i) == 2 and all(isinstance(x, int) and 0 < x <= 8192 for x in i) for i in images
        ):
            raise fail(f"{where}: images must be a list of [width, height] in pixels", "fix or drop images")
        count = obj.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise fail(f"{where}: count must be a whole number >= 1", "give how often the prompt occurred")
        sys_ref = obj.get("system")
        if sys_ref is not None and (not isinstance(sys_ref, str) or not sys_ref):
            raise fail(f"{where}: system must be the id of a system line", 'write e.g. "system": "s0001"')
        prompt_refs.append((where, sys_ref))
        buckets[kind].append(
            Template(
                kind,
                domain,
                lang,
                obj["text"],
                id=tid,
                system=sys_ref,
                history=messages["history"],
                count=count,
                after=messages["after"],
                tools=tools,
                images=tuple(tuple(i) for i in images),
            )
        )

    if not any(buckets.values()):
        raise fail(f"template file {path} is empty", "add question, context and system lines, one JSON object per line")
    if not buckets["question"] and not buckets["prompt"]:
        raise fail(
            f"template file {path} has no questions (and no imported prompts)", 'add lines with "kind": "question"'
        )
    if prompt_refs:  # resolve system prompt ids to their text
        by_id = raw_systems
        prompts = []
        for (where, ref), t in zip(prompt_refs, buckets["prompt"]):
            if ref is not None and ref not in by_id:
                raise fail(
                    f"{where}: system {ref!r} is not the id of a system line in this file",
                    "add the system line or drop the reference",
                )
            prompts.append(t if ref is None else replace(t, system=by_id[ref]))
        buckets["prompt"] = prompts
    return Library(
        path=path,
        questions=tuple(buckets["question"]),
        contexts=tuple(buckets["context"]),
        systems=tuple(buckets["system"]),
        data=data,
        prompts=tuple(buckets["prompt"]),
    )
