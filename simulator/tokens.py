"""Prompt token counting and the output vocabulary.

Prompt tokens
-------------
With ``--tokenizer PATH`` the prompt is counted with
``transformers.AutoTokenizer.from_pretrained(PATH)`` (local files only): the
completions ``prompt`` is encoded as is; for chat, every message's text
content is encoded and summed, plus the per-message overhead below.

Without a tokenizer the count is the estimate of :mod:`core.text`
(:func:`estimate_tokens`: one token per CJK character, one per four other characters).  For chat
requests each message adds ``CHAT_TOKENS_PER_MESSAGE`` (= 4) tokens of template overhead (role
markers, separators), whatever the tokenizer.

Output tokens
-------------
The generated text is made of word pieces from a small fixed vocabulary
(``VOCAB``): one token = one word piece (a word with a leading space).  The
pieces are plain ASCII and need no JSON escaping, so chunk bytes can be
assembled by concatenation.
"""

from __future__ import annotations

import os

from core.images import png_size
from core.text import CHAT_TOKENS_PER_MESSAGE, content_text, estimate_tokens

__all__ = [
    "CHAT_TOKENS_PER_MESSAGE",
    "estimate_tokens",
    "PromptCounter",
    "VOCAB",
    "VOCAB_BYTES",
    "VOCAB_SIZE",
    "token_text",
    "token_bytes",
]  # the first two live in core.text (shared with the log importer)


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
                total += self.count_text(content_text(m.get("content")) or "")
            total += CHAT_TOKENS_PER_MESSAGE
        return max(1, total)


def image_tokens(messages, patch_px: int, fallback: int) -> tuple[int, int]:
    """(images, prompt tokens they make) of the ``image_url`` parts of chat ``messages`` (the
    Responses API's ``input_image``): a PNG data
    URL makes one token per ``patch_px`` x ``patch_px`` tile of its size (read from its header, as
    Qwen2-VL's 28-pixel merged patches), any other image ``fallback`` tokens."""
    n = tokens = 0
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            if not (isinstance(part, dict) and part.get("type") in ("image_url", "input_image")):
                continue
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            n += 1
            size = png_size(url) if isinstance(url, str) else None
            tokens += -(-size[0] // patch_px) * -(-size[1] // patch_px) if size else fallback
    return n, tokens


VOCAB = (
    " the",
    " model",
    " answer",
    " is",
    " a",
    " simple",
    " test",
    " of",
    " load",
    " and",
    " latency",
    " token",
    " stream",
    " server",
    " engine",
    " batch",
    " with",
    " many",
    " users",
    " request",
    " queue",
    " time",
    " first",
    " last",
    " fast",
    " slow",
    " data",
    " GPU",
    " cache",
    " memory",
    " step",
    " per",
    " second",
    " we",
    " can",
    " see",
    " that",
    " it",
    " will",
    " be",
    " in",
    " on",
    " for",
    " this",
    " result",
    " value",
    " large",
    " small",
    " more",
    " less",
    " than",
    " one",
    " two",
    " three",
    " system",
    " prompt",
    " output",
    " input",
    " text",
    " word",
    " piece",
    " here",
    " now",
    ".",
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
