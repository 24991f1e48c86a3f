"""Seeded request sampler: WorkloadSpec -> a reproducible stream of Requests."""

from __future__ import annotations

import math
import random
import re
from bisect import bisect_left, bisect_right
from dataclasses import replace
from itertools import accumulate

from .request import Request, template_request
from .spec import ClassSpec, WorkloadSpec

SEP = "\n\n"  # between context passages, and before the question
MIN_FRAGMENT = 24  # never splice a context piece shorter than this (unless needed for min)
WORD_SLACK = 24  # how far back a cut may move to land on a word boundary

_SENTENCE_END = re.compile(r"[。！？；!?;](?:[」”\"')）])?|[.](?=\s)|\n")


class _Ctx:
    __slots__ = ("text", "ends", "cjk")

    def __init__(self, text: str):
        self.text = text
        ends = [m.end() for m in _SENTENCE_END.finditer(text)]
        self.ends = ends
        self.cjk = sum(1 for ch in text if ord(ch) > 0x2E80) > len(text) // 4


class _Dist:
    """A plain, slotted copy of a validated distribution (the spec's are pydantic models, validated
    once at load): what the per-request draws read."""

    __slots__ = ("dist", "min", "max", "mean", "stddev", "median", "sigma", "value", "values")

    def __init__(self, d):
        for name in self.__slots__:
            setattr(self, name, getattr(d, name, None))


class _Class:
    """Precomputed lookup tables of one class."""

    __slots__ = (
        "name",
        "ic",
        "ot",
        "share",
        "q_texts",
        "q_lens",
        "q_keys",
        "s_min",
        "s_tiers",
        "pools",
        "all_pool",
        "verbatim",
        "v_prompts",
        "v_lens",
        "v_cum",
        "turns",
        "think",
        "prefix_share",
        "prefixes",
        "tools",
        "images",
        "image_urls",
        "image_count",
        "batch",
    )

    def __init__(self, c: ClassSpec):
        self.name = c.name
        self.ic = _Dist(c.input_chars)
        self.ot = _Dist(c.output_tokens)
        # conversations: the number of turns and the think time; None for single requests
        self.turns = _Dist(c.session.turns) if c.session is not None else None
        self.think = _Dist(c.session.think_time_s) if c.session is not None else None
        sp = c.shared_prefix
        self.prefix_share = sp.share if sp is not None and sp.texts else 0.0
        self.prefixes = sp.texts if sp is not None else ()
        self.tools = c.tools.body() if c.tools is not None else None
        self.images = c.images.share if c.images is not None else 0.0
        self.image_urls = c.image_urls
        self.image_count = _Dist(c.images.count) if c.images is not None else None
        self.batch = _Dist(c.batch) if c.batch is not None else None
        self.verbatim = c.prompts_mode == "verbatim"
        if self.verbatim:  # whole imported prompts, by input length; weights = logged counts
            ps = sorted(c.prompts, key=lambda t: (t.input_chars, t.id, t.text))
            self.v_prompts = ps
            self.v_lens = [t.input_chars for t in ps]
            self.v_cum = list(accumulate(t.count for t in ps))
            self.share = 0.0
            return
        self.share = c.system_prompt.share if c.systems else 0.0
        qs = sorted(c.questions, key=lambda t: (len(t.text), t.text))
        self.q_texts = [t.text for t in qs]
        self.q_lens = [len(t.text) for t in qs]
        self.q_keys = [(t.lang, t.domain) for t in qs]
        # system prompts: per question key, tiers of candidates sorted by length:
        # same language and domain, same language, any
        lang_of = {}
        for t in c.system_templates:
            lang_of.setdefault(t.text, (t.lang, t.domain))
        sys_keys = [(lang_of.get(s, ("", "")), s) for s in c.systems]

        def tier(texts):
            texts = sorted(set(texts), key=lambda x: (len(x), x))
            return (texts, [len(x) for x in texts])

        all_tier = tier([s for _, s in sys_keys])
        self.s_min = all_tier[1][0] if all_tier[0] else 0
        s_tiers = {}
        for key in set(self.q_keys):
            tiers = []
            same = [s for k, s in sys_keys if k == key]
            lang = [s for k, s in sys_keys if k[0] == key[0]]
            for group in (same, lang):
                if group:
                    tiers.append(tier(group))
            tiers.append(all_tier)
            s_tiers[key] = tiers
        self.s_tiers = s_tiers
        all_ctx = [_Ctx(t.text) for t in c.contexts]
        self.all_pool = all_ctx
        by_lang: dict[str, list[_Ctx]] = {}
        by_key: dict[tuple[str, str], list[_Ctx]] = {}
        for t, cx in zip(c.contexts, all_ctx):
            by_lang.setdefault(t.lang, []).append(cx)
            by_key.setdefault((t.lang, t.domain), []).append(cx)
        # context pool per question key: same language and domain, else same
        # language, else everything; small pools are topped up with the language pool
        pools: dict[tuple[str, str], list[_Ctx]] = {}
        for key in set(self.q_keys):
            pool = list(by_key.get(key, ()))
            if len(pool) < 6:
                pool += [x for x in by_lang.get(key[0], ()) if x not in pool]
            if not pool:
                pool = list(all_ctx)
            pools[key] = pool
        self.pools = pools


def _draw(rng: random.Random, d: _Dist) -> int:
    kind = d.dist
    if kind == "uniform":
        return rng.randint(d.min, d.max)
    if kind == "fixed":
        return d.value  # type: ignore[return-value]
    if kind == "empirical":
        v = d.values  # type: ignore[assignment]
        return v[int(rng.random() * len(v))]
    if kind == "normal":
        x = rng.gauss(d.mean, d.stddev)
    else:  # lognormal
        x = d.median * math.exp(d.sigma * rng.gauss(0.0, 1.0))  # type: ignore[operator]
    x = int(round(x))
    if x < d.min:
        return d.min
    if x > d.max:
        return d.max
    return x


def draw_seconds(rng: random.Random, d: _Dist) -> float:
    """A duration in seconds (fractions kept) from a seconds distribution (think times)."""
    kind = d.dist
    if kind == "fixed":
        return float(d.value)  # type: ignore[arg-type]
    if kind == "uniform":
        return rng.uniform(d.min, d.max)
    if kind == "empirical":
        v = d.values  # type: ignore[assignment]
        return float(v[int(rng.random() * len(v))])
    if kind == "normal":
        x = rng.gauss(d.mean, d.stddev)
    else:  # lognormal
        x = d.median * math.exp(d.sigma * rng.gauss(0.0, 1.0))  # type: ignore[operator]
    return float(min(max(x, d.min), d.max))


def _deck(weights: list[float]) -> list[int]:
    """How many of each class one shuffled deck holds.

    Classes are dealt from shuffled decks rather than drawn independently: the order stays random,
    but the realised shares match the weights within one deck at any point of a run (independent
    draws over 300 requests miss a 40 % share by more than 5 points about 7 % of the time)."""
    total = sum(weights)
    for size in (10, 20, 50, 100, 1000):
        exact = [w / total * size for w in weights]
        if all(abs(x - round(x)) < 1e-6 for x in exact):
            return [int(round(x)) for x in exact]
    floors = [int(x) for x in exact]  # largest remainder over 1000
    for i in sorted(range(len(exact)), key=lambda i: exact[i] - floors[i], reverse=True)[: size - sum(floors)]:
        floors[i] += 1
    return floors


class Sampler:
    """Draws requests from a spec. Same seed, same sequence; ``seed=None`` is random.

    ``max_tokens`` (--max-tokens-override) is every request's max_tokens in place of its class's
    output_tokens: decided here, once, the request carries it to its body and its record. The class's
    draw is still made, so a seed gives the same texts with or without it."""

    def __init__(self, spec: WorkloadSpec, seed: int | None = None, max_tokens: int | None = None):
        self.spec = spec
        self.seed = seed
        self.max_tokens = max_tokens
        self.rng = random.Random(seed)
        self._classes = [_Class(c) for c in spec.classes.values() if c.weight > 0]
        self._by_name = {c.name: c for c in self._classes}
        weights = [c.weight for c in spec.classes.values() if c.weight > 0]
        self._deck_counts = _deck(weights)
        self._deck: list[int] = []
        self.count = 0

    def __iter__(self):
        return self

    def __next__(self) -> Request:
        return self.next()

    def sample(self, n: int) -> list[Request]:
        return [self.next() for _ in range(n)]

    def next(self) -> Request:
        """The next request; for a conversation class its first turn (``turns`` says how many)."""
        if not self._deck:
            self._deck = [i for i, n in enumerate(self._deck_counts) for _ in range(n)]
            self.rng.shuffle(self._deck)
        cls = self._classes[self._deck.pop()]
        self.count += 1
        req = self._request(cls, True)
        if cls.turns is not None:
            turns = _draw(self.rng, cls.turns)
            req = replace(req, turns=max(1, turns))
        return req

    def next_turn(self, class_name: str) -> Request:
        """A later turn's new user message for a conversation of this class (no system prompt, no
        shared prefix: those came with the first turn)."""
        return self._request(self._by_name[class_name], False)

    def think_time(self, class_name: str) -> float:
        """Seconds a conversation of this class waits between a reply and its next turn."""
        think = self._by_name[class_name].think
        return draw_seconds(self.rng, think) if think is not None else 0.0

    def _request(self, cls: _Class, first: bool) -> Request:
        req = self._text(cls, first)
        if cls.batch is not None:  # embeddings: more texts of the class
            n = _draw(self.rng, cls.batch)
            return replace(req, inputs=(req.user, *(self._text(cls, False).user for _ in range(n - 1))))
        if cls.tools is None and not cls.images:
            return req
        images: tuple[str, ...] = ()
        if cls.images and self.rng.random() < cls.images:
            urls = cls.image_urls
            images = tuple(urls[int(self.rng.random() * len(urls))] for _ in range(_draw(self.rng, cls.image_count)))
        return replace(req, tools=cls.tools, images=images)

    def _text(self, cls: _Class, first: bool) -> Request:
        rng = self.rng
        rand = rng.random
        prefix = None
        if first and cls.prefix_share > 0.0 and rand() < cls.prefix_share:
            prefix = cls.prefixes[int(rand() * len(cls.prefixes))]
        if cls.verbatim:
            return self._verbatim(cls, prefix)
        req = self._spliced(cls, allow_system=first and prefix is None)
        if prefix is not None:  # the shared prefix is the system prompt; the class range covers the rest
            return Request(cls.name, prefix, req.user, req.max_tokens, len(prefix) + req.input_chars)
        return req

    def _verbatim(self, cls: _Class, prefix: str | None) -> Request:
        rng = self.rng
        lens = cls.v_lens
        ic = cls.ic
        if ic.dist == "empirical" and ic.values is None:  # as often as logged
            i = bisect_right(cls.v_cum, rng.random() * cls.v_cum[-1])
            i = min(i, len(lens) - 1)
        else:  # the prompt nearest to a drawn length; a random one among equal lengths
            target = _draw(rng, ic)
            i = bisect_left(lens, target)
            if i == len(lens) or (i > 0 and target - lens[i - 1] <= lens[i] - target):
                i -= 1
            lo, hi = bisect_left(lens, lens[i]), bisect_right(lens, lens[i])
            i = lo + int(rng.random() * (hi - lo))
        return template_request(cls.name, cls.v_prompts[i], self._max_tokens(cls), prefix, rng)

    def _spliced(self, cls: _Class, allow_system: bool = True) -> Request:
        rng = self.rng
        rand = rng.random
        ic = cls.ic
        lo, hi = ic.min, ic.max
        target = _draw(rng, ic)
        q_lens = cls.q_lens

        # question: random among those that fit the target (at least a handful),
        # leaving room for the shortest system prompt when one is drawn
        use_system = allow_system and cls.share > 0.0 and rand() < cls.share
        smin = cls.s_min if use_system else 0
        budget = target - smin
        k = bisect_right(q_lens, budget)
        if k < 8:
            k = min(max(k, 8), bisect_right(q_lens, hi - smin)) or 1
        qi = int(rand() * k)
        question = cls.q_texts[qi]
        qlen = len(question)

        # system prompt: same language (and domain) as the question where one fits
        system = None
        slen = 0
        if use_system:
            for texts, lens in cls.s_tiers[cls.q_keys[qi]]:
                k = bisect_right(lens, target - qlen)
                if k == 0 and lens[0] <= hi - qlen:
                    k = 1
                if k:
                    system = texts[int(rand() * k)]
                    slen = len(system)
                    break
        cur = slen + qlen

        # contexts: splice until the total lands near the target, inside [lo, hi]
        if cur < lo or target - cur >= MIN_FRAGMENT + 2:
            pool = cls.pools[cls.q_keys[qi]]
            n = len(pool)
            parts: list[str] = []
            used: set[int] = set()
            skips = 0
            while True:
                room = target - cur - 2  # characters left for the next piece
                if room < MIN_FRAGMENT:
                    if cur >= lo:
                        break
                    # min not reached yet: overshoot the target rather than splice a scrap
                    room = min(hi - cur - 2, max(MIN_FRAGMENT, lo - cur - 2))
                    if room < 1:
                        break
                i = int(rand() * n)
                if i in used and len(used) < n:
                    for _ in range(4):
                        i = int(rand() * n)
                        if i not in used:
                            break
                used.add(i)
                cx = pool[i]
                text = cx.text
                if len(text) <= room:
                    # a whole passage that would leave lo a scrap away: try another one
                    gap = lo - cur - len(text) - 2
                    if 0 < gap < MIN_FRAGMENT + 2 and skips < 4:
                        skips += 1
                        continue
                    parts.append(text)
                    cur += len(text) + 2
                    continue
                # truncate: sentence end if close enough, else word boundary, else hard cut
                need = lo - cur - 2  # minimum piece length to reach lo
                ends = cx.ends
                j = bisect_right(ends, room) - 1
                cut = ends[j] if j >= 0 else 0
                if cut < need or room - cut > max(40, target // 10) or cut < MIN_FRAGMENT:
                    cut = room
                    if not cx.cjk:
                        sp = text.rfind(" ", 0, room)
                        if sp >= need and sp > 0 and room - sp <= WORD_SLACK:
                            cut = sp
                piece = text[:cut].rstrip()
                if len(piece) < need:  # exact lengths: keep the size, blank the line breaks
                    piece = text[:room]
                    stripped = piece.rstrip()
                    piece = stripped + " " * (len(piece) - len(stripped))
                parts.append(piece)
                cur += len(piece) + 2
                break
            if parts:
                parts.append(question)
                user = SEP.join(parts)
            else:
                user = question
            if cur < lo:  # only for ranges narrower than a separator
                user += " " * (lo - cur)
        else:
            user = question

        return Request(cls.name, system, user, self._max_tokens(cls), slen + len(user))

    def _max_tokens(self, cls: _Class) -> int:
        drawn = _draw(self.rng, cls.ot)
        return self.max_tokens or drawn
