"""Import production request logs: a template library, a fitted workload spec and a replay trace.

    python -m workloads import LOGFILE --out workloads/mybiz/ [--anonymize] [--sample N | --sample-frac F]

Input shapes (detected from the content; a `.gz` file is read compressed):

  JSONL (or a JSON array) of OpenAI request bodies: chat (`messages`) or completions (`prompt`), at
        the top level or under `request` / `body` (an object or a JSON string); optional timestamp
        (`timestamp`, `time`, `created`, `created_at`, `ts`, `request_time`, `start_time`: epoch
        seconds / ms / us / ns, or ISO 8601; naive times are UTC) and usage (`usage` at the top
        level, in the body, or in a `response` object: `completion_tokens` / `output_tokens`,
        `prompt_tokens` / `input_tokens`); the reply text in `response.choices[0]` is used when
        there is no usage.
  ShareGPT JSON: `[{"id", "conversations": [{"from": "human"|"gpt"|"system", "value"}]}]` (also
        `role`/`content`, and one conversation per JSONL line). `--turns first` (default, as
        `vllm bench serve`): one request per conversation, its first human message; `--turns all`:
        one request per human message that got a reply, carrying the conversation before it.
  CSV / TSV with a header: prompt column `prompt`/`input`/`question`/`query`/`instruction`/`text`/
        `content`/`message`/`user` (or `--prompt-column`), output length `output_tokens`/
        `completion_tokens`/`output_len`/`output_length`/`response_tokens`/`generated_tokens`
        (or `--output-column`), optional `system`, `max_tokens`, reply text (`output`/`response`/
        `answer`/`completion`) and a time column.

Output tokens of a request, first that applies (the record of each import says how many of each):
  1. `usage.completion_tokens` (or a CSV output-length column);
  2. the logged reply text, counted with the estimate below;
  3. the request's `max_tokens` (a cap, not what was generated: check the summary's share);
  4. `--default-output-tokens` (256).
The estimate is the simulator's rule (core/text.py): one token per CJK character, one per four
other characters.

What is written to `--out`:
  templates.jsonl  kind `prompt` lines, the whole prompts as logged (deduplicated, with `count`),
                   and kind `system` lines for the distinct system prompts they reference;
  workload.yaml    classes bucketed by input length (quantiles `--quantiles 50,90` by default, or
                   fixed `--edges 200,800` characters), weights = the observed shares, input_chars
                   `empirical` over the class's prompts (`prompts: verbatim`), output_tokens
                   `empirical` over the observed lengths (at most `--max-values` order statistics);
  trace.jsonl      when requests carry timestamps: a header line, then one line per request
                   `{"t": seconds after the first, "class", "prompt": id, "max_tokens"}` for
                   `--replay` (shapes/replay.py).

Anonymisation (`--anonymize`) masks e-mail addresses, phone numbers (mainland China mobile and
landline, and international `+CC ...` and North American forms), mainland China 18-digit resident
ID numbers, card numbers (13-19 digits, optionally grouped) and any other run of `--digit-run`
(8) or more digits. Masking keeps the length: every letter and digit of a match becomes `*` (the
`@` and dots of an e-mail stay), so input lengths and classes are those of the log. It applies to
every text kept: messages, tool results and tool-call arguments.

Chat requests keep their `tools` (and `tool_choice`), the assistants' tool calls and the tool
results (before the last user message, and after it: an agent's turn going on), and the number
and sizes of the final user message's images; the images themselves are not kept, a replay sends
generated ones of the same sizes.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
from collections import Counter

import numpy as np

from core.errors import InputError

from ..spec import load_spec
from .anonymize import Anonymizer, anonymize_message
from .fit import DEFAULT_MAX_VALUES, DEFAULT_OUTPUT_TOKENS, DEFAULT_QUANTILES, fit_classes, resolve_output
from .readers import read_log
from .write import write_outputs


def _pcts(v, qs=(10, 50, 90, 99)) -> str:
    if len(v) == 0:
        return "-"
    return "/".join(f"{np.percentile(v, q):.0f}" for q in qs)


def import_args(p: argparse.ArgumentParser) -> None:
    p.description = __doc__
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument(
        "logfile", help="request log: JSONL/JSON of OpenAI request bodies, ShareGPT JSON, or CSV/TSV (.gz too)"
    )
    p.add_argument("--out", required=True, help="folder for templates.jsonl, workload.yaml and trace.jsonl")
    p.add_argument("--name", default=None, help="workload name (default: the --out folder's name)")
    p.add_argument("--domain", default="imported", help="domain written on the templates (default: imported)")
    p.add_argument(
        "--anonymize",
        "--anonymise",
        action="store_true",
        help="mask e-mails, phone numbers, ID and card numbers and long digit runs (length kept)",
    )
    p.add_argument(
        "--digit-run", type=int, default=8, help="with --anonymize: mask runs of this many digits or more (default 8)"
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--sample", type=int, default=None, help="keep N requests, drawn at random (seeded)")
    g.add_argument("--sample-frac", type=float, default=None, help="keep this fraction of the requests (seeded)")
    p.add_argument("--seed", type=int, default=0, help="seed of --sample / --sample-frac (default 0)")
    b = p.add_mutually_exclusive_group()
    b.add_argument(
        "--quantiles",
        default=None,
        help="class bounds as input-length percentiles, e.g. 50,90 (default: 50,90 -> short/medium/long)",
    )
    b.add_argument("--edges", default=None, help="class bounds in characters instead, e.g. 200,800")
    p.add_argument("--names", default=None, help="class names, comma-separated (default: short,medium,long for 3)")
    p.add_argument(
        "--turns",
        choices=["first", "all"],
        default="first",
        help="ShareGPT: first human message of each conversation (default), or every answered one with its history",
    )
    p.add_argument(
        "--default-output-tokens",
        type=int,
        default=DEFAULT_OUTPUT_TOKENS,
        help=f"output length when a request has no usage, reply or max_tokens (default {DEFAULT_OUTPUT_TOKENS})",
    )
    p.add_argument(
        "--max-values",
        type=int,
        default=DEFAULT_MAX_VALUES,
        help=f"most values in an empirical output_tokens distribution (default {DEFAULT_MAX_VALUES})",
    )
    p.add_argument("--prompt-column", default=None, help="CSV: the prompt column, when not detected")
    p.add_argument("--output-column", default=None, help="CSV: the output-length column, when not detected")


def _floats(option: str, text: str | None) -> list | None:
    if text is None:
        return None
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--{option}: {text!r} is not a comma-separated list of numbers") from None
    if not vals:
        raise InputError(f"--{option}: give at least one number")
    return vals


def run_import(args: argparse.Namespace, out=print) -> int:
    try:
        return _run_import(args, out)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run_import(args: argparse.Namespace, out) -> int:
    quantiles = _floats("quantiles", args.quantiles)
    if quantiles and not all(0 < q < 100 for q in quantiles):
        raise InputError("--quantiles: percentiles lie strictly between 0 and 100")
    edges = _floats("edges", args.edges)
    if edges and any(e < 1 for e in edges):
        raise InputError("--edges: bounds are characters >= 1")
    names = [n.strip() for n in args.names.split(",")] if args.names else None
    if names and not all(re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", n) for n in names):
        raise InputError("--names: use letters, digits, '_', '-' or '.', starting with a letter or digit")
    if args.sample is not None and args.sample < 1:
        raise InputError("--sample: give N >= 1")
    if args.sample_frac is not None and not 0 < args.sample_frac <= 1:
        raise InputError("--sample-frac: give a fraction in (0, 1]")
    if args.default_output_tokens < 1 or args.max_values < 2:
        raise InputError("--default-output-tokens must be >= 1 and --max-values >= 2")

    parsed = read_log(
        args.logfile, turns=args.turns, prompt_column=args.prompt_column, output_column=args.output_column
    )
    entries = parsed.entries
    if not entries:
        why = ", ".join(f"{k} {v}" for k, v in parsed.skipped.most_common()) or "nothing recognised"
        raise InputError(f"{args.logfile}: no usable requests ({why}); see python -m workloads import --help")
    found = len(entries)
    if args.sample is not None or args.sample_frac is not None:
        k = args.sample if args.sample is not None else max(1, round(args.sample_frac * found))
        if k < found:
            keep = sorted(random.Random(args.seed).sample(range(found), k))
            entries = [entries[i] for i in keep]
    anon = None
    if args.anonymize:
        anon = Anonymizer(args.digit_run)
        for e in entries:
            e.text = anon(e.text)
            if e.system is not None:
                e.system = anon(e.system)
            e.history = [anonymize_message(anon, m) for m in e.history]
            e.after = [anonymize_message(anon, m) for m in e.after]
    for e in entries:
        resolve_output(e, args.default_output_tokens)
    fit = fit_classes(entries, quantiles, edges, names, args.max_values)

    n = len(entries)
    sources = Counter(e.output_source for e in entries)
    with_system = sum(1 for e in entries if e.system is not None)
    with_usage = sum(1 for e in entries if e.out_tokens_usage is not None)
    with_history = sum(1 for e in entries if e.history)
    timed = [e.time for e in entries if e.time is not None]
    lines = [
        f"log        {args.logfile}: {parsed.format}, {parsed.lines} items, {found} requests"
        + (f", skipped: {', '.join(f'{k} {v}' for k, v in parsed.skipped.most_common())}" if parsed.skipped else "")
    ]
    if parsed.dropped_roles:
        lines.append(
            f"           messages left out: {', '.join(f'{k} {v}' for k, v in parsed.dropped_roles.most_common())}"
        )
    if n != found:
        lines.append(f"sampled    {n} of {found} (seed {args.seed})")
    lines.append(
        f"system     {with_system / n:.1%} of requests carry a system prompt "
        f"({len({e.system for e in entries if e.system is not None})} distinct); "
        f"{with_history / n:.1%} carry earlier turns"
    )
    lines.append(
        f"usage      {with_usage / n:.1%} of requests carry usage; output tokens from "
        + ", ".join(f"{k} {v}" for k, v in sources.most_common())
    )
    if timed:
        span = max(timed) - min(timed)
        rate = f", mean {len(timed) / span:.3g} requests/s" if span > 0 else ""
        lines.append(f"time       {len(timed) / n:.1%} of requests carry a timestamp, spanning {span:,.1f} s{rate}")
    else:
        lines.append("time       no timestamps: no trace.jsonl")
    if anon is not None:
        lines.append("anonymised " + (", ".join(f"{k} {v}" for k, v in sorted(anon.counts.items())) or "nothing found"))
    bounds = ", ".join(str(b) for b in fit.edges) or "none"
    how = (
        f"fixed edges {args.edges}"
        if edges
        else f"percentiles {','.join(f'{q:g}' for q in quantiles or DEFAULT_QUANTILES)}"
    )
    lines.append(f"classes    by input length ({how}: bounds {bounds} chars)")
    lines.append(
        f"  {'class':<8}{'share':>7}{'count':>7}  {'input chars p10/p50/p90/p99 (range)':<38}output tokens p10/p50/p90/p99"
    )
    for c in fit.classes:
        ic = f"{_pcts(c['lengths'])} ({c['min']}-{c['max']})"
        lines.append(f"  {c['name']:<8}{c['weight']:>7.1%}{c['count']:>7}  {ic:<38}{_pcts(c['outputs'])}")
    allout = np.array([e.output_tokens for e in entries])
    alllen = np.array([e.input_chars for e in entries])
    lines.append(
        f"  {'(total)':<8}{1:>7.0%}{n:>7}  {_pcts(alllen) + f' ({alllen.min()}-{alllen.max()})':<38}{_pcts(allout)}"
    )

    with_trace = len(timed) >= 2
    name = args.name or os.path.basename(os.path.normpath(args.out)) or "imported"
    if not re.match(r"^\S", name):
        name = "imported"
    written = write_outputs(
        args.out,
        entries,
        fit,
        name=name,
        domain=args.domain,
        source=args.logfile,
        summary_lines=lines,
        with_trace=with_trace,
    )
    for ln in lines:
        out(ln)
    out(f"wrote      {written['templates']} ({written['prompts']} prompts, {written['system_prompts']} system prompts)")
    out(f"           {written['spec']}")
    if with_trace:
        out(
            f"           {written['trace']} ({written['trace_requests']} requests over "
            f"{written['trace_duration_s']:,.1f} s; replay with --replay {written['trace']})"
        )
    # the spec must load: a mistake here is a bug of the importer, not of the log
    load_spec(written["spec"])
    return 0
