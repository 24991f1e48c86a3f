"""One request drawn from a workload (`Request`: its messages or prompt, tools, images, inputs), the
request of an imported prompt as it was logged, and the seed of each stream of a seeded run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

from .attachments import IMAGE_VARIANTS, generated_image, image_parts


@dataclass(frozen=True, slots=True)
class Request:
    request_class: str
    system: str | None
    user: str
    max_tokens: int
    input_chars: int
    # earlier turns sent before `user`, as (role, content) pairs: a logged prompt's history, or the
    # previous turns of a conversation (user messages and the replies received); a turn that is not
    # plain text (an assistant's tool calls, a tool result, a message with images) is its whole
    # message, a dict
    history: tuple = ()
    turns: int = 0  # conversation classes: the number of turns of this conversation; 0 = a single request
    tools: dict | None = None  # request fields of the class's tools: tools, tool_choice (workloads/attachments.py)
    images: tuple[str, ...] = ()  # image URLs sent with `user`
    # False: no user message ends the request: a conversation's turn that sends tool results, the
    # history's end, for the model to go on from

    ask: bool = True
    inputs: tuple[str, ...] = ()  # classes with `batch`: the texts to embed, or the documents to rank

    def messages(self) -> list[dict]:
        """OpenAI chat messages, system first when present, then the history, then the user message
        (with its images as image_url parts)."""
        if not self.history and not self.images:
            if self.system is not None:
                return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]
            return [{"role": "user", "content": self.user}]
        out = [{"role": "system", "content": self.system}] if self.system is not None else []
        out += [m if isinstance(m, dict) else {"role": m[0], "content": m[1]} for m in self.history]
        if self.ask:
            out.append({"role": "user", "content": image_parts(self.user, self.images) if self.images else self.user})
        return out

    def prompt(self) -> str:
        """A single completion prompt: system + blank line + (history, blank lines) + user."""
        parts = [self.system] if self.system is not None else []
        parts += [m[1] for m in self.history if not isinstance(m, dict)]
        if not parts:
            return self.user
        parts.append(self.user)
        return "\n\n".join(parts)


def derive_seed(seed: int | None, stream: int | str) -> int | None:
    """A distinct, reproducible seed for one stream (a worker, a user) of a seeded run."""
    if seed is None:
        return None
    digest = hashlib.sha256(f"{seed}:{stream}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def template_request(name: str, t, max_tokens: int, prefix: str | None = None, rng=None) -> Request:
    """The request of an imported prompt (library kind "prompt", workloads/library.py) as it was
    logged: its system prompt (or `prefix`, a shared prefix, in its place), history and text, and
    for a logged agent request its tools, images of the logged sizes (generated; which variant is
    drawn from `rng`) and the messages after the text (then no user message ends the request)."""
    chars = t.input_chars if prefix is None else len(prefix) + t.input_chars - (len(t.system) if t.system else 0)
    req = Request(name, prefix if prefix is not None else t.system, t.text, max_tokens, chars, t.history)
    if t.tools is None and not t.images and not t.after:
        return req
    draw = rng.random if rng is not None else (lambda: 0.0)
    images = tuple(generated_image(w, h, int(draw() * IMAGE_VARIANTS)) for w, h in t.images)
    if not t.after:
        return replace(req, tools=t.tools, images=images)
    user = ("user", image_parts(t.text, images)) if images else ("user", t.text)
    return replace(req, tools=t.tools, history=(*t.history, user, *t.after), ask=False)
