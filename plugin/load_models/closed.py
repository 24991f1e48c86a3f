"""Closed loop: -u users, each sending its next request as soon as its last one ended."""

from __future__ import annotations

from typing import Literal

from plugin.load_models.base import LoadModel, no_open_loop_options


class ClosedLoop(LoadModel):
    kind: Literal["closed"] = "closed"

    @classmethod
    def chosen(cls, p) -> bool:
        return True  # the default: the registry asks it last

    @classmethod
    def from_options(cls, p, distributed: bool) -> ClosedLoop:
        no_open_loop_options(p)
        return cls()

    def describe(self, plan) -> str:
        return "closed loop"
