"""A logged request, normalised (what every reader produces), and the value parsers readers share."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

TIME_KEYS = ("timestamp", "time", "created", "created_at", "ts", "request_time", "start_time")


@dataclass(slots=True)
class Entry:
    """One logged request, normalised."""

    text: str  # the final user message (chat) or the prompt (completions)
    system: str | None = None
    # [(role, content)] before text; an assistant's tool calls and a tool result are their whole
    # message, a dict ({"role": "assistant", "content", "tool_calls"} / {"role": "tool", ...})
    history: list = field(default_factory=list)
    output_tokens: int | None = None
    output_source: str = ""  # usage | reply_text | max_tokens | default
    max_tokens: int | None = None
    prompt_tokens: int | None = None
    time: float | None = None  # epoch seconds
    endpoint: str = "chat"
    reply_text: str | None = None
    out_tokens_usage: int | None = None
    tools: dict | None = None  # the request's tools and tool_choice, as logged
    images: list = field(default_factory=list)  # [width, height] of each image of the final user message
    # (the pixels are not kept: a replay sends a generated image of the same size)
    after: list = field(default_factory=list)  # messages after `text`: an agent's tool calls and results

    @property
    def input_chars(self) -> int:
        return (
            (len(self.system) if self.system else 0)
            + sum(message_chars(m) for m in (*self.history, *self.after))
            + len(self.text)
        )


def message_chars(m) -> int:
    """Characters of a history message: its text, or a tool call's arguments."""
    if isinstance(m, tuple):
        return len(m[1])
    content = m.get("content")
    if isinstance(content, str):
        return len(content)
    return sum(len(c["function"]["arguments"]) for c in m.get("tool_calls") or ())


@dataclass
class Parsed:
    """What a reader found: the entries, the shape it read (for the summary) and what it left out."""

    entries: list
    format: str
    lines: int = 0
    skipped: Counter = field(default_factory=Counter)
    dropped_roles: Counter = field(default_factory=Counter)


def as_count(v) -> int | None:
    """A token count: a number >= 0 or a string of digits; None otherwise."""
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
                dt = dt.replace(tzinfo=UTC)
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


def maybe_json(v):
    """A JSON object or array written as a string (a body logged as text), parsed; anything else as is."""
    if isinstance(v, str) and v[:1] in "{[":
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v
