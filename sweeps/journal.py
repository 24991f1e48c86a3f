"""The sweep's journal: one JSON line per event (a point started, its server ready, its load
started, its outcome), appended and flushed as it happens, so an interrupted sweep says how far it
got and why a point failed."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime

JOURNAL = "journal.jsonl"


class Journal:
    def __init__(self, folder: str):
        self.path = os.path.join(folder, JOURNAL)

    def write(self, event: str, **fields) -> None:
        line = {
            "t": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "unix": round(time.time(), 3),
            "event": event,
            **fields,
        }
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, default=str) + "\n")

    def read(self) -> list[dict]:
        try:
            with open(self.path, encoding="utf-8") as f:
                return [json.loads(x) for x in f if x.strip()]
        except FileNotFoundError:
            return []
