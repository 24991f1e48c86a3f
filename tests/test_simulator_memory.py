"""The simulator's KV cache (simulator/kv_cache.py, simulator/prefix.py, the engine's use of them):
blocks allocated as tokens grow, preemption of the newest running request to the front of the
queue, the prefix cache's chained keys, shared blocks and LRU eviction, vLLM's refusal of a long
request; and a real simulator with a tight cache under a long mix, whose /metrics counters, usage
and per-request metrics must agree with its truth log."""

from __future__ import annotations

import asyncio
import json
import random
import urllib.request

import pytest

from core.errors import InputError
from simulator.engine import BatchEngine, Seq, step_duration
from simulator.kv_cache import KVCache, num_gpu_blocks
from simulator.prefix import block_keys
from simulator.profiles import load_profile, profile_from_dict
from simulator.request_body import check_length
from simulator.wire import HttpError
from tests.helpers import read_truth, simulator

FAST = {
    "kind": "batch",
    "scheduler": "chunked",
    "max_num_batched_tokens": 4096,
    "step_base_s": 0.01,
    "per_seq_s": 0.0,
    "per_prefill_token_s": 0.0,
    "max_model_len": 256,
}


def engine(**kw) -> BatchEngine:
    return BatchEngine(profile_from_dict({**FAST, **kw}))


def run_until_done(eng: BatchEngine, limit: int = 10_000) -> int:
    steps = 0
    while eng.has_work() and steps < limit:
        eng.step()
        steps += 1
    return steps


# ---------------------------------------------------------------- sizing
@pytest.mark.unit
def test_blocks_from_gpu_memory_or_the_override():
    p = load_profile("v100-7b-tp8")
    # 8 GPUs x (31.75 GiB x 0.9 - 1 GiB activations) - 12.55 GiB of weights, over 512 KiB x 16 a block
    assert num_gpu_blocks(p) == int((8 * (31.75 * 0.9 - 1.0) - 12.55) * 1024 / 8) == 26630
    assert num_gpu_blocks(profile_from_dict({**FAST, "num_gpu_blocks_override": 77})) == 77


@pytest.mark.unit
def test_a_cache_below_max_model_len_and_the_old_field_are_one_line_errors():
    with pytest.raises(
        InputError,
        match=r"num_gpu_blocks_override: the KV cache holds 15 blocks of 16 tokens, fewer than "
        r"max_model_len \(256\)",
    ):
        profile_from_dict({**FAST, "num_gpu_blocks_override": 15}, "p")
    with pytest.raises(InputError, match="kv_cache_tokens: no longer a field.*num_gpu_blocks_override"):
        profile_from_dict({**FAST, "kv_cache_tokens": 4096}, "p")


# ---------------------------------------------------------------- allocation
@pytest.mark.unit
def test_blocks_are_allocated_as_tokens_grow_not_reserved():
    eng = engine(num_gpu_blocks_override=64)
    s = Seq(20, 40)
    eng.add(s)
    eng.step()  # the prompt's 20 tokens: 2 blocks, not the 4 of prompt + max_tokens
    assert (s.generated, s.computed, s.blocks, eng.kv.used) == (1, 20, 2, 2)
    held = []
    while s.generated < 40:
        eng.step()
        held.append((s.computed, eng.kv.used))
    # a decode step computes the token the step before emitted: the 33rd token takes the 3rd block
    assert (32, 2) in held and (33, 3) in held and (49, 4) in held and (48, 3) in held
    assert eng.kv.used == 0 and eng.kv.num_free() == 64  # the finished sequence freed its blocks
    assert eng.kv_usage() == 0.0


@pytest.mark.unit
def test_a_full_cache_preempts_the_newest_running_request_to_the_front_of_the_queue():
    # 10 blocks of 16 tokens: a (64 prompt tokens) and b (60) take 4 blocks each, d (10) one more
    eng = engine(num_gpu_blocks_override=10, max_model_len=160)
    a, b, d = Seq(64, 80), Seq(60, 80), Seq(10, 50)
    eng.add(a)
    eng.add(b)
    eng.step()
    assert eng.kv.used == 8
    eng.add(d)
    eng.step()  # a's 65th token takes a 5th block, d is admitted with one: the cache is full
    assert eng.kv.used == 10 and eng.num_running == 3 and eng.kv.num_free() == 0
    while not eng.preemptions:
        eng.step()
    # b's 65th token needed a block: the newest running request (d) lost its blocks and leads the queue
    assert b.computed == 65 and d.preemptions == 1 and a.preemptions == b.preemptions == 0
    assert list(eng.waiting) == [d] and d.computed == 0 and d.blocks == 0 and d.generated == 4
    run_until_done(eng)
    # recomputed (its prompt and earlier tokens) and finished, like the others, with exactly max_tokens
    assert [s.generated for s in (a, b, d)] == [80, 80, 50]
    assert eng.kv.used == 0 and eng.preemptions == a.preemptions + b.preemptions + d.preemptions


@pytest.mark.unit
def test_a_recomputed_request_pays_its_tokens_as_prefill():
    eng = engine(num_gpu_blocks_override=16, per_prefill_token_s=0.001, per_seq_s=0.1)
    s = Seq(30, 10)
    eng.add(s)
    eng.step()
    eng.step()
    assert s.generated == 2
    eng.running.remove(s)  # preempt by hand, as the engine does
    eng._preempt(s)
    d, emitted = eng.step()  # 30 prompt + 2 generated tokens computed again, one new token
    assert emitted == [s] and s.generated == 3 and abs(d - step_duration(eng.p, 0, 32, 0)) < 1e-12


# ---------------------------------------------------------------- prefix cache
def keyed(prompt: int, keys: list[int], max_tokens: int = 4) -> Seq:
    return Seq(prompt, max_tokens, keys=keys)


@pytest.mark.unit
def test_prefix_blocks_are_shared_while_in_use_and_evicted_least_recently_released_first():
    kv = KVCache(8, 16, True)
    a = keyed(50, [1, 2, 3])  # 3 full blocks + 2 tokens
    assert kv.lookup(a) == [] and kv.admit(a, [], 50)
    a.computed = 50
    kv.register(a)
    assert set(kv.cached) == {1, 2, 3} and kv.used == 4
    b = keyed(50, [1, 2, 3])
    hit = kv.lookup(b)
    assert [x.key for x in hit] == [1, 2, 3] and kv.admit(b, hit, 50 - 48)
    assert b.computed == 48 and kv.used == 5 and [x.refs for x in hit] == [2, 2, 2]  # shared, counted once
    kv.free(a)
    assert kv.used == 4 and not kv.evictable  # b still holds the shared blocks
    kv.free(b)
    assert kv.used == 0 and list(kv.evictable) == [3, 2, 1]  # the first block released last
    assert kv.num_free() == 8 and kv.free_plain == 5
    c = Seq(96, 4)  # 6 blocks: the 5 plain ones, then the least recently released cached one
    assert kv.admit(c, [], 96)
    assert set(kv.cached) == {1, 2} and kv.usage() == 6 / 8
    d = keyed(50, [1, 2, 3])
    assert [x.key for x in kv.lookup(d)] == [1, 2]  # chained: found up to the evicted block


@pytest.mark.unit
def test_a_fully_cached_prompt_computes_its_last_token():
    kv = KVCache(8, 16, True)
    a = keyed(32, [7, 8])
    kv.admit(a, [], 32)
    a.computed = 32
    kv.register(a)
    b = keyed(32, [7, 8])
    assert [x.key for x in kv.lookup(b)] == [7]  # at most 31 of 32 tokens: one block


@pytest.mark.unit
def test_prefix_counters_count_a_request_once_and_its_hits_are_its_cached_tokens():
    eng = engine(num_gpu_blocks_override=16, enable_prefix_caching=True, max_num_seqs=1)
    keys = block_keys([(11, 40), (12, 30)], 70, 16)  # a system prompt of 40 tokens, then the rest
    first, second = keyed(70, keys, 3), keyed(70, keys, 3)
    eng.add(first)
    eng.add(second)
    run_until_done(eng)
    assert first.cached_tokens == 0 and second.cached_tokens == 64  # 4 full blocks of 70 tokens
    assert (eng.kv.queries, eng.kv.hits) == (140, 64)


@pytest.mark.unit
def test_block_keys_are_shared_up_to_the_end_of_the_part_where_a_block_ends():
    shared = block_keys([(1, 40), (2, 30)], 70, 16)
    other_user = block_keys([(1, 40), (3, 30)], 70, 16)
    # blocks 0-1 (tokens 0-31) end inside the shared first part; block 2 (32-47) ends in the second
    assert shared[:2] == other_user[:2] and shared[2:] != other_user[2:] and len(shared) == 4
    assert block_keys([(9, 40), (2, 30)], 70, 16)[0] != shared[0]
    assert block_keys([(1, 10)], 10, 16) == []  # no full block


# ---------------------------------------------------------------- max_model_len
@pytest.mark.unit
def test_a_request_longer_than_max_model_len_gets_vllms_words():
    with pytest.raises(HttpError) as e:
        check_length(90, 20, 100)
    assert e.value.status == 400 and e.value.message == (
        "'max_tokens' or 'max_completion_tokens' is too large: 20. This model's maximum context length is 100 tokens "
        "and your request has 90 input tokens (20 > 100 - 90)."
    )
    with pytest.raises(HttpError) as e:
        check_length(100, None, 100)
    assert e.value.message == (
        "This model's maximum context length is 100 tokens. However, your request has 100 "
        "input tokens. Please reduce the length of the input messages."
    )
    check_length(90, 10, 100)


# ---------------------------------------------------------------- a real simulator
TIGHT = """kind: batch
scheduler: chunked
max_num_seqs: 64
max_num_batched_tokens: 4096
max_model_len: 1536
block_size: 16
num_gpu_blocks_override: 96
step_base_s: 0.002
per_seq_s: 0.0
per_prefill_token_s: 0.0
enable_prefix_caching: true
enable_prompt_tokens_details: true
enable_per_request_metrics: true
"""
SYSTEM = [
    "You answer questions about load tests of inference servers, briefly. " * 6,
    "Reply in the voice of a careful performance engineer who checks every figure. " * 6,
]


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


async def _drive(url: str, n: int, concurrency: int) -> tuple[dict, list[float], list[float], tuple[int, str]]:
    """`n` streamed chat requests of a long mix, `concurrency` at a time, while /metrics is read
    every 20 ms; the final usage chunk of each (by request id), the KV use and waiting seen, and
    the answer to one request longer than max_model_len."""
    import aiohttp

    rng = random.Random(5)
    usage: dict[str, dict] = {}
    kv, waiting = [], []
    done = asyncio.Event()
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession() as session:

        async def one(i: int) -> None:
            long = rng.random() < 0.2
            text = "context " * rng.randint(200, 400) if long else "question " * rng.randint(20, 150)
            msgs = [{"role": "system", "content": SYSTEM[i % 2]}, {"role": "user", "content": f"{i} {text}"}]
            body = {
                "model": "m",
                "messages": msgs,
                "max_tokens": rng.randint(150, 300) if long else rng.randint(40, 160),
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            async with (
                sem,
                session.post(url + "/v1/chat/completions", json=body, headers={"X-Request-Id": f"r{i}"}) as r,
            ):
                async for line in r.content:
                    if line.startswith(b"data: {") and b'"usage"' in line:
                        chunk = json.loads(line[6:])
                        usage[chunk["id"]] = chunk

        async def scrape() -> None:
            while not done.is_set():
                async with session.get(url + "/metrics") as r:
                    text = await r.text()
                kv.append(_metric(text, "vllm:kv_cache_usage_perc"))
                waiting.append(_metric(text, "vllm:num_requests_waiting"))
                await asyncio.sleep(0.02)

        scraper = asyncio.create_task(scrape())
        await asyncio.gather(*(one(i) for i in range(n)))
        done.set()
        await scraper
        too_long = {"model": "m", "messages": [{"role": "user", "content": "x" * 4000}], "max_tokens": 600}
        async with session.post(url + "/v1/chat/completions", json=too_long) as r:
            refused = (r.status, await r.text())
    return usage, kv, waiting, refused


@pytest.mark.process
def test_a_tight_cache_under_a_long_mix_agrees_with_the_truth_log(tmp_path):
    """96 blocks (1,536 tokens) against 16 requests at a time (32 in all) of a mix with 20 % long ones: the cache
    fills, the newest requests are preempted and requests wait; every counter /metrics shows at the
    end is the truth log's sum, and each stream's usage and per-request metrics are its own line's."""
    profile, truth = tmp_path / "tight.yaml", str(tmp_path / "truth.jsonl")
    profile.write_text(TIGHT)
    with simulator("--profile", str(profile), truth_log=truth) as url:
        usage, kv, waiting, refused = asyncio.run(_drive(url, 32, 16))
        text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    lines = [r for r in read_truth(truth) if r["outcome"] == "ok"]
    assert len(lines) == 32 and len(usage) == 32
    assert refused == (
        400,
        json.dumps(
            {
                "error": {
                    "message": "'max_tokens' or 'max_completion_tokens' is too large: 600. This model's maximum context length is "
                    "1536 tokens and your request has 1004 input tokens (600 > 1536 - 1004).",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            },
            separators=(",", ":"),
        ),
    )
    # the cache ran full and requests waited
    assert max(kv) >= 0.9 and max(waiting) >= 1, (max(kv), max(waiting))
    preemptions = sum(r["preemptions"] for r in lines)
    assert preemptions > 0 and _metric(text, "vllm:num_preemptions_total") == preemptions
    cached = sum(r["cached_tokens"] for r in lines)
    assert cached > 0 and _metric(text, "vllm:prefix_cache_hits_total") == cached
    assert _metric(text, "vllm:prefix_cache_queries_total") == sum(r["prompt_tokens"] for r in lines)
    assert abs(_metric(text, "vllm:request_queue_time_seconds_sum") - sum(r["queue_time"] for r in lines)) < 1e-6
    assert 'vllm:cache_config_info{block_size="16",' in text and 'num_gpu_blocks="96"' in text
    assert 'enable_prefix_caching="True"' in text and 'max_num_seqs="64"' in text
    for r in lines:
        u = usage[r["request_id"]]
        # a preempted request still streams exactly max_tokens tokens
        assert u["usage"]["completion_tokens"] == r["output_tokens"]
        assert u["usage"].get("prompt_tokens_details", {"cached_tokens": 0})["cached_tokens"] == r["cached_tokens"]
        m = u["metrics"]
        assert abs(m["queue_time_ms"] - 1000 * (r["scheduled"] - r["queued"])) < 1e-6
        assert abs(m["time_to_first_token_ms"] - 1000 * (r["first_token"] - r["scheduled"])) < 1e-6
        assert abs(m["generation_time_ms"] - 1000 * (r["last_token"] - r["first_token"])) < 1e-6
        assert abs(m["mean_itl_ms"] - m["generation_time_ms"] / (r["output_tokens"] - 1)) < 1e-6
        assert abs(m["tokens_per_second"] - r["output_tokens"] / (r["last_token"] - r["scheduled"])) < 1e-6
        assert r["arrival"] <= r["queued"] <= r["scheduled"] < r["first_token"]
    assert any(r["preemptions"] for r in lines) and any(r["cached_tokens"] for r in lines)


# ---------------------------------------------------------------- the limit profiles
@pytest.mark.unit
def test_each_limit_profile_hits_its_limit_in_virtual_time():
    """The bundled limit profiles, driven by the default mix in virtual time (the server's own
    step arithmetic): each one's figures at a load past its limit and at a light one, as its file
    and docs/simulator.md state them."""
    from simulator.virtual import simulate_closed_loop

    def at(name, users):
        return simulate_closed_loop(load_profile(name), users, duration_s=60.0, warmup_s=10.0, seed=3)

    light, heavy = at("memory-bound", 2), at("memory-bound", 16)
    assert light["mean_waiting"] < 0.5 and heavy["kv_peak"] > 0.95 and heavy["preemptions"] > 0
    assert heavy["mean_waiting"] > 4 and heavy["mean_running"] < 12, heavy
    light, heavy = at("scheduler-bound", 4), at("scheduler-bound", 16)
    assert light["mean_waiting"] < 0.5 and heavy["mean_running"] > 7.5 and heavy["mean_waiting"] > 4
    assert heavy["kv_peak"] < 0.15 and heavy["preemptions"] == 0, heavy
    light, heavy = at("prefill-bound", 4), at("prefill-bound", 32)
    assert light["mean_waiting"] < 0.5 and heavy["mean_waiting"] > 2 and heavy["mean_running"] < 28
    assert heavy["budget_steps"] > 0.8 and heavy["mean_step_s"] < 0.03 and heavy["kv_peak"] < 0.3, heavy
    assert heavy["ttft_mean"] > 5 * light["ttft_mean"]
    light, heavy = at("compute-bound", 4), at("compute-bound", 24)
    assert heavy["mean_waiting"] < 0.5 and heavy["mean_running"] > 20 and heavy["budget_steps"] == 0
    assert light["mean_step_s"] < 0.045 and heavy["mean_step_s"] > 0.1, (light, heavy)


@pytest.mark.unit
def test_a_prefill_first_engine_preempts_in_its_decode_step_and_readmits_whole():
    # vLLM V0 scheduling: a prefill step of whole prompts, else a decode step of every running request
    eng = engine(scheduler="prefill_first", num_gpu_blocks_override=10, max_model_len=160)
    a, b = Seq(64, 80), Seq(60, 80)
    eng.add(a)
    eng.add(b)
    eng.step()  # one prefill step: both whole prompts
    assert (a.generated, b.generated, eng.kv.used) == (1, 1, 8)
    while not eng.preemptions:
        eng.step()
    assert b.preemptions == 1 and a.preemptions == 0 and list(eng.waiting) == [b] and b.blocks == 0
    kept = b.generated
    while eng.waiting:  # a decodes alone until b's prompt and tokens fit again (after a ends)
        d, emitted = eng.step()
    # b comes back in a prefill step of its prompt and the tokens it had sent, whole
    assert a.generated == 80 and emitted == [b] and b.generated == kept + 1
    assert abs(d - step_duration(eng.p, 0, 60 + kept, 0)) < 1e-12
    run_until_done(eng)
    assert b.generated == 80 and eng.kv.used == 0
