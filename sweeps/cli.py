"""Command line of the planning layer.

    python -m sweeps run  [--param NAME=V1,V2 ...] [--grid FILE] [--server TEMPLATE | --profile NAME]
                          [--out DIR] [--start-timeout 300s] [--point-timeout DURATION] [--seed N]
                          [--rank auto|capacity|throughput|ttft] [--gpus N] [--dry-run] -- LOAD ARGUMENTS
    python -m sweeps ab   (--a-server T | --a-url URL | --a-set NAME=V ...) (the same for --b-...)
                          [--profile NAME] [--rounds N | --max-rounds N] [--out DIR] -- LOAD ARGUMENTS

The load arguments (after --) are those of
`locust -f locustfile.py --headless`, e.g. `--find-capacity --slo "ttft.p95<5s" -t 20m` or
`-u 32 -t 120s`; the sweep adds --host, --results-dir, --run-id and --seed itself, and fills in
`--server-metrics auto` with each run's own server's /metrics (sweeps/server_metrics.py).

Exit codes of run: 0 a best point beyond the runner-up's interval (or the only point), 1 no
difference measured between the best and the runner-up, 2 bad input (nothing started), 3 no point
could be ranked, 130 interrupted. Of ab: 0 B no worse than A on every metric, 1 B worse on at
least one (beyond its interval), 2 bad input, 3 a configuration could not be measured, 130
interrupted.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from datetime import UTC, datetime

from core.durations import parse_duration
from core.errors import InputError

DEFAULT_PROFILE = "v100-7b-tp8"
LOAD_HELP = (
    "The load of every run follows --: the arguments of locust -f locustfile.py --headless, e.g. "
    "-- --find-capacity --slo 'ttft.p95<5s' -t 20m, or -- -u 32 -t 120s; --server-metrics auto scrapes each "
    "run's own server at <its URL>/metrics (docs/tuning.md)."
)


def split_load(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def _common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--profile", default=None, help=f"base simulator profile when no server is given (default {DEFAULT_PROFILE})"
    )
    ap.add_argument(
        "--out",
        default=None,
        help="the folder of the sweep (default results/<kind>-<UTC time>); give the same folder again to resume",
    )
    ap.add_argument("--start-timeout", default="300s", help="longest wait for a server to be ready (default 300s)")
    ap.add_argument(
        "--point-timeout",
        default=None,
        help="longest load run per point (default: its -t plus 120 s, or 30 min without -t)",
    )
    ap.add_argument("--seed", type=int, default=1, help="request-sequence seed of every run (default 1)")
    ap.add_argument("--gpus", type=int, default=None, help="the deployment's GPU count: throughput per GPU")
    ap.add_argument("--dry-run", action="store_true", help="print every run's commands; start nothing")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m sweeps", description="Sweeps of server settings and A/B of one change."
    )
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("run", help="a grid of server settings, one run per point, ranked", epilog=LOAD_HELP)
    s.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="a setting and its values (repeatable); the points are every combination",
    )
    s.add_argument("--grid", default=None, help="a YAML or JSON file: NAME: [V1, V2] per setting")
    s.add_argument(
        "--server",
        default=None,
        help="command template started per point, with {port} and a "
        "{NAME} per setting; without it the built-in simulator runs with the settings as profile fields",
    )
    s.add_argument(
        "--rank",
        default="auto",
        help="ranking: capacity, throughput or ttft; auto (default): by "
        "capacity when the load is a capacity search, else by throughput",
    )
    _common(s)
    from sweeps.ab import add_arguments

    add_arguments(sub.add_parser("ab", help="an A/B of one change, in interleaved rounds", epilog=LOAD_HELP), _common)
    return ap


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def default_out(kind: str) -> str:
    return os.path.join("results", f"{kind}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, load = split_load(argv)
    args = parser().parse_args(own)
    command = shlex.join(["python", "-m", "sweeps", *argv])
    # SIGTERM ends a sweep as Ctrl-C does: the point's server and load are stopped on the way out,
    # never left running in their own process groups
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if args.command == "ab":
            from sweeps.ab import main_ab

            args.out = args.out or default_out("ab")
            return main_ab(args, load, command)
        return main_run(args, load, command)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def main_run(args, load: list[str], command: str) -> int:
    from sweeps.grid import build_grid, check_template, points
    from sweeps.load import check_load_args
    from sweeps.ranking import RANKINGS
    from sweeps.servers import SimulatorServer, TemplateServer
    from sweeps.sweep import Sweep, dry_run, run_sweep

    if args.rank not in RANKINGS and args.rank != "auto":
        raise InputError(f"--rank {args.rank}: no such ranking; choose auto, {', '.join(RANKINGS)}")
    if not args.param and not args.grid:
        raise InputError("--param: no setting to sweep; give --param NAME=V1,V2 (repeatable) or --grid FILE")
    if args.server and args.profile:
        raise InputError("--profile: a base simulator profile is for sweeps without --server; give one of them")
    if args.gpus is not None and args.gpus < 1:
        raise InputError("--gpus: give a whole number >= 1")
    check_load_args(load)
    grid = build_grid(args.param, args.grid)
    start_timeout = parse_duration("start-timeout", args.start_timeout)
    point_timeout = parse_duration("point-timeout", args.point_timeout) if args.point_timeout else None
    if args.server:
        check_template(args.server, grid)
        server = TemplateServer(args.server, start_timeout)
    else:
        server = SimulatorServer(args.profile or DEFAULT_PROFILE, start_timeout)
    pts = points(grid)
    if isinstance(server, SimulatorServer):
        for p in pts:
            server.check(p)
    sw = Sweep(
        args.out or default_out("sweep"),
        pts,
        server,
        load,
        seed=args.seed,
        point_timeout=point_timeout,
        ranking=args.rank,
        gpus=args.gpus,
        settings=list(grid),
        command=command,
        say=lambda line: print(line, flush=True),
    )
    if args.dry_run:
        dry_run(sw)
        return 0
    return run_sweep(sw)
