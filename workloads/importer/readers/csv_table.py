"""CSV / TSV with a header line: a prompt column (``prompt``/``input``/``question``/... or
``--prompt-column``), an output length (``output_tokens``/``completion_tokens``/... or
``--output-column``), and optional system prompt, max_tokens, prompt tokens, reply text and time
columns. A file named .csv/.tsv, or one that does not start like JSON, is read as this."""

from __future__ import annotations

import csv
import io

from core.errors import InputError

from ..records import TIME_KEYS, Entry, Parsed, as_count, parse_time
from .registry import Source, reader

CSV_PROMPT = ("prompt", "input", "question", "query", "instruction", "text", "content", "message", "user")
CSV_OUTPUT_TOKENS = (
    "output_tokens",
    "completion_tokens",
    "output_len",
    "output_length",
    "output_token_count",
    "response_tokens",
    "generated_tokens",
    "num_output_tokens",
    "output_tokens_count",
)
CSV_MAX_TOKENS = ("max_tokens", "max_new_tokens", "max_completion_tokens")
CSV_PROMPT_TOKENS = ("prompt_tokens", "input_tokens", "input_len", "input_length")
CSV_OUTPUT_TEXT = ("output", "response", "answer", "completion", "reply")
CSV_SYSTEM = ("system", "system_prompt", "system_message")
CSV_TIME = TIME_KEYS + ("datetime", "date")


def _pick(columns: dict, names: tuple, override: str | None, what: str) -> str | None:
    if override:
        key = override.strip().lower()
        if key not in columns:
            raise InputError(f"--{what}-column: no column {override!r} (columns: {', '.join(columns.values())})")
        return columns[key]
    for n in names:
        if n in columns:
            return columns[n]
    return None


def _claims(source: Source) -> bool:
    return source.name.lower().endswith((".csv", ".tsv")) or source.stripped[0] not in "[{"


@reader("csv", order=10, claims=_claims)
def read(source: Source) -> Parsed:
    text, path = source.text, source.path
    csv.field_size_limit(1 << 30)
    head = text[:65536]
    try:
        dialect = csv.Sniffer().sniff(head.split("\n", 1)[0] + "\n", delimiters=",\t;|")
    except csv.Error:
        dialect = csv.excel_tab if path.endswith(".tsv") else csv.excel
    rows = csv.DictReader(io.StringIO(text, newline=""), dialect=dialect)
    if not rows.fieldnames:
        raise InputError(f"{path}: the CSV has no header line")
    columns = {c.strip().lower(): c for c in rows.fieldnames if c is not None}
    pcol = _pick(columns, CSV_PROMPT, source.prompt_column, "prompt")
    if pcol is None:
        raise InputError(
            f"{path}: no prompt column among {', '.join(rows.fieldnames)}; "
            f"name one with --prompt-column (looked for {', '.join(CSV_PROMPT)})"
        )
    ocol = _pick(columns, CSV_OUTPUT_TOKENS, source.output_column, "output")
    mcol = _pick(columns, CSV_MAX_TOKENS, None, "max-tokens")
    itcol = _pick(columns, CSV_PROMPT_TOKENS, None, "prompt-tokens")
    rcol = _pick(columns, CSV_OUTPUT_TEXT, None, "reply")
    scol = _pick(columns, CSV_SYSTEM, None, "system")
    tcol = _pick(columns, CSV_TIME, None, "time")
    parsed = Parsed([], f"csv (prompt column {pcol!r}" + (f", output tokens {ocol!r}" if ocol else "") + ")")
    for row in rows:
        parsed.lines += 1
        prompt = row.get(pcol)
        if not prompt or not prompt.strip():
            parsed.skipped["empty prompt"] += 1
            continue
        system = row.get(scol) if scol else None
        e = Entry(text=prompt, system=system if system and system.strip() else None)
        if ocol:
            e.out_tokens_usage = as_count(row.get(ocol))
        if mcol:
            e.max_tokens = as_count(row.get(mcol))
        if itcol:
            e.prompt_tokens = as_count(row.get(itcol))
        if rcol and row.get(rcol):
            e.reply_text = row[rcol]
        if tcol:
            e.time = parse_time(row.get(tcol))
        parsed.entries.append(e)
    return parsed
