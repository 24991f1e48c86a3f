"""The balancing policies, one module each, registered here by name (`--balance`).

A policy is a class registered with ``@policy(name, order)``: built once per load process with the
number of backends, asked `pick(session_id, outstanding, up)` once per request. `outstanding` is the
requests of this process in flight on each backend, `up` whether each is in the spread (a backend
that refused a connection is out until a probe finds it back: targets/health.py). A pick is a few
list reads: it runs once per request, never per chunk. A new policy is one more module in this
folder, imported by ``targets/__init__.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


class Policy:
    """Picks the backend of each request (an index into the run's backends)."""

    def __init__(self, n: int):
        self.n = n

    def pick(self, session_id: str, outstanding: Sequence[int], up: Sequence[bool]) -> int:
        raise NotImplementedError


POLICIES: dict[str, type[Policy]] = {}
_ORDER: dict[str, int] = {}


def policy(name: str, order: int) -> Callable[[type[Policy]], type[Policy]]:
    """Register the decorated Policy class as `--balance name`; `order`: its place among the choices."""

    def register(cls: type[Policy]) -> type[Policy]:
        POLICIES[name] = cls
        _ORDER[name] = order
        return cls

    return register


def next_up(start: int, up: Sequence[bool]) -> int:
    """The first backend from `start` on (wrapping) that is in the spread; `start` when none is:
    every backend down, the request goes where the policy said and fails fast (the user's failure
    pacing, plugin/users.py, then bounds the rate)."""
    n = len(up)
    for k in range(n):
        i = (start + k) % n
        if up[i]:
            return i
    return start


def names() -> tuple[str, ...]:
    """The registered policies' names, in their order (--balance's choices, the default first)."""
    return tuple(sorted(POLICIES, key=_ORDER.__getitem__))
