"""/v1/completions: one prompt string (system, history and user text joined), max_tokens; a
streamed reply asks for its usage with stream_options."""

from __future__ import annotations

from typing import Any

from .registry import endpoint, stream_fields, with_model


@endpoint("completions", "/v1/completions", 1)
def body(request, model: str, stream: bool) -> dict[str, Any]:
    out = with_model(model)
    out["prompt"] = request.prompt()
    out["max_tokens"] = request.max_tokens
    return stream_fields(out, stream, usage_option=True)
