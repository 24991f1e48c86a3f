"""A worker's own options against its master's: one INFO line on the worker for each option it was
given that its master's run overrides.

A worker runs its master's plan (plugin/run_start.py): Locust copies the master's options of the
suite over the worker's with every spawn message, and the master alone decides the users, the
spawn rate, the run time, the target and the stop's wait. A worker started with its own `--model`
or `-u` would otherwise run the master's without a word. What the worker was given is read again
from its command line, environment and config files the way Locust read them at its start (its
options are overwritten by then), once per process; what the master decides of Locust's own
options travels under one key of the master's options (`MASTERS`), set at each test start.
"""

from __future__ import annotations

import logging
import sys

from core.urls import without_credentials
from plugin.options import SECRET_OPTIONS

log = logging.getLogger("llm")

MASTERS = "llm_masters_options"  # the master's Locust options it decides for its workers
DECIDED_BY_MASTER = ("num_users", "spawn_rate", "run_time", "host", "stop_timeout")
# a worker's own, whatever its master says: its API key and any secret, never shown (docs/security.md),
# the folder for the records a lost master never acknowledged; and what starts it
OWN = {*SECRET_OPTIONS, "results_dir", "master_host", "master_port", "worker", "locustfile"}

_given: tuple[dict, dict, dict] | None = None  # (options as given, the parser's defaults, option -> its flag)


def read_own() -> None:
    """This worker's options as its command line (and environment, config files) gave them; parsed
    once, at init, before a run's users start when the worker is not late."""
    global _given
    if _given is not None:
        return
    from locust.argument_parser import get_parser

    parser = get_parser()  # Locust's, with the suite's options (plugin/hooks.py adds them)
    given = vars(parser.parse_args(sys.argv[1:]))
    defaults = {a.dest: a.default for a in parser._actions}
    flags = {a.dest: max(a.option_strings, key=len) for a in parser._actions if a.option_strings}
    _given = (given, defaults, flags)


def announce(environment) -> None:
    """Master, at test start: what it decides of Locust's own options, for its workers' lines."""
    runner = environment.runner
    setattr(
        environment.parsed_options,
        MASTERS,
        {
            "num_users": runner.target_user_count,
            "spawn_rate": runner.spawn_rate,
            "run_time": environment.parsed_options.run_time,
            "host": environment.host,
            "stop_timeout": environment.stop_timeout,
        },
    )


def overridden(environment) -> list[tuple[str, object, object]]:
    """(flag, this worker's value, the master's) of each option given here that the master's run overrides."""
    from locust.argument_parser import default_args_dict

    read_own()
    given, defaults, flags = _given
    in_effect = vars(environment.parsed_options)
    masters = in_effect.get(MASTERS) or {}
    locusts = default_args_dict()
    out = []
    for key, mine in given.items():
        if key in OWN or key.startswith("llm_") or key not in flags or mine == defaults.get(key):
            continue
        if key in DECIDED_BY_MASTER:
            if key not in masters:
                continue
            theirs = masters[key]
        elif key in locusts:  # Locust's own, the worker's to keep (its log level, its web UI's)
            continue
        else:
            theirs = in_effect.get(key)
        if theirs != mine:
            out.append((flags[key], mine, theirs))
    return out


def say_overridden(environment) -> None:
    """One INFO line per option the master overrides (at the worker's test start)."""
    for flag, mine, theirs in overridden(environment):
        log.info("option %s %s of this worker is overridden by its master's: %s", flag, _shown(mine), _shown(theirs))


def _shown(value) -> str:
    """As the line shows it: a URL without its user:password@."""
    if value is None or value == "":
        return "not set"
    return " ".join(without_credentials(str(v)) for v in (value if isinstance(value, (list, tuple)) else [value]))
