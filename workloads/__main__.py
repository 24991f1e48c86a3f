"""Command line of the workloads package.

    python -m workloads check [FILE] [--samples N] [--seed S]
    python -m workloads import LOGFILE --out DIR [--anonymize] [--sample N | --sample-frac F] ...

Subcommands register themselves in ``SUBCOMMANDS`` (name -> (add_arguments,
run)); a new one (e.g. ``import``) adds an entry and needs nothing else here.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable

from core.errors import InputError

from .importer import import_args, run_import
from .sampler import Sampler
from .spec import load_spec

EXIT_BAD_SPEC = 2


def _percentiles(values: list[int], qs=(0, 50, 90, 99, 100)) -> list[int]:
    v = sorted(values)
    if not v:
        return [0 for _ in qs]
    return [v[min(len(v) - 1, int(round(q / 100 * (len(v) - 1))))] for q in qs]


def _fmt_counts(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items()) or "-"


def check_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", default=None, help="workload spec (YAML); default: the built-in reference mix")
    p.add_argument("--samples", type=int, default=10_000, help="requests to draw (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")


def check_run(args: argparse.Namespace) -> int:
    try:
        spec = load_spec(args.file)
    except InputError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_SPEC
    out = print
    out(f"spec      {spec.name}  ({spec.path})")
    if spec.description:
        out(f"          {spec.description[:100]}")
    out(f"hash      {spec.spec_hash[:16]}  loaded in {spec.load_seconds * 1000:.1f} ms")
    counts = spec.library.counts()
    out(f"library   {spec.templates_path}")
    for kind in ("question", "context", "system", "prompt"):
        if kind == "prompt" and not counts["by_kind"][kind]:
            continue
        out(f"  {kind + 's':<10}{counts['by_kind'][kind]:>5}  lang: {_fmt_counts(counts['by_lang'][kind])}")
        out(f"  {'':<15}domain: {_fmt_counts(counts['by_domain'][kind])}")
    dups = spec.library.duplicates()
    if dups:
        out(f"  warning: {len(dups)} duplicate texts in the library")
    out("classes")
    for line in spec.describe_classes():
        out(f"  {line}")

    n = max(1, args.samples)
    sampler = Sampler(spec, args.seed)
    t0 = time.perf_counter()
    reqs = sampler.sample(n)
    dt = time.perf_counter() - t0
    by_cls: dict[str, list] = {}
    for r in reqs:
        by_cls.setdefault(r.request_class, []).append(r)
    out(f"samples   {n} drawn (seed {args.seed}) in {dt * 1000:.0f} ms, {n / dt:,.0f}/s")
    out(
        f"  {'class':<10}{'share':>7}{'target':>7}{'system':>8}  {'input chars p0/p50/p90/p99/p100':<34}"
        f"{'max_tokens p0/p50/p90/p99/p100'}"
    )
    for name, c in spec.classes.items():
        rs = by_cls.get(name, [])
        share = len(rs) / n
        sys_share = sum(1 for r in rs if r.system is not None) / len(rs) if rs else 0.0
        ic = "/".join(str(x) for x in _percentiles([r.input_chars for r in rs]))
        mt = "/".join(str(x) for x in _percentiles([r.max_tokens for r in rs]))
        out(f"  {name:<10}{share:>7.1%}{c.weight:>7.0%}{sys_share:>8.1%}  {ic:<34}{mt}")
    outside = sum(
        1
        for r in reqs
        if not spec.classes[r.request_class].input_chars.min
        <= r.input_chars
        <= spec.classes[r.request_class].input_chars.max
    )
    langs = Counter()
    for r in reqs:
        langs["zh" if any("\u4e00" <= ch <= "\u9fff" for ch in r.user[-40:]) else "other"] += 1
    out(f"  inputs outside their class range: {outside}; Chinese questions (approx.): {langs['zh'] / n:.0%}")
    return 0


SUBCOMMANDS: dict[str, tuple[Callable, Callable, str]] = {
    "check": (check_args, check_run, "summarise a spec and draw samples from it"),
    "import": (import_args, run_import, "import a request log: template library, fitted workload spec, replay trace"),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workloads", description="Workload specs and template libraries.")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for name, (add_args, _run, help_text) in SUBCOMMANDS.items():
        add_args(sub.add_parser(name, help=help_text, description=help_text))
    args = ap.parse_args(argv)
    if args.command is None:
        ap.print_help()
        return 1
    return SUBCOMMANDS[args.command][1](args)


if __name__ == "__main__":
    sys.exit(main())
