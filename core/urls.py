"""URLs as the suite writes them to results, logs and messages: without the user:password@ a URL may
carry.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

_USERINFO = re.compile(r"(\w+://)[^/@\s]*@")


def without_credentials(text: str) -> str:
    """Free text (a command line) with every URL's user:password@ left out."""
    return _USERINFO.sub(r"\1", text)


def public_url(url: str) -> str:
    """The URL without user:password@, as written to results and logs. A --host of several
    replicas (comma-separated URLs): each."""
    if "," in url:
        return ",".join(public_url(u) for u in url.split(","))
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
