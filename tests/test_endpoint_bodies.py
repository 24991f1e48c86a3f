"""The body each endpoint sends (workloads/endpoints/), pinned byte for byte: the bodies below are
what the client sent before the endpoints became a registry, for hand-made requests that take every
branch (system prompt, history, tool calls and results, images, tools with a named choice, a batch)
and, by digest, for a seeded sequence of drawn requests. Also: one decision of max_tokens, carried
by the drawn request, and the registry as the one list of endpoints."""

from __future__ import annotations

import hashlib
import os
from typing import get_args

import orjson
import pytest

from tests.helpers import ROOT
from workloads import Sampler, load_spec
from workloads.bodies import body, expected_results
from workloads.endpoints import ENDPOINTS, NAMES, EndpointName
from workloads.request import Request

pytestmark = pytest.mark.unit

TOOLS = {
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "tool_choice": {"type": "function", "function": {"name": "f"}},
    "parallel_tool_calls": False,
}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}
REQUESTS = {
    "plain": Request("c", None, "Hi", 5, 2),
    "history": Request("c", "Be brief.", "And now?", 7, 30, history=(("user", "Q1"), ("assistant", "A1"))),
    "tools_images": Request("t", "Sys", "Look", 9, 20, tools=TOOLS, images=("data:image/png;base64,AAAA",)),
    "tool_results": Request(
        "a",
        None,
        "Look",
        11,
        40,
        turns=2,
        tools={**TOOLS, "tool_choice": "auto"},
        ask=False,
        history=(("user", "Weather?"), CALL, {"role": "tool", "tool_call_id": "call_0", "content": "sunny"}),
    ),
    "batch": Request("d", None, "first", 1, 5, inputs=("first", "second", "third")),
}

# (endpoint, request, model, stream): the body as sent (orjson, as plugin/context.py sends it)
PINNED = {
    (
        "chat",
        "plain",
        "m",
        True,
    ): '{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}',
    (
        "chat",
        "history",
        "m",
        True,
    ): '{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Q1"},{"role":"assistant","content":"A1"},{"role":"user","content":"And now?"}],"max_tokens":7,"stream":true,"stream_options":{"include_usage":true}}',
    (
        "chat",
        "tools_images",
        "m",
        True,
    ): '{"model":"m","messages":[{"role":"system","content":"Sys"},{"role":"user","content":[{"type":"text","text":"Look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false,"max_tokens":9,"stream":true,"stream_options":{"include_usage":true}}',
    (
        "chat",
        "tool_results",
        "m",
        True,
    ): '{"model":"m","messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_0","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_0","content":"sunny"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"auto","parallel_tool_calls":false,"max_tokens":11,"stream":true,"stream_options":{"include_usage":true}}',
    (
        "chat",
        "batch",
        "m",
        True,
    ): '{"model":"m","messages":[{"role":"user","content":"first"}],"max_tokens":1,"stream":true,"stream_options":{"include_usage":true}}',
    ("chat", "plain", "", False): '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":5,"stream":false}',
    (
        "completions",
        "plain",
        "m",
        True,
    ): '{"model":"m","prompt":"Hi","max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}',
    (
        "completions",
        "history",
        "m",
        True,
    ): '{"model":"m","prompt":"Be brief.\\n\\nQ1\\n\\nA1\\n\\nAnd now?","max_tokens":7,"stream":true,"stream_options":{"include_usage":true}}',
    (
        "completions",
        "tools_images",
        "m",
        True,
    ): '{"model":"m","prompt":"Sys\\n\\nLook","max_tokens":9,"stream":true,"stream_options":{"include_usage":true}}',
    (
        "completions",
        "tool_results",
        "m",
        True,
    ): '{"model":"m","prompt":"Weather?\\n\\nLook","max_tokens":11,"stream":true,"stream_options":{"include_usage":true}}',
    (
        "completions",
        "batch",
        "m",
        True,
    ): '{"model":"m","prompt":"first","max_tokens":1,"stream":true,"stream_options":{"include_usage":true}}',
    ("completions", "plain", "", False): '{"prompt":"Hi","max_tokens":5,"stream":false}',
    (
        "responses",
        "plain",
        "m",
        True,
    ): '{"model":"m","input":[{"role":"user","content":"Hi"}],"max_output_tokens":5,"stream":true}',
    (
        "responses",
        "history",
        "m",
        True,
    ): '{"model":"m","input":[{"role":"system","content":"Be brief."},{"role":"user","content":"Q1"},{"role":"assistant","content":"A1"},{"role":"user","content":"And now?"}],"max_output_tokens":7,"stream":true}',
    (
        "responses",
        "tools_images",
        "m",
        True,
    ): '{"model":"m","input":[{"role":"system","content":"Sys"},{"role":"user","content":[{"type":"input_text","text":"Look"},{"type":"input_image","image_url":"data:image/png;base64,AAAA"}]}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":{"type":"function","name":"f"},"parallel_tool_calls":false,"max_output_tokens":9,"stream":true}',
    (
        "responses",
        "tool_results",
        "m",
        True,
    ): '{"model":"m","input":[{"role":"user","content":"Weather?"},{"type":"function_call","call_id":"call_0","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"call_0","output":"sunny"}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":"auto","parallel_tool_calls":false,"max_output_tokens":11,"stream":true}',
    (
        "responses",
        "batch",
        "m",
        True,
    ): '{"model":"m","input":[{"role":"user","content":"first"}],"max_output_tokens":1,"stream":true}',
    (
        "responses",
        "plain",
        "",
        False,
    ): '{"input":[{"role":"user","content":"Hi"}],"max_output_tokens":5,"stream":false}',
    ("embeddings", "plain", "m", True): '{"model":"m","input":["Hi"]}',
    ("embeddings", "history", "m", True): '{"model":"m","input":["Be brief.\\n\\nQ1\\n\\nA1\\n\\nAnd now?"]}',
    ("embeddings", "tools_images", "m", True): '{"model":"m","input":["Sys\\n\\nLook"]}',
    ("embeddings", "tool_results", "m", True): '{"model":"m","input":["Weather?\\n\\nLook"]}',
    ("embeddings", "batch", "m", True): '{"model":"m","input":["first","second","third"]}',
    ("embeddings", "plain", "", False): '{"input":["Hi"]}',
    ("rerank", "plain", "m", True): '{"model":"m","query":"Hi","documents":["Hi"]}',
    (
        "rerank",
        "history",
        "m",
        True,
    ): '{"model":"m","query":"Be brief.\\n\\nQ1\\n\\nA1\\n\\nAnd now?","documents":["Be brief.\\n\\nQ1\\n\\nA1\\n\\nAnd now?"]}',
    ("rerank", "tools_images", "m", True): '{"model":"m","query":"Sys\\n\\nLook","documents":["Sys\\n\\nLook"]}',
    (
        "rerank",
        "tool_results",
        "m",
        True,
    ): '{"model":"m","query":"Weather?\\n\\nLook","documents":["Weather?\\n\\nLook"]}',
    ("rerank", "batch", "m", True): '{"model":"m","query":"first","documents":["first","second","third"]}',
    ("rerank", "plain", "", False): '{"query":"Hi","documents":["Hi"]}',
}

# A mix without images (generated PNGs are zlib output, which may differ between zlib builds)
SPEC = """
name: pinned
templates: {templates}
classes:
  chat:   {{weight: 0.3, input_chars: {{min: 20, max: 300}}, output_tokens: {{min: 8, max: 40}}, system_prompt: {{share: 0.5}}}}
  tools:  {{weight: 0.2, input_chars: {{min: 20, max: 300}}, output_tokens: {{min: 8, max: 40}}, tools: {{count: 2, choice: get_weather, parallel: false}}}}
  prefix: {{weight: 0.2, input_chars: {{min: 20, max: 300}}, output_tokens: 16, shared_prefix: {{share: 0.5, count: 2, chars: 120}}}}
  docs:   {{weight: 0.3, input_chars: {{min: 40, max: 200}}, output_tokens: 1, batch: {{min: 2, max: 4}}}}
"""
# SHA-256 of the 40 bodies of Sampler(SPEC, seed=7), model "m", per (endpoint, stream)
DRAWN = {
    ("chat", True): "5deed1efe8cef586ebbb4952e2300b076b4b88b16db5e7de7d6001525971a4a3",
    ("chat", False): "cdaa7c5bfd69c01e1aac9f40d62deff764d9fe21051607fa970238b4fbcf5587",
    ("completions", True): "c3afabfeba03c3e5765cf4d78cf379f598dc28332bfbb6d2e56acf09dc1a9dcf",
    ("completions", False): "4eee549fffa057e33aead807ee589dbe1d1db052ae89e616ca0d8ba0d95d3816",
    ("responses", True): "af89b2daaa2a93ef963a750622198d869a14ba6d30a90342f9dbec2896b3dc1c",
    ("responses", False): "6f1364a1f28b6336b54c42b192ccd3791ec69ca704513687749d6ea83eae0f78",
    ("embeddings", True): "c75bb4549ba83a8aaa44b77e274c9fd70f2329b3c52bf9ff6c7a858350ae8d24",
    ("embeddings", False): "c75bb4549ba83a8aaa44b77e274c9fd70f2329b3c52bf9ff6c7a858350ae8d24",
    ("rerank", True): "3b18b30d791a5ba3471dd98324cb4ec0f2eebb7c709c0fe50bf560416b0f18b8",
    ("rerank", False): "3b18b30d791a5ba3471dd98324cb4ec0f2eebb7c709c0fe50bf560416b0f18b8",
}


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    path = tmp_path_factory.mktemp("pinned") / "pinned.yaml"
    path.write_text(SPEC.format(templates=os.path.join(ROOT, "workloads", "templates.jsonl")))
    return load_spec(str(path))


@pytest.mark.parametrize("key", sorted(PINNED), ids=lambda k: "-".join(map(str, k)))
def test_each_endpoint_sends_the_pinned_body(key):
    endpoint, name, model, stream = key
    assert orjson.dumps(body(endpoint, REQUESTS[name], model, stream)).decode() == PINNED[key]


def test_a_seeded_sequence_of_drawn_requests_sends_the_pinned_bodies(spec):
    requests = Sampler(spec, seed=7).sample(40)
    assert {r.request_class for r in requests} == {"chat", "tools", "prefix", "docs"}
    assert any(r.system for r in requests) and any(r.tools for r in requests) and any(r.inputs for r in requests)
    for (endpoint, stream), digest in DRAWN.items():
        h = hashlib.sha256()
        for r in requests:
            h.update(orjson.dumps(body(endpoint, r, "m", stream)))
        assert h.hexdigest() == digest, (endpoint, stream)


def test_max_tokens_override_is_decided_when_drawn_and_changes_nothing_else(spec):
    drawn = Sampler(spec, seed=7).sample(40)
    fixed = Sampler(spec, seed=7, max_tokens=3).sample(40)
    assert len({r.max_tokens for r in drawn}) > 3 and {r.max_tokens for r in fixed} == {3}
    for a, b in zip(drawn, fixed):
        assert a.user == b.user and a.system == b.system and a.inputs == b.inputs  # the same draws
        assert (
            body("chat", b, "m", True)["max_tokens"] == 3 and body("responses", b, "m", True)["max_output_tokens"] == 3
        )
    # a conversation's later turns are drawn by the same sampler
    assert Sampler(spec, seed=1, max_tokens=3).next_turn("chat").max_tokens == 3


def test_the_registry_is_the_one_list_of_endpoints():
    from plugin.options import DECLARED, Options
    from plugin.plan import RunPlan

    assert NAMES == ("chat", "completions", "responses", "embeddings", "rerank") == get_args(EndpointName)
    choices = next(d for d in DECLARED if d.name == "endpoint").choices
    assert choices == list(NAMES) == list(get_args(Options.model_fields["endpoint"].annotation))
    assert get_args(RunPlan.model_fields["endpoint"].annotation) == NAMES
    assert {n: (e.path, e.streams, e.attachments) for n, e in ENDPOINTS.items()} == {
        "chat": ("/v1/chat/completions", True, True),
        "completions": ("/v1/completions", True, False),
        "responses": ("/v1/responses", True, True),
        "embeddings": ("/v1/embeddings", False, False),
        "rerank": ("/v1/rerank", False, False),
    }


def test_the_results_a_reply_must_hold():
    sent = orjson.loads(PINNED["embeddings", "batch", "m", True])
    assert expected_results("embeddings", sent) == 3 and expected_results("embeddings", {"input": "one"}) == 1
    sent = orjson.loads(PINNED["rerank", "batch", "m", True])
    assert expected_results("rerank", sent) == 3 and expected_results("rerank", {**sent, "top_n": 2}) == 2
    assert expected_results("rerank", {**sent, "top_n": 0}) == 3
    assert all(
        expected_results(e, orjson.loads(PINNED[e, "plain", "m", True])) == 0
        for e in ("chat", "completions", "responses")
    )


def test_a_runs_max_tokens_override_reaches_drawn_and_replayed_requests_alike(tmp_path):
    """The run context draws with the override and gives a replayed trace's requests the same value,
    so the body sent (and the record, which reads the request) says the one max_tokens."""
    import argparse

    from plugin.context import RunContext
    from plugin.plan import RunPlan
    from plugin.run_start import RunInputs
    from shapes.replay import load_trace

    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"t": 0, "text": "hello", "max_tokens": 9}\n{"t": 0.5, "text": "again", "max_tokens": 12}\n')
    for override, logged in ((None, [9, 12]), (3, [3, 3])):
        plan = RunPlan.from_options(argparse.Namespace(replay=str(trace), max_tokens_override=override, seed=1))
        ctx = RunContext(plan, RunInputs(load_spec(None), load_trace(str(trace))), "r", 0, None, 0.0)
        assert [r.max_tokens for r in ctx.trace.requests] == logged
        sent, _ = ctx.body("chat", ctx.trace.requests[1])
        assert orjson.loads(sent)["max_tokens"] == logged[1]
        drawn = ctx.sampler.next()
        assert (drawn.max_tokens == 3) == (override == 3)
        assert orjson.loads(ctx.body("completions", drawn)[0])["max_tokens"] == drawn.max_tokens
    assert [r.max_tokens for r in load_trace(str(trace)).requests] == [9, 12]  # the read trace is left as read
