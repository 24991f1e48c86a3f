"""sticky: every turn of a conversation (workloads/session.py: one session id for all its turns) on
one backend, so that its prefix cache serves the later turns as behind a session-affine gateway.
The backend is the session id's hash (CRC-32, the same in every process and run), so nothing is
remembered per session; a request of no conversation goes round-robin. A session whose backend is
out of the spread moves to the next one in the spread, and back once its own is back."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from targets.registry import Policy, next_up, policy


@policy("sticky", order=2)
class Sticky(Policy):
    def __init__(self, n: int):
        super().__init__(n)
        self.turn = -1

    def pick(self, session_id: str, outstanding: Sequence[int], up: Sequence[bool]) -> int:
        if session_id:
            return next_up(zlib.crc32(session_id.encode()) % self.n, up)
        self.turn = next_up((self.turn + 1) % self.n, up)
        return self.turn
