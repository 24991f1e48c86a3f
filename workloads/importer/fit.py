"""From entries to classes: each request's output length, and classes bucketed by input length
(weights = the observed shares, output lengths as order statistics)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.errors import InputError
from core.text import estimate_tokens

from .records import Entry

DEFAULT_OUTPUT_TOKENS = 256
DEFAULT_QUANTILES = (50.0, 90.0)
DEFAULT_MAX_VALUES = 1000
CLASS_NAMES = {
    1: ["all"],
    2: ["short", "long"],
    3: ["short", "medium", "long"],
    4: ["short", "medium", "long", "xlong"],
}


def resolve_output(e: Entry, default: int) -> None:
    """Output tokens, first that applies: usage, the reply text (estimated), max_tokens, `default`."""
    if e.out_tokens_usage is not None and e.out_tokens_usage >= 1:
        e.output_tokens, e.output_source = e.out_tokens_usage, "usage"
    elif e.reply_text:
        e.output_tokens, e.output_source = max(1, estimate_tokens(e.reply_text)), "reply_text"
    elif e.max_tokens is not None and e.max_tokens >= 1:
        e.output_tokens, e.output_source = e.max_tokens, "max_tokens"
    else:
        e.output_tokens, e.output_source = default, "default"


def class_names(n: int, names: list | None) -> list:
    if names:
        if len(names) != n:
            raise InputError(f"--names: {len(names)} names for {n} classes")
        return names
    return CLASS_NAMES.get(n, [f"c{i + 1}" for i in range(n)])


def bucket_edges(lengths: np.ndarray, quantiles=None, edges=None) -> list:
    """Upper bounds (inclusive) of every class but the last, in characters."""
    if edges:
        out = sorted({int(e) for e in edges})
    else:
        qs = quantiles or DEFAULT_QUANTILES
        out = sorted({int(np.percentile(lengths, q, method="lower")) for q in qs})
    return [e for e in out if e < int(lengths.max())]  # a bound at or above the longest input adds nothing


def reduce_values(values: list, k: int) -> list:
    """At most k evenly spaced order statistics of the sorted values (all of them if fewer)."""
    v = sorted(values)
    if len(v) <= k:
        return v
    return [v[round(i * (len(v) - 1) / (k - 1))] for i in range(k)]


def fix_weights(counts: list) -> list:
    """Shares rounded to 6 decimals that sum to 1 exactly enough for the spec (1e-6)."""
    total = sum(counts)
    w = [round(c / total, 6) for c in counts]
    i = max(range(len(w)), key=lambda j: w[j])
    w[i] = round(w[i] + (1.0 - sum(w)), 6)
    return w


@dataclass
class Fit:
    names: list
    edges: list
    assign: np.ndarray  # class index per entry
    classes: list  # dicts: name, weight, count, min, max, out_values


def fit_classes(entries: list, quantiles=None, edges=None, names=None, max_values=DEFAULT_MAX_VALUES) -> Fit:
    lengths = np.array([e.input_chars for e in entries])
    b = bucket_edges(lengths, quantiles, edges)
    assign = np.searchsorted(np.array(b), lengths, side="left") if b else np.zeros(len(lengths), dtype=int)
    used = sorted(set(assign.tolist()))
    remap = {old: new for new, old in enumerate(used)}  # empty buckets dropped
    assign = np.array([remap[a] for a in assign.tolist()])
    labels = class_names(len(used), names)
    outs = np.array([e.output_tokens for e in entries])
    counts = [int((assign == i).sum()) for i in range(len(used))]
    weights = fix_weights(counts)
    classes = []
    for i, name in enumerate(labels):
        m = assign == i
        classes.append(
            {
                "name": name,
                "weight": weights[i],
                "count": counts[i],
                "min": int(lengths[m].min()),
                "max": int(lengths[m].max()),
                "lengths": lengths[m],
                "outputs": outs[m],
                "out_values": reduce_values(outs[m].tolist(), max_values),
            }
        )
    return Fit(labels, b, assign, classes)
