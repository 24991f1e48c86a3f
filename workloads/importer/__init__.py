"""Import production request logs (``python -m workloads import``): a template library, a fitted
workload spec and a replay trace. The command's help (``cli.py``) describes formats and outputs.

    readers/     one module per log format, registered by name (readers/registry.py); read_log picks one
    records.py   Entry (one logged request, normalised), Parsed (what a reader found), value parsers
    anonymize.py length-preserving masking of personal data (--anonymize)
    fit.py       output lengths, and classes bucketed by input length
    write.py     templates.jsonl, workload.yaml, trace.jsonl
    cli.py       the command: options, summary, the checks
"""

from .anonymize import Anonymizer, luhn_ok
from .cli import import_args, run_import
from .fit import Fit, fit_classes, resolve_output
from .readers import READERS, read_log
from .records import Entry, Parsed, parse_time
from .write import guess_lang, write_outputs

__all__ = [
    "Anonymizer",
    "luhn_ok",
    "import_args",
    "run_import",
    "Fit",
    "fit_classes",
    "resolve_output",
    "READERS",
    "read_log",
    "Entry",
    "Parsed",
    "parse_time",
    "guess_lang",
    "write_outputs",
]
