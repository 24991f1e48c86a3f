"""/v1/rerank: query, the request's text; documents, the class's batch of texts (the first is the
query's own text) or that text alone; never streamed. A reply must rank every document, or top_n
of them when a positive top_n is set (--extra-body)."""

from __future__ import annotations

from typing import Any

from .registry import endpoint, texts, with_model


def results(sent: dict) -> int:
    n, top = len(sent.get("documents") or ()), sent.get("top_n")
    return min(n, top) if isinstance(top, int) and top > 0 else n


@endpoint("rerank", "/v1/rerank", 4, streams=False, results=results)
def body(request, model: str, stream: bool) -> dict[str, Any]:
    out = with_model(model)
    out["query"] = request.prompt()
    out["documents"] = texts(request)
    return out
