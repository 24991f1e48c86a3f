"""Trace replay: `--replay trace.jsonl [--time-scale F]` sends logged requests at their logged times.

The trace (written by `python -m workloads import`, or by hand) is JSON lines: an optional header
line `{"trace": {"templates": "templates.jsonl", ...}}`, then one request per line:

    {"t": 12.25, "class": "short", "prompt": "p000017", "max_tokens": 212}     # a library prompt by id
    {"t": 12.5, "text": "Hello?", "system": "You are ...", "max_tokens": 64}    # or inline
    {"t": 13.0, "messages": [{"role": "user", "content": "..."}], "max_tokens": 64}

`t` is seconds after the start of the trace; `prompt` ids refer to the kind "prompt" lines of the
header's `templates` file (relative to the trace; default templates.jsonl beside it); `class`
defaults to "replay"; `max_tokens` to 256.

It is an open loop on one shared clock (plugin/replay.py ends the run): the master fixes the start
and sends it to its workers with the trace itself (its files, plugin/run_start.py: no worker opens
a trace file), request i of the trace (in time order) goes to process i mod N, and is sent at
start + 1 s + t x time-scale
(0.5 = twice as fast), whatever the server does; the user count caps requests in flight
(`--max-concurrency`, default 512). Records carry `t_intended`, so `summary.json` reports the
schedule lag and latency from the intended send time, and `open_loop.target_rate` is the trace's
mean rate: requests / (last t x time-scale), taken as at least 1 s.

The run ends when every process has sent its last request (the master counts them), or at
`-t`; requests still in flight get `--stop-timeout` to finish, as at any other end of a run.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import lru_cache

from core.errors import InputError
from shapes.arrivals import START_DELAY_S
from workloads import Request, load_library
from workloads.request import template_request

DEFAULT_MAX_TOKENS = 256
DEFAULT_CLASS = "replay"


TRACE_SOURCE, TEMPLATES_SOURCE = "trace", "templates"  # keys of Trace.sources


@dataclass(frozen=True)
class Trace:
    path: str
    times: tuple[float, ...]  # seconds after the trace start, sorted
    requests: tuple[Request, ...]
    header: dict
    # the files it is made of, as read (TRACE_SOURCE, and TEMPLATES_SOURCE when its prompts use a
    # library): what a master sends its workers, who never open the trace themselves
    sources: dict[str, bytes] = field(repr=False, default_factory=dict)
    digest: str = ""  # SHA-256 of the sources: the trace's identity in the plan and run.json

    @property
    def duration_s(self) -> float:
        return self.times[-1] if self.times else 0.0

    def rate(self, time_scale: float = 1.0) -> float:
        """Mean requests/s of the replay: requests / (last t x time-scale), at least over 1 s."""
        return len(self.times) / max(self.duration_s * time_scale, 1.0)


def _entry_request(obj: dict, where: str, prompts: dict | None, path: str) -> Request:
    cls = obj.get("class", DEFAULT_CLASS)
    if not isinstance(cls, str) or not cls:
        raise InputError(f"{where}: class must be a non-empty string")
    mt = obj.get("max_tokens", DEFAULT_MAX_TOKENS)
    if isinstance(mt, bool) or not isinstance(mt, int) or mt < 1:
        raise InputError(f"{where}: max_tokens must be a whole number >= 1")
    if "prompt" in obj:
        if prompts is None:
            raise InputError(
                f"{where}: refers to prompt {obj['prompt']!r} but there is no template library "
                f"(templates.jsonl beside {os.path.basename(path)}, or the header's templates)"
            )
        t = prompts.get(obj["prompt"])
        if t is None:
            raise InputError(f"{where}: prompt {obj['prompt']!r} is not in the template library")
        return template_request(cls, t, mt)
    if "messages" in obj:
        msgs = obj["messages"]
        if (
            not isinstance(msgs, list)
            or not msgs
            or not all(
                isinstance(m, dict)
                and isinstance(m.get("content"), str)
                and m.get("role") in ("system", "user", "assistant")
                for m in msgs
            )
        ):
            raise InputError(f"{where}: messages must be a list of {{role: system|user|assistant, content: text}}")
        system = msgs[0]["content"] if msgs[0]["role"] == "system" else None
        rest = msgs[1:] if system is not None else msgs
        if not rest or rest[-1]["role"] != "user":
            raise InputError(f"{where}: the last message must be the user's")
        history = tuple((m["role"], m["content"]) for m in rest[:-1])
        text = rest[-1]["content"]
    elif "text" in obj:
        text, system, history = obj["text"], obj.get("system"), ()
        if not isinstance(text, str) or not text or (system is not None and not isinstance(system, str)):
            raise InputError(f"{where}: text (and system) must be strings")
    else:
        raise InputError(f"{where}: needs prompt (a library id), text or messages")
    chars = (len(system) if system else 0) + sum(len(c) for _, c in history) + len(text)
    return Request(cls, system, text, mt, chars, history)


def _read_trace(path: str, sources: dict[str, bytes] | None = None) -> Trace:
    if sources is None:
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            raise InputError(f"{path}: trace file not found") from None
        except OSError as e:
            raise InputError(f"{path}: cannot read ({e})") from None
    else:
        data = sources[TRACE_SOURCE]
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: cannot read ({e})") from None
    kept = {TRACE_SOURCE: data}
    header: dict = {}
    rows = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path} line {n}"
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise InputError(f"{where}: malformed JSON ({e})") from None
        if not isinstance(obj, dict):
            raise InputError(f"{where}: expected a JSON object")
        if "trace" in obj and not rows:
            if not isinstance(obj["trace"], dict):
                raise InputError(f"{where}: the header's trace must be an object")
            header = obj["trace"]
            continue
        t = obj.get("t")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t >= 0 or t == float("inf"):
            raise InputError(f"{where}: t must be seconds >= 0 after the start of the trace")
        rows.append((float(t), len(rows), obj, where))
    if not rows:
        raise InputError(f"{path}: the trace holds no requests")
    prompts = None
    if any("prompt" in obj for _, _, obj, _ in rows):
        lib_name = header.get("templates", "templates.jsonl")
        lib_path = (
            lib_name if os.path.isabs(lib_name) else os.path.join(os.path.dirname(os.path.abspath(path)), lib_name)
        )
        lib_data = sources.get(TEMPLATES_SOURCE) if sources is not None else None
        if lib_data is not None or (sources is None and os.path.exists(lib_path)):
            lib = load_library(lib_path, origin=path, data=lib_data)
            kept[TEMPLATES_SOURCE] = lib.data
            prompts = {t.id: t for t in lib.prompts if t.id}
    rows.sort(key=lambda r: (r[0], r[1]))  # by time; equal times keep the file order
    requests = tuple(_entry_request(obj, where, prompts, path) for _, _, obj, where in rows)
    h = hashlib.sha256()
    for key in sorted(kept):
        h.update(b"%s\0%d\0" % (key.encode(), len(kept[key])))
        h.update(kept[key])
    return Trace(
        path=path, times=tuple(r[0] for r in rows), requests=requests, header=header, sources=kept, digest=h.hexdigest()
    )


@lru_cache(maxsize=4)
def _cached(path: str, mtime_ns: int, size: int) -> Trace:
    return _read_trace(path)


def load_trace(path: str, *, sources: dict[str, bytes] | None = None) -> Trace:
    """The parsed trace (cached while the file is unchanged). ``sources``: its files as
    ``Trace.sources`` keeps them, instead of reading them (a worker gets those its master read);
    ``path`` then only names them in messages. Raises InputError."""
    if sources is not None:
        return _read_trace(path, sources)
    try:
        st = os.stat(path)
    except OSError:
        raise InputError(f"{path}: trace file not found") from None
    return _cached(os.path.abspath(path), st.st_mtime_ns, st.st_size)


class ReplaySchedule:
    """This process's share of a trace: requests index, index + N, ... at their scheduled times."""

    def __init__(self, trace: Trace, time_scale: float, processes: int, index: int, t0: float):
        """`t0` is the run's start on this process's perf_counter clock."""
        self.processes = max(1, processes)
        self.index = index % self.processes
        start = t0 + START_DELAY_S
        self.times = [start + t * time_scale for t in trace.times[self.index :: self.processes]]
        self.requests = trace.requests[self.index :: self.processes]
        self.taken = 0
        self.sent = 0
        self.reported = False

    def __len__(self) -> int:
        return len(self.times)

    def take(self) -> tuple[float, Request] | None:
        """The next (send time, request) of this process, in order; None once the share is used up."""
        i = self.taken
        if i >= len(self.times):
            return None
        self.taken = i + 1
        return self.times[i], self.requests[i]

    def sending(self) -> bool:
        """A request of the share is being sent; True once it was the last one."""
        self.sent += 1
        return self.sent >= len(self.times)

    def mark_reported(self) -> bool:
        """True the first time the end of this share is reported (it is reported once)."""
        if self.reported:
            return False
        self.reported = True
        return True
