"""What every real-server run must satisfy, whatever the server."""

from __future__ import annotations

import numpy as np

from tests.servers.harness import SuiteRun


def check_all_succeeded(run: SuiteRun, min_requests: int) -> None:
    rec = run.records
    assert len(rec) >= min_requests, f"only {len(rec)} requests:\n{run.output[-3000:]}"
    failed = rec[~rec["ok"]]
    assert failed.empty, f"{len(failed)} failed: {failed[['error', 'error_detail']].value_counts().head(5).to_dict()}"
    assert run.returncode == 0, run.output[-3000:]
    # the summary's statistics take the requests sent inside the window; a few can be sent after
    # the run began to stop (users finishing a request in that instant start one more)
    records = run.summary["records"]
    assert records["total"] == len(rec) and records["outside_window"] <= 2 * len(rec) // 10 + 8
    overall = run.summary["overall"]["requests"]
    assert overall["ok"] == overall["sent"] == len(rec) - records["outside_window"] and overall["failed"] == 0


def check_tokens_from_usage(run: SuiteRun, pinned_max_tokens: int | None) -> None:
    """Output tokens are the server's usage counts; with a pinned length, exactly max_tokens."""
    rec = run.records
    assert (rec["tokens_source"] == "usage").all(), rec["tokens_source"].value_counts().to_dict()
    assert (rec["prompt_tokens"] > 0).all()
    assert (rec["output_tokens"] >= 1).all()
    if pinned_max_tokens is not None:
        assert (rec["max_tokens"] == pinned_max_tokens).all()
        assert (rec["output_tokens"] == pinned_max_tokens).all(), rec["output_tokens"].value_counts().to_dict()
    # a chunk carries one token or more, never less: chunks <= tokens
    assert (rec["n_chunks"] >= 1).all() and (rec["n_chunks"] <= rec["output_tokens"]).all()
    inside = rec[
        (rec["wall_send"] >= run.summary["window"]["start"]) & (rec["wall_send"] <= run.summary["window"]["end"])
    ]
    tokens = run.summary["overall"]["tokens"]
    assert tokens["output"] == int(inside["output_tokens"].sum()) and tokens["prompt"] == int(
        inside["prompt_tokens"].sum()
    )


def check_timings(run: SuiteRun) -> None:
    rec = run.records
    assert (rec["ttft_s"] > 0).all() and (rec["ttft_s"] <= rec["e2e_s"]).all()
    # ttft == e2e can happen with several chunks: a fast server's whole answer may land in one read
    tpot = (rec["e2e_s"] - rec["ttft_s"]) / (rec["output_tokens"] - 1)
    np.testing.assert_allclose(rec["tpot_s"], tpot, rtol=1e-9)
    for times, n in zip(rec["chunk_times"], rec["n_chunks"]):
        assert len(times) == n and np.all(np.diff(times) >= 0), (n, list(times))
