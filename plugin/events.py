"""The suite's own events, for features that plug into a run (like Locust's `events`).

A feature module adds listeners here and to Locust's events, and is imported by locustfile.py;
plugin/hooks.py fires these on the process that writes results (the master, or a local run).

  run_started(run)              the results folder exists; the run's window is about to open
  rows_recorded(run, rows)      records arrived (tuples in metrics.record.FIELD_NAMES order);
                                every record passes here exactly once
  run_stopping(run)             load has stopped, before summary.json: add to run.summary_extra
  run_finished(run, summary)    summary.json is written (build reports, print, clean up)

Fired on every process that runs users (a worker, or a local run), by plugin/finisher.py:

  stream_parsed(rec, parsed)    one exchange became a record: the RequestRecord and its
                                metrics.sse.ParsedStream (chunk arrival times, and `sim_t` with
                                --sim-timestamps); off the hot path, only when someone listens
"""

from locust.event import EventHook

run_started = EventHook()
rows_recorded = EventHook()
run_stopping = EventHook()
run_finished = EventHook()
stream_parsed = EventHook()
