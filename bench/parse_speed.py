"""CPU per output token of the parse after a stream (metrics.sse.parse_reads), with the text template
and with every event parsed in full (TEMPLATE_TRIES = 0), on the event shapes of vLLM's completions
and chat streams: one HTTP chunk per event, one read per chunk, 128 tokens a request.

    .venv/bin/python bench/parse_speed.py [--requests 2000] [--repeats 3]

Thread CPU time (a busy machine's other processes do not count), the best of the repeats.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import metrics.sse as sse

TOKENS = 128


def event(i: int, last: bool, chat: bool) -> bytes:
    """A vLLM chat or completions event carrying token `i` (the last one with its finish reason)."""
    choice = {"index": 0, "logprobs": None, "finish_reason": "length" if last else None}
    choice.update({"delta": {"content": f" tok{i}"}} if chat else {"text": f" tok{i}"})
    body = {
        "id": "chatcmpl-5a14eaac00000001" if chat else "cmpl-5a14eaac00000001",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": 1796604786,
        "model": "sim-model",
        "choices": [choice],
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


def reads_of(chat: bool) -> list[bytes]:
    events = [event(i, i == TOKENS - 1, chat) for i in range(TOKENS)]
    events.append(b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":128}}\n\n')
    events.append(b"data: [DONE]\n\n")
    reads = [b"%x\r\n%s\r\n" % (len(e), e) for e in events]
    reads[-1] += b"0\r\n\r\n"
    return reads


def per_token_us(reads: list[bytes], requests: int, repeats: int) -> float:
    times = [0.02 * i for i in range(len(reads))]
    best = float("inf")
    for _ in range(repeats):
        t = time.thread_time()
        for _ in range(requests):
            sse.parse_reads(times, reads, True)
        best = min(best, time.thread_time() - t)
    return 1e6 * best / (requests * TOKENS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print("| stream | parse, every event in full (µs/token) | parse with the text template (µs/token) | ratio |")
    print("|---|---|---|---|")
    for name, chat in (("vLLM completions", False), ("vLLM chat", True)):
        reads = reads_of(chat)
        tries = sse.TEMPLATE_TRIES
        sse.TEMPLATE_TRIES = 0
        full = per_token_us(reads, args.requests, args.repeats)
        sse.TEMPLATE_TRIES = tries
        fast = per_token_us(reads, args.requests, args.repeats)
        print(f"| {name} | {full:.2f} | {fast:.2f} | {fast / full:.2f} |")


if __name__ == "__main__":
    main()
