"""The master's inbox at the edges of a run: a worker alive at the drain's end that never sent its
last records is lost, and a batch of a run the master does not know is said once."""

from __future__ import annotations

import logging

import pytest
from locust.runners import STATE_RUNNING

from plugin.shipping import MasterCollector

pytestmark = pytest.mark.unit


class Client:
    def __init__(self, cid):
        self.id, self.state = cid, STATE_RUNNING


class Clients(dict):
    @property
    def all(self):
        return list(self.values())


class Runner:
    """What the collector reads of Locust's master runner."""

    def __init__(self, *ids):
        self.clients = Clients({cid: Client(cid) for cid in ids})
        self.sent = []

    def get_worker_index(self, cid):
        return sorted(self.clients).index(cid)

    def send_message(self, kind, data, client_id=None):
        self.sent.append((kind, client_id))


class Writer:
    def __init__(self):
        self.rows = []

    def add_rows(self, rows, on_written):
        self.rows += rows
        on_written()


class Final:
    def __init__(self, node_id, data):
        self.node_id, self.data = node_id, data


def test_a_live_worker_without_its_last_records_at_the_drains_end_is_lost(caplog):
    runner = Runner("a", "b")
    inbox = MasterCollector(runner, Writer(), "run-1")
    inbox.on_worker_report(
        "a",
        {
            "llm_in_flight": 3,
            "llm_rows": {"run_id": "run-1", "rows": 2},
            "llm_batches": {"run_id": "run-1", "batches": [(1, [("r1",)])]},
        },
    )
    inbox.on_final(Final("b", {"run_id": "run-1", "batches": [], "last_seq": 0, "rows": 0}))
    with caplog.at_level(logging.WARNING):
        inbox.drain(timeout=0.2)
    assert ("llm_drain", "a") in runner.sent
    assert inbox.lost_workers() == {"a": 3 + 1}  # in flight at its last report, and a row cut but never received
    assert "worker a (index 0) sent no final records by the drain's end" in caplog.text
    assert inbox.report()["a"]["final_received"] is False and inbox.report()["b"]["lost_at"] is None


def test_a_batch_of_an_unknown_run_is_said_once_and_not_written(caplog):
    writer = Writer()
    MasterCollector(Runner("a"), Writer(), "earlier-run")  # this process's run before: its late batches are expected
    inbox = MasterCollector(Runner("a"), writer, "run-2")
    with caplog.at_level(logging.WARNING):
        for seq in (1, 2, 3):
            inbox.on_worker_report(
                "a", {"llm_batches": {"run_id": "its-own-run", "batches": [(seq, [("x",), ("y",)])]}}
            )
            inbox.on_worker_report("a", {"llm_batches": {"run_id": "earlier-run", "batches": [(seq, [("z",)])]}})
    said = [r.getMessage() for r in caplog.records if "its-own-run" in r.getMessage()]
    assert len(said) == 1 and "not of this run 'run-2': not written (2 in this batch" in said[0], said
    assert not [r for r in caplog.records if "earlier-run" in r.getMessage()]
    assert writer.rows == []
