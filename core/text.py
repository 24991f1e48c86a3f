"""Text helpers shared by the simulator (prompt token counts) and the log importer (output lengths
from reply texts): the token estimate and the text of an OpenAI chat message.

The estimate, used wherever no tokenizer is given:

* every CJK character (CJK Unified Ideographs and extension A, compatibility ideographs, kana,
  hangul, CJK punctuation and full-width forms) counts 1 token;
* all other characters count 1 token per 4 characters, rounded up;
* a non-empty text counts at least 1 token.

A chat request adds ``CHAT_TOKENS_PER_MESSAGE`` tokens of template overhead (role markers,
separators) per message, whatever the tokenizer.
"""

from __future__ import annotations

import math
import re
from typing import Any

CHAT_TOKENS_PER_MESSAGE = 4

# CJK ranges counted one token per character.
CJK_RE = re.compile(
    "[\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u312f\u3130-\u318f"
    "\u3190-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
    "\uff00-\uffef]"
)


def estimate_tokens(text: str) -> int:
    """Estimated token count of ``text`` (see the module's docstring)."""
    if not text:
        return 0
    cjk = len(CJK_RE.findall(text))
    return max(1, cjk + math.ceil((len(text) - cjk) / 4))


def content_text(content: Any) -> str | None:
    """The text of a chat message's ``content``: a string, or the text parts of a list of content
    parts (``{"type": "text", "text": ...}`` or plain strings) joined; None when it holds no text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            p if isinstance(p, str) else p["text"]
            for p in content
            if isinstance(p, str) or (isinstance(p, dict) and isinstance(p.get("text"), str))
        ]
        return "".join(parts) if parts else None
    return None
