"""The endpoints a run sends to (`--endpoint`), one module each:

    chat         /v1/chat/completions  messages (+ tools, tool_choice), max_tokens, stream_options
    completions  /v1/completions       prompt, max_tokens, stream_options
    responses    /v1/responses         input (the conversation as Responses items), max_output_tokens,
                                       tools in the API's flat form; usage comes with response.completed
    embeddings   /v1/embeddings        input: the request's text, or the class's batch of texts; never streamed
    rerank       /v1/rerank            query and documents (the class's batch, or the text alone); never streamed

Each module registers itself with ``registry.endpoint``; importing it here is all a new one needs.
``EndpointName``, the type of --endpoint, is derived from what registered.
"""

from __future__ import annotations

from typing import Literal

from . import chat, completions, embeddings, rerank, responses  # noqa: F401  (they register themselves)
from .registry import ENDPOINTS, Endpoint

NAMES: tuple[str, ...] = tuple(sorted(ENDPOINTS, key=lambda name: ENDPOINTS[name].order))
EndpointName = Literal[NAMES]  # type: ignore[valid-type]  (built from the registry)

__all__ = ["ENDPOINTS", "NAMES", "Endpoint", "EndpointName"]
