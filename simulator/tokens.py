"""Prompt token counting and the output vocabulary.

Prompt tokens
-------------
With ``--tokenizer PATH`` the prompt is counted with
``transformers.AutoTokenizer.from_pretrained(PATH)`` (local files only): the
completions ``prompt`` is encoded as is; for chat, every message's text
content is encoded and summed, plus the per-message overhead below.

Without a tokenizer the count is an estimate, computed in one place,
:func:`estimate_tokens`:

* every CJK character (CJK Unified Ideographs and extension A, compatibility
  ideographs, kana, hangul, CJK punctuation and full-width forms) counts
  1 token;
* all other characters count 1 token per 4 characters, rounded up;
* a non-empty text counts at least 1 token.

For chat requests each message adds ``CHAT_TOKENS_PER_MESSAGE`` (= 4) tokens
of template overhead (role markers, separators), whatever the tokenizer.

Output tokens
-------------
The generated text is made of word pieces from a small fixed vocabulary
(``VOCAB``): one token = one word piece (a word with a leading space).  The
pieces are plain ASCII and need no JSON escaping, so chunk bytes can be
assembled by concatenation.
"""
from __future__ import annotations

import math
import os
import re

CHAT_TOKENS_PER_MESSAGE = 4

# CJK ranges counted one token per character.
_CJK_RE = re.compile(
    "[\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u312f\u3130-\u318f"
    "\u3190-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
    "\uff00-\uffef]"
)


def estimate_tokens(text: str) -> int:
    """Estimated token count of ``text`` (see module docstring)."""
    if not text:
        return 0
    cjk = len(_CJK_RE.findall(text))
    other = len(text) - cjk
    return max(1, cjk + math.ceil(other / 4))


def _message_text(content) -> str:
    """Text of a chat message content (string or list of content parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
            elif isinstance(p, str):
                parts.append(p)
        return "".join(parts)
    return str(content)


class PromptCounter:
    """Counts prompt tokens, with a local tokenizer or with the estimate."""

    def __init__(self, tokenizer_path: str | None = None):
        self._tok = None
        if tokenizer_path:
            if not os.path.exists(tokenizer_path):
                raise FileNotFoundError(f"no such file or directory: {tokenizer_path}")
            os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
            from transformers import AutoTokenizer  # heavy import, only when asked

            self._tok = AutoTokenizer.from_pretrained(tokenizer_path, local_files_only=True)

    def count_text(self, text: str) -> int:
        if self._tok is None:
            return estimate_tokens(text)
        if not text:
            return 0
        return len(self._tok.encode(text, add_special_tokens=False))

    def count_prompt(self, prompt) -> int:
        """Completions ``prompt``: a string, a list of strings or token ids."""
        if isinstance(prompt, str):
            return max(1, self.count_text(prompt))
        if isinstance(prompt, list):
            if prompt and all(isinstance(x, int) for x in prompt):
                return len(prompt)
            return max(1, sum(self.count_text(x) if isinstance(x, str) else 0 for x in prompt))
        return 1

    def count_messages(self, messages) -> int:
        total = 0
        for m in messages:
            if isinstance(m, dict):
                total += self.count_text(_message_text(m.get("content")))
            total += CHAT_TOKENS_PER_MESSAGE
        return max(1, total)


VOCAB = (
    " the", " model", " answer", " is", " a", " simple", " test", " of", " load",
    " and", " latency", " token", " stream", " server", " engine", " batch", " with",
    " many", " users", " request", " queue", " time", " first", " last", " fast",
    " slow", " data", " GPU", " cache", " memory", " step", " per", " second",
    " we", " can", " see", " that", " it", " will", " be", " in", " on", " for",
    " this", " result", " value", " large", " small", " more", " less", " than",
    " one", " two", " three", " system", " prompt", " output", " input", " text",
    " word", " piece", " here", " now", ".",
)
VOCAB_BYTES = tuple(w.encode() for w in VOCAB)
VOCAB_SIZE = len(VOCAB)


def token_text(seed: int, index: int) -> str:
    """The ``index``-th output token of a request whose text seed is ``seed``."""
    return VOCAB[(seed + index * 7) % VOCAB_SIZE]


def token_bytes(seed: int, start: int, count: int) -> bytes:
    """UTF-8 bytes of output tokens ``start .. start+count-1``."""
    if count == 1:
        return VOCAB_BYTES[(seed + start * 7) % VOCAB_SIZE]
    return b"".join(VOCAB_BYTES[(seed + i * 7) % VOCAB_SIZE] for i in range(start, start + count))
