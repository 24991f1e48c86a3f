"""After the run: reports for people and pipelines, from a results folder.

    python -m reports build results/<run-id>      report.html (self-contained, offline) + report.md
    python -m reports show results/<run-id>       the summary tables in a terminal
    python -m reports compare BASE NEW --fail-on 'ttft.p95>+10%,output_tokens_per_s<-5%'
    python -m tests.cdp results/<run-id>/report.html --screenshot page.png   (headless Chromium check)

Modules: data (reading a results folder, summary.json as metrics.schema.Summary, vectorised
binning), rows (the report's content as one row model), templates/ (report.html.j2 and
report.md.j2 render it), svg (inline charts), build (the charts and the formats registry),
compare (time-block bootstrap, rules), plugin (builds the report at the end of every run), cli.
"""
