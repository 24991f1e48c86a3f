"""ShareGPT conversations: ``[{"id", "conversations": [{"from": "human"|"gpt"|"system", "value"}]}]``
(also ``role``/``content``, and one conversation per JSON line). ``--turns first`` (the default, as
``vllm bench serve``): one request per conversation, its first human message; ``--turns all``: one
request per human message that got a reply, carrying the conversation before it."""

from __future__ import annotations

from core.text import content_text

from ..records import Entry, Parsed, parse_time
from .registry import Source, reader

ASSISTANT_ROLES = {"gpt", "assistant", "chatgpt", "bard", "bing", "model", "bot"}
USER_ROLES = {"human", "user"}
LOOK_AT = 200  # items examined to tell ShareGPT from a log of requests


def _entries(item, parsed: Parsed, turns: str) -> list:
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
        text = content_text(m.get("value", m.get("content")))
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


def _claims(source: Source) -> bool:
    """JSON whose items are mostly conversations (of the first LOOK_AT)."""
    if source.stripped[0] not in "[{":
        return False
    items, _ = source.json_items()
    found = sum(
        1
        for it in items[:LOOK_AT]
        if isinstance(it, dict) and isinstance(it.get("conversations", it.get("conversation")), list)
    )
    return found > 0 and found >= 0.5 * min(len(items), LOOK_AT)


@reader("sharegpt", order=50, claims=_claims)
def read(source: Source) -> Parsed:
    items, lines = source.json_items()
    parsed = Parsed([], f"sharegpt (turns: {source.turns})", lines=lines)
    for it in items:
        if it is None:
            parsed.skipped["malformed JSON line"] += 1
            continue
        parsed.entries.extend(_entries(it, parsed, source.turns))
    return parsed
