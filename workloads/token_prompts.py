"""--input-tokens: prompts of a number of tokens, not characters, as `vllm bench serve`'s random
dataset sizes them (--random-input-len, --random-range-ratio).

Characters are not tokens: on the test tokenizer 4,000 characters of the template library made about
1,900 tokens, on the simulator's estimate 1,000. So each request's length is drawn in tokens
(uniformly in [MIN, MAX]) and its text is cut from the workload's own texts (the template library's
passages and questions, one long text read in a seeded order) to exactly that many tokens by the
client's count: the tokenizer of --tokenizer, or without one the estimate of core/text.py (what the
built-in simulator counts when it has no tokenizer). A fast tokenizer cuts it at its N-th token's end
(its character offsets) and counts the cut once to check it; otherwise the cut is found by a few
counts (steps from the cut's own characters per token, then bisection, about 8 at 512 tokens): the
count of a cut grows with it, by one token a character nearly always, so a cut of the length
exists; where none does from a start (a character that makes two tokens at once), another start is
tried (at most TRIES), and the last resort is one token short.

The request keeps the workload's draw (its class, its max_tokens, a conversation's turns) and carries
its prompt as one user message, no system prompt: the server adds its chat template's tokens (the
simulator 4 a message; --endpoint completions sends the text alone).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from core.text import estimate_tokens

from .request import Request

TRIES = 4  # starts tried for a cut of exactly the length
SECANT_STEPS = 6  # counts before bisection
MIN_POOL_CHARS = 1 << 16


def pool_text(spec) -> str:
    """The workload's texts, distinct, in a fixed order, joined: what prompts are cut from."""
    texts: set[str] = set()
    for c in spec.classes.values():
        for group in (c.contexts, c.questions, c.prompts, c.system_templates):
            texts.update(t.text for t in group if getattr(t, "text", None))
        texts.update(c.systems)
    ordered = sorted(texts)
    random.Random("token-prompts").shuffle(ordered)  # languages and domains mixed, the same on every process
    text = "\n\n".join(ordered) or "The quick brown fox jumps over the lazy dog."
    return text


class TokenPrompts:
    """Texts of an exact token count, cut from one long text."""

    def __init__(
        self, text: str, count: Callable[[str], int] | None, longest: int, head: Callable[[str, int], str] | None = None
    ):
        self.count = count or estimate_tokens
        self.head = head
        sample = text[:6000]  # within a tokenizer's model_max_length (no warning)
        self.chars_per_token = max(0.5, len(sample) / max(1, self.count(sample)))
        need = int(longest * self.chars_per_token * 3) + MIN_POOL_CHARS
        self.text = (text + "\n\n") * (need // (len(text) + 2) + 1)  # a prompt never runs off its end
        self.room = len(self.text) - int(longest * self.chars_per_token * 2) - 64

    def prompt(self, tokens: int, rng: random.Random) -> str:
        """A text of `tokens` tokens by the count (one fewer only where no start of TRIES allowed it)."""
        best = ""
        for _ in range(TRIES):
            start = self._word_start(int(rng.random() * self.room))
            if self.head is not None:  # the tokenizer's own offsets: one encoding, one count to check
                cut = self.head(self.text[start : start + int(tokens * self.chars_per_token * 1.5) + 64], tokens)
                if self.count(cut) == tokens:
                    return cut
            cut, exact = self._cut(start, tokens)
            if exact:
                return cut
            best = max(best, cut, key=len)
        return best

    def _word_start(self, i: int) -> int:
        space = self.text.find(" ", i, i + 64)
        return space + 1 if space >= 0 else i

    def _cut(self, start: int, tokens: int) -> tuple[str, bool]:
        """(a text from `start` of `tokens` tokens, True), or (the longest found under it, False)."""
        text, count = self.text, self.count
        lo, hi = 0, len(text) - start  # lo: a length under the count (or at it); hi: one over it
        k = max(1, round(tokens * self.chars_per_token))
        for _ in range(SECANT_STEPS):  # a step from this text's own characters per token
            n = count(text[start : start + k])
            if n == tokens:
                return text[start : start + k], True
            if n < tokens:
                lo = k
            else:
                hi = k
            k += round((tokens - n) * k / max(n, 1)) or (1 if n < tokens else -1)
            k = min(max(k, lo + 1), hi - 1)
            if hi - lo <= 1:
                return text[start : start + lo], False
        while hi - lo > 1:
            mid = (lo + hi) // 2
            n = count(text[start : start + mid])
            if n == tokens:
                return text[start : start + mid], True
            if n < tokens:
                lo = mid
            else:
                hi = mid
        return text[start : start + lo], False


class TokenSizedSampler:
    """The workload's sampler, each request's text a prompt of a drawn number of tokens."""

    def __init__(self, sampler, low: int, high: int, tokenizer, seed: int | None):
        """`tokenizer`: workloads.tokenizer.Tokenizer, or None for the estimate."""
        self.sampler, self.low, self.high = sampler, low, high
        count, head = (tokenizer.count, tokenizer.head) if tokenizer is not None else (None, None)
        self.prompts = TokenPrompts(pool_text(sampler.spec), count, high, head)
        self.rng = random.Random(None if seed is None else f"input-tokens:{seed}")

    @property
    def spec(self):
        return self.sampler.spec

    @property
    def count(self) -> int:
        return self.sampler.count

    def __iter__(self):
        return self

    def __next__(self) -> Request:
        return self.next()

    def next(self) -> Request:
        return self._sized(self.sampler.next())

    def next_turn(self, class_name: str) -> Request:
        return self._sized(self.sampler.next_turn(class_name))

    def think_time(self, class_name: str) -> float:
        return self.sampler.think_time(class_name)

    def sample(self, n: int) -> list[Request]:
        return [self.next() for _ in range(n)]

    def _sized(self, req: Request) -> Request:
        tokens = self.low if self.low == self.high else self.rng.randint(self.low, self.high)
        text = self.prompts.prompt(tokens, self.rng)
        inputs = (text,) if req.inputs else ()
        return replace(
            req, system=None, user=text, input_chars=len(text), history=(), images=(), inputs=inputs, ask=True
        )
