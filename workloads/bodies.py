"""The JSON body a drawn request is sent as, and the results its reply must hold, from the
endpoint's module (`workloads/endpoints/`, one per `--endpoint`)."""

from __future__ import annotations

from typing import Any

from .endpoints import ENDPOINTS


def body(endpoint: str, request, model: str, stream: bool) -> dict[str, Any]:
    """The request body (the run's extra body fields are added by the caller); its max_tokens is the
    request's own, decided when it was drawn."""
    return ENDPOINTS[endpoint].body(request, model, stream)


def expected_results(endpoint: str, sent: dict) -> int:
    """The results a reply to `sent` (the body with the run's extra fields) must hold: a vector per
    input, a ranked document per document (top_n of them when a positive top_n is set); 0 for
    generation."""
    return ENDPOINTS[endpoint].results(sent)


__all__ = ["body", "expected_results"]
