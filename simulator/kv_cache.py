"""The KV cache of a vLLM-style engine: blocks, the prefix cache and its counters.

No clock and no I/O; the engine (``simulator.engine``) calls it at its KV touch points: a waiting
request's prefix lookup and admission, a running request's growth by a step's tokens, and the
release of a finished, cancelled or preempted request's blocks.

Blocks
------
The cache holds ``num_blocks`` blocks of ``block_size`` tokens (see :func:`num_gpu_blocks`). A
sequence holds ``ceil(computed tokens / block_size)`` of them: its prompt's blocks as the prompt is
prefilled (chunk by chunk with chunked prefill), then one more each time decoding crosses a block
boundary, as vLLM allocates them; nothing is reserved for ``max_tokens`` up front. Usage
(``vllm:kv_cache_usage_perc``) is the share of blocks held by running sequences.

Prefix cache (``enable_prefix_caching``)
----------------------------------------
Each full block of a prompt has a key chained from the key of the block before it (as vLLM's block
hashes), so two prompts share a block only when they share everything up to its end (see
``simulator.prefix`` for what the keys are made of). Once a sequence has computed a full prompt
block, the block is registered under its key. A new request takes every leading block it finds
(a reference each: a block is shared while in use and counts once in the usage); at most
``prompt - 1`` tokens are hits, so the last prompt token is always computed (vLLM needs its
logits). When no sequence holds a registered block any more it stays cached but evictable, in an
LRU pool: the first blocks of a prompt are released last, so they are evicted last. A new block
is taken from free blocks that hold no cached prefix first, then by evicting the least recently
released cached block (vLLM keeps one queue of free blocks for both; the difference only keeps a
cached prefix a little longer).

Counters as vLLM's: ``queries`` and ``hits`` are prompt tokens looked up and found, counted when a
request is first admitted (a preempted request's second lookup is not counted, as vLLM's
Prometheus counters leave it out); a request's hits are its ``cached_tokens``.

The bookkeeping of a step is per sequence it schedules, not per block: a sequence's plain blocks
are a count; only registered prefix blocks are objects, touched when a sequence takes, registers
or releases them, or a new block evicts one.
"""

from __future__ import annotations

from collections import OrderedDict

GIB = 1 << 30


def num_gpu_blocks(p) -> int:
    """Blocks of a profile's KV cache, as vLLM sizes it: ``num_gpu_blocks_override`` when set, else
    what is left of ``gpu_memory_utilization`` of every GPU's memory after the weights (split over
    ``tensor_parallel_size`` GPUs) and the activations, divided by a block's bytes
    (``kv_bytes_per_token`` of the whole model times ``block_size``)."""
    if p.num_gpu_blocks_override is not None:
        return p.num_gpu_blocks_override
    tp = p.tensor_parallel_size
    free = tp * (p.gpu_memory_gib * p.gpu_memory_utilization - p.activation_gib) * GIB - p.weights_gib * GIB
    return max(0, int(free // (p.kv_bytes_per_token * p.block_size)))


class Block:
    """A registered full prompt block: its key and how many running sequences hold it."""

    __slots__ = ("key", "refs")

    def __init__(self, key: int):
        self.key = key
        self.refs = 1


class KVCache:
    """Blocks and the prefix cache (see the module docstring)."""

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.used = 0  # blocks held by sequences (a shared block once)
        self.free_plain = num_blocks  # free blocks that hold no cached prefix
        self.cached: dict[int, Block] = {}  # key -> registered block, held or evictable
        self.evictable: OrderedDict[int, Block] = OrderedDict()  # refs 0, least recently released first
        self.queries = 0
        self.hits = 0

    # -- figures -------------------------------------------------------------
    def num_free(self) -> int:
        return self.free_plain + len(self.evictable)

    def usage(self) -> float:
        return self.used / self.num_blocks

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    # -- a waiting sequence --------------------------------------------------
    def lookup(self, s) -> list[Block]:
        """The leading registered blocks of ``s``'s prompt (at most ``num_tokens - 1`` tokens)."""
        keys = s.keys
        if not keys or not self.prefix_caching:
            return []
        most = (s.prompt_tokens + s.generated - 1) // self.block_size
        found = []
        cached = self.cached
        for key in keys[:most] if most < len(keys) else keys:
            b = cached.get(key)
            if b is None:
                break
            found.append(b)
        return found

    def admit(self, s, hit: list[Block], new_tokens: int) -> bool:
        """Give waiting ``s`` its hit blocks and blocks for ``new_tokens`` more; False (and nothing
        changed) when the free blocks do not suffice."""
        fresh = self.blocks_for(len(hit) * self.block_size + new_tokens) - len(hit)
        revived = 0
        for b in hit:
            if not b.refs:
                revived += 1
        if fresh + revived > self.free_plain + len(self.evictable):
            return False
        evictable = self.evictable
        for b in hit:
            if not b.refs:
                del evictable[b.key]
                self.used += 1
            b.refs += 1
        s.shared = list(hit)
        s.blocks = len(hit)
        s.computed = len(hit) * self.block_size
        s.registered = len(hit)
        if fresh:
            self._take(fresh)
            s.blocks += fresh
        return True

    # -- a running sequence ----------------------------------------------------
    def grow(self, s, tokens: int) -> bool:
        """Blocks for ``s`` to hold ``tokens`` computed tokens; False when none are free."""
        need = -(-tokens // self.block_size) - s.blocks
        if need <= 0:
            return True
        if need > self.free_plain + len(self.evictable):
            return False
        self._take(need)
        s.blocks += need
        return True

    def register(self, s) -> None:
        """Register ``s``'s newly computed full prompt blocks under their keys (a key already
        registered by another sequence keeps that block; this one stays a plain block)."""
        keys = s.keys
        n = min(s.computed // self.block_size, len(keys))
        cached = self.cached
        while s.registered < n:
            key = keys[s.registered]
            if key not in cached:
                b = Block(key)
                cached[key] = b
                s.shared.append(b)
            s.registered += 1

    def free(self, s) -> None:
        """Release every block of ``s`` (finished, cancelled or preempted)."""
        plain = s.blocks - len(s.shared)
        evictable = self.evictable
        for b in reversed(s.shared):  # the prompt's first blocks released last: evicted last
            b.refs -= 1
            if not b.refs:
                evictable[b.key] = b
                self.used -= 1
        self.used -= plain
        self.free_plain += plain
        s.shared = []
        s.blocks = 0
        s.registered = 0

    def _take(self, n: int) -> None:
        """``n`` blocks off the free ones: plain ones first, then evicting cached ones, oldest first."""
        self.used += n
        plain = self.free_plain
        if n <= plain:
            self.free_plain = plain - n
            return
        self.free_plain = 0
        evictable, cached = self.evictable, self.cached
        for _ in range(n - plain):
            key, _b = evictable.popitem(last=False)
            del cached[key]
