"""The load models, one class per kind, and the registry that picks one from the options.

Adding a kind: a module here with its class (plugin/load_models/base.py lists what it owns), and
its place in KINDS. The registry asks each kind in order whether its options ask for it; the first
that does builds the model (and refuses options of the others). ClosedLoop, last, always does.
"""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from plugin.load_models.base import LoadModel
from plugin.load_models.capacity import CapacitySearchModel
from plugin.load_models.closed import ClosedLoop
from plugin.load_models.open_loop import DEFAULT_MAX_CONCURRENCY, OpenLoop
from plugin.load_models.rate_steps import RateSteps
from plugin.load_models.replay import TraceReplay
from plugin.load_models.steps import StepRamp

KINDS: tuple[type[LoadModel], ...] = (RateSteps, TraceReplay, OpenLoop, CapacitySearchModel, StepRamp, ClosedLoop)

AnyLoadModel = Annotated[Union[KINDS], Field(discriminator="kind")]  # noqa: UP007  a tagged union of KINDS


def load_model(p, distributed: bool) -> LoadModel:
    """The load model the parsed options `p` (plugin.options.Options) ask for, or one-line InputError."""
    kind = next(k for k in KINDS if k.chosen(p))
    return kind.from_options(p, distributed)


__all__ = [
    "AnyLoadModel",
    "CapacitySearchModel",
    "ClosedLoop",
    "DEFAULT_MAX_CONCURRENCY",
    "KINDS",
    "LoadModel",
    "OpenLoop",
    "RateSteps",
    "StepRamp",
    "TraceReplay",
    "load_model",
]
