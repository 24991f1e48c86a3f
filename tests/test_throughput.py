"""metrics.timing and metrics.percentiles: each token counted in the interval it arrived in;
the ITL gaps and who they belong to; E2E censored where a request ended early; one percentile."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from metrics.timing import arrived_tokens

LISTS = pa.list_(pa.float64())


def test_tokens_fall_where_their_chunks_arrived():
    # record 0: 8 tokens in 4 chunks at +0.1..0.4 s; record 1: no chunks (non-streaming), 3 tokens
    # with the body at +0.9 s; record 2: 6 tokens in 3 chunks at +0.5, +1.5, +2.5 s; record 3: masked out
    chunk_times = pa.chunked_array(
        [pa.array([[0.1, 0.2, 0.3, 0.4], []], LISTS), pa.array([[0.5, 1.5, 2.5], [0.1]], LISTS)]
    )
    wall = np.full(4, 10.0)
    ttft, e2e = np.array([0.1, np.nan, 0.5, 0.1]), np.array([0.4, 0.9, 2.5, 0.1])
    out, prompt = arrived_tokens(
        [10.0, 10.25, 11.0, 13.0],
        wall,
        ttft,
        e2e,
        [5, 6, 7, 100],
        [8, 3, 6, 100],
        chunk_times,
        [True, True, True, False],
    )
    assert out.tolist() == [4.0, 4.0 + 3.0 + 2.0, 4.0]
    assert prompt.tolist() == [5.0, 7.0, 0.0]  # record 1 never had a first token: its prompt is not counted
    assert out.sum() == 8 + 3 + 6  # nothing lost, nothing counted twice


def test_last_edge_is_inclusive_and_outside_is_dropped_and_slices_are_read_right():
    full = pa.array([[9.0], [0.0, 1.0, 2.0, 3.0], [0.5]], LISTS)
    part = full.slice(1, 1)  # offsets of a slice point into the unsliced values
    out, _ = arrived_tokens([1.0, 2.0, 3.0], [0.0], [0.0], [3.0], [0], [4], part, [True])
    assert out.tolist() == [1.0, 2.0]  # 0.0 is before the first edge; 3.0 sits on the last edge


def test_itl_gaps_belong_to_their_request_across_chunks_and_slices():
    from metrics.timing import itl_gaps, pooled_itl

    full = pa.array([[9.0], [0.0, 1.0, 3.0], [], None, [0.5, 0.75]], LISTS)
    col = pa.chunked_array([full.slice(0, 2), full.slice(2, 3)])
    gaps, rows = itl_gaps(col)
    assert gaps.tolist() == [1.0, 2.0, 0.25] and rows.tolist() == [1, 1, 4]
    assert pooled_itl(col).tolist() == gaps.tolist()
    assert itl_gaps(pa.chunked_array([], LISTS))[0].size == 0


def test_end_early_censors_e2e_where_the_request_ended():
    from metrics.record import RequestRecord
    from metrics.timing import end_early

    def rec(**kw):
        return RequestRecord(
            "r", "w", "chat", "short", 1, 8, t_send=10.0, ok=True, ttft_s=0.2, e2e_s=1.0, n_chunks=3, **kw
        )

    r = rec()
    end_early(r, "timeout", "--timeout-total 3s", t_end=13.0, cause="timeout")
    assert (r.ok, r.error, r.error_detail, r.e2e_s) == (False, "timeout", "--timeout-total 3s", 3.0)  # at the limit
    r = rec()
    end_early(r, "stream_truncated", "reset", t_end=12.5, cause="stream_truncated")
    assert r.e2e_s == 1.0  # tokens came: E2E stays at the last one
    r = rec(chunk_times=[])
    r.n_chunks, r.e2e_s = 0, math.nan
    end_early(r, "stopped", "in flight when the run ended", t_end=11.5)
    assert r.e2e_s == 1.5 and r.error == "stopped"


def test_one_percentile_everywhere():
    from metrics.percentiles import mean, percentile, percentile_by_group, percentiles

    rng = np.random.default_rng(4)
    v = rng.lognormal(0, 1, 500)
    v[::7] = np.nan
    clean = v[~np.isnan(v)]
    assert percentile(v, 95) == np.percentile(clean, 95) and percentiles(v, [50, 99.9]) == list(
        np.percentile(clean, [50, 99.9])
    )
    assert mean(v) == pytest.approx(clean.mean())
    assert percentile([], 50) is None and percentile([math.nan], 50) is None and mean([]) is None
    groups = rng.integers(0, 9, v.size)  # group 8 gets no value
    groups[groups == 8] = 7
    got = percentile_by_group(v, groups, 9, 95)
    for g in range(8):
        want = np.percentile(v[(groups == g) & ~np.isnan(v)], 95)
        assert got[g] == want, g  # to the bit
    assert math.isnan(got[8])


def test_itl_objective_per_request_is_the_statistic_of_its_own_gaps():
    from metrics.slo import good_mask, parse_slo, request_values

    times = pa.chunked_array(
        [pa.array([[0.0, 0.1, 0.2, 0.5], [0.0], [0.0, 0.05, 0.1]], LISTS), pa.array([[0.0, 0.3]], LISTS)]
    )
    df = pd.DataFrame({"ok": [True, True, True, False]})
    (p90,), (avg,) = parse_slo("itl.p90<270ms"), parse_slo("itl.mean<250ms")
    got = request_values(p90, df, times)
    assert got[0] == pytest.approx(np.percentile([0.1, 0.1, 0.3], 90)) and math.isnan(got[1])
    assert got[2] == pytest.approx(0.05) and got[3] == pytest.approx(0.3)
    assert request_values(avg, df, times)[[0, 2, 3]] == pytest.approx([0.5 / 3, 0.05, 0.3])
    # p90 of 0.1, 0.1, 0.3 s is 0.26 s: under 270 ms; one chunk has no ITL and passes; a failure is never good
    assert good_mask([p90], df, times).tolist() == [True, True, True, False]
    assert good_mask(parse_slo("itl.p90<250ms"), df, times).tolist() == [False, True, True, False]
