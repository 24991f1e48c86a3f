"""Getting records from the process that made them to the one that writes them.

Local run: records go straight to the ResultsWriter.

Distributed run (master + workers, also `--processes N`): a worker keeps finished records as
rows, cuts them into numbered batches at every worker report (every 3 s, Locust's
`report_to_master`), and re-sends each batch until the master acknowledges it. The master writes
a batch once (deduplicated by worker and sequence number) and acknowledges it.

The end of a run is a drain. The master, when the run begins to stop, asks every worker to stop
starting requests (`llm_drain`); the worker stops its users the Locust way (in-flight streams may
finish within --stop-timeout, then are cut and recorded as `stopped`) and sends its last batches
and its batch count (`llm_final`). The master waits for every live worker's final message, checks
that no sequence number is missing, and only then lets the run end. Locust's own quit waits only 0.5 s
for the workers' last reports (while the workers first wait --stop-timeout) and loses records;
this does not.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import gevent
from locust.runners import STATE_MISSING

log = logging.getLogger(__name__)

REPORT_KEY = "llm_batches"


class LocalSink:
    """Single process: records go to the writer directly."""

    def __init__(self, writer):
        self.writer = writer

    def add(self, record) -> None:
        self.writer.add_rows([record.as_row()])


class WorkerShipper:
    """A worker's outbox: numbered batches, kept until the master acknowledges them."""

    def __init__(self, runner, run_id: str):
        self.runner = runner
        self.run_id = run_id
        self.pending: list[tuple] = []
        self.unacked: dict[int, list] = {}
        self.seq = 0
        self.rows = 0

    def add(self, record) -> None:
        self.pending.append(record.as_row())

    def _cut(self) -> None:
        if self.pending:
            self.seq += 1
            self.unacked[self.seq] = self.pending
            self.rows += len(self.pending)
            self.pending = []

    def on_report(self, data: dict, in_flight: int) -> None:
        data["llm_in_flight"] = in_flight
        self._cut()
        if self.unacked:
            data[REPORT_KEY] = {"run_id": self.run_id, "batches": list(self.unacked.items())}

    def on_ack(self, data: dict) -> None:
        if data.get("run_id") == self.run_id:
            for seq in data["seqs"]:
                self.unacked.pop(seq, None)

    def send_final(self) -> None:
        self._cut()
        self.runner.send_message(
            "llm_final",
            {"run_id": self.run_id, "batches": list(self.unacked.items()), "last_seq": self.seq, "rows": self.rows},
        )


@dataclass
class WorkerState:
    client_id: str
    index: int
    first_seen: float = field(default_factory=time.time)
    seqs: set = field(default_factory=set)
    rows: int = 0
    final: dict | None = None
    lost_at: float | None = None


class MasterCollector:
    """The master's inbox: writes each batch once, acknowledges it, and runs the drain."""

    def __init__(self, runner, writer, run_id: str):
        self.runner = runner
        self.writer = writer
        self.run_id = run_id
        self.workers: dict[str, WorkerState] = {}
        self.in_flight: dict[str, int] = {}  # latest count reported by each worker
        self._watch = gevent.spawn(self._watch_workers)

    def _worker(self, client_id: str) -> WorkerState:
        if client_id not in self.workers:
            self.workers[client_id] = WorkerState(client_id, self.runner.get_worker_index(client_id))
        return self.workers[client_id]

    def _ingest(self, client_id: str, payload: dict) -> None:
        if payload.get("run_id") != self.run_id:
            return  # a batch of an earlier run, re-sent late
        state = self._worker(client_id)
        new = []
        for seq, rows in payload["batches"]:
            if seq not in state.seqs:
                state.seqs.add(seq)
                state.rows += len(rows)
                self.writer.add_rows(rows)
            new.append(seq)
        if new:
            self.runner.send_message("llm_ack", {"run_id": self.run_id, "seqs": new}, client_id=client_id)

    def on_worker_report(self, client_id: str, data: dict) -> None:
        if "llm_in_flight" in data:
            self.in_flight[client_id] = data.pop("llm_in_flight")
        payload = data.pop(REPORT_KEY, None)
        if payload:
            self._ingest(client_id, payload)

    def on_final(self, msg) -> None:
        data = msg.data
        self._ingest(msg.node_id, data)
        if data.get("run_id") == self.run_id:
            self._worker(msg.node_id).final = data

    def _watch_workers(self) -> None:
        """Note the time a worker goes missing (killed, network cut); the run goes on without it."""
        while True:
            for client in list(self.runner.clients.all):
                if client.state == STATE_MISSING:
                    state = self._worker(client.id)
                    self.in_flight.pop(client.id, None)
                    if state.lost_at is None and state.final is None:
                        state.lost_at = time.time()
                        log.warning(
                            "worker %s (index %s) lost at %s; its %d acknowledged records are kept",
                            client.id, state.index, time.strftime("%H:%M:%S"), state.rows,
                        )  # fmt: skip
            gevent.sleep(1.0)

    def drain(self, timeout: float) -> None:
        """Ask live workers to stop and wait for their final batches (bounded by `timeout`)."""
        live = [c.id for c in self.runner.clients.all if c.state != STATE_MISSING]
        for client_id in live:
            self._worker(client_id)
            self.runner.send_message("llm_drain", {"run_id": self.run_id}, client_id=client_id)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            waiting = [cid for cid in live if self.workers[cid].final is None and not self._gone(cid)]
            if not waiting:
                break
            gevent.sleep(0.05)
        else:
            log.error("drain: no final records from %s within %.0fs", ", ".join(waiting), timeout)

    def _gone(self, client_id: str) -> bool:
        client = self.runner.clients[client_id] if client_id in self.runner.clients else None
        if client is None or client.state == STATE_MISSING:
            state = self.workers[client_id]
            if state.lost_at is None:
                state.lost_at = time.time()
            return True
        return False

    def report(self) -> dict:
        """Per-worker accounting for summary.json: nothing lost, nothing twice."""
        self._watch.kill(block=False)
        out = {}
        for cid, s in sorted(self.workers.items(), key=lambda kv: kv[1].index):
            last = s.final["last_seq"] if s.final else (max(s.seqs) if s.seqs else 0)
            missing = sorted(set(range(1, last + 1)) - s.seqs)
            out[cid] = {
                "index": s.index,
                "records": s.rows,
                "batches": len(s.seqs),
                "final_received": s.final is not None,
                "records_reported_by_worker": s.final["rows"] if s.final else None,
                "missing_batches": missing,
                "lost_at": s.lost_at,
            }
        return out
