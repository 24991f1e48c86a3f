"""Import production request logs: a template library, a fitted workload spec and a replay trace.

    python -m workloads import LOGFILE --out workloads/mybiz/ [--anonymize] [--sample N | --sample-frac F]

Input shapes (detected from the content; a `.gz` file is read compressed):

  JSONL (or a JSON array) of OpenAI request bodies: chat (`messages`) or completions (`prompt`), at
        the top level or under `request` / `body` (an object or a JSON string); optional timestamp
        (`timestamp`, `time`, `created`, `created_at`, `ts`, `request_time`, `start_time`: epoch
        seconds / ms / us / ns, or ISO 8601; naive times are UTC) and usage (`usage` at the top
        level, in the body, or in a `response` object: `completion_tokens` / `output_tokens`,
        `prompt_tokens` / `input_tokens`); the reply text in `response.choices[0]` is used when
        there is no usage.
  ShareGPT JSON: `[{"id", "conversations": [{"from": "human"|"gpt"|"system", "value"}]}]` (also
        `role`/`content`, and one conversation per JSONL line). `--turns first` (default, as
        `vllm bench serve`): one request per conversation, its first human message; `--turns all`:
        one request per human message that got a reply, carrying the conversation before it.
  CSV / TSV with a header: prompt column `prompt`/`input`/`question`/`query`/`instruction`/`text`/
        `content`/`message`/`user` (or `--prompt-column`), output length `output_tokens`/
        `completion_tokens`/`output_len`/`output_length`/`response_tokens`/`generated_tokens`
        (or `--output-column`), optional `system`, `max_tokens`, reply text (`output`/`response`/
        `answer`/`completion`) and a time column.

Output tokens of a request, first that applies (the record of each import says how many of each):
  1. `usage.completion_tokens` (or a CSV output-length column);
  2. the logged reply text, counted with the estimate below;
  3. the request's `max_tokens` (a cap, not what was generated: check the summary's share);
  4. `--default-output-tokens` (256).
The estimate is the simulator's rule (simulator/tokens.py): one token per CJK character, one per
four other characters.

What is written to `--out`:
  templates.jsonl  kind `prompt` lines, the whole prompts as logged (deduplicated, with `count`),
                   and kind `system` lines for the distinct system prompts they reference;
  workload.yaml    classes bucketed by input length (quantiles `--quantiles 50,90` by default, or
                   fixed `--edges 200,800` characters), weights = the observed shares, input_chars
                   `empirical` over the class's prompts (`prompts: verbatim`), output_tokens
                   `empirical` over the observed lengths (at most `--max-values` order statistics);
  trace.jsonl      when requests carry timestamps: a header line, then one line per request
                   `{"t": seconds after the first, "class", "prompt": id, "max_tokens"}` for
                   `--replay` (shapes/replay.py).

Anonymisation (`--anonymize`) masks e-mail addresses, phone numbers (mainland China mobile and
landline, and international `+CC ...` and North American forms), mainland China 18-digit resident
ID numbers, card numbers (13-19 digits, optionally grouped) and any other run of `--digit-run`
(8) or more digits. Masking keeps the length: every letter and digit of a match becomes `*` (the
`@` and dots of an e-mail stay), so input lengths and classes are those of the log.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import math
import os
import random
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np

DEFAULT_OUTPUT_TOKENS = 256
DEFAULT_QUANTILES = (50.0, 90.0)
DEFAULT_MAX_VALUES = 1000
TRACE_VERSION = 1

CLASS_NAMES = {1: ["all"], 2: ["short", "long"], 3: ["short", "medium", "long"],
               4: ["short", "medium", "long", "xlong"]}
TIME_KEYS = ("timestamp", "time", "created", "created_at", "ts", "request_time", "start_time")
BODY_KEYS = ("request", "body", "request_body")
ASSISTANT_ROLES = {"gpt", "assistant", "chatgpt", "bard", "bing", "model", "bot"}
USER_ROLES = {"human", "user"}

CSV_PROMPT = ("prompt", "input", "question", "query", "instruction", "text", "content", "message", "user")
CSV_OUTPUT_TOKENS = ("output_tokens", "completion_tokens", "output_len", "output_length", "output_token_count",
                     "response_tokens", "generated_tokens", "num_output_tokens", "output_tokens_count")
CSV_MAX_TOKENS = ("max_tokens", "max_new_tokens", "max_completion_tokens")
CSV_PROMPT_TOKENS = ("prompt_tokens", "input_tokens", "input_len", "input_length")
CSV_OUTPUT_TEXT = ("output", "response", "answer", "completion", "reply")
CSV_SYSTEM = ("system", "system_prompt", "system_message")
CSV_TIME = TIME_KEYS + ("datetime", "date")


class ImportError_(ValueError):
    """An input that cannot be imported (one line)."""


# ----------------------------------------------------------------------------- token estimate

_CJK_RE = re.compile("[\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u312f\u3130-\u318f"
                     "\u3190-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")


def estimate_tokens(text: str) -> int:
    """One token per CJK character, one per four other characters (the simulator's estimate)."""
    if not text:
        return 0
    cjk = len(_CJK_RE.findall(text))
    return max(1, cjk + math.ceil((len(text) - cjk) / 4))


def guess_lang(text: str) -> str:
    """A script-based guess: zh (Han), ja (kana), ko (hangul), else en."""
    sample = text[:2000]
    letters = sum(1 for ch in sample if ch.isalpha()) or 1
    if sum(1 for ch in sample if "\u3040" <= ch <= "\u30ff") > 0.05 * letters:
        return "ja"
    if sum(1 for ch in sample if "\uac00" <= ch <= "\ud7af") > 0.2 * letters:
        return "ko"
    if sum(1 for ch in sample if "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf") > 0.2 * letters:
        return "zh"
    return "en"


# ----------------------------------------------------------------------------- anonymisation

_MASKS = [  # (name, pattern), applied in this order
    ("email", re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")),
    ("id_number", re.compile(r"(?<![0-9A-Za-z])[1-9]\d{5}(?:18|19|20)\d{2}(?:0[1-9]|1[0-2])"
                             r"(?:0[1-9]|[12]\d|3[01])\d{3}[\dXx](?![0-9A-Za-z])")),
    ("card", re.compile(r"(?<![\d-])(?:\d{4}[ -]){2,3}\d{4}(?:\d{1,3})?(?![\d-])|(?<!\d)\d{13,19}(?!\d)")),
    ("phone", re.compile(
        r"(?<![\w+])(?:\+|00)\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{2,4}){1,4}(?!\d)"  # international
        r"|(?<!\d)(?:\+?86[ -]?)?1[3-9]\d[ -]?\d{4}[ -]?\d{4}(?!\d)"                                 # CN mobile
        r"|(?<!\d)0\d{2,3}-\d{7,8}(?!\d)"                                                            # CN landline
        r"|(?<!\d)\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}(?!\d)")),                                           # NANP
]
_ALNUM = re.compile(r"[0-9A-Za-z]")


def luhn_ok(digits: str) -> bool:
    """The check digit card numbers carry (a random digit run passes 1 time in 10)."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


class Anonymizer:
    """Length-preserving masking; counts what it masked. Card numbers must pass the Luhn check
    (other long digit runs are masked as digit runs)."""

    def __init__(self, digit_run: int = 8):
        self.counts: Counter = Counter()
        self.masks = list(_MASKS) + [("digit_run", re.compile(r"\d{%d,}" % max(2, digit_run)))]

    def __call__(self, text: str) -> str:
        if not text:
            return text
        for name, rx in self.masks:
            text = rx.sub(lambda m, name=name: self._mask(name, m), text)
        return text

    def _mask(self, name: str, m: re.Match) -> str:
        s = m.group(0)
        if name == "card" and not luhn_ok("".join(ch for ch in s if ch.isdigit())):
            return s
        self.counts[name] += 1
        return _ALNUM.sub("*", s)


# ----------------------------------------------------------------------------- parsed requests


@dataclass(slots=True)
class Entry:
    """One logged request, normalised."""

    text: str  # the final user message (chat) or the prompt (completions)
    system: str | None = None
    history: list = field(default_factory=list)  # [(role, content)] before text
    output_tokens: int | None = None
    output_source: str = ""  # usage | reply_text | max_tokens | default
    max_tokens: int | None = None
    prompt_tokens: int | None = None
    time: float | None = None  # epoch seconds
    endpoint: str = "chat"
    reply_text: str | None = None
    out_tokens_usage: int | None = None

    @property
    def input_chars(self) -> int:
        return (len(self.system) if self.system else 0) + sum(len(c) for _, c in self.history) + len(self.text)


@dataclass
class Parsed:
    entries: list
    format: str
    lines: int = 0
    skipped: Counter = field(default_factory=Counter)
    dropped_roles: Counter = field(default_factory=Counter)


def _content_text(content) -> str | None:
    """Text of a message content: a string, or the text parts of a list of content parts."""
    if content is None:
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
        return "".join(parts) if parts else None
    return None


def _int(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)) and math.isfinite(v) and v >= 0:
        return int(v)
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return None


def parse_time(v) -> float | None:
    """Epoch seconds from epoch s/ms/us/ns (number or numeric string) or ISO 8601; None if not a time."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, str):
        s = v.strip()
        if not s:
            return None
        try:
            v = float(s)
        except ValueError:
            try:
                dt = datetime.fromisoformat(s.replace("Z", "+00:00").replace(" UTC", "+00:00"))
            except ValueError:
                return None
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=timezone.utc)
            return dt.timestamp()
    if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        return None
    v = float(v)
    if v > 1e17:
        return v / 1e9
    if v > 1e14:
        return v / 1e6
    if v > 1e11:
        return v / 1e3
    return v


def _maybe_json(v):
    if isinstance(v, str) and v[:1] in "{[":
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def _messages_entry(messages: list, parsed: Parsed) -> Entry | None:
    system_parts, convo = [], []
    for m in messages:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        text = _content_text(m.get("content"))
        if text is None:
            parsed.dropped_roles[str(role)] += 1
            continue
        if role in ("system", "developer"):
            if not convo:
                system_parts.append(text)
            else:
                parsed.dropped_roles[str(role)] += 1
        elif role in ("user", "assistant"):
            convo.append((role, text))
        else:
            parsed.dropped_roles[str(role)] += 1
    last_user = max((i for i, (r, _) in enumerate(convo) if r == "user"), default=None)
    if last_user is None:
        parsed.skipped["no user message"] += 1
        return None
    text = convo[last_user][1]
    if not text.strip():
        parsed.skipped["empty prompt"] += 1
        return None
    system = "\n\n".join(system_parts) if system_parts else None
    if system is not None and not system.strip():
        system = None
    return Entry(text=text, system=system, history=convo[:last_user], endpoint="chat")


def _usage_of(obj: dict, body: dict) -> dict | None:
    for holder in (obj, body):
        u = holder.get("usage")
        if isinstance(u, dict):
            return u
    resp = _maybe_json(obj.get("response"))
    if isinstance(resp, dict):
        u = resp.get("usage")
        if isinstance(u, dict):
            return u
        if "completion_tokens" in resp or "output_tokens" in resp:
            return resp
    return None


def _reply_of(obj: dict) -> str | None:
    resp = _maybe_json(obj.get("response"))
    if isinstance(resp, str):
        return resp
    if isinstance(resp, dict):
        choices = resp.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            c = choices[0]
            msg = c.get("message")
            if isinstance(msg, dict):
                t = _content_text(msg.get("content"))
                if t is not None:
                    return t
            if isinstance(c.get("text"), str):
                return c["text"]
    for key in ("output", "completion", "reply"):
        if isinstance(obj.get(key), str):
            return obj[key]
    return None


def _time_of(obj: dict, body: dict) -> float | None:
    for holder in (obj, body):
        for key in TIME_KEYS:
            if key in holder:
                t = parse_time(holder[key])
                if t is not None:
                    return t
    resp = _maybe_json(obj.get("response"))
    if isinstance(resp, dict) and "created" in resp:
        return parse_time(resp["created"])
    return None


def entry_from_request(obj, parsed: Parsed) -> Entry | None:
    """One JSON log object (a request body, or a wrapper holding one) -> Entry."""
    if not isinstance(obj, dict):
        parsed.skipped["not a JSON object"] += 1
        return None
    body = obj
    for key in BODY_KEYS:
        b = _maybe_json(obj.get(key))
        if isinstance(b, dict) and ("messages" in b or "prompt" in b):
            body = b
            break
    messages = body.get("messages")
    prompt = body.get("prompt")
    if isinstance(messages, list):
        e = _messages_entry(messages, parsed)
    elif prompt is not None:
        if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt.strip():
            parsed.skipped["empty or non-text prompt"] += 1
            return None
        e = Entry(text=prompt, endpoint="completions")
    elif "conversations" in obj:
        return None  # handled by the ShareGPT reader
    else:
        parsed.skipped["no messages or prompt"] += 1
        return None
    if e is None:
        return None
    e.max_tokens = _int(body.get("max_tokens", body.get("max_completion_tokens", body.get("max_new_tokens"))))
    usage = _usage_of(obj, body)
    if usage is not None:
        e.out_tokens_usage = _int(usage.get("completion_tokens", usage.get("output_tokens")))
        e.prompt_tokens = _int(usage.get("prompt_tokens", usage.get("input_tokens")))
    e.reply_text = _reply_of(obj)
    e.time = _time_of(obj, body)
    return e


def _sharegpt_entries(item, parsed: Parsed, turns: str) -> list:
    if not isinstance(item, dict):
        parsed.skipped["not a JSON object"] += 1
        return []
    conv = item.get("conversations", item.get("conversation", item.get("messages")))
    if not isinstance(conv, list):
        parsed.skipped["no conversations"] += 1
        return []
    system, msgs = None, []
    for m in conv:
        if not isinstance(m, dict):
            continue
        role = str(m.get("from", m.get("role", ""))).lower()
        text = m.get("value", m.get("content"))
        text = _content_text(text)
        if text is None:
            continue
        if role == "system":
            if not msgs and system is None:
                system = text if text.strip() else None
            else:
                parsed.dropped_roles["system"] += 1
        elif role in USER_ROLES:
            msgs.append(("user", text))
        elif role in ASSISTANT_ROLES:
            msgs.append(("assistant", text))
        else:
            parsed.dropped_roles[role] += 1
    out = []
    t = parse_time(item.get("timestamp", item.get("time")))
    for i, (role, text) in enumerate(msgs):
        if role != "user" or not text.strip():
            continue
        reply = msgs[i + 1][1] if i + 1 < len(msgs) and msgs[i + 1][0] == "assistant" else None
        if turns == "all" and reply is None:
            continue
        out.append(Entry(text=text, system=system, history=list(msgs[:i]), reply_text=reply, time=t))
        if turns == "first":
            break
    if not out:
        parsed.skipped["no human message" if turns == "first" else "no answered human message"] += 1
    return out


def _open_text(path: str) -> str:
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise ImportError_(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ImportError_(f"{path}: not UTF-8 ({e.reason} at byte {e.start}); save the log as UTF-8") from None
    return text[1:] if text.startswith("\ufeff") else text


def _pick(columns: dict, names: tuple, override: str | None, what: str) -> str | None:
    if override:
        key = override.strip().lower()
        if key not in columns:
            raise ImportError_(f"--{what}-column: no column {override!r} (columns: {', '.join(columns.values())})")
        return columns[key]
    for n in names:
        if n in columns:
            return columns[n]
    return None


def read_csv(text: str, path: str, prompt_column: str | None, output_column: str | None) -> Parsed:
    csv.field_size_limit(1 << 30)
    head = text[:65536]
    try:
        dialect = csv.Sniffer().sniff(head.split("\n", 1)[0] + "\n", delimiters=",\t;|")
    except csv.Error:
        dialect = csv.excel_tab if path.endswith(".tsv") else csv.excel
    reader = csv.DictReader(io.StringIO(text, newline=""), dialect=dialect)
    if not reader.fieldnames:
        raise ImportError_(f"{path}: the CSV has no header line")
    columns = {c.strip().lower(): c for c in reader.fieldnames if c is not None}
    pcol = _pick(columns, CSV_PROMPT, prompt_column, "prompt")
    if pcol is None:
        raise ImportError_(f"{path}: no prompt column among {', '.join(reader.fieldnames)}; "
                           f"name one with --prompt-column (looked for {', '.join(CSV_PROMPT)})")
    ocol = _pick(columns, CSV_OUTPUT_TOKENS, output_column, "output")
    mcol = _pick(columns, CSV_MAX_TOKENS, None, "max-tokens")
    itcol = _pick(columns, CSV_PROMPT_TOKENS, None, "prompt-tokens")
    rcol = _pick(columns, CSV_OUTPUT_TEXT, None, "reply")
    scol = _pick(columns, CSV_SYSTEM, None, "system")
    tcol = _pick(columns, CSV_TIME, None, "time")
    parsed = Parsed([], f"csv (prompt column {pcol!r}" + (f", output tokens {ocol!r}" if ocol else "") + ")")
    for row in reader:
        parsed.lines += 1
        text = row.get(pcol)
        if not text or not text.strip():
            parsed.skipped["empty prompt"] += 1
            continue
        system = row.get(scol) if scol else None
        e = Entry(text=text, system=system if system and system.strip() else None)
        if ocol:
            e.out_tokens_usage = _int(row.get(ocol))
        if mcol:
            e.max_tokens = _int(row.get(mcol))
        if itcol:
            e.prompt_tokens = _int(row.get(itcol))
        if rcol and row.get(rcol):
            e.reply_text = row[rcol]
        if tcol:
            e.time = parse_time(row.get(tcol))
        parsed.entries.append(e)
    return parsed


def read_log(path: str, *, turns: str = "first", prompt_column: str | None = None,
             output_column: str | None = None) -> Parsed:
    """Read a log file of any supported shape into normalised entries."""
    text = _open_text(path)
    base = path[:-3] if path.endswith(".gz") else path
    stripped = text.lstrip()
    if not stripped:
        raise ImportError_(f"{path}: the file is empty")
    if base.lower().endswith((".csv", ".tsv")) or stripped[0] not in "[{":
        return read_csv(text, path, prompt_column, output_column)
    items = None
    if stripped[0] == "[":
        try:
            items = json.loads(stripped)
        except ValueError as e:
            raise ImportError_(f"{path}: a JSON array that does not parse ({e})") from None
        lines = len(items) if isinstance(items, list) else 1
        if not isinstance(items, list):
            items = [items]
    else:
        items, lines = [], 0
        bad = 0
        for line in text.splitlines():
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
                raise ImportError_(f"{path}: neither JSON lines nor a JSON document") from None
            items = doc if isinstance(doc, list) else doc.get("data", doc.get("requests", [doc])) \
                if isinstance(doc, dict) else [doc]
            lines = len(items)
    sharegpt = sum(1 for it in items[:200] if isinstance(it, dict)
                   and isinstance(it.get("conversations", it.get("conversation")), list))
    parsed = Parsed([], "", lines=lines)
    if sharegpt and sharegpt >= 0.5 * min(len(items), 200):
        parsed.format = f"sharegpt (turns: {turns})"
        for it in items:
            if it is None:
                parsed.skipped["malformed JSON line"] += 1
                continue
            parsed.entries.extend(_sharegpt_entries(it, parsed, turns))
        return parsed
    kinds = Counter()
    for it in items:
        if it is None:
            parsed.skipped["malformed JSON line"] += 1
            continue
        e = entry_from_request(it, parsed)
        if e is not None:
            kinds[e.endpoint] += 1
            parsed.entries.append(e)
    parsed.format = ("jsonl" if stripped[0] == "{" else "json") + " requests (" + \
        ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + ")"
    return parsed


# ----------------------------------------------------------------------------- fitting


def resolve_output(e: Entry, default: int) -> None:
    if e.out_tokens_usage is not None and e.out_tokens_usage >= 1:
        e.output_tokens, e.output_source = e.out_tokens_usage, "usage"
    elif e.reply_text:
        e.output_tokens, e.output_source = max(1, estimate_tokens(e.reply_text)), "reply_text"
    elif e.max_tokens is not None and e.max_tokens >= 1:
        e.output_tokens, e.output_source = e.max_tokens, "max_tokens"
    else:
        e.output_tokens, e.output_source = default, "default"


def class_names(n: int, names: list | None) -> list:
    if names:
        if len(names) != n:
            raise ImportError_(f"--names: {len(names)} names for {n} classes")
        return names
    return CLASS_NAMES.get(n, [f"c{i + 1}" for i in range(n)])


def bucket_edges(lengths: np.ndarray, quantiles=None, edges=None) -> list:
    """Upper bounds (inclusive) of every class but the last, in characters."""
    if edges:
        out = sorted({int(e) for e in edges})
    else:
        qs = quantiles or DEFAULT_QUANTILES
        out = sorted({int(np.percentile(lengths, q, method="lower")) for q in qs})
    return [e for e in out if e < int(lengths.max())]  # a bound at or above the longest input adds nothing


def reduce_values(values: list, k: int) -> list:
    """At most k evenly spaced order statistics of the sorted values (all of them if fewer)."""
    v = sorted(values)
    if len(v) <= k:
        return v
    return [v[round(i * (len(v) - 1) / (k - 1))] for i in range(k)]


def fix_weights(counts: list) -> list:
    """Shares rounded to 6 decimals that sum to 1 exactly enough for the spec (1e-6)."""
    total = sum(counts)
    w = [round(c / total, 6) for c in counts]
    i = max(range(len(w)), key=lambda j: w[j])
    w[i] = round(w[i] + (1.0 - sum(w)), 6)
    return w


@dataclass
class Fit:
    names: list
    edges: list
    assign: np.ndarray  # class index per entry
    classes: list  # dicts: name, weight, count, min, max, out_values


def fit_classes(entries: list, quantiles=None, edges=None, names=None, max_values=DEFAULT_MAX_VALUES) -> Fit:
    lengths = np.array([e.input_chars for e in entries])
    b = bucket_edges(lengths, quantiles, edges)
    assign = np.searchsorted(np.array(b), lengths, side="left") if b else np.zeros(len(lengths), dtype=int)
    used = sorted(set(assign.tolist()))
    remap = {old: new for new, old in enumerate(used)}  # empty buckets dropped
    assign = np.array([remap[a] for a in assign.tolist()])
    labels = class_names(len(used), names)
    outs = np.array([e.output_tokens for e in entries])
    counts = [int((assign == i).sum()) for i in range(len(used))]
    weights = fix_weights(counts)
    classes = []
    for i, name in enumerate(labels):
        m = assign == i
        classes.append({"name": name, "weight": weights[i], "count": counts[i],
                        "min": int(lengths[m].min()), "max": int(lengths[m].max()),
                        "lengths": lengths[m], "outputs": outs[m],
                        "out_values": reduce_values(outs[m].tolist(), max_values)})
    return Fit(labels, b, assign, classes)


# ----------------------------------------------------------------------------- writing


def _yaml_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def write_outputs(out_dir: str, entries: list, fit: Fit, *, name: str, domain: str, source: str,
                  summary_lines: list, with_trace: bool) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    # system prompts and prompts, deduplicated in first-seen order
    sys_ids: dict[str, str] = {}
    prompt_ids: dict[tuple, str] = {}
    prompt_rows: dict[str, dict] = {}
    entry_pid = []
    for e in entries:
        sid = None
        if e.system is not None:
            sid = sys_ids.setdefault(e.system, f"s{len(sys_ids) + 1:04d}")
        key = (e.system, tuple(e.history), e.text)
        pid = prompt_ids.get(key)
        if pid is None:
            pid = prompt_ids[key] = f"p{len(prompt_ids) + 1:06d}"
            row = {"kind": "prompt", "domain": domain, "lang": guess_lang(e.text), "text": e.text, "id": pid}
            if sid:
                row["system"] = sid
            if e.history:
                row["history"] = [{"role": r, "content": c} for r, c in e.history]
            row["count"] = 0
            row["output_tokens"] = e.output_tokens
            prompt_rows[pid] = row
        prompt_rows[pid]["count"] += 1
        entry_pid.append(pid)
    lib_path = os.path.join(out_dir, "templates.jsonl")
    with open(lib_path, "w", encoding="utf-8") as fh:
        for text, sid in sys_ids.items():
            fh.write(json.dumps({"kind": "system", "domain": domain, "lang": guess_lang(text), "text": text,
                                 "id": sid}, ensure_ascii=False) + "\n")
        for row in prompt_rows.values():
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")

    spec_path = os.path.join(out_dir, "workload.yaml")
    lines = [f"# Imported from {source} by `python -m workloads import`.", "#"]
    lines += [f"# {ln}" if ln else "#" for ln in summary_lines]
    lines += ["", f"name: {_yaml_str(name)}",
              f"description: {_yaml_str(f'Replayed production traffic from {os.path.basename(source)}: {len(entries)} requests, classes by input length, prompts sent verbatim.')}",
              "templates: templates.jsonl",
              "classes:"]
    for c in fit.classes:
        lines += [f"  {c['name']}:",
                  f"    weight: {c['weight']}",
                  "    prompts: verbatim                 # the logged prompts as they are (templates.jsonl)",
                  f"    input_chars: {{min: {c['min']}, max: {c['max']}, dist: empirical}}",
                  f"    output_tokens: {{dist: empirical, values: {json.dumps(c['out_values'])}}}"]
    with open(spec_path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")

    written = {"templates": lib_path, "spec": spec_path, "prompts": len(prompt_rows), "system_prompts": len(sys_ids)}
    if with_trace:
        timed = [(e.time, i) for i, e in enumerate(entries) if e.time is not None]
        timed.sort()
        t0 = timed[0][0]
        duration = timed[-1][0] - t0
        trace_path = os.path.join(out_dir, "trace.jsonl")
        with open(trace_path, "w", encoding="utf-8") as fh:
            header = {"version": TRACE_VERSION, "templates": "templates.jsonl", "requests": len(timed),
                      "duration_s": round(duration, 6), "source": os.path.basename(source),
                      "start": datetime.fromtimestamp(t0, timezone.utc).isoformat()}
            fh.write(json.dumps({"trace": header}) + "\n")
            for t, i in timed:
                fh.write(json.dumps({"t": round(t - t0, 6), "class": fit.names[fit.assign[i]],
                                     "prompt": entry_pid[i], "max_tokens": int(entries[i].output_tokens)}) + "\n")
        written.update(trace=trace_path, trace_requests=len(timed), trace_duration_s=duration)
    return written


# ----------------------------------------------------------------------------- command


def _pcts(v, qs=(10, 50, 90, 99)) -> str:
    if len(v) == 0:
        return "-"
    return "/".join(f"{np.percentile(v, q):.0f}" for q in qs)


def import_args(p: argparse.ArgumentParser) -> None:
    p.description = __doc__
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("logfile", help="request log: JSONL/JSON of OpenAI request bodies, ShareGPT JSON, or CSV/TSV (.gz too)")
    p.add_argument("--out", required=True, help="folder for templates.jsonl, workload.yaml and trace.jsonl")
    p.add_argument("--name", default=None, help="workload name (default: the --out folder's name)")
    p.add_argument("--domain", default="imported", help="domain written on the templates (default: imported)")
    p.add_argument("--anonymize", "--anonymise", action="store_true",
                   help="mask e-mails, phone numbers, ID and card numbers and long digit runs (length kept)")
    p.add_argument("--digit-run", type=int, default=8, help="with --anonymize: mask runs of this many digits or more (default 8)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--sample", type=int, default=None, help="keep N requests, drawn at random (seeded)")
    g.add_argument("--sample-frac", type=float, default=None, help="keep this fraction of the requests (seeded)")
    p.add_argument("--seed", type=int, default=0, help="seed of --sample / --sample-frac (default 0)")
    b = p.add_mutually_exclusive_group()
    b.add_argument("--quantiles", default=None,
                   help="class bounds as input-length percentiles, e.g. 50,90 (default: 50,90 -> short/medium/long)")
    b.add_argument("--edges", default=None, help="class bounds in characters instead, e.g. 200,800")
    p.add_argument("--names", default=None, help="class names, comma-separated (default: short,medium,long for 3)")
    p.add_argument("--turns", choices=["first", "all"], default="first",
                   help="ShareGPT: first human message of each conversation (default), or every answered one with its history")
    p.add_argument("--default-output-tokens", type=int, default=DEFAULT_OUTPUT_TOKENS,
                   help=f"output length when a request has no usage, reply or max_tokens (default {DEFAULT_OUTPUT_TOKENS})")
    p.add_argument("--max-values", type=int, default=DEFAULT_MAX_VALUES,
                   help=f"most values in an empirical output_tokens distribution (default {DEFAULT_MAX_VALUES})")
    p.add_argument("--prompt-column", default=None, help="CSV: the prompt column, when not detected")
    p.add_argument("--output-column", default=None, help="CSV: the output-length column, when not detected")


def _floats(option: str, text: str | None) -> list | None:
    if text is None:
        return None
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ImportError_(f"--{option}: {text!r} is not a comma-separated list of numbers") from None
    if not vals:
        raise ImportError_(f"--{option}: give at least one number")
    return vals


def run_import(args: argparse.Namespace, out=print) -> int:
    try:
        return _run_import(args, out)
    except ImportError_ as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run_import(args: argparse.Namespace, out) -> int:
    quantiles = _floats("quantiles", args.quantiles)
    if quantiles and not all(0 < q < 100 for q in quantiles):
        raise ImportError_("--quantiles: percentiles lie strictly between 0 and 100")
    edges = _floats("edges", args.edges)
    if edges and any(e < 1 for e in edges):
        raise ImportError_("--edges: bounds are characters >= 1")
    names = [n.strip() for n in args.names.split(",")] if args.names else None
    if names and not all(re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", n) for n in names):
        raise ImportError_("--names: use letters, digits, '_', '-' or '.', starting with a letter or digit")
    if args.sample is not None and args.sample < 1:
        raise ImportError_("--sample: give N >= 1")
    if args.sample_frac is not None and not 0 < args.sample_frac <= 1:
        raise ImportError_("--sample-frac: give a fraction in (0, 1]")
    if args.default_output_tokens < 1 or args.max_values < 2:
        raise ImportError_("--default-output-tokens must be >= 1 and --max-values >= 2")

    parsed = read_log(args.logfile, turns=args.turns, prompt_column=args.prompt_column,
                      output_column=args.output_column)
    entries = parsed.entries
    if not entries:
        why = ", ".join(f"{k} {v}" for k, v in parsed.skipped.most_common()) or "nothing recognised"
        raise ImportError_(f"{args.logfile}: no usable requests ({why}); see python -m workloads import --help")
    found = len(entries)
    if args.sample is not None or args.sample_frac is not None:
        k = args.sample if args.sample is not None else max(1, round(args.sample_frac * found))
        if k < found:
            keep = sorted(random.Random(args.seed).sample(range(found), k))
            entries = [entries[i] for i in keep]
    anon = None
    if args.anonymize:
        anon = Anonymizer(args.digit_run)
        for e in entries:
            e.text = anon(e.text)
            if e.system is not None:
                e.system = anon(e.system)
            e.history = [(r, anon(c)) for r, c in e.history]
    for e in entries:
        resolve_output(e, args.default_output_tokens)
    fit = fit_classes(entries, quantiles, edges, names, args.max_values)

    n = len(entries)
    sources = Counter(e.output_source for e in entries)
    with_system = sum(1 for e in entries if e.system is not None)
    with_usage = sum(1 for e in entries if e.out_tokens_usage is not None)
    with_history = sum(1 for e in entries if e.history)
    timed = [e.time for e in entries if e.time is not None]
    lines = [f"log        {args.logfile}: {parsed.format}, {parsed.lines} items, {found} requests"
             + (f", skipped: {', '.join(f'{k} {v}' for k, v in parsed.skipped.most_common())}" if parsed.skipped else "")]
    if parsed.dropped_roles:
        lines.append(f"           messages left out: {', '.join(f'{k} {v}' for k, v in parsed.dropped_roles.most_common())}")
    if n != found:
        lines.append(f"sampled    {n} of {found} (seed {args.seed})")
    lines.append(f"system     {with_system / n:.1%} of requests carry a system prompt "
                 f"({len({e.system for e in entries if e.system is not None})} distinct); "
                 f"{with_history / n:.1%} carry earlier turns")
    lines.append(f"usage      {with_usage / n:.1%} of requests carry usage; output tokens from "
                 + ", ".join(f"{k} {v}" for k, v in sources.most_common()))
    if timed:
        span = max(timed) - min(timed)
        rate = f", mean {len(timed) / span:.3g} requests/s" if span > 0 else ""
        lines.append(f"time       {len(timed) / n:.1%} of requests carry a timestamp, spanning {span:,.1f} s{rate}")
    else:
        lines.append("time       no timestamps: no trace.jsonl")
    if anon is not None:
        lines.append("anonymised " + (", ".join(f"{k} {v}" for k, v in sorted(anon.counts.items())) or "nothing found"))
    bounds = ", ".join(str(b) for b in fit.edges) or "none"
    how = f"fixed edges {args.edges}" if edges else f"percentiles {','.join(f'{q:g}' for q in quantiles or DEFAULT_QUANTILES)}"
    lines.append(f"classes    by input length ({how}: bounds {bounds} chars)")
    lines.append(f"  {'class':<8}{'share':>7}{'count':>7}  {'input chars p10/p50/p90/p99 (range)':<38}output tokens p10/p50/p90/p99")
    for c in fit.classes:
        ic = f"{_pcts(c['lengths'])} ({c['min']}-{c['max']})"
        lines.append(f"  {c['name']:<8}{c['weight']:>7.1%}{c['count']:>7}  {ic:<38}{_pcts(c['outputs'])}")
    allout = np.array([e.output_tokens for e in entries])
    alllen = np.array([e.input_chars for e in entries])
    lines.append(f"  {'(total)':<8}{1:>7.0%}{n:>7}  {_pcts(alllen) + f' ({alllen.min()}-{alllen.max()})':<38}{_pcts(allout)}")

    with_trace = len(timed) >= 2
    name = args.name or os.path.basename(os.path.normpath(args.out)) or "imported"
    if not re.match(r"^\S", name):
        name = "imported"
    written = write_outputs(args.out, entries, fit, name=name, domain=args.domain, source=args.logfile,
                            summary_lines=lines, with_trace=with_trace)
    for ln in lines:
        out(ln)
    out(f"wrote      {written['templates']} ({written['prompts']} prompts, {written['system_prompts']} system prompts)")
    out(f"           {written['spec']}")
    if with_trace:
        out(f"           {written['trace']} ({written['trace_requests']} requests over "
            f"{written['trace_duration_s']:,.1f} s; replay with --replay {written['trace']})")
    # the spec must load: a mistake here is a bug of the importer, not of the log
    from .spec import load_spec

    load_spec(written["spec"])
    return 0
