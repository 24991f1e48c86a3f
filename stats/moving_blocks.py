"""The sampling spread of a statistic of values that come in a sequence and are correlated along it
(the first tokens of one load level: a request sent while the server's queue is long waits, and so
do the ones sent just after it): a moving-block bootstrap.

Each draw is made of ceil(n / L) blocks of L consecutive values, each block starting at a uniformly
drawn position, cut to n values; the statistic of each draw is one resampled value. Blocks keep
the correlation within L values, which independent draws of single values would break (and then
understate the spread: a level's P95 moves between levels far more than the order statistics of
independent values allow). L = ceil(sqrt(n)), the usual order for a moving-block bootstrap.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def block_length(n: int) -> int:
    return max(1, math.ceil(math.sqrt(n)))


def moving_block_draws(
    values: np.ndarray, statistic: Callable[[np.ndarray], np.ndarray], draws: int, rng: np.random.Generator
) -> np.ndarray:
    """`draws` values of `statistic` (rows of a (draws, n) array -> (draws,)) over moving-block
    resamples of `values` (in their order; at least one)."""
    v = np.asarray(values, dtype=float)
    n = v.size
    length = block_length(n)
    blocks = math.ceil(n / length)
    starts = rng.integers(0, n - length + 1, size=(draws, blocks))
    index = (starts[:, :, None] + np.arange(length)).reshape(draws, blocks * length)[:, :n]
    return statistic(v[index])
