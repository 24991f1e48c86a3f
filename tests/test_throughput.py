"""metrics.timing.arrived_tokens: each token counted in the interval it arrived in."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from metrics.timing import arrived_tokens

LISTS = pa.list_(pa.float64())


def test_tokens_fall_where_their_chunks_arrived():
    # record 0: 8 tokens in 4 chunks at +0.1..0.4 s; record 1: no chunks (non-streaming), 3 tokens
    # with the body at +0.9 s; record 2: 6 tokens in 3 chunks at +0.5, +1.5, +2.5 s; record 3: masked out
    chunk_times = pa.chunked_array([pa.array([[0.1, 0.2, 0.3, 0.4], []], LISTS), pa.array([[0.5, 1.5, 2.5], [0.1]], LISTS)])
    wall = np.full(4, 10.0)
    ttft, e2e = np.array([0.1, np.nan, 0.5, 0.1]), np.array([0.4, 0.9, 2.5, 0.1])
    out, prompt = arrived_tokens([10.0, 10.25, 11.0, 13.0], wall, ttft, e2e, [5, 6, 7, 100], [8, 3, 6, 100],
                                 chunk_times, [True, True, True, False])  # fmt: skip
    assert out.tolist() == [4.0, 4.0 + 3.0 + 2.0, 4.0]
    assert prompt.tolist() == [5.0, 7.0, 0.0]  # record 1 never had a first token: its prompt is not counted
    assert out.sum() == 8 + 3 + 6  # nothing lost, nothing counted twice


def test_last_edge_is_inclusive_and_outside_is_dropped_and_slices_are_read_right():
    full = pa.array([[9.0], [0.0, 1.0, 2.0, 3.0], [0.5]], LISTS)
    part = full.slice(1, 1)  # offsets of a slice point into the unsliced values
    out, _ = arrived_tokens([1.0, 2.0, 3.0], [0.0], [0.0], [3.0], [0], [4], part, [True])
    assert out.tolist() == [1.0, 2.0]  # 0.0 is before the first edge; 3.0 sits on the last edge
