"""The readers of log formats, one module each, registered here by name.

A reader is a ``read(source) -> Parsed`` function registered with ``@reader(name, order, claims)``:
``claims(source)`` says whether the file is in its format (from the content, and the name for
CSV); the first reader in ``order`` that claims a file reads it. A new format is one more module
in this folder, imported by ``readers/__init__.py``.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.errors import InputError

from ..records import Parsed


@dataclass
class Source:
    """A log file read once: its text, the reading options, and its JSON items parsed on first use."""

    path: str
    text: str
    turns: str = "first"  # ShareGPT: "first" human message of each conversation, or "all" answered ones
    prompt_column: str | None = None  # CSV overrides
    output_column: str | None = None
    _items: tuple[list, int] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """The file name without a trailing .gz."""
        return self.path[:-3] if self.path.endswith(".gz") else self.path

    @property
    def stripped(self) -> str:
        return self.text.lstrip()

    def json_items(self) -> tuple[list, int]:
        """``(items, lines)``: the objects of a JSON array, of JSON lines (None for a line that does not
        parse), or of one JSON document spread over lines."""
        if self._items is None:
            self._items = self._parse_json()
        return self._items

    def _parse_json(self) -> tuple[list, int]:
        stripped = self.stripped
        if stripped[0] == "[":
            try:
                items = json.loads(stripped)
            except ValueError as e:
                raise InputError(f"{self.path}: a JSON array that does not parse ({e})") from None
            return (items, len(items)) if isinstance(items, list) else ([items], 1)
        items, lines, bad = [], 0, 0
        for line in self.text.splitlines():
            if not line.strip():
                continue
            lines += 1
            try:
                items.append(json.loads(line))
            except ValueError:
                bad += 1
                items.append(None)
        if bad == lines:  # one JSON document spread over lines?
            try:
                doc = json.loads(stripped)
            except ValueError:
                raise InputError(f"{self.path}: neither JSON lines nor a JSON document") from None
            items = (
                doc
                if isinstance(doc, list)
                else doc.get("data", doc.get("requests", [doc]))
                if isinstance(doc, dict)
                else [doc]
            )
            lines = len(items)
        return items, lines


@dataclass(frozen=True)
class Reader:
    name: str
    order: int  # detection order: lower is asked first
    claims: Callable[[Source], bool]
    read: Callable[[Source], Parsed]


READERS: dict[str, Reader] = {}


def reader(name: str, order: int, claims: Callable[[Source], bool]) -> Callable[[Callable[[Source], Parsed]], Any]:
    """Register the decorated ``read(source)`` as the reader of format `name`."""

    def register(read: Callable[[Source], Parsed]) -> Callable[[Source], Parsed]:
        READERS[name] = Reader(name, order, claims, read)
        return read

    return register


def open_text(path: str) -> str:
    """The file's text (a .gz file decompressed), without a byte-order mark."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 ({e.reason} at byte {e.start}); save the log as UTF-8") from None
    return text[1:] if text.startswith("\ufeff") else text
