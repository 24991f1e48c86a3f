"""The HTTP side: a raw ``asyncio.Protocol`` HTTP/1.1 server on uvloop, and the shared state of one
simulator process (`SimServer`).

A completion streams as a `simulator/stream.py` Stream, an embedding or rerank request is a
`simulator/embedding.py` Embedding; a request body is read by `simulator/request_body.py`.

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /v1/responses``
(OpenAI's Responses API: typed events, ending with ``response.completed``), ``POST /v1/embeddings``,
``POST /v1/rerank`` (also ``/rerank``; vLLM's Jina/Cohere form), ``GET /v1/models``, ``GET /health``, ``GET /metrics``.  Any ``model`` field is
accepted and echoed back (the served id when absent).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import uuid
from time import perf_counter

import orjson

from .embedding import Embedding
from .faults import HTTP_FAULTS, FaultPlan
from .metrics import Metrics
from .request_body import parse_request, prompt_block_keys, tool_calls_for
from .runtime import BatchRunner, FixedRunner
from .stream import Stream
from .tokens import PromptCounter, image_tokens
from .truthlog import TruthLog
from .wire import MAX_BODY, MAX_HEAD, REASONS, SERVER_HEADER, HttpError, error_body

ROUTES = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/responses": "responses",
    "/v1/embeddings": "embeddings",
    "/v1/rerank": "rerank",
    "/rerank": "rerank",
}


ID_PREFIX = {"chat": "chatcmpl", "responses": "resp", "embeddings": "embd", "rerank": "rerank"}


class SimServer:
    """Shared state of one simulator process."""

    def __init__(self, profile, loop, model=None, counter=None, truth=None, faults=None, seed=0):
        self.profile = profile
        self.loop = loop
        self.model = model or profile.model
        self.counter = counter or PromptCounter(None)
        self.truth = truth or TruthLog(None)
        self.faults = faults or FaultPlan({}, seed)
        self.fixed = profile.kind == "fixed"
        self.runner = (FixedRunner if self.fixed else BatchRunner)(profile, loop, seed)
        self.metrics = Metrics(self.model, profile, 0 if self.fixed else self.runner.engine.kv.num_blocks)
        if not self.fixed:
            self.runner.on_step = self.metrics.iteration.observe
        self.stream_interval = profile.stream_interval
        self.role_at_once = profile.role_chunk == "at_once"
        self.created = int(time.time())
        self.embed_free_at = 0.0  # when the embedding queue is free again (Embedding)
        self.active: set[Stream] = set()
        self.conns: set[HttpConn] = set()
        self._n = 0
        self._prefix = uuid.uuid4().hex[:8]
        self.models_body = orjson.dumps(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model,
                        "object": "model",
                        "created": self.created,
                        "owned_by": "simulator",
                        "root": self.model,
                        "parent": None,
                        "max_model_len": profile.max_model_len,
                    }
                ],
            }
        )

    def new_id(self, endpoint):
        self._n += 1
        return f"{ID_PREFIX.get(endpoint, 'cmpl')}-{self._prefix}{self._n:08x}"

    def shape_reply(self, s: Stream, req: dict) -> None:
        """Reasoning then answer (profile reasoning_tokens), or tool calls for a request with tools."""
        p = self.profile
        kwargs = req.get("chat_template_kwargs")
        thinking = not (isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False)
        s.set_phases(min(p.reasoning_tokens, s.max_tokens) if thinking else 0, tool_calls_for(req, p, s.seed))
        msgs = req["messages"]
        s.images = image_tokens(msgs, p.image_patch_px, p.image_tokens)[0]
        s.tool_results = sum(
            1
            for m in msgs
            if isinstance(m, dict) and (m.get("role") == "tool" or m.get("type") == "function_call_output")
        )

    def metrics_text(self) -> bytes:
        r = self.runner
        if self.fixed:
            return self.metrics.render(r.num_running(), r.num_waiting(), r.kv_usage())
        eng = r.engine
        return self.metrics.render(
            r.num_running(), r.num_waiting(), r.kv_usage(), eng.preemptions, eng.kv.queries, eng.kv.hits
        )

    def shutdown(self):
        for s in list(self.active):
            if not s.done:
                self.runner.cancel(s)
                s.finish("server_shutdown", respond=False)
        for c in list(self.conns):
            c.drop(reset=False)
        self.runner.stop()
        self.truth.close()


class HttpConn(asyncio.Protocol):
    __slots__ = ("srv", "transport", "buf", "active", "closed", "keep_alive", "_head", "_sent_continue")

    def __init__(self, srv: SimServer):
        self.srv = srv
        self.transport = None
        self.buf = bytearray()
        self.active = None
        self.closed = False
        self.keep_alive = True
        self._head = None
        self._sent_continue = False

    # -- asyncio.Protocol -------------------------------------------------------
    def connection_made(self, transport):
        self.transport = transport
        srv = self.srv
        if srv.faults and srv.faults.draw_connection():
            if srv.truth:
                srv.truth.record(
                    {
                        "request_id": None,
                        "endpoint": None,
                        "stream": None,
                        "arrival": perf_counter(),
                        "first_token": None,
                        "last_token": None,
                        "prompt_tokens": 0,
                        "output_tokens": 0,
                        "chunks": 0,
                        "status": 0,
                        "outcome": "refuse",
                        "fault": "refuse",
                    }
                )
            self.closed = True
            self._reset()
            return
        srv.conns.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def connection_lost(self, exc):
        self.closed = True
        self.srv.conns.discard(self)
        a = self.active
        if a is not None:
            self.active = None
            a.client_gone()

    def data_received(self, data):
        self.buf += data
        if self.active is None:
            self._process()

    def eof_received(self):
        return False  # close our side too

    # -- output -----------------------------------------------------------------
    def headers_bytes(self, status, ctype, length, rid, extra=b""):
        h = [
            b"HTTP/1.1 %d %s\r\n%bcontent-type: %b\r\n"
            % (status, REASONS.get(status, "OK").encode(), SERVER_HEADER, ctype)
        ]
        if length is None:
            h.append(b"transfer-encoding: chunked\r\n")
        else:
            h.append(b"content-length: %d\r\n" % length)
        if rid is not None:
            h.append(b"x-request-id: %b\r\n" % rid.encode("latin-1", "replace"))
        if not self.keep_alive:
            h.append(b"connection: close\r\n")
        h.append(extra)
        h.append(b"\r\n")
        return b"".join(h)

    def simple(self, status, body, ctype=b"application/json", rid=None, extra=b""):
        if not self.closed:
            self.transport.write(self.headers_bytes(status, ctype, len(body), rid, extra) + body)
            if not self.keep_alive:
                self.transport.close()

    def response_done(self):
        self.active = None
        if self.closed:
            return
        if not self.keep_alive:
            self.transport.close()
            return
        if self.buf:
            self.srv.loop.call_soon(self._process)

    def _reset(self):
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        self.transport.abort()

    def drop(self, reset: bool):
        if self.closed:
            return
        self.closed = True
        self.srv.conns.discard(self)
        if reset:
            self._reset()
        else:
            self.transport.close()

    # -- input ------------------------------------------------------------------
    def _process(self):
        while self.active is None and not self.closed:
            buf = self.buf
            if self._head is None:
                i = buf.find(b"\r\n\r\n")
                if i < 0:
                    if len(buf) > MAX_HEAD:
                        self.keep_alive = False
                        self.simple(431, error_body(431, "request head too large"))
                    return
                head = bytes(buf[:i])
                del buf[: i + 4]
                try:
                    self._head = self._parse_head(head)
                except HttpError as e:
                    self.keep_alive = False
                    self.simple(e.status, error_body(e.status, e.message))
                    return
                self._sent_continue = False
            method, path, headers, length = self._head
            if len(buf) < length:
                if headers.get("expect", "").lower() == "100-continue" and not self._sent_continue:
                    self._sent_continue = True
                    self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                return
            body = bytes(buf[:length])
            del buf[:length]
            self._head = None
            self._dispatch(method, path, headers, body)

    def _parse_head(self, head: bytes):
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise HttpError(400, "malformed request line")
        method, target, version = parts
        headers = {}
        for line in lines[1:]:
            k, sep, v = line.partition(":")
            if not sep:
                raise HttpError(400, "malformed header line")
            headers[k.strip().lower()] = v.strip()
        conn = headers.get("connection", "").lower()
        if version == "HTTP/1.0":
            self.keep_alive = conn == "keep-alive"
        else:
            self.keep_alive = conn != "close"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise HttpError(501, "chunked request bodies are not supported; send Content-Length")
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise HttpError(400, "bad Content-Length") from None
        if length < 0 or length > MAX_BODY:
            raise HttpError(413, "request body too large")
        path = target.split("?", 1)[0]
        return method, path, headers, length

    def _dispatch(self, method, path, headers, body):
        srv = self.srv
        if path in ROUTES:
            if method != "POST":
                self.simple(405, error_body(405, "method not allowed"), extra=b"allow: POST\r\n")
                return
            if ROUTES[path] in ("embeddings", "rerank"):
                self._pooling(ROUTES[path], headers, body)
            else:
                self._completion(ROUTES[path], headers, body)
            return
        if method not in ("GET", "HEAD"):
            self.simple(
                405 if path in ("/health", "/v1/models", "/metrics") else 404,
                error_body(405 if path in ("/health", "/v1/models", "/metrics") else 404, "not found"),
            )
            return
        if path == "/health":
            self.simple(200, b"", ctype=b"text/plain")
        elif path == "/v1/models":
            self.simple(200, srv.models_body)
        elif path == "/metrics":
            self.simple(200, srv.metrics_text(), ctype=b"text/plain; version=0.0.4; charset=utf-8")
        else:
            self.simple(404, error_body(404, f"no route {path}"))

    def _pooling(self, endpoint, headers, body):
        """/v1/embeddings, or /v1/rerank: each document is scored with the query before it (a cross
        encoder's pair), so a document costs the query's tokens and its own, as vLLM counts them."""
        srv = self.srv
        arrival = perf_counter()
        rid = headers.get("x-request-id") or srv.new_id(endpoint)
        documents = None
        try:
            req = orjson.loads(body)
            if not isinstance(req, dict):
                raise HttpError(400, "request body must be a JSON object")
            if endpoint == "rerank":
                query, documents, top_n = req.get("query"), req.get("documents"), req.get("top_n") or 0
                if (
                    not isinstance(query, str)
                    or not isinstance(documents, list)
                    or not documents
                    or not all(isinstance(d, str) for d in documents)
                ):
                    raise HttpError(400, "'query' must be a string and 'documents' a non-empty list of strings")
                if not isinstance(top_n, int) or top_n < 0:
                    raise HttpError(400, "'top_n' must be a non-negative integer")
                q = srv.counter.count_prompt(query)
                tokens = sum(q + srv.counter.count_prompt(d) for d in documents)
                inputs = documents[:top_n] if top_n else documents
            else:
                inputs = req.get("input")
                inputs = (
                    [inputs]
                    if isinstance(inputs, str) or (isinstance(inputs, list) and inputs and isinstance(inputs[0], int))
                    else inputs
                )
                if not isinstance(inputs, list) or not inputs:
                    raise HttpError(400, "'input' must be a string or a non-empty list")
                tokens = sum(srv.counter.count_prompt(x) for x in inputs)
        except orjson.JSONDecodeError as e:
            self.simple(400, error_body(400, f"invalid JSON body: {e}"), rid=rid)
            return
        except HttpError as e:
            self.simple(e.status, error_body(e.status, e.message), rid=rid)
            return
        model = req.get("model") if isinstance(req.get("model"), str) and req.get("model") else srv.model
        self.active = Embedding(srv, self, rid, arrival, tokens, len(inputs), model, documents)

    def _completion(self, endpoint, headers, body):
        srv = self.srv
        arrival = perf_counter()
        rid = headers.get("x-request-id") or srv.new_id(endpoint)
        try:
            req, prompt_tokens, max_tokens, stream, inc_usage, cont_usage, model = parse_request(srv, endpoint, body)
        except HttpError as e:
            self.simple(e.status, error_body(e.status, e.message), rid=rid)
            if srv.truth:
                srv.truth.record(
                    {
                        "request_id": rid,
                        "endpoint": endpoint,
                        "stream": None,
                        "arrival": arrival,
                        "first_token": None,
                        "last_token": None,
                        "prompt_tokens": 0,
                        "output_tokens": 0,
                        "chunks": 0,
                        "status": e.status,
                        "outcome": "rejected",
                        "fault": None,
                    }
                )
            return
        s = Stream(
            srv,
            self,
            rid,
            endpoint,
            stream,
            prompt_tokens,
            max_tokens,
            model,
            inc_usage,
            cont_usage,
            headers.get("x-sim-timestamps") == "1",
            arrival,
        )
        s.block_keys = prompt_block_keys(srv, endpoint, req, prompt_tokens)
        self.active = s
        srv.active.add(s)
        if endpoint in ("chat", "responses"):
            srv.shape_reply(s, req)
        fault = srv.faults.draw_request() if srv.faults else None
        if fault is not None:
            name, param = fault
            s.fault, s.fault_param = name, param
            if name in HTTP_FAULTS:
                st = HTTP_FAULTS[name]
                s._send_simple(st, error_body(st, f"simulated {name}"), b"retry-after: 1\r\n" if st == 429 else b"")
                s.finish(name)
                return
            if name == "json_reply":
                s.is_stream = False
            if name in ("mid_stream_error", "cut_close", "cut_reset", "malformed_chunk"):
                s.fault_k = max(0, min(int(param), max_tokens - 1))
                if name == "malformed_chunk":
                    s.fault_k = max(1, s.fault_k)
        s.begin()
