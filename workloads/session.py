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
"""

from __future__ import annotations

from .sampler import Request, Sampler


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

    def advance(self, reply: str) -> Request | None:
        """The next turn, given the reply text the current one received; None after the last."""
        if self.done:
            return None
        self._history.append(("user", self.request.user))
        self._history.append(("assistant", reply))
        new = self.sampler.next_turn(self._class)
        chars = (len(self._system) if self._system else 0) + sum(len(c) for _, c in self._history) + len(new.user)
        self.turn += 1
        self.request = Request(self._class, self._system, new.user, new.max_tokens, chars,
                               tuple(self._history), self.turns)
        return self.request

    def think_time(self) -> float:
        """Seconds to wait after a reply before the next turn (drawn from the class)."""
        return self.sampler.think_time(self._class)
