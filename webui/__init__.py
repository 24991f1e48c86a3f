"""The LLM view of Locust's web UI (master or local process): live TTFT, TPOT, ITL, E2E, tokens/s
and goodput per request class from the exact merged records, charts over time, report links.

`webui.live` aggregates (no Flask, no Locust: unit-testable), with one block of records and open
streams in `webui.live_blocks`, the load steps and the knee's diagnosis in `webui.live_steps` and the
records' columns in `webui.live_table`; `webui.view` samples it while a run
is on, with the gauges of `webui.gauges`; `webui.routes` serves it; `webui.plugin` wires it into
the run's events and the web UI (imported by locustfile.py); `webui/llm.html` is the page.
"""
