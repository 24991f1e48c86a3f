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
json_reply          --          a streaming request is answered as if it were not
                                streaming: one JSON body (application/json), as a
                                gateway that buffers the stream would
==================  ==========  ==================================================

``k`` is clamped to ``max_tokens - 1`` so that the fault strikes before the
natural end of the stream.  Non-streaming requests: ``mid_stream_error`` gives
an HTTP 500, ``cut_*`` close the connection without a response,
``malformed_chunk`` sends an invalid JSON body, the stalls delay the body.
"""

from __future__ import annotations

import random
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, RootModel, model_validator

from core.errors import InputError
from core.validation import FieldError, Fix, build, dotted

# name -> (default parameter, parameter kind: "k" tokens, "s" seconds, None: takes none)
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
    "json_reply": (None, None),
}
HTTP_FAULTS = {"http_429": 429, "http_500": 500, "http_503": 503}


def _rate(v: float) -> float:
    if not 0.0 <= v <= 1.0:
        raise FieldError(f"rate {v:g} is outside [0, 1]", "give the probability per request, 0 to 1")
    return v


class FaultSetting(BaseModel):
    """One fault: its rate and parameter (checked against the fault's kind by `FaultTable`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rate: Annotated[
        float, Field(strict=True), AfterValidator(_rate), Fix("give the probability per request, 0 to 1")
    ] = 0.0
    param: Annotated[float | None, Field(strict=True), Fix("give k (tokens) or s (seconds) as a number")] = None


def _shorthand(v: Any) -> Any:
    """Unknown names are refused by name; ``NAME: RATE`` is short for ``NAME: {rate: RATE}``."""
    if not isinstance(v, dict):
        return v
    for name in v:
        if name not in FAULTS:
            raise FieldError(f"unknown fault {name!r}", f"known: {', '.join(FAULTS)}", at=(name,))
    return {n: {"rate": x} if isinstance(x, (int, float)) and not isinstance(x, bool) else x for n, x in v.items()}


class FaultTable(RootModel[Annotated[dict[str, FaultSetting], BeforeValidator(_shorthand)]]):
    """``{name: {rate: p, param: x}}`` or ``{name: p}``: a profile's ``faults`` and the ``--fault`` options."""

    model_config = ConfigDict(frozen=True)

    @model_validator(mode="after")
    def _params(self):
        for name, f in self.root.items():
            kind = FAULTS[name][1]
            if f.param is None:
                continue
            if kind is None:
                raise FieldError(f"fault {name!r} takes no parameter", "drop the parameter", at=(name, "param"))
            if kind == "k" and not float(f.param).is_integer():
                raise FieldError(
                    f"{f.param:g} is not a whole number of tokens", "give k as a whole number", at=(name, "param")
                )
            if f.param < 0:
                raise FieldError(f"parameter {f.param:g} is negative", "give a parameter >= 0", at=(name, "param"))
        return self

    def plan(self) -> dict:
        """``{name: (rate, param)}``, the default parameter where none is given."""
        out = {}
        for name, f in self.root.items():
            default, kind = FAULTS[name]
            param = default if f.param is None else int(f.param) if kind == "k" else float(f.param)
            out[name] = (f.rate, param)
        return out


def _number(text: str) -> Any:
    """A number written on the command line; anything else is left for the validation to name."""
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def parse_fault_option(text: str):
    """``NAME=RATE[:PARAM]`` -> ``(name, (rate, param))``; a mistake is an `InputError` naming ``--fault``."""
    if "=" not in text:
        raise InputError(f"--fault {text!r}: expected NAME=RATE[:PARAM] (e.g. http_500=0.01 or cut_close=0.1:5)")
    name, _, rest = text.partition("=")
    rate, _, param = rest.partition(":")
    name, param = name.strip(), param.strip()
    raw = {name: {"rate": _number(rate.strip()), **({"param": _number(param)} if param else {})}}
    table = build(FaultTable, raw, field_name=lambda loc: f"--fault {text!r}: {dotted(loc)}")
    return name, table.plan()[name]


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
