"""OpenAI request bodies, as JSON lines or a JSON array: chat (``messages``) or completions
(``prompt``), at the top level or under ``request`` / ``body`` / ``request_body`` (an object or a
JSON string), with an optional timestamp, usage and reply (see ``python -m workloads import --help``).
Any JSON log that no other reader claims is read as this."""

from __future__ import annotations

from collections import Counter

from core.images import png_size
from core.text import content_text

from ..records import TIME_KEYS, Entry, Parsed, as_count, maybe_json, parse_time
from .registry import Source, reader

BODY_KEYS = ("request", "body", "request_body")


def _tool_calls(m: dict) -> list[dict] | None:
    """An assistant message's tool calls, as the chat API takes them; None if it has none or a
    malformed one."""
    calls = m.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return None
    out = []
    for c in calls:
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(c.get("id"), str):
            return None
        args = fn.get("arguments")
        out.append(
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": fn["name"], "arguments": args if isinstance(args, str) else "{}"},
            }
        )
    return out


def _image_sizes(content) -> list[list[int]]:
    """[width, height] of every image part of a message's content (512 x 512 where the logged image
    does not say: a URL, or a format other than PNG)."""
    sizes = []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, dict) and part.get("type") in ("image_url", "input_image"):
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            size = png_size(url) if isinstance(url, str) else None
            sizes.append(list(size) if size else [512, 512])
    return sizes


def _messages_entry(messages: list, parsed: Parsed) -> Entry | None:
    system_parts, convo = [], []
    for m in messages:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        text = content_text(m.get("content"))
        calls = _tool_calls(m) if role == "assistant" else None
        if calls is not None:  # an assistant's tool calls: kept whole
            convo.append({"role": "assistant", "content": text, "tool_calls": calls})
            continue
        if role == "tool" and isinstance(m.get("tool_call_id"), str) and text is not None:
            convo.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": text})
            continue
        if text is None:
            parsed.dropped_roles[str(role)] += 1
            continue
        if role in ("system", "developer"):
            if not convo:
                system_parts.append(text)
            else:
                parsed.dropped_roles[str(role)] += 1
        elif role in ("user", "assistant"):
            convo.append((role, text, _image_sizes(m.get("content"))) if role == "user" else (role, text))
        else:
            parsed.dropped_roles[str(role)] += 1
    last_user = max((i for i, m in enumerate(convo) if isinstance(m, tuple) and m[0] == "user"), default=None)
    if last_user is None:
        parsed.skipped["no user message"] += 1
        return None
    text, images = convo[last_user][1], convo[last_user][2]
    if not text.strip():
        parsed.skipped["empty prompt"] += 1
        return None
    system = "\n\n".join(system_parts) if system_parts else None
    if system is not None and not system.strip():
        system = None
    # earlier user messages keep their text (their images are not replayed); what follows the last
    # user message (an agent's tool calls and their results) is kept after it
    history = [m[:2] if isinstance(m, tuple) else m for m in convo[:last_user]]
    after = [m[:2] if isinstance(m, tuple) else m for m in convo[last_user + 1 :]]
    return Entry(text=text, system=system, history=history, endpoint="chat", images=images, after=after)


def _usage_of(obj: dict, body: dict) -> dict | None:
    for holder in (obj, body):
        u = holder.get("usage")
        if isinstance(u, dict):
            return u
    resp = maybe_json(obj.get("response"))
    if isinstance(resp, dict):
        u = resp.get("usage")
        if isinstance(u, dict):
            return u
        if "completion_tokens" in resp or "output_tokens" in resp:
            return resp
    return None


def _reply_of(obj: dict) -> str | None:
    resp = maybe_json(obj.get("response"))
    if isinstance(resp, str):
        return resp
    if isinstance(resp, dict):
        choices = resp.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            c = choices[0]
            msg = c.get("message")
            if isinstance(msg, dict):
                t = content_text(msg.get("content"))
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
    resp = maybe_json(obj.get("response"))
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
        b = maybe_json(obj.get(key))
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
        return None  # a ShareGPT conversation in a log of requests: not a request
    else:
        parsed.skipped["no messages or prompt"] += 1
        return None
    if e is None:
        return None
    tools = body.get("tools")
    if e.endpoint == "chat" and isinstance(tools, list) and tools and all(isinstance(t, dict) for t in tools):
        e.tools = {"tools": tools, **({"tool_choice": body["tool_choice"]} if "tool_choice" in body else {})}
    e.max_tokens = as_count(body.get("max_tokens", body.get("max_completion_tokens", body.get("max_new_tokens"))))
    usage = _usage_of(obj, body)
    if usage is not None:
        e.out_tokens_usage = as_count(usage.get("completion_tokens", usage.get("output_tokens")))
        e.prompt_tokens = as_count(usage.get("prompt_tokens", usage.get("input_tokens")))
    e.reply_text = _reply_of(obj)
    e.time = _time_of(obj, body)
    return e


def _is_json(source: Source) -> bool:
    return source.stripped[0] in "[{"


@reader("openai_requests", order=90, claims=_is_json)
def read(source: Source) -> Parsed:
    items, lines = source.json_items()
    parsed = Parsed([], "", lines=lines)
    kinds: Counter = Counter()
    for it in items:
        if it is None:
            parsed.skipped["malformed JSON line"] += 1
            continue
        e = entry_from_request(it, parsed)
        if e is not None:
            kinds[e.endpoint] += 1
            parsed.entries.append(e)
    parsed.format = (
        ("jsonl" if source.stripped[0] == "{" else "json")
        + " requests ("
        + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
        + ")"
    )
    return parsed
