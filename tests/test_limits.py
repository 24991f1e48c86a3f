"""Each limit the diagnosis names is one rule (metrics/limits.py), checked here on hand-made scrapes of
vLLM's metrics through the same path a run's take (metrics/diagnosis.py level_evidence, the server's
stated configuration, diagnose): what it names, the figures it quotes (a cap is a peak or the
server's configured maximum, never a mean, never above the level's users), what it says where the
evidence does not separate two limits or nothing is near one, and the level's server window that
starts only once the level before it has drained."""

from __future__ import annotations

import json

import pandas as pd

from metrics.diagnosis import diagnose, level_evidence, server_config
from metrics.schema.server_side import LevelEvidence

CONFIG = {"block_size": "16", "num_gpu_blocks": "8192", "gpu_memory_utilization": "0.9"}
SCHEDULER = {"max_num_seqs": "8", "max_num_batched_tokens": "4096", "max_model_len": "4096"}


def scrapes(levels, config=None) -> pd.DataFrame:
    """One scrape a second of vLLM's gauges, counters and histograms, as the scraper keeps them
    (timestamp, metric, value, labels): for each level a dict of (start, end) and its figures per
    scrape: running, waiting, kv, and per second: preemptions, queue (seconds waited, over requests
    scheduled), prefill (seconds, over requests), tokens (per step, over steps)."""
    rows, totals = [], {}

    def add(t, metric, value, labels="{}"):
        rows.append((float(t), metric, float(value), labels))

    def grow(t, name, by):
        totals[name] = totals.get(name, 0.0) + by
        add(t, name, totals[name])

    for lv in levels:
        for t in range(lv["start"], lv["end"] + 1):
            running = lv["running"](t) if callable(lv["running"]) else lv["running"]
            waiting = lv["waiting"](t) if callable(lv["waiting"]) else lv["waiting"]
            add(t, "vllm:num_requests_running", running)
            add(t, "vllm:num_requests_waiting", waiting)
            add(t, "vllm:kv_cache_usage_perc", lv["kv"])
            grow(t, "vllm:num_preemptions_total", lv.get("preemptions", 0))
            for name, (per_request, requests) in (
                ("vllm:request_queue_time_seconds", lv.get("queue", (0.0, 4))),
                ("vllm:request_prefill_time_seconds", lv.get("prefill", (0.02, 4))),
                ("vllm:iteration_tokens_total", lv.get("tokens", (8, 40))),
            ):
                grow(t, name + "_sum", per_request * requests)
                grow(t, name + "_count", requests)
            add(t, "vllm:cache_config_info", 1.0, json.dumps(CONFIG, sort_keys=True))
            if config is not None:
                add(t, "llm_simulator_scheduler_config_info", 1.0, json.dumps(config, sort_keys=True))
    return pd.DataFrame(rows, columns=["timestamp", "metric", "value", "labels"])


def run(levels, config=None, client=None, knee=None, client_lag_ms=None):
    """The diagnosis of `levels` (each also with users, step_ms, rate, ttft, prompt), at `knee`
    (default: the highest); `client` the client's warning, `client_lag_ms` its worst read lag."""
    server = scrapes(levels, config)
    evidence, names = level_evidence(
        server, [(i, lv["users"], lv["start"] + 0.5, lv["end"]) for i, lv in enumerate(levels)]
    )
    evidence = [
        e.model_copy(
            update={
                "step_ms": lv.get("step_ms", 20.0),
                "request_rate": lv.get("rate", 10.0),
                "ttft_ms": lv.get("ttft", 50.0),
                "prompt_tokens": lv.get("prompt", 300.0),
                "rate": lv.get("rps"),  # a level of a search in requests/s
            }
        )
        for e, lv in zip(evidence, levels)
    ]
    cfg, source = server_config(server)
    if source:
        names["config"] = source
    return diagnose(
        evidence,
        knee or max(lv.get("rps") or lv["users"] for lv in levels),
        names,
        client=client or "",
        config=cfg,
        client_lag_ms=client_lag_ms,
    )


LOW = {"start": 0, "end": 10, "users": 2, "running": 2, "waiting": 0, "kv": 0.02}


def level(**kw):
    return {"start": 11, "end": 30, **kw}


def test_the_server_states_its_limits_in_its_info_gauges():
    cfg, source = server_config(scrapes([LOW], SCHEDULER))
    assert cfg == {
        "max_num_seqs": 8,
        "max_num_batched_tokens": 4096,
        "num_gpu_blocks": 8192,
        "block_size": 16,
        "gpu_memory_utilization": 0.9,
        "max_model_len": 4096,
    }
    assert source == "vllm:cache_config_info, llm_simulator_scheduler_config_info"
    assert server_config(scrapes([LOW])) == (
        {"num_gpu_blocks": 8192, "block_size": 16, "gpu_memory_utilization": 0.9},
        "vllm:cache_config_info",
    )
    # the reports read the labels of server_metrics.parquet as "k=v,..." text
    flat = scrapes([LOW], SCHEDULER)
    flat["labels"] = flat["labels"].map(lambda t: ",".join(f"{k}={v}" for k, v in json.loads(t).items()))
    assert server_config(flat)[0]["max_num_seqs"] == 8


def test_memory_bound_the_kv_cache_full_and_preempting():
    slots = SCHEDULER | {"max_num_seqs": "64"}
    d = run([LOW, level(users=24, running=9, waiting=14, kv=0.97, preemptions=2, queue=(1.5, 4))], slots)
    assert d.kind == "memory-bound", d.sentence
    assert "KV cache of 8,192 blocks (vllm:cache_config_info) is full (peak 97%" in d.sentence
    assert any("vllm:num_preemptions_total +36" in e for e in d.evidence), d.evidence  # 19 scrapes, 18 seconds
    assert any("vllm:kv_cache_usage_perc peak 97%" in e for e in d.evidence)
    # as vLLM states it (no scheduler limits): a preempted request is prefilled again, so its grown
    # prefill time says nothing of the budget, and the cache alone is named
    recompute = run(
        [LOW, level(users=24, running=9, waiting=14, kv=0.97, preemptions=2, queue=(1.5, 4), prefill=(0.5, 4))]
    )
    assert recompute.kind == "memory-bound", recompute.sentence
    # full with a request's worth free: 13 running hold 89 %, about 7 % each, room for fewer than two more
    assert run([LOW, level(users=24, running=13, waiting=11, kv=0.89, queue=(1.5, 4))], slots).kind == "memory-bound"


def test_scheduler_bound_every_slot_taken_at_its_stated_max_num_seqs():
    d = run([LOW, level(users=24, running=8, waiting=16, kv=0.05, queue=(1.6, 5))], SCHEDULER)
    assert d.kind == "scheduler-bound", d.sentence
    assert "at most 8 (its max_num_seqs)" in d.sentence and d.config["max_num_seqs"] == 8
    assert any(
        e.endswith(
            "each request waits 1,600 ms on average to be scheduled (vllm:request_queue_time_seconds_sum / "
            "vllm:request_queue_time_seconds_count) against one engine step of 20 ms (ITL p50)"
        )
        for e in d.evidence
    ), d.evidence
    assert any("max_num_seqs 8 (vllm:cache_config_info, llm_simulator_scheduler_config_info)" in e for e in d.evidence)


def test_prefill_bound_steps_full_of_prompt_tokens_and_still_short():
    budget = {**SCHEDULER, "max_num_seqs": "32", "max_num_batched_tokens": "48"}
    d = run(
        [
            {**LOW, "tokens": (6, 40)},
            level(
                users=48,
                running=20,
                waiting=12,
                kv=0.15,
                queue=(0.9, 5),
                tokens=(46, 40),
                step_ms=26.0,
                ttft=900.0,
                prompt=330.0,
            ),
        ],
        budget,
    )
    assert d.kind == "prefill-bound", d.sentence
    assert (
        "96% of its budget of 48 tokens (max_num_batched_tokens)" in d.sentence
        and "1.3x the lowest level" in d.sentence
    )
    assert any("TTFT p50 900 ms against 50 ms at 2 users, steps (ITL p50) 26 ms against 20 ms" in e for e in d.evidence)
    assert any(
        "46.0 tokens per engine step (vllm:iteration_tokens_total_sum / vllm:iteration_tokens_total_count)" in e
        for e in d.evidence
    )
    # steps that grew with the batch are not a budget limit: the same queue, twice as long a step
    assert (
        run(
            [
                {**LOW, "tokens": (6, 40)},
                level(users=48, running=20, waiting=12, kv=0.15, queue=(0.9, 5), tokens=(46, 40), step_ms=45.0),
            ],
            budget,
        ).kind
        != "prefill-bound"
    )


def test_prefill_bound_without_a_stated_budget_from_the_servers_prefill_time():
    """A server that states no limits (vLLM states no scheduler limits): the prefill time grows
    tenfold at a queue while the steps stay short: prompts wait for the budget; a queue whose
    prefill time stays as it was is not."""
    d = run([LOW, level(users=48, running=20, waiting=12, kv=0.15, queue=(0.9, 5), prefill=(0.2, 4), step_ms=24.0)])
    assert d.kind == "prefill-bound" and "not stated by the server" in d.sentence, d.sentence
    # a prefill time as it was cannot tell: a server may hold prompts in its queue until the budget has
    # room, as one whose slots are full does; without either limit stated, it says so
    slots = run([LOW, level(users=24, running=8, waiting=16, kv=0.05, queue=(1.6, 5))])
    assert slots.kind == "undecided" and slots.candidates == ["scheduler-bound", "prefill-bound"], slots.sentence
    # with max_num_seqs stated and not reached, the budget is what is left: named by elimination
    left = run([LOW, level(users=24, running=5, waiting=16, kv=0.05, queue=(1.6, 5))], {"max_num_seqs": "32"})
    assert left.kind == "prefill-bound" and "no other limit explains it" in left.sentence, left.sentence
    # and the slots, by elimination, where the server states its budget but not its slots: the cap is
    # the running gauge's peak, never a mean
    budget = run(
        [LOW, level(users=24, running=lambda t: 8 if t % 3 else 7, waiting=16, kv=0.05, queue=(1.6, 5))],
        {"max_num_batched_tokens": "4096"},
    )
    assert (
        budget.kind == "scheduler-bound"
        and "at most 8 at once (the peak of vllm:num_requests_running" in budget.sentence
    )


def test_compute_bound_nothing_waits_and_every_step_grows_with_the_batch():
    d = run([LOW, level(users=24, running=23, waiting=1, kv=0.3, step_ms=140.0)], SCHEDULER | {"max_num_seqs": "256"})
    assert d.kind == "compute-bound" and "140 ms, 7.0x the 20 ms at 2 users" in d.sentence, d.sentence
    # a queue of the step in progress only: 3 waiting at 12 requests/s wait 250 ms, within two 300 ms steps
    step = run(
        [
            {**LOW, "queue": (0.15, 4)},
            level(users=24, running=18, waiting=3.0, kv=0.01, step_ms=300.0, rate=12.0, queue=(0.25, 4)),
        ]
    )
    assert (
        step.kind == "compute-bound"
        and "wait only for the step in progress (mean 3.0 waiting, 250 ms each)" in step.sentence
    )


def test_an_idle_server_is_no_limit_with_the_nearest_one_and_its_headroom():
    """2 users whose steps take as long as at 1: not compute-bound (the old rule said so); the slots
    are the nearest limit, 2 of 8 running at the peak."""
    d = run([{**LOW, "users": 1, "running": 1}, level(users=2, running=2, waiting=0, kv=0.03)], SCHEDULER)
    assert d.kind == "no limit reached" and d.nearest == "scheduler-bound" and d.headroom == 0.75, d.sentence
    assert (
        "the nearest limit is scheduler-bound: the slots (2 of max_num_seqs 8 running at the peak), 75% headroom"
        in d.sentence
    )
    assert "nothing waits for a slot (mean 0.0 waiting) and steps take 1.0x as long as at 1 user;" in d.sentence, (
        d.sentence
    )
    # requests counted as waiting, each only for the step in progress (10 ms): said so, not "nothing
    # waits for a slot (mean 10.0 waiting)"
    brief = run(
        [{**LOW, "users": 1, "running": 1}, level(users=40, running=20, waiting=10, kv=0.05, queue=(0.01, 4))],
        SCHEDULER | {"max_num_seqs": "128"},
    )
    assert brief.kind == "no limit reached", brief.sentence
    assert "requests wait only for the step in progress (mean 10.0 waiting, 10 ms each)" in brief.sentence
    # a lowest level with no request ended OK has no step time: unknown, not "0 ms"
    bare = run([{**LOW, "users": 1, "running": 1, "step_ms": None}, level(users=2, running=2, waiting=0, kv=0.03)])
    assert "the step time is not known" in bare.sentence, bare.sentence
    assert any("steps (ITL p50) 20 ms against unknown" in e for e in bare.evidence), bare.evidence
    alone = run([level(users=2, running=2, waiting=0, kv=0.03)])  # one level, nothing stated: KV is what can be told
    assert alone.kind == "no limit reached" and "the lowest level, so no step growth" in alone.sentence
    assert alone.nearest == "memory-bound"
    # the same, with the client flagged: the knee is the client's
    client = run(
        [{**LOW, "users": 1, "running": 1}, level(users=2, running=2, waiting=0, kv=0.03)], SCHEDULER, client="late."
    )
    assert client.kind == "client-bound" and "the knee is the client's" in client.sentence


def test_a_first_token_late_outside_the_engine_is_the_front_end():
    """The reference profile's knee as a web-form search measured it: at 93 users the first token
    comes 1.5 s later than at 1 user, while the engine's queue (10 ms) and prefill (30 ms) are as
    they were and 69 of 128 slots run: the wait is in the API server, not the client's (its reads
    were 13 ms late at worst) nor a limit of the engine. A rise the client's lag could explain, or
    one that the engine's own queue carries, is not the front end's."""
    low = {**LOW, "users": 1, "running": 1, "ttft": 311.0, "step_ms": 19.0, "queue": (0.0, 4), "prefill": (0.027, 4)}
    knee = level(users=93, running=69, waiting=24, kv=0.11, ttft=1847.0, step_ms=23.0, queue=(0.010, 8))
    knee["prefill"] = (0.030, 8)
    cfg = {**SCHEDULER, "max_num_seqs": "128", "max_num_batched_tokens": "2448"}
    d = run([low, knee], cfg)
    assert d.kind == "front-end-bound", d.sentence
    assert "the engine's own queue and prefill account for 13 ms" in d.sentence
    assert any("TTFT p50 rose 1,536 ms" in e and "vllm:request_queue_time_seconds_sum" in e for e in d.evidence)
    late = run([low, knee], cfg, client="the client was late.", client_lag_ms=13.0)
    assert late.kind == "front-end-bound" and "the knee's place may be off" in late.sentence, late.sentence
    # a client whose reads were 0.6 s late could account for the rise: not put on the server
    slow = run([low, knee], cfg, client="the client was late.", client_lag_ms=600.0)
    assert slow.kind == "client-bound", slow.sentence
    # the same rise carried by the engine's queue (every slot taken): the slots, not the front end
    queued = level(users=24, running=8, waiting=16, kv=0.05, ttft=1847.0, step_ms=23.0, queue=(1.5, 8))
    assert run([low, queued], SCHEDULER).kind == "scheduler-bound"


def test_a_search_in_requests_per_second_is_diagnosed_at_its_rates():
    """Every level of a search in requests/s has the same users (its in-flight cap): the knee and the
    lowest level are told apart by their rates, and the sentence names the rate."""
    low = {**LOW, "users": 64, "rps": 2.0, "running": 2}
    knee = level(users=64, rps=8.5, running=8, waiting=16, kv=0.05, queue=(1.6, 5))
    d = run([low, knee], SCHEDULER, knee=8.5)
    assert d.kind == "scheduler-bound" and d.rate == 8.5 and d.users == 64, d.sentence
    assert d.sentence.startswith("scheduler-bound: at 8.5 requests/s requests wait")
    assert all("at 8.5 requests/s (step 1" in e for e in d.evidence if e.startswith("at "))


def test_where_the_evidence_does_not_separate_two_limits_it_says_so():
    # every slot taken and the KV cache full at once
    both = run([LOW, level(users=24, running=8, waiting=16, kv=0.95, queue=(1.6, 5))], SCHEDULER)
    assert both.kind == "undecided" and both.candidates == ["memory-bound", "scheduler-bound"], both.sentence
    assert "does not separate memory-bound from scheduler-bound" in both.sentence
    # a queue with room in the KV cache from a server that states neither limit nor sends its histograms
    bare = run([LOW, level(users=24, running=8, waiting=16, kv=0.05)])
    bare = diagnose(
        [lv.model_copy(update={"prefill_ms": None, "queue_ms": None}) for lv in bare.levels], 24, bare.metrics
    )
    assert bare.kind == "undecided" and bare.candidates == ["scheduler-bound", "prefill-bound"], bare.sentence


def test_a_level_after_a_higher_one_is_measured_once_the_server_has_drained():
    """A step down in a bisection, 128 then 96 users: the 96-user level's first scrapes still hold
    the 128-user level's requests (83 running and 19 waiting, more than 96); its window starts at
    the first scrape back within 96, so it carries no queue of the level before, and its cap quotes
    never pass its own users."""
    drain = lambda t: 83 if t < 36 else 60  # noqa: E731
    levels = [
        {**LOW, "users": 64, "running": 64},
        {"start": 11, "end": 30, "users": 128, "running": 101, "waiting": 27, "kv": 0.4, "queue": (1.2, 5)},
        {"start": 31, "end": 50, "users": 96, "running": drain, "waiting": lambda t: 19 if t < 36 else 0, "kv": 0.3},
    ]
    server = scrapes(levels, SCHEDULER | {"max_num_seqs": "128"})
    evidence, _ = level_evidence(
        server, [(i, lv["users"], lv["start"] + 0.5, lv["end"]) for i, lv in enumerate(levels)]
    )
    at96 = evidence[2]
    assert at96.window_start == 36.0 and at96.scrapes == 15 and at96.waiting == 0 and at96.running_peak == 60, at96
    assert evidence[1].window_start == 12.0  # a step up starts at its warm-up's end (the first scrape after it)
    d = run(levels, SCHEDULER | {"max_num_seqs": "128"}, knee=96)
    assert d.kind == "no limit reached" and d.nearest in ("scheduler-bound", "memory-bound"), d.sentence
    # a level the server never drained for has no scrapes of its own
    stuck = level_evidence(server, [(2, 40, 31.5, 50.0)])[0][0]
    assert stuck.scrapes == 0 and stuck.running is None


def test_a_falling_prefix_cache_hit_rate_is_part_of_the_cause():
    def g(users, kv, hit):
        return LevelEvidence(
            step=users,
            users=users,
            scrapes=5,
            running=8,
            waiting=9 if users > 4 else 0,
            kv_cache_peak=kv,
            preemptions=0.0,
            prefix_cache_hit_rate=hit,
        )

    d = diagnose([g(4, 0.5, 0.8), g(32, 0.98, 0.25)], 32, {"prefix_hits": "vllm:prefix_cache_hits_total"})
    assert d.kind == "memory-bound" and "prefix-cache hit rate fell from 80% at 4 users to 25%" in d.sentence


def test_without_server_gauges_an_idle_gpu_still_rules_compute_out():
    """No server gauges (a server without /metrics), GPU telemetry only."""
    gpu = lambda users, busy: LevelEvidence(step=users, users=users, scrapes=0, gpu_utilisation=busy)  # noqa: E731
    alone = diagnose([gpu(16, 0.15), gpu(32, 0.20)], 32, {"gpu": "GPU telemetry"})
    assert alone.kind == "scheduler-bound" and "GPU is busy only 20%" in alone.sentence, alone
    assert alone.evidence == ["at 32 users (step 32): GPU telemetry mean 20%"]
    assert diagnose([gpu(16, 0.5), gpu(32, 0.9)], 32).kind == "unknown"
    assert diagnose([], 24).kind == "unknown"
    # nothing waits and every request runs, but the GPU is mostly idle: the server's own loop
    idle = run([LOW, level(users=24, running=24, waiting=0, kv=0.3)], SCHEDULER | {"max_num_seqs": "256"})
    idle = diagnose(
        [lv.model_copy(update={"gpu_utilisation": 0.26}) for lv in idle.levels], 24, idle.metrics, config=idle.config
    )
    assert idle.kind == "scheduler-bound" and "GPU is busy only 26%" in idle.sentence, idle.sentence


def test_the_client_flagged_keeps_the_servers_limit_with_a_caveat_said_once():
    """The server's figures are its own: the limit stands when the client flagged itself, with a
    caveat that says the client's warning once (beside it, `client`), not in the sentence."""
    late = run(
        [LOW, level(users=24, running=8, waiting=16, kv=0.05, queue=(1.6, 5))], SCHEDULER, client="the client was late."
    )
    assert (
        late.kind == "scheduler-bound"
        and "client's own timings were off" in late.sentence
        and late.client == "the client was late."
    )
    assert "late." not in late.sentence + "".join(late.evidence)
    assert late.evidence[-1] == "client self-health: its own timings were off (summary.json client_bound)"
    # no advice of its own: "add workers" contradicted a contended client's (a quieter machine, not more workers)
    unknown = diagnose([], 24, client="the client was late.")
    assert unknown.kind == "client inaccurate" and "workers" not in unknown.sentence, unknown.sentence


def test_a_full_peak_with_a_lower_mean_names_the_slots_only_where_nothing_else_does():
    """Users sending in step empty the slots together: the running gauge reads 6 of 6 at the peak and
    under 4 on average under a queue of 17. Nothing else explains the queue: the slots; with the KV cache
    full as well, the cache (a peak alone does not make the two undecided)."""
    slots = SCHEDULER | {"max_num_seqs": "6"}
    batches = lambda t: 6 if t % 2 else 2  # noqa: E731
    d = run([LOW, level(users=24, running=batches, waiting=17, kv=0.01, queue=(1.8, 4))], slots)
    assert (
        d.kind == "scheduler-bound" and "6 run at the peak (3.9 on average), at most 6 (its max_num_seqs)" in d.sentence
    ), d.sentence
    full = run([LOW, level(users=24, running=batches, waiting=17, kv=0.97, preemptions=1, queue=(1.8, 4))], slots)
    assert full.kind == "memory-bound", full.sentence
