"""`--endpoint responses` (/v1/responses, streamed typed events), `--endpoint embeddings`
(/v1/embeddings) and `--endpoint rerank` (/v1/rerank) against the simulator, measured against its
truth log: the same record as chat for the Responses API (TTFT, time to first answer token,
reasoning, tool calls, conversations with tool results as function_call_output items), and latency,
inputs or documents per request and input tokens/s per load step for embeddings and rerank."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from metrics.record import RequestRecord
from metrics.sse import parse_response
from metrics.timing import fill_record
from tests.helpers import ROOT, read_results, read_truth, run_locust, simulator
from tests.test_truth_agentic import MIX, PROFILE
from workloads import Sampler, load_spec
from workloads.bodies import body, expected_results

pytestmark = pytest.mark.process

TEMPLATES = os.path.join(ROOT, "workloads", "templates.jsonl")


@pytest.fixture(scope="module")
def responses_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("responses")
    truth = str(tmp / "truth.jsonl")
    (tmp / "agentic.yaml").write_text(PROFILE)
    (tmp / "mix.yaml").write_text(MIX.format(templates=TEMPLATES))
    with simulator("--profile", str(tmp / "agentic.yaml"), truth_log=truth) as url:
        proc = run_locust(
            "--host",
            url,
            "--endpoint",
            "responses",
            "-u",
            "12",
            "-r",
            "12",
            "-t",
            "8s",
            "--seed",
            "5",
            "--workload",
            str(tmp / "mix.yaml"),
            "--results-dir",
            str(tmp),
            "--run-id",
            "resp",
            "--stop-timeout",
            "20",
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, summary = read_results(str(tmp), "resp")
    return df, summary, {x["request_id"]: x for x in read_truth(truth)}


def test_responses_api_records_match_the_truth_log(responses_run):
    df, summary, truth = responses_run
    assert len(df) >= 100 and set(df["request_id"]) == set(truth)
    assert df["ok"].all(), df.loc[~df["ok"], ["error", "error_detail"]].head()
    assert (df["endpoint"] == "responses").all() and {truth[r]["endpoint"] for r in df["request_id"]} == {"responses"}
    rows = [truth[r] for r in df["request_id"]]
    # on one clock: seen just after the simulator wrote it (the first token, the first answer token)
    sent = df["t_send"].to_numpy()
    lag = (sent + df["ttft_s"].to_numpy() - np.array([x["first_token"] for x in rows])) * 1000
    assert (lag > -0.5).all() and np.median(lag) < 2.0, np.percentile(lag, [0, 50, 99])
    answered = np.array([x["first_answer_token"] is not None for x in rows])
    assert (df["ttfa_s"].notna().to_numpy() == answered).all() and (~answered).sum() > 0
    written = np.array([x["first_answer_token"] for x, a in zip(rows, answered) if a])
    lag = (sent[answered] + df["ttfa_s"].to_numpy()[answered] - written) * 1000
    assert (lag > -0.5).all() and np.median(lag) < 2.0, np.percentile(lag, [0, 50, 99])
    for column in ("output_tokens", "reasoning_tokens", "answer_tokens", "tool_calls", "prompt_tokens", "chunks"):
        assert (df["n_chunks" if column == "chunks" else column] == [x[column] for x in rows]).all(), column
    assert (df["tokens_source"] == "usage").all() and (df["reasoning_source"] == "usage").all()
    assert (df.loc[df["tool_calls"] > 0, "finish_reason"] == "tool_calls").all() and (df["tool_calls"] > 0).sum() >= 5
    assert (df.loc[df["tool_calls"] == 0, "finish_reason"] == "length").all()  # response.incomplete: the output limit
    # conversations sent their tool results back as function_call_output items (the simulator
    # refuses an output without its call: every request was ok)
    assert sum(truth[r]["tool_results"] for r in df["request_id"]) > 0
    assert summary["overall"]["ttfa_ms"]["count"] == int(
        answered[df["wall_send"].between(summary["window"]["start"], summary["window"]["end"]).to_numpy()].sum()
    )


def test_a_request_becomes_the_responses_api_body(tmp_path):
    spec = tmp_path / "mix.yaml"
    spec.write_text(MIX.format(templates=TEMPLATES))
    reqs = Sampler(load_spec(str(spec)), seed=3, max_tokens=20).sample(60)
    vision = next(r for r in reqs if r.images)
    b = body("responses", vision, "m", True)
    assert b["max_output_tokens"] == 20 and b["stream"] is True and "stream_options" not in b and "max_tokens" not in b
    parts = b["input"][-1]["content"]
    assert (
        parts[0]["type"] == "input_text"
        and parts[1]["type"] == "input_image"
        and parts[1]["image_url"].startswith("data:")
    )
    tools = next(r for r in reqs if r.request_class == "tools")
    b = body("responses", tools, "m", True)
    assert (
        b["tools"][0]["type"] == "function"
        and b["tools"][0]["name"] == "get_weather"
        and "function" not in b["tools"][0]
    )
    assert b["tool_choice"] == "auto"
    assert json.dumps(body("chat", reqs[0], "m", True))  # chat stays chat


EMBED_MIX = """
name: embed
templates: {templates}
classes:
  docs: {{weight: 1, input_chars: {{min: 200, max: 800}}, output_tokens: 1, batch: {{min: 4, max: 12}}}}
"""


@pytest.mark.parametrize("endpoint", ["embeddings", "rerank"])
def test_embeddings_under_a_step_ramp_latency_and_input_tokens_per_second_match_the_truth(tmp_path, endpoint):
    """A serial embedding queue (profile embedding_*; a reranker costs per input token the same way):
    latency grows with the users; each step's input tokens/s is what the simulator embedded or
    ranked in the step's window; every record is a request of the truth log."""
    truth_path = str(tmp_path / "truth.jsonl")
    spec = tmp_path / "embed.yaml"
    spec.write_text(EMBED_MIX.format(templates=TEMPLATES))
    profile = tmp_path / "embed-profile.yaml"
    profile.write_text("kind: fixed\nembedding_base_s: 0.004\nembedding_per_token_s: 0.00002\n")
    with simulator("--profile", str(profile), truth_log=truth_path) as url:
        proc = run_locust(
            "--host",
            url,
            "--endpoint",
            endpoint,
            "--steps",
            "1,4",
            "--step-time",
            "4s",
            "--step-warmup",
            "1s",
            "--seed",
            "2",
            "--workload",
            str(spec),
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "emb",
            "--stop-timeout",
            "5",
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, summary = read_results(str(tmp_path), "emb")
    truth = {t["request_id"]: t for t in read_truth(truth_path)}
    ok = df[df["ok"]]
    # a floor for the figures below, not a throughput check: the run is two steps of 4 s, 112
    # requests alone on this machine, 97-98 on it crowded by the whole suite
    assert len(ok) >= 50 and (df["ok"] | (df["error"] == "stopped")).all()
    served = {r for r, t in truth.items() if t["outcome"] == "ok"}
    assert set(ok["request_id"]) <= served and len(served - set(ok["request_id"])) <= (df["error"] == "stopped").sum()
    assert {t["endpoint"] for t in truth.values()} == {endpoint}
    assert ok["ttft_s"].isna().all() and (ok["output_tokens"] == 0).all() and (ok["n_chunks"] == 0).all()
    assert (ok["inputs"] == [truth[r]["inputs"] for r in ok["request_id"]]).all() and ok["inputs"].between(4, 12).all()
    assert (ok["prompt_tokens"] == [truth[r]["prompt_tokens"] for r in ok["request_id"]]).all()
    # the client's latency holds the server's (arrival of the whole request to the write of the
    # answer) and the transfer of both bodies, some kB each, over loopback on a busy machine
    latency = np.array([truth[r]["last_token"] - truth[r]["arrival"] for r in ok["request_id"]])
    d = (ok["e2e_s"].to_numpy() - latency) * 1000
    assert (d > 0).all() and np.median(d) < 10.0, np.percentile(d, [0, 50, 99])
    steps = summary["by_step"]
    assert steps[0]["ttft_ms"]["count"] == 0 and steps[0]["e2e_ms"]["count"] > 0
    # four users queue on one server: its own latency grows from the first step to the second, and
    # the client's with it (by how much depends on how fast this machine's client keeps them coming:
    # 3.8-4x alone, 1.8x once with the whole suite beside it, so no fixed ratio is asserted)
    server = [np.median(latency[ok["step"].to_numpy() == k]) for k in (0, 1)]
    assert server[1] > server[0], server
    assert steps[1]["e2e_ms"]["p50"] > steps[0]["e2e_ms"]["p50"], (steps[0]["e2e_ms"], steps[1]["e2e_ms"], server)
    for st in steps:  # input tokens that arrived (embedded) inside the step's window, per second
        start, end = st["window"]["start"], st["window"]["end"]
        wall_done = ok["wall_send"] + ok["e2e_s"]
        inside = ok[(wall_done >= start) & (wall_done <= end)]
        expect = inside["prompt_tokens"].sum() / (end - start)
        assert st["embeddings"]["input_tokens_per_s"] == pytest.approx(expect, rel=1e-6)
        assert st["throughput"]["total_tokens_per_s"] == pytest.approx(expect, rel=1e-6)
        assert st["embeddings"]["inputs_per_s"] == pytest.approx(inside["inputs"].sum() / (end - start), rel=1e-6)
    assert "embeddings:" in proc.stdout + proc.stderr


def test_tools_or_images_with_an_endpoint_that_cannot_carry_them_is_bad_input(tmp_path):
    (tmp_path / "mix.yaml").write_text(MIX.format(templates=TEMPLATES))
    proc = run_locust(
        "--endpoint",
        "completions",
        "-u",
        "1",
        "-t",
        "2s",
        "--workload",
        str(tmp_path / "mix.yaml"),
        "--results-dir",
        str(tmp_path),
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "--endpoint completions: class 'tools' of the workload has tools or images" in proc.stderr
    assert not (tmp_path / "requests.parquet").exists()


def test_tools_or_images_with_rerank_are_bad_input(tmp_path):
    (tmp_path / "mix.yaml").write_text(MIX.format(templates=TEMPLATES))
    with simulator() as url:
        proc = run_locust(
            "--host",
            url,
            "--endpoint",
            "rerank",
            "-u",
            "1",
            "-t",
            "2s",
            "--workload",
            str(tmp_path / "mix.yaml"),
            "--results-dir",
            str(tmp_path),
            timeout=60,
        )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "--endpoint rerank: class 'tools' of the workload has tools or images" in proc.stderr
    assert not (tmp_path / "requests.parquet").exists()


def test_a_request_becomes_the_rerank_body_and_a_short_reply_is_a_classified_failure(tmp_path):
    spec = tmp_path / "embed.yaml"
    spec.write_text(EMBED_MIX.format(templates=TEMPLATES))
    req = Sampler(load_spec(str(spec)), seed=3).sample(1)[0]
    b = body("rerank", req, "m", False)
    assert set(b) == {"model", "query", "documents"} and b["query"] == req.prompt()
    assert b["documents"] == list(req.inputs) and 4 <= len(b["documents"]) <= 12
    assert expected_results("rerank", b) == len(b["documents"]) and expected_results("rerank", {**b, "top_n": 2}) == 2

    def record(reply: dict, expected: int) -> RequestRecord:
        rec = RequestRecord("r1", "w", "rerank", "docs", 10, 1, stream=False, inputs=expected)
        rec.t_send = 0.0
        fill_record(rec, 200, parse_response([(0.5, json.dumps(reply).encode())]), None, stream=False)
        return rec

    results = [{"index": i, "document": {"text": "d"}, "relevance_score": 0.5} for i in range(3)]
    rec = record({"id": "x", "model": "m", "usage": {"total_tokens": 30}, "results": results}, 3)
    assert rec.ok and rec.inputs == 3 and rec.prompt_tokens == 30 and rec.e2e_s == 0.5 and rec.output_tokens == 0
    short = record({"id": "x", "model": "m", "usage": {"total_tokens": 30}, "results": results[:2]}, 3)
    assert not short.ok and short.error == "missing_results" and "2 results for 3" in short.error_detail
    none = record({"id": "x", "model": "m", "usage": {"total_tokens": 30}}, 3)
    assert not none.ok and none.error == "no_tokens"


def test_the_simulator_ranks_documents_on_both_rerank_paths(tmp_path):
    """/v1/rerank and /rerank: documents ranked by score, top_n of them, usage.total_tokens what
    the truth log says was scored; a body without documents is refused with HTTP 400."""
    import urllib.error
    import urllib.request

    truth_path = str(tmp_path / "truth.jsonl")
    docs = ["first document text", "a second, longer document text here", "third"]

    def post(url, payload):
        req = urllib.request.Request(
            url,
            json.dumps(payload).encode(),
            {"Content-Type": "application/json", "X-Request-Id": payload.get("id", "")},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    with simulator(truth_log=truth_path) as url:
        full = post(f"{url}/v1/rerank", {"model": "m", "query": "which text", "documents": docs, "id": "a"})
        top = post(f"{url}/rerank", {"query": "which text", "documents": docs, "top_n": 2, "id": "b"})
        with pytest.raises(urllib.error.HTTPError) as bad:
            post(f"{url}/v1/rerank", {"query": "which text", "id": "c"})
    assert bad.value.code == 400
    assert set(full) == {"id", "model", "usage", "results"} and full["model"] == "m"
    scores = [r["relevance_score"] for r in full["results"]]
    assert sorted(r["index"] for r in full["results"]) == [0, 1, 2] and scores == sorted(scores, reverse=True)
    assert all(r["document"]["text"] == docs[r["index"]] for r in full["results"])
    top_scores = [r["relevance_score"] for r in top["results"]]
    assert len(top_scores) == 2 and top_scores == sorted(top_scores, reverse=True)
    truth = {t["request_id"]: t for t in read_truth(truth_path)}
    assert truth["a"]["endpoint"] == "rerank" and truth["a"]["inputs"] == 3 and truth["b"]["inputs"] == 2
    assert full["usage"]["total_tokens"] == truth["a"]["prompt_tokens"] == top["usage"]["total_tokens"]
    assert truth["a"]["prompt_tokens"] > 3 * 2  # the query's tokens count once per document


def test_the_web_form_offers_every_endpoint():
    from plugin.options import DECLARED

    endpoint = next(d for d in DECLARED if d.name == "endpoint")
    assert endpoint.choices == [
        "chat",
        "completions",
        "responses",
        "embeddings",
        "rerank",
    ]  # Locust's form shows choices


def test_an_imported_agent_log_replays_against_the_simulator(tmp_path):
    """Every request of an imported agent log (tools, tool calls and results, images) is accepted
    by a server that checks tool messages against their calls, on chat and on the Responses API."""
    import urllib.request

    from tests.test_workload_attachments import agent_log
    from workloads.__main__ import main as cli

    out = tmp_path / "out"
    assert cli(["import", agent_log(tmp_path / "agent.jsonl"), "--out", str(out)]) == 0
    reqs = Sampler(load_spec(str(out / "workload.yaml")), seed=1, max_tokens=4).sample(30)
    with simulator("--profile", "fixed") as url:
        for endpoint, path in (("chat", "/v1/chat/completions"), ("responses", "/v1/responses")):
            for r in reqs:
                data = json.dumps(body(endpoint, r, "", False)).encode()
                with urllib.request.urlopen(urllib.request.Request(url + path, data)) as reply:
                    assert reply.status == 200


def test_a_web_form_run_of_the_mixed_workload_on_the_responses_api(tmp_path):
    """Started from the web form (endpoint and workload chosen there): the run's records are the
    truth log's requests, per class, with tool calls and first answer tokens as the simulator
    sent them."""
    import urllib.parse
    import urllib.request

    from tests.helpers import free_port
    from tests.test_webui import _json, _wait, start_group, stop_group

    truth_path = str(tmp_path / "truth.jsonl")
    (tmp_path / "agentic.yaml").write_text(PROFILE)
    (tmp_path / "mix.yaml").write_text(MIX.format(templates=TEMPLATES))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = str(tmp_path / "web.log")
    with simulator("--profile", str(tmp_path / "agentic.yaml"), truth_log=truth_path) as url:
        proc = start_group(
            "--host",
            url,
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(port),
            "--results-dir",
            str(tmp_path / "results"),
            "--run-id",
            "form",
            "--stop-timeout",
            "20",
            log_path=log,
        )
        try:
            _wait(lambda: _json(base + "/llm/stats"), 60, "the web UI", proc, log)
            form = urllib.parse.urlencode(
                {
                    "user_count": 6,
                    "spawn_rate": 6,
                    "run_time": "6s",
                    "endpoint": "responses",
                    "workload": str(tmp_path / "mix.yaml"),
                    "seed": "3",
                }
            ).encode()
            with urllib.request.urlopen(urllib.request.Request(base + "/swarm", data=form), timeout=30) as r:
                assert json.loads(r.read())["success"]
            final = _wait(
                lambda: (lambda d: d if d["summary"] else None)(_json(base + "/llm/stats")),
                120,
                "the end of the run",
                proc,
                log,
            )
        finally:
            stop_group(proc)
    df, summary = read_results(str(tmp_path / "results"), "form")
    truth = {t["request_id"]: t for t in read_truth(truth_path)}
    assert set(df["request_id"]) == set(truth) and df["ok"].all() and (df["endpoint"] == "responses").all()
    assert set(summary["by_class"]) == {"chat", "tools", "vision", "agent", "think"}
    for column in ("tool_calls", "reasoning_tokens", "answer_tokens", "output_tokens"):
        assert (df[column] == [truth[r][column] for r in df["request_id"]]).all(), column
    assert (df["ttfa_s"].notna() == [truth[r]["first_answer_token"] is not None for r in df["request_id"]]).all()
    assert final["summary"]["overall"]["ttfa_ms"] == summary["overall"]["ttfa_ms"]
