"""A completion request's body read and checked as the OpenAI API does (HTTP 400 otherwise): its
prompt tokens, output limit, stream options and model, the tool messages it answers, and the tool
calls a reply to it makes."""

from __future__ import annotations

import orjson

from .prefix import block_keys, message_parts, prompt_parts
from .tokens import image_tokens
from .wire import HttpError

DEFAULT_MAX_TOKENS = 256


def _positive_int(req, key):
    v = req.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise HttpError(400, f"{key} must be an integer >= 1, got {v!r}")
    return v


def parse_request(srv, endpoint, body):
    try:
        req = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise HttpError(400, f"invalid JSON body: {e}") from None
    if not isinstance(req, dict):
        raise HttpError(400, "request body must be a JSON object")
    if endpoint == "responses":  # input: a string or a list of messages and items
        items = req.get("input")
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        if not isinstance(items, list) or not items:
            raise HttpError(400, "'input' must be a string or a non-empty list")
        req["messages"] = items
        if isinstance(req.get("instructions"), str):
            items = [{"role": "system", "content": req["instructions"]}, *items]
        check_tool_messages(items)
        prompt_tokens = srv.counter.count_messages(items)
        prompt_tokens += image_tokens(items, srv.profile.image_patch_px, srv.profile.image_tokens)[1]
    elif endpoint == "chat":
        msgs = req.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise HttpError(400, "'messages' must be a non-empty list")
        check_tool_messages(msgs)
        prompt_tokens = srv.counter.count_messages(msgs)
        prompt_tokens += image_tokens(msgs, srv.profile.image_patch_px, srv.profile.image_tokens)[1]
    else:
        if "prompt" not in req or req["prompt"] is None:
            raise HttpError(400, "'prompt' is required")
        prompt_tokens = srv.counter.count_prompt(req["prompt"])
    stream = req.get("stream", False)
    if not isinstance(stream, bool):
        raise HttpError(400, "'stream' must be a boolean")
    so = req.get("stream_options")
    if so is not None:
        if not stream:
            raise HttpError(400, "Stream options can only be defined when `stream=True`.")
        if not isinstance(so, dict):
            raise HttpError(400, "'stream_options' must be an object")
    else:
        so = {}
    max_tokens = _positive_int(req, "max_output_tokens" if endpoint == "responses" else "max_completion_tokens")
    mt = _positive_int(req, "max_tokens")
    if mt is not None:
        max_tokens = mt
    check_length(prompt_tokens, max_tokens, srv.profile.max_model_len)
    if max_tokens is None:  # vLLM's default is the rest of the context; the simulator's is shorter
        max_tokens = min(DEFAULT_MAX_TOKENS, srv.profile.max_model_len - prompt_tokens)
    model = req.get("model")
    if not isinstance(model, str) or not model:
        model = srv.model
    include_usage = bool(so.get("include_usage")) or endpoint == "responses"  # usage is in response.completed
    return req, prompt_tokens, max_tokens, stream, include_usage, bool(so.get("continuous_usage_stats")), model


def check_length(prompt_tokens: int, max_tokens: int | None, limit: int) -> None:
    """vLLM's refusal of a request longer than ``max_model_len``, word for word (HTTP 400): a prompt
    must leave room for one generated token, and prompt + max_tokens must fit."""
    if prompt_tokens >= limit:
        raise HttpError(
            400,
            f"This model's maximum context length is {limit} tokens. However, your request has "
            f"{prompt_tokens} input tokens. Please reduce the length of the input messages.",
        )
    if max_tokens is not None and prompt_tokens + max_tokens > limit:
        raise HttpError(
            400,
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
            f"maximum context length is {limit} tokens and your request has {prompt_tokens} input "
            f"tokens ({max_tokens} > {limit} - {prompt_tokens}).",
        )


def prompt_block_keys(srv, endpoint: str, req: dict, prompt_tokens: int) -> list[int]:
    """The prefix-cache keys of the prompt's full blocks (simulator.prefix); none without prefix caching."""
    p = srv.profile
    if not p.enable_prefix_caching or p.kind != "batch":
        return []
    if endpoint == "completions":
        parts = prompt_parts(req["prompt"], prompt_tokens)
    else:
        msgs = req["messages"]
        if endpoint == "responses" and isinstance(req.get("instructions"), str):
            msgs = [{"role": "system", "content": req["instructions"]}, *msgs]
        parts = message_parts(srv.counter, msgs, p.image_patch_px, p.image_tokens)
    return block_keys(parts, prompt_tokens, p.block_size)


def check_tool_messages(msgs: list) -> None:
    """A tool message answers a tool call of an earlier assistant message, by its id (as OpenAI's
    API insists; HTTP 400 otherwise)."""
    called = set()
    for m in msgs:
        if not isinstance(m, dict):
            continue
        for c in m.get("tool_calls") or ():
            if isinstance(c, dict):
                called.add(c.get("id"))
        if m.get("type") == "function_call":  # the Responses API's items
            called.add(m.get("call_id"))
        if m.get("type") == "function_call_output" and m.get("call_id") not in called:
            raise HttpError(400, f"No tool call found for function call output with call_id {m.get('call_id')!r}.")
        if m.get("role") == "tool" and m.get("tool_call_id") not in called:
            raise HttpError(
                400,
                "messages with role 'tool' must be a response to a preceding message with "
                f"'tool_calls' (no call has id {m.get('tool_call_id')!r})",
            )


def tool_calls_for(req: dict, profile, seed: int) -> list[str]:
    """The function names a reply to `req` calls: none without tools or with tool_choice none; the
    named function; else the tools in turn, as many as profile.parallel_tool_calls, when tool_choice
    is required, or with probability profile.tool_call_rate (drawn from the request's seed)."""
    tools = req.get("tools")
    if not isinstance(tools, list) or not tools:
        return []
    names = [n for n in (_tool_name(t) for t in tools) if n]
    choice = req.get("tool_choice", "auto")
    if not names or choice == "none":
        return []
    if isinstance(choice, dict):
        named = _tool_name(choice)
        return [named] if isinstance(named, str) else []
    if choice != "required" and (seed % 100_003) / 100_003 >= profile.tool_call_rate:
        return []
    n = 1 if req.get("parallel_tool_calls") is False else profile.parallel_tool_calls
    return [names[i % len(names)] for i in range(n)]


def _tool_name(tool) -> str | None:
    """A function tool's (or a named tool_choice's) name: chat's {"function": {"name"}} or the
    Responses API's flat {"name"}."""
    if not isinstance(tool, dict):
        return None
    name = tool["function"].get("name") if isinstance(tool.get("function"), dict) else tool.get("name")
    return name if isinstance(name, str) and name else None
