"""Length-preserving masking of personal data in imported prompts (``--anonymize``).

Masks e-mail addresses, phone numbers (mainland China mobile and landline, international ``+CC ...``
and North American forms), mainland China 18-digit resident ID numbers, card numbers (13-19 digits,
optionally grouped, passing the Luhn check) and any other run of ``--digit-run`` (8) or more
digits. Every letter and digit of a match becomes ``*`` (the ``@`` and dots of an e-mail stay), so
input lengths, and the classes fitted on them, are those of the log.
"""

from __future__ import annotations

import re
from collections import Counter

_MASKS = [  # (name, pattern), applied in this order
    ("email", re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")),
    (
        "id_number",
        re.compile(
            r"(?<![0-9A-Za-z])[1-9]\d{5}(?:18|19|20)\d{2}(?:0[1-9]|1[0-2])"
            r"(?:0[1-9]|[12]\d|3[01])\d{3}[\dXx](?![0-9A-Za-z])"
        ),
    ),
    ("card", re.compile(r"(?<![\d-])(?:\d{4}[ -]){2,3}\d{4}(?:\d{1,3})?(?![\d-])|(?<!\d)\d{13,19}(?!\d)")),
    (
        "phone",
        re.compile(
            r"(?<![\w+])(?:\+|00)\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{2,4}){1,4}(?!\d)"  # international
            r"|(?<!\d)(?:\+?86[ -]?)?1[3-9]\d[ -]?\d{4}[ -]?\d{4}(?!\d)"  # CN mobile
            r"|(?<!\d)0\d{2,3}-\d{7,8}(?!\d)"  # CN landline
            r"|(?<!\d)\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}(?!\d)"
        ),
    ),  # NANP
]
_ALNUM = re.compile(r"[0-9A-Za-z]")


def luhn_ok(digits: str) -> bool:
    """The check digit card numbers carry (a random digit run passes 1 time in 10)."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


class Anonymizer:
    """Length-preserving masking; counts what it masked. Card numbers must pass the Luhn check
    (other long digit runs are masked as digit runs)."""

    def __init__(self, digit_run: int = 8):
        self.counts: Counter = Counter()
        self.masks = list(_MASKS) + [("digit_run", re.compile(r"\d{" + str(max(2, digit_run)) + ",}"))]

    def __call__(self, text: str) -> str:
        if not text:
            return text
        for name, rx in self.masks:
            text = rx.sub(lambda m, name=name: self._mask(name, m), text)
        return text

    def _mask(self, name: str, m: re.Match) -> str:
        s = m.group(0)
        if name == "card" and not luhn_ok("".join(ch for ch in s if ch.isdigit())):
            return s
        self.counts[name] += 1
        return _ALNUM.sub("*", s)


def anonymize_message(anon: Anonymizer, m):
    """A history message masked: its text, a tool call's arguments, a tool result (the function
    names and ids, which name code, not people, stay)."""
    if isinstance(m, tuple):
        return (m[0], anon(m[1]))
    out = dict(m)
    if isinstance(out.get("content"), str):
        out["content"] = anon(out["content"])
    if out.get("tool_calls"):
        out["tool_calls"] = [
            {**c, "function": {**c["function"], "arguments": anon(c["function"]["arguments"])}}
            for c in out["tool_calls"]
        ]
    return out
