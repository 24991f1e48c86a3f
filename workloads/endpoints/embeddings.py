"""/v1/embeddings: input, the request's text or the class's batch of texts; no max_tokens, never
streamed. A reply must hold a vector per input."""

from __future__ import annotations

from typing import Any

from .registry import endpoint, texts, with_model


def results(sent: dict) -> int:
    return len(sent["input"]) if isinstance(sent.get("input"), list) else 1


@endpoint("embeddings", "/v1/embeddings", 3, streams=False, results=results)
def body(request, model: str, stream: bool) -> dict[str, Any]:
    out = with_model(model)
    out["input"] = texts(request)
    return out
