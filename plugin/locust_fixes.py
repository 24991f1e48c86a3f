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


def end_dispatch_after_rebalance() -> None:
    """Locust's users dispatcher marks a dispatch in progress while its generator runs, and its
    generator returns early after a rebalance that leaves the user count as it was (a worker went
    missing: its users are moved to the others) without clearing the mark (locust/dispatch.py,
    `_dispatcher`). The master starts a new dispatch when a worker comes back only if none is in
    progress: a worker that returned from a freeze kept its users and the others kept theirs, 15
    users for a plan of 10 until the run ended. The mark is cleared whenever the generator ends."""
    from locust.dispatch import UsersDispatcher

    original = UsersDispatcher._dispatcher
    if getattr(original, "ends_dispatch", False):
        return

    def _dispatcher(self):
        yield from original(self)
        # ended, not abandoned: a generator that a new dispatch replaced is closed without reaching here
        self._dispatch_in_progress = False

    _dispatcher.ends_dispatch = True
    UsersDispatcher._dispatcher = _dispatcher
