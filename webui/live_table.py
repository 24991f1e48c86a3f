"""The live view's records as columns: the record fields its statistics read (the summary's
scalars, chunk_times, input_chars) plus when each request ended, and JSON-safe values."""

from __future__ import annotations

import math
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from metrics.record import FIELD_NAMES, SCALAR_COLUMNS, arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa

# The record fields the live statistics read: the summary's scalars, chunk_times, input_chars.
LIVE_COLUMNS = (*SCALAR_COLUMNS, "input_chars", "chunk_times")
_INDEX = [FIELD_NAMES.index(c) for c in LIVE_COLUMNS]


@cache
def live_schema() -> pa.Schema:
    """LIVE_COLUMNS in the records' types, plus `ended`. pyarrow loads here, at first use
    (metrics/record.py `arrow_schema`)."""
    import pyarrow as pa

    records = arrow_schema()
    return pa.schema([*(records.field(c) for c in LIVE_COLUMNS), pa.field("ended", pa.float64())])


def ended_at(wall_send: np.ndarray, e2e_s: np.ndarray) -> np.ndarray:
    """Wall-clock time each record ended: wall_send + e2e_s, or wall_send when e2e_s is unknown."""
    wall_send = np.asarray(wall_send, dtype=float)
    e2e = np.asarray(e2e_s, dtype=float)
    return wall_send + np.where(np.isfinite(e2e), e2e, 0.0)


def rows_to_live_table(rows: list) -> pa.Table:
    """Rows in FIELD_NAMES order -> a table of LIVE_COLUMNS plus `ended`."""
    import pyarrow as pa

    schema = live_schema()
    columns = [[row[i] for row in rows] for i in _INDEX] if rows else [[] for _ in _INDEX]
    arrays = [pa.array(col, type=f.type) for col, f in zip(columns, schema)]
    wall = arrays[LIVE_COLUMNS.index("wall_send")].to_numpy(zero_copy_only=False)
    e2e = arrays[LIVE_COLUMNS.index("e2e_s")].to_numpy(zero_copy_only=False)
    return pa.Table.from_arrays([*arrays, pa.array(ended_at(wall, e2e), type=pa.float64())], schema=schema)


def clean(x):
    """JSON-safe: NaN and infinities become None, numpy scalars Python numbers."""
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return x if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x
