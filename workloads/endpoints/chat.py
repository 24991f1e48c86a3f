"""/v1/chat/completions: messages (+ tools, tool_choice), max_tokens; a streamed reply asks for its
usage with stream_options."""

from __future__ import annotations

from typing import Any

from .registry import endpoint, stream_fields, with_model


@endpoint("chat", "/v1/chat/completions", 0, attachments=True)
def body(request, model: str, stream: bool) -> dict[str, Any]:
    out = with_model(model)
    out["messages"] = request.messages()
    if request.tools:
        out.update(request.tools)
    out["max_tokens"] = request.max_tokens
    return stream_fields(out, stream, usage_option=True)
