"""Multi-turn conversations (workload classes with `session`): spec validation, the Conversation
builder, and end to end against a capturing server: each turn carries the previous turns with the
assistant text actually received, on one user, think times respected, records carry turn and
session_id, summary.json has by_turn; in open loop later turns are scheduled from the reply's end."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from core.errors import InputError
from tests.helpers import read_results, run_locust
from workloads import Conversation, Sampler, load_spec


class CaptureServer:
    """A small OpenAI-compatible streaming server on 127.0.0.1 that keeps every request body and
    the text it answered with (by X-Request-Id). Replies are `max_tokens` words, one per SSE chunk,
    each naming the request, then a usage chunk (unless `usage` is False) and [DONE]; chunked HTTP/1.1
    with keep-alive."""

    def __init__(self, chunk_gap_s: float = 0.002, ttft_s: float = 0.005, usage: bool = True):
        self.bodies: dict[str, dict] = {}
        self.replies: dict[str, str] = {}
        self.lock = threading.Lock()
        self.count = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                body = json.dumps({"object": "list", "data": [{"id": "capture", "object": "model"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                req = json.loads(self.rfile.read(n))
                rid = self.headers.get("X-Request-Id", "")
                with server.lock:
                    server.count += 1
                    k = server.count
                words = [f" r{k}w{i}" for i in range(int(req.get("max_tokens", 4)))]
                with server.lock:
                    server.bodies[rid] = req
                    server.replies[rid] = "".join(words)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                time.sleep(ttft_s)
                prompt_chars = sum(len(m["content"]) for m in req.get("messages", [])) or len(req.get("prompt", ""))
                for i, w in enumerate(words):
                    self._event({"id": rid, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]})
                    if i + 1 < len(words):
                        time.sleep(chunk_gap_s)
                self._event(
                    {
                        "id": rid,
                        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                        **(
                            {"usage": {"prompt_tokens": prompt_chars // 4, "completion_tokens": len(words)}}
                            if usage
                            else {}
                        ),
                    }
                )
                self._chunk(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _event(self, obj):
                self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

            def _chunk(self, data: bytes):
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


SESSION_SPEC = """
name: conversations
classes:
  chat:
    weight: 0.75
    input_chars: {min: 30, max: 120}
    output_tokens: {min: 3, max: 6}
    system_prompt: {share: 1.0, text: "You are a patient tutor."}
    session: {turns: 3, think_time_s: {min: 0.3, max: 0.5}}
  single:
    weight: 0.25
    input_chars: {min: 30, max: 120}
    output_tokens: 3
"""


def write_spec(tmp_path, text=SESSION_SPEC, name="spec.yaml"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


# ------------------------------------------------------------------------------------ spec and builder


def test_session_spec_and_conversation(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    chat = spec.classes["chat"]
    assert chat.session.turns.value == 3 and chat.session.think_time_s.min == 0.3
    assert "conversations of fixed 3 turns" in spec.describe_classes()[0]
    assert spec.to_dict()["classes"]["chat"]["session"]["turns"] == {"dist": "fixed", "value": 3, "min": 3, "max": 3}
    s = Sampler(spec, 3)
    reqs = s.sample(400)
    assert {r.turns for r in reqs if r.request_class == "chat"} == {3}
    assert {r.turns for r in reqs if r.request_class == "single"} == {0}
    first = next(r for r in reqs if r.turns)
    conv = Conversation(s, first, "s1")
    assert conv.turn == 1 and not conv.done
    r2 = conv.advance("Answer one.")
    assert conv.turn == 2
    assert r2.messages()[:3] == [
        {"role": "system", "content": "You are a patient tutor."},
        {"role": "user", "content": first.user},
        {"role": "assistant", "content": "Answer one."},
    ]
    assert r2.input_chars == sum(len(m["content"]) for m in r2.messages())
    assert 30 <= len(r2.user) <= 120 and r2.system == first.system
    r3 = conv.advance("Answer two.")
    assert len(r3.messages()) == 6 and r3.input_chars > r2.input_chars
    assert conv.done and conv.advance("x") is None
    assert r3.prompt().startswith("You are a patient tutor.\n\n" + first.user + "\n\nAnswer one.")
    think = [conv.think_time() for _ in range(200)]
    assert 0.3 <= min(think) and max(think) <= 0.5


@pytest.mark.parametrize(
    "session,needle",
    [
        ("{think_time_s: 1}", "session.turns: missing turns"),
        ("{turns: 0}", "below 1"),
        ("{turns: 2, think_time_s: {min: 3, max: 1}}", "above max"),
        ("{turns: 2, think_time_s: -1}", "not a duration"),
        ("{turns: 2, pause: 1}", "unknown field"),
        ("{turns: {dist: empirical, values: [1, 2, 5]}, think_time_s: {dist: empirical, values: [0.5, 2]}}", None),
    ],
)
def test_session_validation(tmp_path, session, needle):
    p = write_spec(
        tmp_path,
        f"classes:\n  c:\n    weight: 1\n    input_chars: {{min: 20, max: 200}}\n"
        f"    output_tokens: 5\n    session: {session}\n",
    )
    if needle is None:
        spec = load_spec(p)
        s = Sampler(spec, 1)
        assert {r.turns for r in s.sample(100)} == {1, 2, 5}
        assert {s.think_time("c") for _ in range(50)} == {0.5, 2.0}
        return
    with pytest.raises(InputError) as ei:
        load_spec(p)
    assert needle in str(ei.value) and "classes.c.session" in str(ei.value)


# ------------------------------------------------------------------------------------ end to end


def sessions_of(df):
    return {sid: g.sort_values("turn") for sid, g in df[df["session_id"] != ""].groupby("session_id")}


@pytest.mark.process
def test_conversations_carry_the_replies_received(tmp_path):
    with CaptureServer() as srv:
        proc = run_locust(
            "--host",
            srv.url,
            "--model",
            "capture",
            "--workload",
            write_spec(tmp_path),
            "-u",
            "3",
            "-r",
            "3",
            "-t",
            "8s",
            "--seed",
            "2",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "conv",
            "--stop-timeout",
            "5",
            timeout=120,
        )
        bodies, replies = dict(srv.bodies), dict(srv.replies)
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, summary = read_results(str(tmp_path), "conv")
    assert df["ok"].all()
    assert set(df.loc[df["request_class"] == "single", "turn"]) == {-1}
    sessions = sessions_of(df)
    complete = [g for g in sessions.values() if len(g) == 3]
    assert len(complete) >= 3, {k: len(g) for k, g in sessions.items()}
    for g in sessions.values():
        assert list(g["turn"]) == list(range(1, len(g) + 1))  # turns in order, none missing
        assert g["worker"].nunique() == 1 and (g["request_class"] == "chat").all()
        rows = g.to_dict("records")
        for prev, cur in zip(rows, rows[1:]):
            before, after = bodies[prev["request_id"]]["messages"], bodies[cur["request_id"]]["messages"]
            # the whole previous request, then exactly the text the server streamed back, then a new question
            assert after[: len(before)] == before
            assert after[len(before)] == {"role": "assistant", "content": replies[prev["request_id"]]}
            assert after[len(before) + 1]["role"] == "user" and len(after) == len(before) + 2
            assert cur["input_chars"] == sum(len(m["content"]) for m in after)
            assert cur["input_chars"] > prev["input_chars"] and cur["prompt_tokens"] > prev["prompt_tokens"]
            # the next turn waits a think time (0.3-0.5 s) after the reply ended
            gap = cur["wall_send"] - (prev["wall_send"] + prev["e2e_s"])
            assert 0.28 <= gap <= 0.5 + 0.5, gap
    first_bodies = [bodies[g.iloc[0]["request_id"]]["messages"] for g in sessions.values()]
    assert all(m[0] == {"role": "system", "content": "You are a patient tutor."} and len(m) == 2 for m in first_bodies)
    by_turn = summary["by_turn"]
    assert set(by_turn) >= {"1", "2", "3"}
    w = summary["window"]
    in_window = df[(df["wall_send"] >= w["start"]) & (df["wall_send"] <= w["end"])]
    for t in ("1", "2", "3"):
        assert by_turn[t]["requests"]["sent"] == int((in_window["turn"] == int(t)).sum())
    assert by_turn["2"]["ttft_ms"]["p50"] is not None


@pytest.mark.process
def test_open_loop_conversations_schedule_later_turns_from_the_reply(tmp_path):
    spec = write_spec(tmp_path, SESSION_SPEC.replace("weight: 0.75", "weight: 1.0").split("  single:")[0])
    with CaptureServer() as srv:
        proc = run_locust(
            "--host",
            srv.url,
            "--model",
            "capture",
            "--workload",
            spec,
            "--request-rate",
            "2",
            "--arrival",
            "constant",
            "-t",
            "6s",
            "--seed",
            "4",
            "--results-dir",
            str(tmp_path),
            "--run-id",
            "olconv",
            "--stop-timeout",
            "5",
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df, summary = read_results(str(tmp_path), "olconv")
    firsts = df[df["turn"] == 1].sort_values("t_intended")
    assert np.allclose(np.diff(firsts["t_intended"]), 0.5, atol=1e-6)  # sessions arrive on the schedule
    later = df[df["turn"] > 1]
    assert len(later) >= 4 and later["t_intended"].notna().all()
    lag = (later["t_send"] - later["t_intended"]) * 1000
    assert lag.median() < 20, lag.describe()  # sent when due: reply end + think time
    for g in sessions_of(df).values():
        rows = g.to_dict("records")
        for prev, cur in zip(rows, rows[1:]):
            think = cur["t_intended"] - (prev["t_send"] + prev["e2e_s"])
            assert 0.3 - 1e-6 <= think <= 0.5 + 1e-6, think
    assert "schedule_lag_ms" in summary["by_turn"]["2"]
