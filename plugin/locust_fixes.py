"""Fixes to Locust's own machinery that the suite needs, applied once when the locustfile loads."""

from __future__ import annotations


def memoize_default_args() -> None:
    """Locust's worker rebuilds its whole option parser once per option of every spawn message
    (locust/runners.py, `k not in argument_parser.default_args_dict()` inside a comprehension):
    about 150 parses, 0.1-0.4 s with the suite's options, during which no stream is read. Spawn
    messages come once a second while users ramp up and at every step of a load shape. The
    defaults are Locust's own options and never change within a process: parse them once."""
    from locust import argument_parser

    original = argument_parser.default_args_dict
    if getattr(original, "memoized", False):
        return
    cache: list[dict] = []

    def default_args_dict() -> dict:
        if not cache:
            cache.append(original())
        return dict(cache[0])

    default_args_dict.memoized = True
    argument_parser.default_args_dict = default_args_dict
