"""The truth log: one JSON line per finished request (``--truth-log FILE``).

Schema (all times are ``time.perf_counter()`` values of the simulator
process, i.e. CLOCK_MONOTONIC on Linux, comparable with a client's
``perf_counter`` on the same machine)::

    request_id     str    X-Request-Id of the request (or the generated id);
                          null on a ``refuse`` line (no request was read)
    endpoint       str    "chat" | "completions" (null on a ``refuse`` line)
                          (the fields after ``fault`` are on lines of answered requests only)
    stream         bool
    arrival        float  when the request body had been read completely
    first_token    float|null  when the first content chunk was written
                          (non-streaming: when the body was written)
    last_token     float|null  when the last content chunk was written
    prompt_tokens  int
    output_tokens  int    tokens actually sent to the client
    chunks         int    content chunks sent (0 for non-streaming)
    status         int    HTTP status sent (0: none was sent)
    outcome        str    "ok" | "client_disconnected" | "<fault name>" |
                          "rejected" (HTTP 4xx) | "server_shutdown"
    fault          str|null  the injected fault, if any
    first_answer_token  float|null  when the first answer chunk (content or tool call, not
                          reasoning) was written; null when the reply was only reasoning
    reasoning_tokens  int   of output_tokens, those sent as reasoning (profile reasoning_tokens)
    answer_tokens  int    of output_tokens, those sent as content or tool calls
    tool_calls     int    tool calls begun in the reply
    images         int    image_url parts in the request (each adds prompt tokens)
    tool_results   int    tool messages in the request
    queued         float|null  when the request entered the engine's waiting queue (after the
                          front end); null where no engine took it (fixed profile, refused early)
    scheduled      float|null  the start of the engine step that first admitted it
    queue_time     float|null  scheduled - queued: vLLM's queue time (its ``queue_time_ms`` and
                          ``vllm:request_queue_time_seconds``)
    preemptions    int    times the engine preempted it (its blocks freed, computed again later)
    cached_tokens  int    prompt tokens found in the prefix cache at its first admission (usage's
                          ``prompt_tokens_details.cached_tokens``)

Lines are buffered and flushed at least every second, and on shutdown. The file is opened for
appending and each flush is one write of whole lines, so several simulator processes sharing a
port (``--reuse-port``) can share one truth log.
"""

from __future__ import annotations

import orjson


class TruthLog:
    def __init__(self, path: str | None):
        # unbuffered: each flush is one write() of whole lines, atomic among appending processes
        self._f = open(path, "ab", buffering=0) if path else None
        self._buf: list[bytes] = []

    def __bool__(self):
        return self._f is not None

    def record(self, rec: dict) -> None:
        if self._f is not None:
            self._buf.append(orjson.dumps(rec) + b"\n")

    def flush(self) -> None:
        if self._f is not None and self._buf:
            self._f.write(b"".join(self._buf))
            self._buf.clear()

    def close(self) -> None:
        if self._f is not None:
            self.flush()
            self._f.close()
            self._f = None
