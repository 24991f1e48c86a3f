"""Reference client for bench/client_speed.py: asyncio + aiohttp in the style of `vllm bench serve`.

The request loop follows vLLM's benchmark request function for the completions endpoint
(vllm/benchmarks/lib/endpoint_request_func.py, `async_request_openai_completions`; written
anew here, not copied): one shared `aiohttp.ClientSession` with a keep-alive `TCPConnector`,
`async for chunk_bytes in response.content.iter_any()`, strip the bytes, feed an incremental
UTF-8 buffer that splits SSE messages at blank lines (and, like vLLM's handler, tries
`json.loads` on an unterminated tail to see whether it is complete), drop the `data: ` prefix,
skip `[DONE]`, take `time.perf_counter()` and `json.loads` once per event. TTFT is the first
event with choices, as in vLLM (the completions endpoint has no role-only first chunk, so this
is also the suite's definition).

What it adds for the benchmark: N closed-loop streams (each one coroutine sending request after
request, like N Locust users), `X-Sim-Timestamps: 1` so every chunk carries the simulator's send
time, and its own measurement window saved in the format of bench/client_common.py.

    python bench/ref_aiohttp.py --url http://127.0.0.1:8000 --streams 200 --out /tmp/ref.npz
    python bench/ref_aiohttp.py ... --uvloop

Bounded: streams stop sending at the end of the window and finish the request in flight.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import os
import sys
import time

import aiohttp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_common import cpu_seconds, save, sse_events


class State:
    def __init__(self, args):
        self.args = args
        self.stopping = False
        self.chunk_t = array.array("d")
        self.chunk_lag = array.array("d")
        self.req_id: list[str] = []
        self.req_send = array.array("d")
        self.req_first = array.array("d")
        self.errors = 0
        self.tag = f"ref{os.getpid()}"


async def one_request(session: aiohttp.ClientSession, url: str, rid: str, st_: State) -> None:
    args = st_.args
    payload = {
        "model": args.model,
        "prompt": args.prompt,
        "max_tokens": args.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    headers = {"Content-Type": "application/json", "X-Request-Id": rid, "X-Sim-Timestamps": "1"}
    chunk_t, chunk_lag = st_.chunk_t, st_.chunk_lag
    first = 0.0
    st = time.perf_counter()
    try:
        async with session.post(url=url, json=payload, headers=headers) as response:
            if response.status != 200:
                await response.read()
                st_.errors += 1
                return
            async for timestamp, data in sse_events(response):
                if choices := data.get("choices"):
                    _text = choices[0].get("text")
                    if not first:
                        first = timestamp
                    chunk_t.append(timestamp)
                    chunk_lag.append(timestamp - data["sim_t"])
                elif usage := data.get("usage"):
                    _tokens = usage.get("completion_tokens")
    except Exception:
        st_.errors += 1
        return
    if first:
        st_.req_id.append(rid)
        st_.req_send.append(st)
        st_.req_first.append(first)


async def stream_user(i: int, session, url: str, st_: State, start_at: float) -> None:
    await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
    n = 0
    while not st_.stopping:
        n += 1
        await one_request(session, url, f"{st_.tag}-{i}-{n}", st_)


async def main_async(args) -> None:
    st_ = State(args)
    url = args.url.rstrip("/") + "/v1/completions"
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60, enable_cleanup_closed=True, force_close=False)
    t0 = time.perf_counter()
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=6 * 3600)) as session:
        users = [
            asyncio.create_task(stream_user(i, session, url, st_, t0 + args.ramp * i / args.streams))
            for i in range(args.streams)
        ]
        await asyncio.sleep(max(0.0, t0 + args.warmup - time.perf_counter()))
        w0, c0 = time.perf_counter(), cpu_seconds()
        await asyncio.sleep(max(0.0, w0 + args.duration - time.perf_counter()))
        w1, c1 = time.perf_counter(), cpu_seconds()
        st_.stopping = True
        try:
            await asyncio.wait_for(asyncio.gather(*users), timeout=args.drain)
        except TimeoutError:
            pass
    save(args.out, (w0, w1), (c0, c1), st_.chunk_t, st_.chunk_lag, st_.req_id, st_.req_send, st_.req_first)
    print(f"ref_aiohttp: {len(st_.req_id)} requests, {len(st_.chunk_t)} chunks, {st_.errors} errors", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--model", default="sim-model")
    ap.add_argument("--prompt", default="Tell me about the load test of an inference server. " * 3)
    ap.add_argument("--warmup", type=float, default=8.0)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--ramp", type=float, default=2.0)
    ap.add_argument("--drain", type=float, default=15.0)
    ap.add_argument("--uvloop", action="store_true")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.uvloop:
        import uvloop

        uvloop.run(main_async(args))
    else:
        asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
