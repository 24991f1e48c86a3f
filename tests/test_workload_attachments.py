"""Workload classes with tools and images (workloads/attachments.py), and conversations that answer
tool calls with tool results (workloads/session.py). The simulator end of it: test_truth_agentic.py."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
import zlib

import pytest

from core.errors import InputError
from tests.helpers import ROOT
from workloads import Conversation, Sampler, load_spec
from workloads.__main__ import main as cli
from workloads.attachments import TOOLS, png

TEMPLATES = os.path.join(ROOT, "workloads", "templates.jsonl")


def spec_file(tmp_path, cls: str):
    p = tmp_path / "spec.yaml"
    p.write_text(
        f"templates: {TEMPLATES}\nclasses:\n  a: {{weight: 1, input_chars: {{min: 20, max: 200}}, "
        f"output_tokens: 16, {cls}}}\n"
    )
    return str(p)


def test_a_class_with_tools_sends_them_with_tool_choice(tmp_path):
    req = Sampler(load_spec(spec_file(tmp_path, "tools: {count: 2}")), seed=1).next()
    assert req.tools == {"tools": list(TOOLS[:2]), "tool_choice": "auto"}
    req = Sampler(
        load_spec(spec_file(tmp_path, "tools: {count: 2, choice: search_docs, parallel: false}")), seed=1
    ).next()
    assert req.tools["tool_choice"] == {"type": "function", "function": {"name": "search_docs"}}
    assert req.tools["parallel_tool_calls"] is False
    own = "tools: {definitions: [{type: function, function: {name: f, parameters: {type: object}}}], choice: required}"
    req = Sampler(load_spec(spec_file(tmp_path, own)), seed=1).next()
    assert [t["function"]["name"] for t in req.tools["tools"]] == ["f"] and req.tools["tool_choice"] == "required"


@pytest.mark.parametrize(
    "cls, where",
    [
        ("tools: {count: 2, choice: nope}", "classes.a.tools.choice"),
        ("tools: {}", "classes.a.tools.count"),
        ("tools: {definitions: [{type: function, function: {}}]}", "classes.a.tools.definitions"),
        ("images: {count: 0}", "classes.a.images.count"),
        ("images: {files: [missing.png]}", "classes.a.images.files"),
    ],
)
def test_a_mistake_in_tools_or_images_is_one_line_naming_the_field(tmp_path, cls, where):
    with pytest.raises(InputError) as e:
        load_spec(spec_file(tmp_path, cls))
    assert where in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_images_are_valid_pngs_of_the_size_asked_in_image_url_parts(tmp_path):
    sampler = Sampler(
        load_spec(spec_file(tmp_path, "images: {count: {min: 1, max: 3}, width: 70, height: 45, share: 0.5}")), seed=3
    )
    reqs = sampler.sample(200)
    with_images = [r for r in reqs if r.images]
    assert 0.4 < len(with_images) / len(reqs) < 0.6
    assert {len(r.images) for r in with_images} == {1, 2, 3}
    content = with_images[0].messages()[-1]["content"]
    assert content[0] == {"type": "text", "text": with_images[0].user}
    url = content[1]["image_url"]["url"]
    data = base64.b64decode(url.split(",", 1)[1])
    w, h = struct.unpack(">II", data[16:24])
    assert (w, h) == (70, 45) and url.startswith("data:image/png;base64,")
    n = struct.unpack(">I", data[33:37])[0]
    assert data[37:41] == b"IDAT" and len(zlib.decompress(data[41 : 41 + n])) == 45 * (1 + 3 * 70)
    assert png(70, 45, 0) == png(70, 45, 0) != png(70, 45, 1)  # the same bytes in every process
    assert all(not r.images for r in reqs if r not in with_images)


def test_image_files_are_sent_as_data_urls(tmp_path):
    (tmp_path / "cat.jpg").write_bytes(b"\xff\xd8\xff\xe0 a jpeg")
    req = Sampler(load_spec(spec_file(tmp_path, "images: {files: [cat.jpg]}")), seed=1).next()
    assert req.images == ("data:image/jpeg;base64," + base64.b64encode(b"\xff\xd8\xff\xe0 a jpeg").decode(),)


def test_the_content_hash_covers_the_image_files(tmp_path):
    """Two runs whose image files differ by one byte measured different workloads: the hash says so
    (it covered the spec and the templates only). A workload without images keeps its hash."""
    cat = tmp_path / "cat.jpg"
    cat.write_bytes(b"\xff\xd8\xff\xe0 a jpeg")
    path = spec_file(tmp_path, "images: {files: [cat.jpg]}")
    first = load_spec(path).spec_hash
    assert load_spec(path).spec_hash == first
    cat.write_bytes(b"\xff\xd8\xff\xe0 a jpeG")
    assert load_spec(path).spec_hash != first
    plain = load_spec(None)
    assert plain.spec_hash == hashlib.sha256(plain.sources["spec"] + plain.sources["templates"]).hexdigest()


def test_the_default_workload_attaches_nothing():
    reqs = Sampler(load_spec(None), seed=5).sample(100)
    assert all(r.tools is None and not r.images and r.ask for r in reqs)
    assert all(isinstance(m["content"], str) for r in reqs for m in r.messages())


def test_a_conversation_answers_tool_calls_with_tool_results_then_goes_on(tmp_path):
    spec = load_spec(spec_file(tmp_path, "tools: {count: 2}, session: {turns: 4}"))
    sampler = Sampler(spec, seed=2)
    first = sampler.next()
    conv = Conversation(sampler, first, "s1")
    calls = [
        {"id": "call_a", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        {"id": "call_b", "name": "search_docs", "arguments": '{"query": "x"}'},
    ]
    second = conv.advance("", calls)
    msgs = second.messages()
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "tool"]
    assert msgs[1]["content"] is None and [c["id"] for c in msgs[1]["tool_calls"]] == ["call_a", "call_b"]
    assert msgs[1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    assert [m["tool_call_id"] for m in msgs[2:]] == ["call_a", "call_b"] and all(m["content"] for m in msgs[2:])
    assert second.tools == first.tools and not second.ask and conv.think_time() == 0.0
    assert second.input_chars == sum(len(m["content"] or "") for m in msgs) + len(
        calls[0]["arguments"] + calls[1]["arguments"]
    )
    third = conv.advance("It is sunny.")
    assert [m["role"] for m in third.messages()] == ["user", "assistant", "tool", "tool", "assistant", "user"]
    assert third.ask and third.messages()[-1]["content"] == third.user


# ------------------------------------------------------------------------------------ logs of agents


def agent_log(path):
    """OpenAI-format request bodies of an agent: tools, a tool call answered by a tool result before
    the last user message, a request that ends with tool results, and a user message with images."""
    tools = [TOOLS[0], TOOLS[2]]
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_order", "arguments": '{"order_id": "A1", "mail": "ann@x.org"}'},
    }
    rows = [
        {
            "messages": [
                {"role": "user", "content": "Where is my order? Write to ann@x.org"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "Shipped on Monday."},
                {"role": "assistant", "content": "It shipped on Monday."},
                {"role": "user", "content": "And the weather there?"},
            ],
            "tools": tools,
            "tool_choice": "auto",
            "max_tokens": 30,
        },
        {
            "messages": [
                {"role": "system", "content": "You are an agent."},
                {"role": "user", "content": "Weather in Oslo?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_w",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_w", "content": "Rain, 7 degrees."},
            ],
            "tools": tools,
            "max_tokens": 20,
        },
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is in these pictures?"},
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/png;base64," + base64.b64encode(png(64, 48, 9)).decode()},
                        },
                        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
                    ],
                }
            ],
            "max_tokens": 25,
        },
    ]
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return str(path)


def test_the_importer_keeps_tools_tool_messages_and_images_anonymised(tmp_path):
    out = tmp_path / "out"
    assert cli(["import", agent_log(tmp_path / "agent.jsonl"), "--out", str(out), "--anonymize"]) == 0
    rows = [json.loads(x) for x in (out / "templates.jsonl").read_text(encoding="utf-8").splitlines()]
    prompts = {r["text"]: r for r in rows if r["kind"] == "prompt"}
    follow = prompts["And the weather there?"]
    assert follow["tools"]["tool_choice"] == "auto" and [t["function"]["name"] for t in follow["tools"]["tools"]] == [
        "get_weather",
        "get_order",
    ]
    assert [m["role"] for m in follow["history"]] == ["user", "assistant", "tool", "assistant"]
    args = follow["history"][1]["tool_calls"][0]["function"]["arguments"]
    assert "ann@x.org" not in args and len(args) == len(
        '{"order_id": "A1", "mail": "ann@x.org"}'
    )  # masked, same length
    assert "ann@x.org" not in follow["history"][0]["content"]
    ending = prompts["Weather in Oslo?"]
    assert [m["role"] for m in ending["after"]] == ["assistant", "tool"] and ending["after"][1][
        "content"
    ] == "Rain, 7 degrees."
    assert prompts["What is in these pictures?"]["images"] == [[64, 48], [512, 512]]
    assert (
        base64.b64encode(png(64, 48, 9)).decode()[:40] not in (out / "templates.jsonl").read_text()
    )  # pixels not kept

    reqs = {r.user: r for r in Sampler(load_spec(str(out / "workload.yaml")), seed=1).sample(60)}
    r = reqs["Weather in Oslo?"]
    msgs = r.messages()
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool"] and not r.ask  # the agent goes on
    assert msgs[2]["tool_calls"][0]["id"] == msgs[3]["tool_call_id"] == "call_w"
    assert r.input_chars == sum(len(m["content"] or "") for m in msgs) + len('{"city": "Oslo"}')
    pictures = reqs["What is in these pictures?"].messages()[-1]["content"]
    assert [p["type"] for p in pictures] == ["text", "image_url", "image_url"]
    from core.images import png_size

    assert [png_size(p["image_url"]["url"]) for p in pictures[1:]] == [(64, 48), (512, 512)]
    assert reqs["And the weather there?"].tools["tools"][0]["function"]["name"] == "get_weather"
