"""Log readers, one module per format, and ``read_log``, which picks the reader for a file.

    csv_table        CSV / TSV with a header line
    sharegpt         ShareGPT conversations (JSON array or JSON lines)
    openai_requests  OpenAI request bodies (JSON lines or a JSON array): every other JSON log

Each module registers itself with ``registry.reader``; importing it here is all a new one needs.
"""

from __future__ import annotations

from core.errors import InputError

from ..records import Parsed
from . import csv_table, openai_requests, sharegpt  # noqa: F401  (they register themselves)
from .registry import READERS, Source, open_text


def read_log(
    path: str, *, turns: str = "first", prompt_column: str | None = None, output_column: str | None = None
) -> Parsed:
    """Read a log file of any supported format into normalised entries."""
    source = Source(path, open_text(path), turns=turns, prompt_column=prompt_column, output_column=output_column)
    if not source.stripped:
        raise InputError(f"{path}: the file is empty")
    for r in sorted(READERS.values(), key=lambda r: r.order):
        if r.claims(source):
            return r.read(source)
    raise InputError(f"{path}: not a log format the importer reads ({', '.join(READERS)})")
