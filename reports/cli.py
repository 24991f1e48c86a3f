"""Command line of the reports package.

    python -m reports build results/<run-id>            report.html + report.md into the folder
                                                        (--format md: only report.md; a run whose writer was
                                                        killed is recovered first: requests.parquet and
                                                        summary.json, complete: false)
    python -m reports show results/<run-id>             the summary tables in the terminal
    python -m reports compare BASE NEW [--fail-on RULES] [--out DIR] [--junit FILE] [--resamples N] [--seed S]
                                       [--allow-different]
    python -m reports vllm-json results/<run-id> FILE   the run in vLLM's result JSON fields (docs/vllm-bench.md)
    python -m reports plan results/<run-id> --rpm 600 [--gpus 8]
                                                        one replica's capacity in users, requests/min,
                                                        tokens/s (per GPU), and the replicas for 600/min

Exit codes: 0 fine, 1 a --fail-on rule found a regression, 2 a usage or input error (one line).
"""

from __future__ import annotations

import argparse
import sys

from core.errors import InputError
from metrics.schema import Summary
from runfolder.reading import load_run


def show_text(summary: Summary) -> str:
    """The console table of the run (metrics.console_table.format_table: classes, steps, SLO, capacity)."""
    from metrics.console_table import format_table

    parts = [format_table(summary)]
    if not summary.complete:
        parts.append(
            f"note: the run was interrupted{f' ({summary.reason})' if summary.reason else ''}; results are partial"
        )
    return "\n\n".join(parts)


def recover_if_unfinished(run_dir: str) -> None:
    """A folder whose writer stopped before the end (killed, crashed) holds the records it flushed
    as part files and no summary.json, or parts and a summary that says it is incomplete (a full
    disk): make requests.parquet and summary.json from them first; so too when a worker's file of
    unshipped records was copied in (runfolder/recovery.py recover). A folder a run is writing now
    (it holds the folder's lock) is refused."""
    from runfolder.ownership import is_locked
    from runfolder.recovery import needs_recovery, recover

    if is_locked(run_dir):
        raise InputError(
            f"{run_dir} is being written by a run now (it holds the folder's lock); read it once that run has ended"
        )
    if needs_recovery(run_dir):
        try:
            summary = recover(run_dir)
        except Exception as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            raise InputError(f"{run_dir}: its records cannot be recovered ({first})") from None
        print(
            f"{run_dir}: {summary['records']['total']} records recovered; summary.json written with complete: false "
            f"({summary['reason']})"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reports", description="Reports of LLM load-test results folders.")
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write report.html and report.md into a results folder")
    b.add_argument("run_dir")
    b.add_argument(
        "--format", default="html,md", help="comma-separated report formats to write: html, md (default: both)"
    )
    s = sub.add_parser("show", help="print the summary tables")
    s.add_argument("run_dir")
    c = sub.add_parser(
        "compare",
        help="compare two runs; exit 1 on a regression named by --fail-on",
        description="Side-by-side metrics of two results folders (overall, per class, per load step), deltas, and "
        "bootstrap confidence intervals of each delta (time blocks resampled, see stats/comparison.py). Writes "
        "compare.md and compare.json into NEW (or --out). Exit 0: no rule failed; 1: a regression; 2: a usage error.",
    )
    vj = sub.add_parser(
        "vllm-json",
        help="write a run in the fields of vLLM's result JSON (vllm bench serve --save-result "
        "--save-detailed), with the suite's definitions beside them (docs/vllm-bench.md)",
    )
    vj.add_argument("run_dir")
    vj.add_argument("file", help="the JSON file to write")
    pl = sub.add_parser(
        "plan",
        help="the capacity in the deployment's terms, and replicas for a target traffic",
        description="From a capacity search's results: one replica's capacity in users, requests/min and "
        "tokens/s (per GPU with --gpus), and the replicas a target of --rpm requests/min needs at the SLO "
        "(from the met level's rate; at least the missed level's). See reports/plan.py.",
    )
    pl.add_argument("run_dir", help="results folder of a capacity search (or a step ramp with --slo)")
    pl.add_argument("--rpm", type=float, required=True, help="target traffic, requests per minute, with the run's mix")
    pl.add_argument(
        "--gpus",
        type=int,
        default=None,
        help="GPUs of one replica: figures per GPU too (default: the run's "
        "--gpus, or the GPUs its --gpu-telemetry saw)",
    )
    pl.add_argument(
        "--gpu-hour-price",
        type=float,
        default=None,
        help="price of one GPU-hour: cost per million tokens and "
        "of the replicas per hour (default: the run's --gpu-hour-price)",
    )
    c.add_argument("base", help="results folder of the baseline run")
    c.add_argument("new", help="results folder of the run under test")
    c.add_argument(
        "--fail-on",
        default="",
        help=(
            "comma-separated rules [CLASS.|stepN.]METRIC(>|<)(+|-)N(%%|ms|s|pp); METRIC: ttft|ttfa|tpot|itl|e2e . "
            "mean|p50|p90|p95|p99, requests_per_s, output_tokens_per_s, total_tokens_per_s, error_rate. A rule fails "
            "only when the change is beyond N and the confidence interval of the change excludes 0. "
            "E.g. 'ttft.p95>+10%%,output_tokens_per_s<-5%%,short.e2e.p99>+200ms,error_rate>+1pp'"
        ),
    )
    c.add_argument("--out", default="", help="folder for compare.md and compare.json (default: NEW)")
    c.add_argument(
        "--junit",
        default="",
        help="also write JUnit XML to FILE: one test case per --fail-on rule, a failure "
        "carrying base, new and the change",
    )
    c.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    c.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    c.add_argument("--confidence", type=float, default=0.95, help="confidence level of the intervals (default 0.95)")
    c.add_argument(
        "--allow-different",
        action="store_true",
        help="compare runs that measured different things "
        "(workload, load model or level, server, model); refused otherwise, and then the differences "
        "head the comparison",
    )
    args = ap.parse_args(argv)
    try:
        if args.command == "build":
            from reports.build import FORMATS, build

            names = [n.strip() for n in args.format.split(",") if n.strip()]
            unknown = [n for n in names if n not in FORMATS] or ([] if names else [args.format])
            if unknown:
                raise InputError(
                    f"--format: '{unknown[0]}' is not a report format; give {', '.join(FORMATS)} "
                    f"or several, e.g. --format {','.join(FORMATS)}"
                )
        if args.command in ("build", "show"):
            recover_if_unfinished(args.run_dir)
        if args.command == "build":
            paths = build(args.run_dir, formats={n: FORMATS[n] for n in names})
            labels = {"html": "report", "md": "summary for CI"}
            print("\n".join(f"{labels.get(name, name)}: {path}" for name, path in paths.items()))
            return 0
        if args.command == "plan":
            from reports.plan import describe, plan

            print(describe(plan(load_run(args.run_dir).summary, args.rpm, args.gpus, args.gpu_hour_price)))
            return 0
        if args.command == "show":
            print(show_text(load_run(args.run_dir).summary))
            return 0
        if args.command == "vllm-json":
            from reports.vllm_json import write_vllm_json

            result = write_vllm_json(args.run_dir, args.file)
            print(f"vllm json: {args.file} ({result['num_prompts']} requests)")
            return 0
        from reports.compare import run_compare

        return run_compare(
            args.base,
            args.new,
            args.fail_on,
            args.out or None,
            args.resamples,
            args.seed,
            args.confidence,
            junit=args.junit or None,
            allow_different=args.allow_different,
        )
    except InputError as e:  # an unreadable results folder, a --fail-on rule that cannot be read
        sys.stderr.write(f"error: {e}\n")
        return 2
    except Exception:  # a bug or unreadable input: never exit 1, which means "regression"
        import traceback

        traceback.print_exc()
        sys.stderr.write(f"error: python -m reports {args.command} failed (traceback above)\n")
        return 2
