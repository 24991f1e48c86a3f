"""The files of a results folder, each name written here once: what the writer makes, the recovery
restores, the readers open and the web UI serves.
"""

from __future__ import annotations

RECORDS = "requests.parquet"  # every request's record, joined from the parts at the run's end
PARTS = "requests.parts"  # the part files the writer flushes during a run (a folder)
UNSHIPPED = ".unshipped.parquet"  # a worker's records its lost master never acknowledged
SUMMARY = "summary.json"
RUN = "run.json"  # the run plan and what ran it (runfolder/run_info.py)
SERVER_METRICS = "server_metrics.parquet"  # the server's /metrics scrapes (--server-metrics)
REPORT_HTML = "report.html"
REPORT_MD = "report.md"
