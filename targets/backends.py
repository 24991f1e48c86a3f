"""The run's backends as one load process sees them: their URLs, the names records carry, the
requests in flight on each, the policy that picks one per request and which are in the spread.

`--host` is one URL or several, comma-separated (`split_hosts`). With several, the suite spreads the
load itself and each record's `backend` is the URL that served it. With one, `backend` is empty,
unless `--backend-header` names the response header in which a load balancer says which backend
served the request (nginx: `add_header X-Upstream $upstream_addr always`); then it is that header's
value.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

from targets.health import Health
from targets.registry import POLICIES


def split_hosts(text: str) -> tuple[str, ...]:
    """The URLs of a --host value: comma-separated, each without a trailing slash, blanks dropped."""
    return tuple(u.strip().rstrip("/") for u in (text or "").split(",") if u.strip())


def backend_name(url: str) -> str:
    """The name a record carries for a backend: its URL without user:password@ or a trailing slash."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


class Targets:
    """One load process's backends. `pick` runs once per request (a few list reads), `sent` and
    `ended` count the requests in flight on each, `refused` takes a backend out of the spread
    (targets/health.py probes it back). With one backend there is nothing to pick, count or probe."""

    def __init__(
        self,
        urls: tuple[str, ...],
        balance: str,
        probe: Callable[[str], bool] | None = None,
        probe_every_s: float = 1.0,
        on_change: Callable[[str, str], None] | None = None,
        stopping=None,
    ):
        self.urls = tuple(urls)
        self.n = len(self.urls)
        self.spread = self.n > 1
        # what each record carries: the URL when the suite chose it, nothing for one plain host
        self.names = tuple(backend_name(u) for u in self.urls) if self.spread else ("",)
        self.policy = POLICIES[balance](self.n)
        self.outstanding = [0] * self.n
        self.health = (
            Health(self.names, lambda i: probe(self.urls[i]), probe_every_s, on_change, stopping)
            if self.spread and probe is not None
            else None
        )
        self.up = self.health.up if self.health is not None else [True] * self.n

    def pick(self, session_id: str = "") -> int:
        """The backend of the next request (an index into `urls`)."""
        if not self.spread:
            return 0
        return self.policy.pick(session_id, self.outstanding, self.up)

    def sent(self, i: int) -> None:
        self.outstanding[i] += 1

    def ended(self, i: int) -> None:
        self.outstanding[i] -= 1

    def refused(self, i: int) -> None:
        """Backend `i` refused or dropped a connection before any answer: out of the spread until a
        probe finds it back."""
        if self.health is not None:
            self.health.refused(i)

    def close(self) -> None:
        """The run ended: no more probes."""
        if self.health is not None:
            self.health.stop()


def address(url: str) -> str:
    """host:port of a backend's name or a scraped URL (a balancer's header names host:port alone):
    what ties a --server-metrics URL to the replica it scrapes."""
    parts = urlsplit(url if "//" in url else f"//{url}")
    return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)
