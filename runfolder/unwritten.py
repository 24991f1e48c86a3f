"""The memory the results writer may hold for records it could not write yet (a full disk): the
limit (LLM_RESULTS_UNWRITTEN_LIMIT) and a record's estimated size, which it is counted in.
"""

from __future__ import annotations

import os

from core.errors import InputError
from core.sizes import parse_size
from metrics.record import FIELD_NAMES

# Records waiting to be written (a full disk) are held in memory up to this many bytes; those handed
# over beyond it are dropped and counted. The environment variable sets another limit (e.g. 2GB).
UNWRITTEN_LIMIT_ENV = "LLM_RESULTS_UNWRITTEN_LIMIT"
UNWRITTEN_LIMIT = 512 << 20
# A record's memory, estimated (measured with tracemalloc: 0.5 KB as the local process makes it,
# 0.8 KB as a master receives it from a worker, plus 40 bytes per streamed chunk: a float in
# chunk_times and an entry of chunk_tokens). About 47,000 records of 256 chunks fit in 512MB.
ROW_BYTES = 1024
CHUNK_BYTES = 40
_CHUNK_TIMES = FIELD_NAMES.index("chunk_times")


def row_bytes(row) -> int:
    """The memory a record's row takes, estimated (the limit on unwritten records counts these)."""
    return ROW_BYTES + CHUNK_BYTES * len(row[_CHUNK_TIMES] or ())


def unwritten_limit() -> int:
    """Bytes of unwritten records held in memory: LLM_RESULTS_UNWRITTEN_LIMIT, or UNWRITTEN_LIMIT."""
    text = os.environ.get(UNWRITTEN_LIMIT_ENV, "").strip()
    if not text:
        return UNWRITTEN_LIMIT
    try:
        return parse_size(UNWRITTEN_LIMIT_ENV, text)
    except InputError:
        raise InputError(
            f"{UNWRITTEN_LIMIT_ENV}: '{text}' is not a size above 0; give e.g. 512MB or 2GB, or unset it"
        ) from None
