"""The report's content as data: one row model that every format renders (reports/templates/),
built by reports/rows.py. Cells and tables hold plain text; a template decides only how it looks: the
HTML page escapes the text and colours a verdict, the Markdown summary bolds a failure."""

from __future__ import annotations

from dataclasses import dataclass, field

# the setup fields, stated first (reports/rows.py setup_rows); the short summary shows them
SETUP_KEYS = ("label", "load", "time", "SLO", "workload", "server", "against", "client", "suite")


@dataclass
class Cell:
    text: str  # as shown, plain text (a template escapes it for its format)
    status: str = ""  # "pass" | "fail" | "": a verdict, coloured in HTML, a failure bold in Markdown
    code: bool = False  # a name shown as code (metric definitions)


@dataclass
class Table:
    headers: list[str]
    rows: list[list[Cell]]
    left: int = 1  # the first `left` columns are text (left-aligned); the others numbers, unless in `text`
    text: tuple[int, ...] = ()
    row_classes: list[str] = field(default_factory=list)  # e.g. "overall" (bold in HTML)

    def is_text(self, i: int) -> bool:
        return i < self.left or i in self.text

    def row_class(self, r: int) -> str:
        return self.row_classes[r] if r < len(self.row_classes) else ""


@dataclass
class Extra:
    """A summary section with no view of its own (a plugin's, concurrency, open_loop): a table of
    its flattened fields, or one line of text."""

    key: str
    table: Table | None = None
    text: str = ""

    @property
    def title(self) -> str:
        return self.key.replace("_", " ").capitalize()


@dataclass
class ChartGroup:
    title: str
    charts: list[str]  # inline SVG, escaped by reports/svg.py
    note: str = ""


@dataclass
class Report:
    title: str
    run_id: str
    path: str  # the results folder
    header: list[tuple[str, str]]  # (field, value) of the run
    complete: bool
    reason: str  # why the run is incomplete, when it is
    warning: str  # the load generator may have distorted the timings
    capacity: str  # the capacity sentence of a step run with an SLO
    diagnosis: str  # why the knee is there (metrics/diagnosis.py), for runs with load levels
    diagnosis_heading: str  # "Why the knee is there" only where a level missed (metrics/diagnosis.py heading_of)
    server_levels: Table | None  # the server's gauges at each level
    slo_verdict: (
        Cell | None
    )  # the run's SLO verdict (metrics/verdict.py: its state, requests, margin); None without --slo
    slo: Table | None
    summary: Table
    turns: Table | None
    steps: Table | None
    # several replicas or a balancer's header: the summary table per backend, each backend's share and
    # flags (metrics/backends.py), and when each backend's failures came and how long it took to recover
    backends: Table | None
    backend_shares: Table | None
    backend_rule: str
    outages: Table | None
    failures: Table | None  # None: no failed request
    charts: list[ChartGroup]
    extras: list[Extra]
    definitions: Table
    options: Table
    versions: Table
    # the client's TTFT split by the server's own timing of each request (metrics/ttft_split.py), per
    # class, the run and each level; None where no server sent it
    ttft_split: Table | None = None
    # several replicas each scraped (--server-metrics): each one's own diagnosis at the knee (targets/diagnosis.py)
    backend_diagnoses: Table | None = None
    capacity_check: str = ""  # what a capacity search said before it started (its levels' decidability, its ceiling)
    gpu: str = ""  # the capacity (or the run) in the deployment's terms: summary.json gpu.sentence
    gpu_note: str = ""  # where the GPU figures come from: the telemetry source and the GPUs it saw
    gpu_levels: Table | None = None  # the GPUs and the load in the deployment's terms, per level
    built_at: str = ""
    build_s: float = 0.0
    files: dict[str, str] = field(default_factory=dict)  # format name -> path of the file written

    @property
    def header_line(self) -> list[tuple[str, str]]:
        """The header fields the short (Markdown) summary shows."""
        return [
            (k, v)
            for k, v in self.header
            if k in (*SETUP_KEYS, "host", "model", "started", "measurement window", "records", "connection setup")
        ]


def cells(*texts: str) -> list[Cell]:
    return [Cell(t) for t in texts]
