"""Reading a results folder: its records (checked against run.json before a value is used),
summary.json, run.json and server metrics, as one RunData. Reports, the web UI and the tools that
compare runs read a folder only through here.
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import ValidationError

from core.errors import InputError
from core.files import file_digest
from core.validation import describe
from metrics.record import arrow_schema
from metrics.schema import Summary, load_summary
from metrics.timing import arrival_inputs, arrived_tokens
from runfolder.layout import RECORDS, RUN, SERVER_METRICS, SUMMARY
from runfolder.run_info import RunInfo

SCALARS = [
    "request_class",
    "step",
    "wall_send",
    "ok",
    "error",
    "ttft_s",
    "e2e_s",
    "tpot_s",
    "prompt_tokens",
    "output_tokens",
    "tokens_source",
    "n_chunks",
    "connect_s",
    "ttfa_s",
]
STRINGS = ["request_class", "error", "tokens_source"]  # read as dictionaries: categoricals, 4x faster


@dataclass
class RunData:
    path: str
    run_id: str
    summary: Summary
    run: RunInfo
    df: pd.DataFrame  # the scalar columns of every record
    t0: float  # time origin of the charts: the run's start (wall clock)
    server: pd.DataFrame | None = None

    @property
    def records_path(self) -> str:
        return os.path.join(self.path, RECORDS)

    @functools.cached_property
    def chunk_times(self) -> pa.ChunkedArray:
        """Every record's chunk arrival times (read once: the charts and each compared scope use them)."""
        return pq.read_table(self.records_path, columns=["chunk_times"], page_checksum_verification=True).column(
            "chunk_times"
        )

    @property
    def window(self) -> tuple[float, float]:
        return self.summary.window.start, self.summary.window.end


def read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None


def load_run(path: str) -> RunData:
    """The records, summary.json, run.json and server metrics of one results folder. The records
    file is checked before a value is used (`check_records`): a damaged file is refused with one
    line, never read as data."""
    path = os.path.abspath(path)
    records = os.path.join(path, RECORDS)
    if not os.path.isdir(path):
        raise InputError(f"{path}: no such results folder; give results/<run-id>")
    if not os.path.isfile(records):
        raise InputError(f"{path}: no requests.parquet in it; is it a results folder of a finished run?")
    run_json = os.path.join(path, RUN)
    try:
        run = RunInfo.model_validate(read_json(run_json))
    except ValidationError as e:
        raise InputError(f"{run_json}: {describe(e)}") from None
    recorded = check_records(records, run)
    try:
        schema = pq.read_schema(records)
        check_schema(records, schema)
        columns = [c for c in SCALARS if c in schema.names]
        table = pq.read_table(
            records,
            columns=columns,
            read_dictionary=[c for c in STRINGS if c in columns],
            page_checksum_verification=True,
        )
        # a damaged page can still decode into values that do not hold together (a dictionary index
        # past the dictionary's end): pyarrow finds it here, converting, not when it reads
        df = table.to_pandas()
    except InputError:
        raise
    except Exception as e:
        raise InputError(
            f"{records}: cannot be read, the file is damaged ({_first_line(e)}); restore it from a copy"
        ) from None
    if recorded is not None and table.num_rows != recorded:
        raise InputError(
            f"{records}: {table.num_rows} records where run.json recorded {recorded}; restore it from a copy"
        )
    for name in SCALARS:  # an older or partial file: add what is missing, empty
        if name not in df.columns:
            df[name] = np.nan if name.endswith("_s") or name == "wall_send" else ("" if name in STRINGS else 0)
    check_values(records, df)
    summary_path = os.path.join(path, SUMMARY)
    if os.path.isfile(summary_path):
        summary = load_summary(summary_path)
    else:
        summary = _summary_from_records(records, df, run)
    t0 = run.started_at
    if t0 is None or not math.isfinite(float(t0)):
        t0 = float(np.nanmin(df["wall_send"])) if len(df) else 0.0
    server = _server_metrics(os.path.join(path, SERVER_METRICS))
    return RunData(path, run.run_id or summary.run_id or os.path.basename(path), summary, run, df, float(t0), server)


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]


def check_records(records: str, run: RunInfo) -> int | None:
    """requests.parquet against what run.json recorded of it when it was written (`files`: rows,
    bytes, SHA-256; runfolder/records.py records_check): any changed byte is refused (InputError,
    one line). Returns the recorded row count; None for a folder that recorded none (an older
    writer): its pages' checksums and the values' ranges are still checked."""
    entry = run.files.get(RECORDS)
    if entry is None:
        return None
    digest = file_digest(records)
    if digest["bytes"] != entry.bytes or digest["sha256"] != entry.sha256:
        raise InputError(
            f"{records}: damaged or changed since the run wrote it (its SHA-256 differs from the one in "
            "run.json); restore it from a copy"
        )
    return entry.rows


def check_schema(records: str, schema: pa.Schema) -> None:
    """Every column is one the suite writes, with its type (an older file may lack some): a damaged
    footer can rename a column or change its type, and would otherwise be read as missing data."""
    ours = arrow_schema()
    for field in schema:
        if field.name not in ours.names:
            raise InputError(
                f"{records}: a column no version of the suite writes ({field.name!r}): the file is damaged; "
                "restore it from a copy"
            )
        if field.type != ours.field(field.name).type:
            raise InputError(
                f"{records}: column {field.name!r} is {field.type}, not {ours.field(field.name).type}: "
                "the file is damaged; restore it from a copy"
            )


LATENCIES = ("ttft_s", "e2e_s", "tpot_s", "connect_s", "ttfa_s")  # seconds: >= 0, or NaN when not measured


def check_values(records: str, df: pd.DataFrame) -> None:
    """Values no record can hold are refused (InputError, one line): a negative or infinite
    latency, a send time that is missing, a negative count, a success without its E2E."""
    bad = []
    for name in LATENCIES:
        v = df[name].to_numpy(dtype=float)
        n = int(((v < 0) | np.isinf(v)).sum())
        if n:
            bad.append(f"{n} negative or infinite {name}")
    wall = df["wall_send"].to_numpy(dtype=float)
    n = int((~np.isfinite(wall) | (wall <= 0)).sum())
    if n:
        bad.append(f"{n} wall_send missing or not a time")
    for name, least in (("prompt_tokens", -1), ("output_tokens", -1), ("n_chunks", 0), ("step", -1)):
        if name in df.columns:
            n = int((df[name].to_numpy(dtype=float) < least).sum())
            if n:
                bad.append(f"{n} {name} below {least}")
    n = int((df["ok"].to_numpy(dtype=bool) & ~np.isfinite(df["e2e_s"].to_numpy(dtype=float))).sum())
    if n:
        bad.append(f"{n} successes without an E2E")
    if bad:
        raise InputError(
            f"{records}: values no request can have ({', '.join(bad)}): the file is damaged; restore it from a copy"
        )


def _summary_from_records(records: str, df: pd.DataFrame, run: RunInfo) -> Summary:
    """No summary.json (an interrupted writer): compute one with metrics.summary over every record."""
    from metrics.summary import summarize

    wall = df["wall_send"].to_numpy()
    if wall.size == 0:
        start = end = 0.0
    else:
        start, end = float(np.nanmin(wall)), float(np.nanmax(wall))
    summary = summarize(pq.read_table(records, page_checksum_verification=True), start, end)
    summary.run_id = run.run_id
    summary.complete = run.complete is not False
    summary.note = "summary.json was missing: computed over every record, no warm-up excluded"
    return summary


def _server_metrics(path: str) -> pd.DataFrame | None:
    if not os.path.isfile(path):
        return None
    try:
        df = pq.read_table(path).to_pandas()
    except (pa.ArrowInvalid, OSError):
        return None
    need = {"timestamp", "metric", "value"}
    if not need <= set(df.columns):
        return None
    if "labels" not in df.columns:
        df["labels"] = ""
    df["labels"] = df["labels"].map(_label_text) if df["labels"].dtype == object else df["labels"].astype(str)
    ts = df["timestamp"]
    if pd.api.types.is_datetime64_any_dtype(ts):
        df["timestamp"] = (
            ts.astype("int64") / 1e9 if ts.dt.tz is None else ts.dt.tz_convert("UTC").astype("int64") / 1e9
        )
    return df


def _label_text(v) -> str:
    if isinstance(v, dict):
        return ",".join(f"{k}={v[k]}" for k in sorted(v))
    if isinstance(v, (list, tuple, np.ndarray)):  # map<string,string> arrives as a list of pairs
        try:
            return ",".join(f"{k}={val}" for k, val in sorted(v))
        except (TypeError, ValueError):
            return str(v)
    return "" if v is None else str(v)


def tokens_by_interval(
    run: RunData, edges: np.ndarray, group: np.ndarray | bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(output, prompt) tokens of the run's records in `group` that arrived in each interval of
    `edges`, as summary.json counts them (metrics.timing.arrived_tokens: successful requests and
    those still streaming at the end, each token where it arrived)."""
    columns, counted = arrival_inputs(run.df)
    return arrived_tokens(edges, *columns, run.chunk_times, counted & group)
