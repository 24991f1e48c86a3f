"""One /v1/embeddings or /v1/rerank request, answered at once when its turn on the embedding queue
comes."""

from __future__ import annotations

import zlib
from time import perf_counter

import orjson


class Embedding:
    """One /v1/embeddings or /v1/rerank request: it waits its turn on the one embedding queue (a
    reranker is a pooling model like an embedding model: it costs per input token), then the
    vectors, or the documents ranked by relevance (vLLM's Jina/Cohere-form reply), are written at
    once (profile embedding_*). `documents`: rerank's, `inputs` of them returned (top_n)."""

    __slots__ = ("srv", "conn", "rid", "arrival", "tokens", "inputs", "model", "timer", "done", "documents")

    def __init__(self, srv, conn, rid, arrival, tokens, inputs, model, documents=None):
        self.srv, self.conn, self.rid, self.arrival = srv, conn, rid, arrival
        self.tokens, self.inputs, self.model, self.documents = tokens, inputs, model, documents
        self.done = False
        p = srv.profile
        start = max(arrival, srv.embed_free_at)
        srv.embed_free_at = start + p.embedding_base_s + p.embedding_per_token_s * tokens
        self.timer = srv.loop.call_later(max(0.0, srv.embed_free_at - perf_counter()), self.respond)

    def respond(self):
        if self.done:
            return
        srv = self.srv
        if self.documents is not None:
            scores = [(zlib.crc32(f"{self.rid}/{i}".encode()) % 10**6) / 10**6 for i in range(len(self.documents))]
            ranked = sorted(range(len(scores)), key=lambda i: -scores[i])[: self.inputs]
            body = orjson.dumps(
                {
                    "id": self.rid,
                    "model": self.model,
                    "usage": {"total_tokens": self.tokens},
                    "results": [
                        {"index": i, "document": {"text": self.documents[i]}, "relevance_score": scores[i]}
                        for i in ranked
                    ],
                }
            )
        else:
            dim = srv.profile.embedding_dim
            vector = [round(((zlib.crc32(self.rid.encode()) >> (i % 24)) % 2001 - 1000) / 1000, 3) for i in range(dim)]
            body = orjson.dumps(
                {
                    "object": "list",
                    "model": self.model,
                    "data": [{"object": "embedding", "index": i, "embedding": vector} for i in range(self.inputs)],
                    "usage": {"prompt_tokens": self.tokens, "total_tokens": self.tokens},
                }
            )
        t = perf_counter()  # the moment of the write, as for chunks
        self.conn.simple(200, body, rid=self.rid)
        self._end(200, "ok", t)
        self.conn.response_done()

    def client_gone(self):
        if not self.done:
            self.timer.cancel()
            self._end(0, "client_disconnected", None)

    def _end(self, status, outcome, t):
        self.done = True
        srv = self.srv
        if outcome == "ok":
            srv.metrics.prompt_tokens += self.tokens
            srv.metrics.e2e.observe(t - self.arrival)
        if srv.truth:
            endpoint = "embeddings" if self.documents is None else "rerank"
            srv.truth.record(
                {
                    "request_id": self.rid,
                    "endpoint": endpoint,
                    "stream": False,
                    "arrival": self.arrival,
                    "first_token": None,
                    "last_token": t,
                    "prompt_tokens": self.tokens,
                    "output_tokens": 0,
                    "chunks": 0,
                    "status": status,
                    "outcome": outcome,
                    "fault": None,
                    "inputs": self.inputs,
                }
            )
