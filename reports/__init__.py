"""After the run: reports for people and pipelines, from a results folder.

    python -m reports build results/<run-id>      report.html (self-contained, offline) + report.md
    python -m reports show results/<run-id>       the summary tables in a terminal
    python -m reports compare BASE NEW --fail-on 'ttft.p95>+10%,output_tokens_per_s<-5%'
    python -m tests.cdp results/<run-id>/report.html --screenshot page.png   (headless Chromium check)

Modules: data (reading and vectorised binning), svg (inline charts), build (the page and the
Markdown), compare (time-block bootstrap, rules), plugin (builds the report at the end of every
run), cdp (a stdlib DevTools client for the browser test), cli.
"""
