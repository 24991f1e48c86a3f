"""What every summary.json model shares: a number that may be missing (None, never NaN), the
strict model of the suite's own figures, the open section a plugin writes, the percentiles published."""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict


def none_for_nan(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


# A number that may be missing: None, never NaN or an infinity (JSON has neither).
Num = Annotated[float | None, BeforeValidator(none_for_nan)]


class Model(BaseModel):
    """Fields by name in code, the published key names (aliases such as "p99.9") in the file; an
    unknown key is an error (a typo in the code that fills a model must not pass silently)."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)


class Section(BaseModel):
    """A section written by a plugin: its known keys typed, any other key kept as it is."""

    model_config = ConfigDict(extra="allow")


PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("p99_9", 99.9))
