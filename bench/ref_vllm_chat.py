"""Reference client for bench/gpu_agreement.py: chat requests sent and timed the way `vllm bench serve`
(its `openai-chat` backend) sends and times them, written anew (asyncio + aiohttp, no vLLM import).

    python bench/ref_vllm_chat.py --url http://127.0.0.1:8000 --model M --prompts prompts.json \
        --requests 128 --concurrency 32 --max-tokens 128 --out ref.json \
        [--connection per-request|keep-alive] [--body vllm|suite]

The benchmark loop is vllm bench's with `--request-rate inf --max-concurrency C`: one task per
request, all created at once, a semaphore of C; the duration runs from before the first task to
after the last completion. Per request (its request function):

  st = perf_counter() before `session.post`; every SSE data event is stamped with perf_counter()
  when parsed (`iter_any()` reads, an incremental buffer split at blank lines, json.loads per
  event); latency = the stamp of the last data event - st; ITL = gaps between events with choices;
  output tokens from the usage the server sends.

Two stamps of the first token are kept: `first_chunk` (vllm bench's TTFT: the first event with
choices, which on a server that sends a role-only chunk first is that chunk) and `ttft` (the
first event with non-empty content: the suite's definition, and vllm bench's on vLLM, which sends
the role with the first token). TPOT = (latency - ttft) / (output tokens - 1) per request.

--connection per-request: a new aiohttp session (and TCP connection) per request, closed after it
(vllm bench up to its connection-pool change). keep-alive: one session whose connector keeps at
most C connections alive and reuses them (vllm bench after it; every OpenAI SDK).

--body vllm: vllm bench's payload (content as a list of one text part, max_completion_tokens,
stream_options.include_usage, temperature 0; plus max_tokens, which transformers serve 5.17 needs) and headers (Content-Type, Authorization, x-request-id;
aiohttp adds Accept */*, Accept-Encoding and its User-Agent). --body suite: the suite's exact bytes
(plugin/context.py `body()`: compact JSON, content a string, max_tokens) and its headers
(Content-Type, Accept: text/event-stream, X-Request-Id, User-Agent llm-loadtest).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid

import aiohttp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_common import sse_events

TIMEOUT = aiohttp.ClientTimeout(total=6 * 60 * 60)


def build_request(args, messages: list[dict], rid: str) -> tuple[dict, bytes | None, dict]:
    """(payload for json=, or None; raw body bytes, or None; headers) for one request."""
    if args.body == "suite":
        body = {
            "model": args.model,
            "messages": messages,
            "max_tokens": args.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            **args.extra,
        }
        raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "X-Request-Id": rid,
            "User-Agent": "llm-loadtest",
        }
        return None, raw, headers
    msgs = [
        {"role": m["role"], "content": [{"type": "text", "text": m["content"]}]} if m["role"] == "user" else m
        for m in messages
    ]
    # max_tokens as well: transformers serve 5.17 reads only max_tokens and ignores max_completion_tokens
    # (its default is then 1024 new tokens; bench/RESULTS.md "Agreement on one H200")
    payload = {
        "model": args.model,
        "messages": msgs,
        "max_completion_tokens": args.max_tokens,
        "max_tokens": args.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
        **args.extra,
    }
    headers = {
        "Content-Type": "application/json",
        "Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY')}",
        "x-request-id": rid,
    }
    return payload, None, headers


async def one_request(session: aiohttp.ClientSession | None, url: str, args, messages: list[dict], rid: str) -> dict:
    payload, raw, headers = build_request(args, messages, rid)
    out = {
        "ok": False,
        "st": 0.0,
        "first_chunk": 0.0,
        "ttft": 0.0,
        "latency": 0.0,
        "output_tokens": 0,
        "itl": [],
        "error": "",
    }
    own = session is None
    if own:
        session = aiohttp.ClientSession(trust_env=True, timeout=TIMEOUT)
    ttft = first_chunk = 0.0
    itl = out["itl"]
    st = time.perf_counter()
    most_recent = st
    try:
        kwargs = {"json": payload} if raw is None else {"data": raw}
        async with session.post(url=url, headers=headers, **kwargs) as response:
            if response.status != 200:
                out["error"] = f"http {response.status}: {(await response.text())[:200]}"
                return out
            async for timestamp, data in sse_events(response):
                if choices := data.get("choices"):
                    content = choices[0].get("delta", {}).get("content")
                    if first_chunk == 0.0:
                        first_chunk = timestamp - st
                    elif ttft:
                        itl.append(timestamp - most_recent)
                    if content and ttft == 0.0:
                        ttft = timestamp - st
                if usage := data.get("usage"):
                    out["output_tokens"] = usage.get("completion_tokens") or 0
                most_recent = timestamp
        out.update(ok=ttft > 0.0, st=st, first_chunk=first_chunk, ttft=ttft, latency=most_recent - st)
        if not out["ok"]:
            out["error"] = "no content"
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"[:200]
    finally:
        if own:
            await session.close()
    return out


async def bench(args) -> dict:
    prompts = json.loads(open(args.prompts).read())
    url = args.url.rstrip("/") + "/v1/chat/completions"
    sem = asyncio.Semaphore(args.concurrency)
    session = None
    if args.connection == "keep-alive":
        connector = aiohttp.TCPConnector(
            limit=args.concurrency,
            limit_per_host=args.concurrency,
            keepalive_timeout=60,
            enable_cleanup_closed=True,
            force_close=False,
        )
        session = aiohttp.ClientSession(connector=connector, trust_env=True, timeout=TIMEOUT)
    prefix = f"ref-{uuid.uuid4().hex[:8]}-"

    async def limited(i: int) -> dict:
        async with sem:
            return await one_request(session, url, args, prompts[i % len(prompts)], f"{prefix}{i}")

    if args.start_when:  # a pair run: start with the other client's first request, not before
        deadline = time.monotonic() + 120
        while not os.path.exists(args.start_when):
            if time.monotonic() > deadline:
                raise SystemExit(f"--start-when: {args.start_when} did not appear within 120 s")
            await asyncio.sleep(0.001)
    t0 = time.perf_counter()
    tasks = [asyncio.create_task(limited(i)) for i in range(args.requests)]
    results = await asyncio.gather(*tasks)
    duration = time.perf_counter() - t0
    if session is not None:
        await session.close()
    return {"t0": t0, "duration": duration, "requests": results}


def figures(run: dict) -> dict:
    """vllm bench's summary figures (ms; per second), from the first-content TTFT (see the docstring);
    `*_first_chunk` rows use vllm bench's literal TTFT (the first event with choices)."""
    import numpy as np

    ok = [r for r in run["requests"] if r["ok"]]
    out = {
        "completed": len(ok),
        "failed": len(run["requests"]) - len(ok),
        "duration": run["duration"],
        "total_output_tokens": int(sum(r["output_tokens"] for r in ok)),
    }
    ttft = np.array([r["ttft"] for r in ok]) * 1e3
    e2e = np.array([r["latency"] for r in ok]) * 1e3
    tpot = np.array([(r["latency"] - r["ttft"]) / (r["output_tokens"] - 1) for r in ok if r["output_tokens"] > 1]) * 1e3
    tpot_fc = (
        np.array([(r["latency"] - r["first_chunk"]) / (r["output_tokens"] - 1) for r in ok if r["output_tokens"] > 1])
        * 1e3
    )
    itl = np.array([x for r in ok for x in r["itl"]]) * 1e3
    for name, v in (
        ("ttft", ttft),
        ("tpot", tpot),
        ("itl", itl),
        ("e2el", e2e),
        ("first_chunk", np.array([r["first_chunk"] for r in ok]) * 1e3),
        ("tpot_first_chunk", tpot_fc),
    ):
        if len(v):
            out[f"mean_{name}_ms"] = float(v.mean())
            out[f"p50_{name}_ms"] = float(np.percentile(v, 50))
            out[f"p99_{name}_ms"] = float(np.percentile(v, 99))
    out["request_throughput"] = len(ok) / run["duration"]
    out["output_throughput"] = out["total_output_tokens"] / run["duration"]
    errors = [r["error"] for r in run["requests"] if r["error"]]
    if errors:
        out["errors"] = errors[:5]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True, help="JSON list of chat message lists, used in turn")
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--connection", choices=["per-request", "keep-alive"], default="per-request")
    ap.add_argument("--body", choices=["vllm", "suite"], default="vllm")
    ap.add_argument("--extra-body", default="", help="JSON merged into every body (suite: e.g. '{\"temperature\": 0}')")
    ap.add_argument("--start-when", default="", help="wait until this file exists before the first request (pair runs)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    args.extra = json.loads(args.extra_body) if args.extra_body else {}
    run = asyncio.run(bench(args))
    fig = figures(run)
    run["figures"] = fig
    with open(args.out, "w") as f:
        json.dump(run, f)
    print(json.dumps({k: v for k, v in fig.items() if not k.startswith("mean_")}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
