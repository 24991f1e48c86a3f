"""How a breakdown (per class, per backend: summary.json's and the live view's) cuts the records.
Free of pandas: the live view runs in the process that drives the load."""

from __future__ import annotations

import numpy as np


def groups(values: np.ndarray, select: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """(name, mask over all records) of each value that a record in `select` holds, by name."""
    return [(str(name), values == name) for name in sorted(set(values[select].tolist()))]
