"""Where the simulator writes the role-only chunk of a chat stream (profile field `role_chunk`).

vLLM writes the response head at once and the role-only chunk in the same write as the first
content token; transformers serve writes the role chunk at once. Tools that time TTFT to the first
chunk see the difference, so the simulator's vLLM-like profiles (the default) do as vLLM does.
"""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.test_simulator import start_sim

pytestmark = pytest.mark.process

TTFT = 0.3


def _stream(port: int) -> list[tuple[float, bytes]]:
    """Every recv of one streamed chat request, with its time after the request was sent."""
    body = json.dumps(
        {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}
    ).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    t0 = time.perf_counter()
    s.sendall(head + body)
    reads, buf = [], b""
    while b"[DONE]" not in buf:
        data = s.recv(65536)
        if not data:
            break
        reads.append((time.perf_counter() - t0, data))
        buf += data
    s.close()
    return reads


@pytest.mark.parametrize("mode", ["with_first_token", "at_once", None])
def test_role_chunk_timing(tmp_path, mode):
    profile = {"kind": "fixed", "ttft_s": TTFT, "itl_s": 0.05}
    if mode is not None:
        profile["role_chunk"] = mode
    sim = start_sim(tmp_path, profile=profile)
    try:
        reads = _stream(sim.port)
    finally:
        sim.stop()
    role_at = next(t for t, d in reads if b'"role":"assistant"' in d)
    first_content_at = next(t for t, d in reads if b'"content":"' in d)
    head_at = reads[0][0]
    assert head_at < TTFT / 2  # the head always comes at once
    if mode == "at_once":
        assert role_at < TTFT / 2 < first_content_at
    else:  # the default is vLLM's behaviour: one write holds the role chunk and the first token
        assert role_at >= TTFT * 0.9
        together = next(d for t, d in reads if b'"role":"assistant"' in d)
        assert b'"content":"' in together and together.index(b'"role"') < together.index(b'"content"')
