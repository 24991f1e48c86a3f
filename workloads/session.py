"""Multi-turn conversations: one draw of a `session` class, turn after turn.

    conv = Conversation(sampler, first_request, session_id)
    req = conv.request                    # turn 1 (the sampler's draw: system prompt, shared prefix)
    ... send req, receive the reply text ...
    req = conv.advance(reply_text)        # turn 2: system + [user 1, assistant 1] + a new user message
    wait conv.think_time() seconds, send, ... until advance() returns None

Every turn carries the previous turns as they happened: the user messages sent and the assistant
text actually received, so the input grows turn by turn (and a server with prefix caching can reuse
the previous turns' KV cache). A turn's `input_chars` is the whole input: system prompt, history
and the new user message.

A reply that called tools (a class with `tools`) is followed, as an agent does, by a turn that
sends the assistant's tool calls and one tool message per call (a result text drawn from the class
like a user message) and no new user message: the model goes on from the results.
"""

from __future__ import annotations

from dataclasses import replace

from core.text import content_text

from .attachments import image_parts
from .request import Request
from .sampler import Sampler


class Conversation:
    __slots__ = ("sampler", "id", "turns", "turn", "request", "_system", "_history", "_class")

    def __init__(self, sampler: Sampler, first: Request, session_id: str = ""):
        self.sampler = sampler
        self.id = session_id
        self.turns = max(1, first.turns)
        self.turn = 1  # the turn `request` is (1-based)
        self.request = first
        self._class = first.request_class
        self._system = first.system
        self._history: list[tuple[str, str]] = list(first.history)

    @property
    def done(self) -> bool:
        return self.turn >= self.turns

    def advance(self, reply: str, tool_calls: list[dict] | None = None) -> Request | None:
        """The next turn, given the reply text the current one received and the tool calls it made
        ({"id", "name", "arguments"}, as metrics.sse parses them); None after the last."""
        if self.done:
            return None
        req = self.request
        if req.ask:
            self._history.append(("user", image_parts(req.user, req.images)) if req.images else ("user", req.user))
        new = self.sampler.next_turn(self._class)
        if tool_calls:
            self._history.append(
                {
                    "role": "assistant",
                    "content": reply or None,
                    "tool_calls": [
                        {
                            "id": c["id"] or f"call_{self.turn}_{i}",
                            "type": "function",
                            "function": {"name": c["name"], "arguments": c["arguments"] or "{}"},
                        }
                        for i, c in enumerate(tool_calls)
                    ],
                }
            )
            for i, c in enumerate(tool_calls):
                result = new.user if i == 0 else self.sampler.next_turn(self._class).user
                self._history.append(
                    {"role": "tool", "tool_call_id": c["id"] or f"call_{self.turn}_{i}", "content": result}
                )
        else:
            self._history.append(("assistant", reply))
        chars = (len(self._system) if self._system else 0) + sum(_chars(m) for m in self._history)
        self.turn += 1
        self.request = replace(
            new,
            system=self._system,
            input_chars=chars + (0 if tool_calls else len(new.user)),
            history=tuple(self._history),
            turns=self.turns,
            ask=not tool_calls,
            images=() if tool_calls else new.images,
        )
        return self.request

    def think_time(self) -> float:
        """Seconds to wait after a reply before the next turn (drawn from the class); none before
        sending tool results (a program, not a person, answers them)."""
        if not self.request.ask:
            return 0.0
        return self.sampler.think_time(self._class)


def _chars(message) -> int:
    """Characters of a history message's text (tool calls: their arguments)."""
    if isinstance(message, tuple):
        content = message[1]
    else:
        content = message.get("content")
        content = (
            content
            if content is not None
            else "".join(c["function"]["arguments"] for c in message.get("tool_calls", ()))
        )
    return len(content_text(content) or "")
