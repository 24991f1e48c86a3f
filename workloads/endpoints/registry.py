"""The endpoints a run can send to, one module each, registered here by name.

An endpoint is a ``body(request, model, stream) -> dict`` function registered with
``@endpoint(name, path, order, ...)``: the JSON body one drawn request is sent as (the run's extra
body fields are added by the caller), the path it is posted to, whether its replies stream, whether
it carries a request's tools and images, and for embeddings and rerank how many results a reply
must hold. A new endpoint is one more module in this folder, imported by ``endpoints/__init__.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Body = Callable[[Any, str, bool], dict]


def no_results(sent: dict) -> int:
    """A generation's reply holds no results to count."""
    return 0


@dataclass(frozen=True)
class Endpoint:
    name: str  # the --endpoint value
    path: str  # POSTed to, under --host
    order: int  # where it is listed (--endpoint's choices): lower first
    body: Body
    # False: the reply is one JSON document whatever --stream says (embeddings, rerank)
    streams: bool = True
    # True: the body carries a request's tools and images (chat messages or Responses items)
    attachments: bool = False
    # the results a reply to the sent body (with the run's extra fields) must hold; 0 for generation
    results: Callable[[dict], int] = no_results


ENDPOINTS: dict[str, Endpoint] = {}


def endpoint(
    name: str,
    path: str,
    order: int,
    *,
    streams: bool = True,
    attachments: bool = False,
    results: Callable[[dict], int] = no_results,
) -> Callable[[Body], Body]:
    """Register the decorated ``body(request, model, stream)`` as the body of endpoint `name`."""

    def register(body: Body) -> Body:
        ENDPOINTS[name] = Endpoint(name, path, order, body, streams, attachments, results)
        return body

    return register


def with_model(model: str) -> dict[str, Any]:
    """A body's first field: the model, when one is named (an empty --model leaves it out)."""
    return {"model": model} if model else {}


def stream_fields(out: dict[str, Any], stream: bool, usage_option: bool) -> dict[str, Any]:
    """A generation body's last fields: ``stream``, and with `usage_option` (chat, completions: a
    streamed reply carries usage only when asked) ``stream_options.include_usage`` when streamed."""
    out["stream"] = stream
    if stream and usage_option:
        out["stream_options"] = {"include_usage": True}
    return out


def texts(request) -> list[str]:
    """The texts of an embeddings or rerank request: the class's batch, or the request's text alone."""
    return list(request.inputs) if request.inputs else [request.prompt()]
