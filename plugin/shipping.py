"""Getting records from the process that made them to the one that writes them.

Local run: records go straight to the ResultsWriter.

Distributed run (master + workers, also `--processes N`): a worker keeps finished records as
rows, cuts them into numbered batches at every worker report (every 3 s, Locust's
`report_to_master`), and sends each batch again when no acknowledgement came within
RESEND_AFTER_S. The master writes a batch once (deduplicated by worker and sequence number) and
acknowledges it once it is on disk: a batch lost with a killed master is still on its worker,
which keeps it on its own disk when it finds its master gone (plugin/hooks.py).

Every report also carries the worker's requests in flight and the rows it has cut so far: when a
worker is lost mid-run, the master counts a lower bound of the requests lost with it (those in
flight at its last report, and rows cut but never received) and says so.

The end of a run is a drain. The master, when the run begins to stop, asks every worker to stop
starting requests (`llm_drain`); the worker stops its users the Locust way (in-flight streams may
finish within --stop-timeout, then are cut and recorded as `stopped`) and sends its last batches
and its batch count (`llm_final`). The master waits for every live worker's final message, checks
that no sequence number is missing, and only then lets the run end. A worker still alive when the
drain's bound passes without its final message is lost, counted as a killed worker is (the run is
not complete). A batch of a run the master does not know is not written, and said once per worker. Locust's own quit waits only 0.5 s
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
RESEND_AFTER_S = 15.0  # a batch not acknowledged this long after it was sent is sent again


class LocalSink:
    """Single process: records go to the writer directly."""

    def __init__(self, writer):
        self.writer = writer

    def add(self, record) -> None:
        self.writer.add_rows([record.as_row()])

    def wait_for_room(self) -> None:
        self.writer.wait_for_room()


class WorkerShipper:
    """A worker's outbox: numbered batches, kept until the master acknowledges them."""

    def __init__(self, runner, run_id: str):
        self.runner = runner
        self.run_id = run_id
        self.pending: list[tuple] = []
        self.unacked: dict[int, list] = {}
        self.sent_at: dict[int, float] = {}
        self.seq = 0
        self.rows = 0

    def add(self, record) -> None:
        self.pending.append(record.as_row())

    def wait_for_room(self) -> None:
        """Batches leave with every report; the master's writer bounds what it holds."""

    def _cut(self) -> None:
        if self.pending:
            self.seq += 1
            self.unacked[self.seq] = self.pending
            self.rows += len(self.pending)
            self.pending = []

    def on_report(self, data: dict, in_flight: int) -> None:
        self._cut()
        data["llm_in_flight"] = in_flight
        data["llm_rows"] = {"run_id": self.run_id, "rows": self.rows}
        now = time.monotonic()
        due = [(seq, rows) for seq, rows in self.unacked.items() if now - self.sent_at.get(seq, -1e9) >= RESEND_AFTER_S]
        if due:
            for seq, _ in due:
                self.sent_at[seq] = now
            data[REPORT_KEY] = {"run_id": self.run_id, "batches": due}

    def on_ack(self, data: dict) -> None:
        if data.get("run_id") == self.run_id:
            for seq in data["seqs"]:
                self.unacked.pop(seq, None)
                self.sent_at.pop(seq, None)

    def unshipped(self) -> list[tuple]:
        """Every row the master has not acknowledged (as written to its disk), in order."""
        self._cut()
        return [row for _, rows in sorted(self.unacked.items()) for row in rows]

    def send_final(self) -> bool:
        """The last batches and the count; False when the message could not be sent."""
        self._cut()
        try:
            self.runner.send_message(
                "llm_final",
                {"run_id": self.run_id, "batches": list(self.unacked.items()), "last_seq": self.seq, "rows": self.rows},
            )
        except Exception as e:
            log.error("could not send the last records to the master: %s", e)
            return False
        return True


@dataclass
class WorkerState:
    client_id: str
    index: int
    first_seen: float = field(default_factory=time.time)
    seqs: set = field(default_factory=set)  # batches received
    written: set = field(default_factory=set)  # batches on disk (acknowledged)
    rows: int = 0
    final: dict | None = None
    lost_at: float | None = None
    in_flight: int = 0  # requests in flight at the worker's last report
    rows_cut: int = 0  # rows the worker had cut into batches at its last report

    @property
    def lost_requests_min(self) -> int:
        """A lost worker (no final batches): requests whose records cannot have reached the
        master. Those in flight at its last report finished (or were cut) after it, and their
        records would have come in a later batch; rows it cut but never delivered. Records it
        finished after its last report and before it died are not counted: a lower bound."""
        if self.final is not None or self.lost_at is None:
            return 0
        return self.in_flight + max(0, self.rows_cut - self.rows)


class MasterCollector:
    """The master's inbox: writes each batch once, acknowledges it, and runs the drain."""

    earlier: set[str] = set()  # the runs of this process: a batch of one is re-sent late, not a stranger's

    def __init__(self, runner, writer, run_id: str):
        self.runner = runner
        self.writer = writer
        self.run_id = run_id
        self.workers: dict[str, WorkerState] = {}
        self.in_flight: dict[str, int] = {}  # latest count reported by each live worker
        self.failed: set[str] = set()  # workers that could not start the run (they send no final)
        self.refused: set[str] = set()  # workers the run was stopped for (plugin/hooks.py), those too
        self._acks: dict[str, list[int]] = {}
        self._ack_pending = False
        self._foreign_seen: set[tuple] = set()  # (worker, run id) of batches of another run, logged
        MasterCollector.earlier.add(run_id)
        self._watch = gevent.spawn(self._watch_workers)

    def _worker(self, client_id: str) -> WorkerState:
        if client_id not in self.workers:
            self.workers[client_id] = WorkerState(client_id, self.runner.get_worker_index(client_id))
        return self.workers[client_id]

    def _ingest(self, client_id: str, payload: dict) -> None:
        run_id = payload.get("run_id")
        if run_id != self.run_id:
            self._foreign(client_id, run_id, payload)
            return
        state = self._worker(client_id)
        for seq, rows in payload["batches"]:
            if seq not in state.seqs:
                state.seqs.add(seq)
                state.rows += len(rows)
                self.writer.add_rows(rows, on_written=lambda s=state, q=seq: self._written(s, q))
            elif seq in state.written:  # sent again: the acknowledgement was lost
                self._ack(client_id, seq)

    def _foreign(self, client_id: str, run_id, payload: dict) -> None:
        """A batch of another run is not written. One of this master's earlier runs (a web UI's
        restart) is a batch re-sent late; any other is logged once per worker and run."""
        if run_id in MasterCollector.earlier or (client_id, run_id) in self._foreign_seen:
            return
        self._foreign_seen.add((client_id, run_id))
        rows = sum(len(batch) for _, batch in payload.get("batches", ()))
        log.warning(
            "worker %s (index %s) sent records of run %r, not of this run %r: not written (%d in this batch; "
            "a worker of another version of this suite?)",
            client_id,
            self._worker(client_id).index,
            run_id,
            self.run_id,
            rows,
        )

    def _written(self, state: WorkerState, seq: int) -> None:
        state.written.add(seq)
        self._ack(state.client_id, seq)

    def _ack(self, client_id: str, seq: int) -> None:
        self._acks.setdefault(client_id, []).append(seq)
        if not self._ack_pending:  # one message per worker for everything one flush wrote
            self._ack_pending = True
            gevent.spawn(self._send_acks)

    def _send_acks(self) -> None:
        self._ack_pending = False
        acks, self._acks = self._acks, {}
        for client_id, seqs in acks.items():
            try:
                self.runner.send_message("llm_ack", {"run_id": self.run_id, "seqs": seqs}, client_id=client_id)
            except Exception as e:
                log.debug("ack to %s not sent: %s", client_id, e)

    def on_worker_report(self, client_id: str, data: dict) -> None:
        if "llm_in_flight" in data:
            self.in_flight[client_id] = data.pop("llm_in_flight")
            self._worker(client_id).in_flight = self.in_flight[client_id]
        cut = data.pop("llm_rows", None)
        if cut and cut.get("run_id") == self.run_id:
            self._worker(client_id).rows_cut = cut["rows"]
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
                    self._lost(client.id)
            gevent.sleep(1.0)

    def _lost(self, client_id: str, how: str = "lost") -> None:
        state = self._worker(client_id)
        self.in_flight.pop(client_id, None)
        if state.lost_at is None and state.final is None:
            state.lost_at = time.time()
            log.warning(
                "worker %s (index %s) %s at %s: at least %d requests lost with it (%d in flight at its last "
                "report, %d finished but never received); its %d received records are kept",
                client_id,
                state.index,
                how,
                time.strftime("%H:%M:%S"),
                state.lost_requests_min,
                state.in_flight,
                max(0, state.rows_cut - state.rows),
                state.rows,
            )

    def drain(self, timeout: float, now: bool = False) -> None:
        """Ask live workers to stop and wait for their final batches (bounded by `timeout`). A
        worker missing now is lost, even when it went missing a moment ago: Locust stops the run
        at once when its last worker goes missing, before the watch (every second) could see it."""
        for client in list(self.runner.clients.all):
            if client.state == STATE_MISSING:
                self._lost(client.id)
        self.ask_to_stop(now)
        live = [c.id for c in self.runner.clients.all if c.state != STATE_MISSING and c.id not in self.failed]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            waiting = [cid for cid in live if self._worker(cid).final is None and not self._gone(cid)]
            if not waiting:
                break
            gevent.sleep(0.05)
        else:  # alive, yet its last records never came: lost with what it held, as a killed worker is
            log.error("drain: no final records from %s within %.0fs", ", ".join(waiting), timeout)
            for cid in waiting:
                self._lost(cid, "sent no final records by the drain's end")

    def ask_to_stop(self, now: bool = False) -> None:
        """Ask every live worker to stop its users and send its last batches; `now` (an
        interrupted run): cut the streams in flight at once instead of waiting --stop-timeout."""
        for client in list(self.runner.clients.all):
            if client.state != STATE_MISSING and client.id not in self.failed:
                self._worker(client.id)
                self.runner.send_message("llm_drain", {"run_id": self.run_id, "now": now}, client_id=client.id)

    def _gone(self, client_id: str) -> bool:
        client = self.runner.clients[client_id] if client_id in self.runner.clients else None
        if client is None or client.state == STATE_MISSING:
            self._lost(client_id)
            return True
        return False

    def lost_workers(self) -> dict[str, int]:
        """Workers lost mid-run (no final batches) -> the lower bound of requests lost with each."""
        return {
            cid: s.lost_requests_min for cid, s in self.workers.items() if s.lost_at is not None and s.final is None
        }

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
                "in_flight_when_lost": s.in_flight if s.lost_at is not None and s.final is None else 0,
                "lost_requests_min": s.lost_requests_min,
                "failed_to_start": cid in self.failed,
            }
        return out
