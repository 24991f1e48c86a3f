"""Locustfile for bench/spawn_messages.py: the suite as it runs, with Locust's messages measured.

Every message Locust's master and workers exchange goes through `locust.rpc.protocol.Message`
(`serialize` on the sending side, `unserialize` on the receiving side); both are wrapped here to
count each spawn message's bytes on the wire and the seconds its encoding and decoding held the
process's event loop. Each process writes what it counted to $SPAWN_BENCH_OUT/<role>-<pid>.json
when it quits. Nothing else changes: the users, plugins and shape are the suite's own.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from locust import events
from locust.rpc import protocol

from locustfile import ConfiguredUser, LLMShape  # noqa: F401  the suite's user class, shape and plugins

_counted: dict[str, list] = {"sent": [], "received": []}
_serialize, _unserialize = protocol.Message.serialize, protocol.Message.unserialize.__func__


def serialize(self):
    t0 = time.perf_counter()
    data = _serialize(self)
    if self.type == "spawn":
        carried = "llm_run" in (self.data.get("parsed_options") or {})
        _counted["sent"].append({"bytes": len(data), "seconds": time.perf_counter() - t0, "carries_start": carried})
    return data


def unserialize(cls, data):
    t0 = time.perf_counter()
    msg = _unserialize(cls, data)
    if msg.type == "spawn":
        carried = "llm_run" in (msg.data.get("parsed_options") or {})
        _counted["received"].append({"bytes": len(data), "seconds": time.perf_counter() - t0, "carries_start": carried})
    return msg


protocol.Message.serialize = serialize
protocol.Message.unserialize = classmethod(unserialize)


@events.quitting.add_listener
def _write(environment, **_kw) -> None:
    folder = os.environ.get("SPAWN_BENCH_OUT")
    if folder:
        role = type(environment.runner).__name__.replace("Runner", "").lower()
        with open(os.path.join(folder, f"{role}-{os.getpid()}.json"), "w") as f:
            json.dump(_counted, f)
