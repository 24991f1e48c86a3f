"""How long `python -m reports build` takes on a big run: synthesise N request records (default one
million, ~50 token-bearing chunks each, realistic chunk_times), write a results folder exactly
as the suite does (requests.parquet in 5000-row groups, summary.json by metrics.summary, run.json),
then time the report build.

    python bench/report_scale.py                 # 1,000,000 records
    python bench/report_scale.py --records 200000 --keep /tmp/big

The synthetic run: 40/40/20 % short/medium/long classes, a stepped ramp (5..160 users) whose TTFT
grows with load, 1 % failures of several classes, output tokens from usage (90 %) or the client
tokenizer, and per-chunk token counts (continuous usage stats) on every successful request.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from metrics.record import arrow_schema  # noqa: E402
from shapes.steps import StepPlan  # noqa: E402

CLASSES = np.array(["short", "medium", "long"], dtype=object)
CLASS_P = (0.4, 0.4, 0.2)
MAX_OUT = (80, 200, 400)  # mean output ~40 / 100 / 200 tokens: the mix averages ~49 chunks at 2 tokens per chunk
STEP_USERS = (5, 10, 20, 50, 80, 120, 160)
ERRORS = np.array(["http_5xx", "timeout", "stream_truncated", "http_429"], dtype=object)


def synth_table(
    n: int,
    seed: int = 1,
    t0: float = 1_700_000_000.0,
    duration: float = 3600.0,
    steps=STEP_USERS,
    error_rate: float = 0.01,
    slow: float = 1.0,
) -> pa.Table:
    """N records in metrics.record.arrow_schema(), built with numpy only. `slow` scales TTFT."""
    rng = np.random.default_rng(seed)
    wall = np.sort(rng.uniform(t0, t0 + duration, n))
    step = np.minimum((wall - t0) / (duration / len(steps)), len(steps) - 1).astype(np.int32)
    users = np.asarray(steps, dtype=float)[step]
    cls = rng.choice(3, size=n, p=CLASS_P)
    max_tokens = np.asarray(MAX_OUT, dtype=np.int32)[cls]
    ok = rng.random(n) >= error_rate
    error = np.where(ok, "", ERRORS[rng.integers(0, len(ERRORS), n)]).astype(object)
    out_tok = np.where(ok, rng.integers(1, max_tokens + 1), 0).astype(np.int32)
    stream_interval = 2
    n_chunks = np.where(ok, (out_tok + stream_interval - 1) // stream_interval, 0).astype(np.int32)
    # TTFT grows with load (queueing), lognormal spread; ITL ~ 20 ms x (1 + users/200), jittered
    ttft = slow * 0.05 * (1 + (users / 40) ** 2) * rng.lognormal(0, 0.35, n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(n_chunks, out=offsets[1:])
    total = int(offsets[-1])
    owner = np.repeat(np.arange(n), n_chunks)
    gaps = 0.02 * (1 + users[owner] / 200) * rng.lognormal(0, 0.25, total) * stream_interval
    gaps[offsets[:-1][n_chunks > 0]] = 0.0  # the first chunk arrives at TTFT
    cs = np.cumsum(gaps)
    base = np.repeat(cs[offsets[:-1][n_chunks > 0]], n_chunks[n_chunks > 0])
    times = ttft[owner] + (cs - base)
    last = offsets[1:] - 1
    e2e = np.where(n_chunks > 0, times[np.clip(last, 0, max(0, total - 1))] if total else np.nan, np.nan)
    e2e = np.where(ok, e2e, rng.uniform(0.01, 5.0, n))
    ttft = np.where(ok, ttft, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(ok & (out_tok > 1), (e2e - ttft) / (out_tok - 1), np.nan)
    tok_per_chunk = np.full(total, stream_interval, dtype=np.int32)
    tok_per_chunk[offsets[1:][n_chunks > 0] - 1] = (out_tok - (n_chunks - 1) * stream_interval)[n_chunks > 0]
    source = np.where(rng.random(n) < 0.9, "usage", "tokenizer").astype(object)
    prompt = np.where(ok, (np.asarray((50, 200, 500))[cls] * rng.uniform(0.5, 1.0, n)).astype(np.int32), -1)
    t_send = wall - t0 + 5000.0
    off32 = pa.array(offsets.astype(np.int32))  # < 2**31 chunks: ~40M per million records
    cols = {
        "request_id": pa.array(np.char.add("r", np.arange(n).astype(str)).astype(object)),
        "worker": pa.array(np.where(rng.random(n) < 0.5, "w0", "w1").astype(object)),
        "endpoint": pa.array(np.full(n, "chat", dtype=object)),
        "request_class": pa.array(CLASSES[cls]),
        "input_chars": pa.array((prompt.clip(0) * 4).astype(np.int32)),
        "max_tokens": pa.array(max_tokens),
        "stream": pa.array(np.ones(n, dtype=bool)),
        "step": pa.array(step),
        "t_intended": pa.array(np.full(n, np.nan)),
        "t_send": pa.array(t_send),
        "wall_send": pa.array(wall),
        "status": pa.array(np.where(ok, 200, 500).astype(np.int16)),
        "ok": pa.array(ok),
        "error": pa.array(error),
        "error_detail": pa.array(np.where(ok, "", "synthetic failure").astype(object)),
        "ttft_s": pa.array(ttft),
        "e2e_s": pa.array(e2e),
        "tpot_s": pa.array(tpot),
        "prompt_tokens": pa.array(prompt.astype(np.int32)),
        "output_tokens": pa.array(np.where(ok, out_tok, -1).astype(np.int32)),
        "tokens_source": pa.array(np.where(ok, source, "").astype(object)),
        "n_chunks": pa.array(n_chunks),
        "finish_reason": pa.array(np.where(ok, "length", "").astype(object)),
        "chunk_times": pa.ListArray.from_arrays(off32, pa.array(times)),
        "chunk_tokens": pa.ListArray.from_arrays(off32, pa.array(tok_per_chunk)),
    }
    return pa.Table.from_arrays(
        [cols[f.name] if f.name in cols else _default(f.type, n) for f in arrow_schema()], schema=arrow_schema()
    )


def _default(t: pa.DataType, n: int) -> pa.Array:
    """A record field this benchmark does not model (e.g. added later): the record's default."""
    if pa.types.is_integer(t):
        return pa.array(np.full(n, -1), type=t)
    if pa.types.is_floating(t):
        return pa.array(np.full(n, np.nan), type=t)
    if pa.types.is_boolean(t):
        return pa.array(np.zeros(n, dtype=bool))
    if pa.types.is_list(t):
        return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], type=t.value_type))
    return pa.array(np.full(n, "", dtype=object), type=t)


def write_run(
    folder: str,
    table: pa.Table,
    t0: float,
    duration: float,
    steps=STEP_USERS,
    slo: str = "ttft.p95<500ms",
    run_id: str | None = None,
):
    """A results folder as the suite writes it: requests.parquet, summary.json, run.json; returns
    the summary (metrics.schema.Summary)."""
    from core.files import write_json
    from metrics.summary import summarize
    from runfolder.provenance import package_versions
    from runfolder.run_info import RunInfo

    os.makedirs(folder, exist_ok=True)
    pq.write_table(table, os.path.join(folder, "requests.parquet"), row_group_size=5000, compression="zstd")
    run_id = run_id or os.path.basename(folder.rstrip("/"))
    start, end = t0 + 10.0, t0 + duration
    try:
        from metrics.slo import parse_slo

        plan = StepPlan(steps, duration / len(steps), min(10.0, duration / len(steps) / 4)) if steps else None
        summary = summarize(table, start, end, run_start=t0, plan=plan, objectives=parse_slo(slo) if slo else ())
    except (ImportError, TypeError):  # an older metrics.summary without steps and objectives
        summary = summarize(table, start, end)
    summary = summary.with_sections(run_id=run_id, complete=True)
    write_json(os.path.join(folder, "summary.json"), summary.model_dump())
    info = RunInfo(
        run_id=run_id,
        started_at=t0,
        ended_at=t0 + duration,
        host="http://synthetic:8000",
        argv=["locust", "--synthetic"],
        versions=package_versions(),
        role="local",
        records=table.num_rows,
        complete=True,
        options={"model": "synthetic-7b", "steps": ",".join(map(str, steps)) if steps else "", "slo": slo, "seed": 1},
    )
    write_json(os.path.join(folder, "run.json"), info.dump())
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--duration", type=float, default=3600.0, help="run length in seconds")
    ap.add_argument("--keep", default="", help="write the results folder here and keep it")
    args = ap.parse_args(argv)
    folder = args.keep or tempfile.mkdtemp(prefix="report-scale-")
    t0 = 1_700_000_000.0
    try:
        t = time.perf_counter()
        table = synth_table(args.records, t0=t0, duration=args.duration)
        chunks = sum(len(c.values) for c in table.column("chunk_times").chunks)
        print(
            f"synthesised {table.num_rows:,} records, {chunks:,} chunks ({chunks / table.num_rows:.1f}/request) "
            f"in {time.perf_counter() - t:.1f}s"
        )
        t = time.perf_counter()
        write_run(folder, table, t0, args.duration)
        del table
        size = os.path.getsize(os.path.join(folder, "requests.parquet"))
        print(
            f"wrote {folder} (requests.parquet {size / 2**20:.0f} MiB) and summary.json in {time.perf_counter() - t:.1f}s"
        )
        from reports.build import build

        t, cpu = time.perf_counter(), time.process_time()
        paths = build(folder)
        elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
        html = os.path.getsize(paths["html"])
        load = os.getloadavg()[0]
        print(
            f"build: {elapsed:.2f}s wall, {cpu:.2f}s CPU (all threads) for {args.records:,} records "
            f"(report.html {html / 1024:.0f} KiB; load average {load:.1f} on {os.cpu_count()} cores)"
        )
        print(f"RESULT report_build_seconds={elapsed:.2f} cpu_seconds={cpu:.2f} records={args.records}")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
