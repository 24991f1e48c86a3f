"""The prefix-cache keys of a prompt's full blocks (``enable_prefix_caching``).

The simulator counts tokens without producing them, so a block's key cannot hash its token ids as
vLLM's does. It hashes what determines them instead: the prompt is a sequence of parts (a chat
request's messages, a Responses request's instructions and items, a completions prompt), each
with its token count, as the simulator counts them. Block ``i`` (tokens ``i*block_size`` up to
``(i+1)*block_size``) gets the key ``hash(key of block i-1, chain, i)``, where ``chain`` hashes
every part up to the one holding the block's last token, in order. Two prompts therefore share a
block when they are the same up to the end of the part where the block ends: a shared system
prompt, the earlier turns of a conversation, the same completions prompt. A block inside a part
that differs only further on is not shared (vLLM would share it; the simulator cannot tell where
within a text two texts part).

Keys are Python hashes, stable within one simulator process, which is all the cache needs.
"""

from __future__ import annotations

import orjson

from .tokens import image_tokens


def part_tokens(counter, part, patch_px: int, image_fallback: int) -> int:
    """Tokens of one chat message or Responses item, as ``PromptCounter.count_messages`` and
    ``image_tokens`` count them."""
    return counter.count_messages([part]) + image_tokens([part], patch_px, image_fallback)[1]


def block_keys(parts: list[tuple[int, int]], prompt_tokens: int, block_size: int) -> list[int]:
    """Keys of the full blocks of a prompt made of ``parts``, ``(hash, tokens)`` in order."""
    n_blocks = min(prompt_tokens, sum(t for _, t in parts)) // block_size
    keys: list[int] = []
    if not n_blocks:
        return keys
    chain = 0
    end = 0  # tokens up to the end of the current part
    it = iter(parts)
    key = 0
    for i in range(n_blocks):
        last = (i + 1) * block_size  # the block's end, exclusive
        while end < last:
            h, t = next(it)
            chain = hash((chain, h))
            end += t
        key = hash((key, chain, i))
        keys.append(key)
    return keys


def message_parts(counter, msgs: list, patch_px: int, image_fallback: int) -> list[tuple[int, int]]:
    """``(hash, tokens)`` of each chat message or Responses item."""
    out = []
    for m in msgs:
        h = hash(orjson.dumps(m, option=orjson.OPT_SORT_KEYS))  # a parsed JSON body serialises again
        out.append((h, part_tokens(counter, m, patch_px, image_fallback)))
    return out


def prompt_parts(prompt, tokens: int) -> list[tuple[int, int]]:
    """A completions prompt is one part."""
    return [(hash(orjson.dumps(prompt)), tokens)]
