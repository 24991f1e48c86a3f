"""A mixed workload of today's traffic against the simulator, measured against its truth log: plain
chat, a class with tools (tool-call replies, parallel calls), a class with images, conversations
whose tool calls are answered with tool results, and replies cut short while still reasoning.

The simulator's profile makes every reply reason first (reasoning_tokens), answers half of the
requests with tools by two parallel tool calls, and adds prompt tokens per image; its truth log
says, per request, when the first answer token was written and how many reasoning and answer
tokens and tool calls it sent (simulator/truthlog.py)."""

from __future__ import annotations

import json
import os
import time
import urllib.request

import numpy as np
import pytest

from tests.helpers import ROOT, read_results, read_truth, run_locust, simulator
from workloads import Sampler, load_spec

pytestmark = [pytest.mark.process, pytest.mark.timing]  # timing against the truth or a rate: tests/conftest.py

PROFILE = """
kind: fixed
ttft_s: 0.05
itl_s: 0.01
reasoning_tokens: 4
tool_call_rate: 0.5
parallel_tool_calls: 2
max_model_len: 1048576
"""

MIX = """
name: mixed-agentic
templates: {templates}
classes:
  chat:   {{weight: 0.2, input_chars: {{min: 20, max: 400}}, output_tokens: {{min: 8, max: 40}}}}
  tools:  {{weight: 0.2, input_chars: {{min: 20, max: 400}}, output_tokens: {{min: 8, max: 40}}, tools: {{count: 3}}}}
  vision: {{weight: 0.2, input_chars: {{min: 20, max: 200}}, output_tokens: {{min: 8, max: 40}},
           images: {{count: {{min: 1, max: 2}}, width: 256, height: 200}}}}
  agent:  {{weight: 0.2, input_chars: {{min: 20, max: 300}}, output_tokens: {{min: 8, max: 30}}, tools: {{count: 2}},
           session: {{turns: 4, think_time_s: 0.05}}}}
  think:  {{weight: 0.2, input_chars: {{min: 20, max: 200}}, output_tokens: {{min: 2, max: 4}}}}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agentic")
    truth = str(tmp / "truth.jsonl")
    profile = tmp / "agentic.yaml"
    profile.write_text(PROFILE)
    spec = tmp / "mix.yaml"
    spec.write_text(MIX.format(templates=os.path.join(ROOT, "workloads", "templates.jsonl")))
    with simulator("--profile", str(profile), truth_log=truth) as url:
        proc = run_locust(
            "--host",
            url,
            "-u",
            "20",
            "-r",
            "20",
            "-t",
            "10s",
            "--seed",
            "11",
            "--workload",
            str(spec),
            "--results-dir",
            str(tmp),
            "--run-id",
            "mix",
            "--stop-timeout",
            "20",
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, summary = read_results(str(tmp), "mix")
    t = {x["request_id"]: x for x in read_truth(truth)}
    return df, summary, t


def test_every_request_once_all_ok_and_every_class_present(run):
    df, summary, truth = run
    assert df["request_id"].is_unique and set(df["request_id"]) == set(truth)
    assert df["ok"].all(), df.loc[~df["ok"], ["request_class", "error", "error_detail"]].head()
    assert set(summary["by_class"]) == {"chat", "tools", "vision", "agent", "think"}
    assert (df.groupby("request_class").size() >= 10).all()


def test_ttft_and_time_to_first_answer_token_match_the_truth_log(run):
    """On one clock: the client saw the first token, and the first answer token, just after the
    simulator wrote them (the request's upload, some kB with images, is in TTFT but not in this)."""
    df, _, truth = run
    rows = [truth[r] for r in df["request_id"]]
    sent = df["t_send"].to_numpy()
    lag = (sent + df["ttft_s"].to_numpy() - np.array([x["first_token"] for x in rows])) * 1000
    assert (lag > -0.5).all() and np.median(lag) < 2.0, np.percentile(lag, [0, 50, 99])
    ttft = np.array([x["first_token"] - x["arrival"] for x in rows])
    assert (df["ttft_s"].to_numpy() - ttft > -0.5e-3).all()
    has_answer = np.array([x["first_answer_token"] is not None for x in rows])
    # no answer token (replies of max_tokens <= reasoning_tokens): no ttfa, and the other way round
    assert (np.isnan(df["ttfa_s"].to_numpy()) == ~has_answer).all()
    assert (~has_answer).sum() >= 10 and set(df.loc[~has_answer, "request_class"]) == {"think"}
    answer_written = np.array([x["first_answer_token"] for x, a in zip(rows, has_answer) if a])
    lag = (sent[has_answer] + df["ttfa_s"].to_numpy()[has_answer] - answer_written) * 1000
    assert (lag > -0.5).all() and np.median(lag) < 2.0, np.percentile(lag, [0, 50, 99])
    # reasoning came first: 4 tokens at 10 ms each before the first answer token
    gap = (df["ttfa_s"] - df["ttft_s"]).to_numpy()[has_answer] * 1000
    assert 35 < np.median(gap) < 45


def test_reasoning_answer_tokens_tool_calls_and_finish_reasons_match_the_truth(run):
    df, _, truth = run
    rows = [truth[r] for r in df["request_id"]]
    assert (df["output_tokens"] == [x["output_tokens"] for x in rows]).all()
    assert (df["reasoning_tokens"] == [x["reasoning_tokens"] for x in rows]).all()
    assert (df["reasoning_source"] == "usage").all()
    assert (df["answer_tokens"] == [x["answer_tokens"] for x in rows]).all()
    calls = np.array([x["tool_calls"] for x in rows])
    assert (df["tool_calls"].to_numpy() == calls).all()
    assert (df.loc[calls > 0, "finish_reason"] == "tool_calls").all()
    assert (df.loc[calls == 0, "finish_reason"] == "length").all()
    with_tools = df["request_class"].isin(["tools", "agent"]).to_numpy()
    assert (calls[~with_tools] == 0).all()  # only requests that offered tools got tool calls
    assert 0.25 < (calls[with_tools] > 0).mean() < 0.75 and set(calls[with_tools]) <= {0, 2}


def test_images_add_prompt_tokens_the_server_counted(run):
    df, _, truth = run
    rows = [truth[r] for r in df["request_id"]]
    images = np.array([x["images"] for x in rows])
    vision = (df["request_class"] == "vision").to_numpy()
    assert (images[~vision] == 0).all() and set(images[vision]) == {1, 2}
    assert (df["prompt_tokens"] == [x["prompt_tokens"] for x in rows]).all()
    assert (df.loc[vision, "prompt_tokens"].to_numpy() > 80 * images[vision]).all()


def test_an_image_of_the_workload_costs_its_tiles_in_prompt_tokens(tmp_path):
    """256 x 200 pixels in 28-pixel tiles: 10 x 8 = 80 prompt tokens per image, and prefill time."""
    spec = tmp_path / "mix.yaml"
    spec.write_text(MIX.format(templates=os.path.join(ROOT, "workloads", "templates.jsonl")))
    sampler = Sampler(load_spec(str(spec)), seed=1)
    req = next(r for r in sampler.sample(50) if r.images)
    profile = tmp_path / "batch.yaml"
    profile.write_text("kind: batch\nper_prefill_token_s: 0.001\nstep_base_s: 0.001\n")

    def ask(messages):
        body = json.dumps({"messages": messages, "max_tokens": 1}).encode()
        t0 = time.perf_counter()
        with urllib.request.urlopen(urllib.request.Request(url + "/v1/chat/completions", body)) as r:
            return json.load(r)["usage"]["prompt_tokens"], time.perf_counter() - t0

    with simulator("--profile", str(profile)) as url:
        with_images, t_images = ask(req.messages())
        text_only, t_text = ask([{"role": "user", "content": req.user}])
    assert with_images - text_only == 80 * len(req.images)
    assert t_images - t_text > 0.07 * len(req.images)  # 80 tokens at 1 ms each, prefilled


def test_conversations_answer_tool_calls_with_tool_results(run):
    df, _, truth = run
    agent = df[df["request_class"] == "agent"].sort_values(["session_id", "turn"])
    followed = 0
    for _, turns in agent.groupby("session_id"):
        results = 0
        for (_, prev), (_, cur) in zip(turns.iloc[:-1].iterrows(), turns.iloc[1:].iterrows()):
            results += prev["tool_calls"]
            # every tool call of the earlier turns is answered by one tool message (the simulator
            # refuses a tool message without its call: all requests were ok)
            assert truth[cur["request_id"]]["tool_results"] == results
            followed += prev["tool_calls"] > 0
    assert followed >= 5


def test_summary_blocks_carry_the_new_metrics(run):
    df, summary, _ = run
    w = summary["window"]
    sel = df[(df["wall_send"] >= w["start"]) & (df["wall_send"] <= w["end"]) & df["ok"]]
    o = summary["overall"]
    assert o["ttfa_ms"]["count"] == int(sel["ttfa_s"].notna().sum())
    assert o["ttfa_ms"]["p95"] == pytest.approx(np.nanpercentile(sel["ttfa_s"] * 1000, 95), rel=1e-9)
    assert o["tokens"]["reasoning"] == int(sel["reasoning_tokens"].sum())
    assert o["requests"]["tool_calls"] == int(sel["tool_calls"].sum())
    tools = sel[sel["request_class"] == "tools"]
    assert (
        summary["by_class"]["tools"]["requests"]["by_finish_reason"] == tools["finish_reason"].value_counts().to_dict()
    )
    assert summary["by_class"]["think"]["ttfa_ms"]["count"] == 0


def test_without_the_usage_detail_reasoning_tokens_are_counted_from_the_stream(tmp_path):
    """A server that does not report completion_tokens_details (reasoning_usage: false): the
    reasoning chunks are counted (one token each here, stream_interval 1), and agree with the truth."""
    truth_path = str(tmp_path / "truth.jsonl")
    profile = tmp_path / "no-detail.yaml"
    profile.write_text(PROFILE.replace("reasoning_tokens: 4", "reasoning_tokens: 6") + "reasoning_usage: false\n")
    spec = tmp_path / "mix.yaml"
    spec.write_text(MIX.format(templates=os.path.join(ROOT, "workloads", "templates.jsonl")))
    with simulator("--profile", str(profile), truth_log=truth_path) as url:
        proc = run_locust(
            "--host",
            url,
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "4s",
            "--seed",
            "2",
            "--workload",
            str(spec),
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "nd",
            "--stop-timeout",
            "20",
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, _ = read_results(str(tmp_path), "nd")
    truth = {t["request_id"]: t for t in read_truth(truth_path)}
    assert len(df) >= 20 and df["ok"].all()
    assert (df["reasoning_source"] == "chunks").all()
    assert (df["reasoning_tokens"] == [truth[r]["reasoning_tokens"] for r in df["request_id"]]).all()
    assert (df["answer_tokens"] == [truth[r]["answer_tokens"] for r in df["request_id"]]).all()
    assert set(df["reasoning_tokens"]) <= {2, 3, 4, 5, 6} and 6 in set(df["reasoning_tokens"])
