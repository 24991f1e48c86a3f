"""Command line: ``python -m simulator [options]``.

    python -m simulator [--host 127.0.0.1] [--port 8000]  (0 = any free port)
                        [--profile v100-7b-tp8 | fixed | PATH.yaml]
                        [--model NAME] [--tokenizer PATH] [--truth-log FILE]
                        [--seed N] [--fault NAME=RATE[:PARAM]] ... [--reuse-port]

On start it prints exactly one line to stdout and flushes it::

    simulator listening on http://HOST:PORT profile=NAME

Bad options, an unknown profile or a bad profile field: one line on stderr,
exit code 2.  SIGTERM / SIGINT: stop accepting, close open streams, flush and
close the truth log, exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from core.errors import InputError

from .faults import FaultPlan, parse_fault_option
from .profiles import load_profile, profile_summaries
from .tokens import PromptCounter
from .truthlog import TruthLog

DEFAULT_PROFILE = "v100-7b-tp8"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(f"simulator: error: {message}\n")
        sys.exit(2)


def _fail(msg: str) -> int:
    sys.stderr.write(f"simulator: error: {msg}\n")
    sys.stderr.flush()
    return 2


def build_parser() -> argparse.ArgumentParser:
    table = "\n".join(f"  {name:16s} {summary}" for name, summary in profile_summaries())
    p = _Parser(
        prog="python -m simulator",
        description="OpenAI-compatible server whose timing comes from a continuous-batching engine model.",
        epilog=f"bundled profiles (--profile NAME; fields: simulator/profiles.py):\n{table}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 = any free port")
    p.add_argument("--profile", default=DEFAULT_PROFILE, help="profile name (simulator/profiles/NAME.yaml) or path")
    p.add_argument("--model", default=None, help="served model id (default: the profile's, sim-model)")
    p.add_argument("--tokenizer", default=None, help="local tokenizer path for prompt token counts")
    p.add_argument("--truth-log", default=None, help="JSONL file, one line per finished request")
    p.add_argument("--seed", type=int, default=0, help="seed of the fault draws")
    p.add_argument(
        "--reuse-port",
        action="store_true",
        help="share --port with other simulator processes (SO_REUSEPORT): the kernel spreads connections "
        "over them, so a client that needs more than one core's worth of tokens/s can be fed; each "
        "process models its own engine, and all may append to one --truth-log",
    )
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAME=RATE[:PARAM]",
        help="inject a fault (repeatable); see simulator.faults",
    )
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if not 0 <= args.port <= 65535:
        return _fail(f"--port must be in 0..65535, got {args.port}")
    try:
        profile = load_profile(args.profile)
        faults = profile.faults.plan()
        faults.update(parse_fault_option(f) for f in args.fault)  # the command line wins
    except InputError as e:
        return _fail(str(e))
    try:
        counter = PromptCounter(args.tokenizer)
    except Exception as e:
        return _fail(f"--tokenizer {args.tokenizer}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    try:
        truth = TruthLog(args.truth_log)
    except OSError as e:
        return _fail(f"--truth-log {args.truth_log}: {e.strerror}")
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency
        runner = asyncio.run
    return runner(_serve(args, profile, counter, truth, FaultPlan(faults, args.seed)))


async def _serve(args, profile, counter, truth, faults) -> int:
    from .server import HttpConn, SimServer

    loop = asyncio.get_running_loop()
    srv = SimServer(profile, loop, model=args.model, counter=counter, truth=truth, faults=faults, seed=args.seed)
    try:
        server = await loop.create_server(
            lambda: HttpConn(srv),
            args.host,
            args.port,
            backlog=4096,
            reuse_address=True,
            reuse_port=args.reuse_port or None,
        )
    except OSError as e:
        truth.close()
        return _fail(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}")
    port = server.sockets[0].getsockname()[1]
    host = args.host if ":" not in args.host else f"[{args.host}]"
    sys.stdout.write(f"simulator listening on http://{host}:{port} profile={profile.name}\n")
    sys.stdout.flush()
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))

    def flush_tick():
        truth.flush()
        if not stop.done():
            loop.call_later(1.0, flush_tick)

    if truth:
        loop.call_later(1.0, flush_tick)
    await stop
    server.close()
    srv.shutdown()
    return 0
