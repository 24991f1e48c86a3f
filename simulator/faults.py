"""Fault injection: which request gets which fault.

Each fault has a rate (probability per request, drawn from a generator seeded
by ``--seed``) and an optional parameter.  Faults come from the profile's
``faults`` mapping and from ``--fault NAME=RATE[:PARAM]`` options (the
command line wins for a name given in both).  For every request the faults
are tried in the order of ``FAULTS`` below with one draw each; the first hit
is the request's fault (at most one fault per request).  ``refuse`` is drawn
per connection, when it is accepted.

==================  ==========  ==================================================
name                param       effect
==================  ==========  ==================================================
http_429            --          HTTP 429 with ``Retry-After: 1``, error JSON body
http_500            --          HTTP 500, error JSON body
http_503            --          HTTP 503, error JSON body
mid_stream_error    k = 5       after k tokens: ``data: {"error": {...,"code":500}}``
                                then ``data: [DONE]`` (stream ends normally)
cut_close           k = 5       after k tokens: close the connection (FIN), no
                                terminating chunk
cut_reset           k = 5       after k tokens: reset the connection (SO_LINGER 0)
stall_first         s = 2.0     s extra seconds before the first token (headers
                                are sent at once)
stall_between       s = 2.0     a gap of s seconds after half the tokens
malformed_chunk     k = 1       after k tokens, one extra SSE event whose JSON is
                                invalid (the token count is unchanged)
slow_headers        s = 2.0     s seconds before the response headers (the request
                                enters the engine only then)
refuse              --          the connection is closed with a reset as soon as it
                                is accepted, before anything is read
==================  ==========  ==================================================

``k`` is clamped to ``max_tokens - 1`` so that the fault strikes before the
natural end of the stream.  Non-streaming requests: ``mid_stream_error`` gives
an HTTP 500, ``cut_*`` close the connection without a response,
``malformed_chunk`` sends an invalid JSON body, the stalls delay the body.
"""
from __future__ import annotations

import random

# name -> (default parameter, parameter kind)
FAULTS = {
    "refuse": (None, None),
    "slow_headers": (2.0, "s"),
    "http_429": (None, None),
    "http_500": (None, None),
    "http_503": (None, None),
    "stall_first": (2.0, "s"),
    "stall_between": (2.0, "s"),
    "malformed_chunk": (1, "k"),
    "mid_stream_error": (5, "k"),
    "cut_close": (5, "k"),
    "cut_reset": (5, "k"),
}
HTTP_FAULTS = {"http_429": 429, "http_500": 500, "http_503": 503}


class FaultError(ValueError):
    pass


def _check(name, rate, param):
    if name not in FAULTS:
        raise FaultError(f"unknown fault '{name}' (known: {', '.join(FAULTS)})")
    try:
        rate = float(rate)
    except (TypeError, ValueError):
        raise FaultError(f"fault '{name}': rate must be a number, got {rate!r}") from None
    if not 0.0 <= rate <= 1.0:
        raise FaultError(f"fault '{name}': rate must be in [0, 1], got {rate}")
    default, kind = FAULTS[name]
    if param is None or param == "":
        param = default
    elif kind is None:
        raise FaultError(f"fault '{name}' takes no parameter")
    else:
        try:
            param = int(param) if kind == "k" else float(param)
        except (TypeError, ValueError):
            raise FaultError(f"fault '{name}': parameter must be {'an integer' if kind == 'k' else 'a number'}, got {param!r}") from None
        if param < 0:
            raise FaultError(f"fault '{name}': parameter must be >= 0")
    return name, (rate, param)


def parse_fault_option(text: str):
    """``NAME=RATE[:PARAM]`` -> ``(name, (rate, param))``."""
    if "=" not in text:
        raise FaultError(f"--fault {text!r}: expected NAME=RATE[:PARAM]")
    name, _, rest = text.partition("=")
    rate, _, param = rest.partition(":")
    return _check(name.strip(), rate.strip(), param.strip() or None)


def parse_fault_mapping(data: dict) -> dict:
    """Profile ``faults:`` mapping ``{name: {rate, param}}`` or ``{name: rate}``."""
    out = {}
    for name, val in data.items():
        if isinstance(val, dict):
            extra = set(val) - {"rate", "param"}
            if extra:
                raise FaultError(f"fault '{name}': unknown key '{sorted(extra)[0]}'")
            n, rp = _check(name, val.get("rate", 0.0), val.get("param"))
        else:
            n, rp = _check(name, val, None)
        out[n] = rp
    return out


class FaultPlan:
    """Seeded draws of faults per request and per connection."""

    def __init__(self, faults: dict, seed: int | None = 0):
        self.faults = {n: faults[n] for n in FAULTS if n in faults and faults[n][0] > 0}
        self._rng = random.Random(seed)
        self._req = [(n, r, p) for n, (r, p) in self.faults.items() if n != "refuse"]
        self._refuse = self.faults.get("refuse", (0.0, None))[0]

    def __bool__(self):
        return bool(self.faults)

    def draw_connection(self) -> bool:
        return self._refuse > 0 and self._rng.random() < self._refuse

    def draw_request(self):
        """``(name, param)`` or ``None``."""
        for name, rate, param in self._req:
            if self._rng.random() < rate:
                return name, param
        return None
