"""Secrets out of what a server says: the API key, and any `Bearer` token, masked in a text the suite
keeps from a server.

Some gateways echo the key they refused ("Incorrect API key provided: sk-..."). A record's text
from the server (its error_detail: an HTTP failure's body, a mid-stream error, a malformed chunk)
is masked once, where the record is finished (plugin/finisher.py), before any writer, report,
console line or log sees it: everything downstream reads the record. Kept text is often cut (an
error body's first 200 bytes), and some servers echo a key shortened: a piece of the key's
beginning or end of at least `MIN_FRAGMENT` characters is masked too.
"""

from __future__ import annotations

import re

MASK = "[redacted]"
MIN_KEY = 4  # a shorter key would mask ordinary words (and guards nothing)
MIN_FRAGMENT = 6  # a shorter piece of the key tells too little to matter ("sk-ab")
# any bearer token (a gateway quoting the header it got) and keys of OpenAI's shape: a worker's
# own key (LOCUST_API_KEY) may differ from the one this process knows
_BEARER = re.compile(r"(\bBearer\s+)(?!\[redacted\])[^\s\"'`,;)\]}]+", re.IGNORECASE)
_KEY_SHAPED = re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}")


def redact(text: str, key: str = "") -> str:
    """`text` with `key` (and its pieces), every `Bearer <token>` and every sk-... key masked."""
    if not text:
        return text
    if len(key) >= MIN_KEY:
        if key in text:
            text = text.replace(key, MASK)
        # every piece holds the key's first or last MIN_FRAGMENT characters: most texts are done here
        if key[:MIN_FRAGMENT] in text or key[-MIN_FRAGMENT:] in text:
            # the longest pieces first: a whole prefix masked is not left as a shorter one
            for n in range(len(key) - 1, MIN_FRAGMENT - 1, -1):
                head, tail = key[:n], key[-n:]
                if head in text:
                    text = text.replace(head, MASK)
                if tail in text:
                    text = text.replace(tail, MASK)
    if "earer" in text:
        text = _BEARER.sub(r"\g<1>" + MASK, text)
    if "sk-" in text:
        text = _KEY_SHAPED.sub(MASK, text)
    return text
