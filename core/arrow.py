"""Arrow schemas and tables of the suite's files, with pyarrow loaded at first use.

A process that only drives load (a worker) never writes a file, and never loads pyarrow: a tenth
of a second of CPU at each start (bench/RESULTS.md "The end of a process, pyarrow off the
workers"). So a file's schema is a function, built once at its first call (`lazy_schema`), and
rows become a table of it in one place (`rows_to_arrow`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa


def lazy_schema(fields: Callable[[object], list]) -> Callable[[], pa.Schema]:
    """The schema whose fields `fields(pyarrow)` lists, built at its first call and kept."""

    @cache
    def schema() -> pa.Schema:
        import pyarrow as pa

        return pa.schema(fields(pa))

    return schema


def rows_to_arrow(rows: list[tuple], schema: pa.Schema) -> pa.Table:
    """Rows (tuples in the schema's column order) as a table of `schema`."""
    import pyarrow as pa

    columns = list(zip(*rows)) if rows else [[] for _ in schema]
    return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema)], schema=schema)
