"""The client's TTFT split by the server's own report of each request: the server's queue, the
server's prefill, and the rest.

A server that reports each request's timing (vLLM's per-request `metrics` object, in the record as
`server_queue_s` and `server_ttft_s`, metrics/record.py) says how long the request waited to be
scheduled and how long from then to its first token. The client's TTFT holds both and more: the
API server's intake and tokenizer, the network both ways and the client's own reading. That rest is
what no server-side dashboard can show, so the split states it: rest = client TTFT - (queue +
server TTFT), per request, and the block's means add up because means do (percentiles of the parts
would not). Only the requests the server reported on are split; a block with none has no split.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from metrics.percentiles import LINEAR, percentiles
from metrics.schema.figures import TtftSplit


def ttft_split(ok: pd.DataFrame, method: str = LINEAR) -> TtftSplit | None:
    """The split over `ok`, a block's successful records (SCALAR_COLUMNS); None where no record
    carries the server's queue time and TTFT and none its cached prompt tokens."""
    if "server_ttft_s" not in ok:
        return None
    ttft = ok["ttft_s"].to_numpy(dtype=float)
    queue = ok["server_queue_s"].to_numpy(dtype=float)
    prefill = ok["server_ttft_s"].to_numpy(dtype=float)
    told = np.isfinite(ttft) & np.isfinite(queue) & np.isfinite(prefill)
    cached = ok["cached_tokens"].to_numpy()
    known = cached >= 0
    if not told.any() and not known.any():
        return None
    prompt = ok["prompt_tokens"].to_numpy()[known]
    prompt_sum = int(prompt[prompt >= 0].sum())
    cached_sum = int(cached[known].sum())
    share = cached_sum / prompt_sum if prompt_sum > 0 else None
    if not told.any():
        return TtftSplit(requests=0, cached_tokens=cached_sum, cached_known=int(known.sum()), cached_share=share)
    t, q, p = ttft[told] * 1000.0, queue[told] * 1000.0, prefill[told] * 1000.0
    rest = t - q - p
    return TtftSplit(
        requests=int(told.sum()),
        ttft_ms=float(t.mean()),
        queue_ms=float(q.mean()),
        prefill_ms=float(p.mean()),
        rest_ms=float(rest.mean()),
        rest_p95_ms=float(percentiles(rest, [95.0], method)[0]),
        cached_tokens=cached_sum,
        cached_known=int(known.sum()),
        cached_share=share,
    )
