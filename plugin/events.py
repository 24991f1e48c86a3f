"""The one per-record event of the suite, fired on every process that runs users (a worker, or a
local run) by plugin/finisher.py:

  stream_parsed(rec, parsed)    one exchange became a record: the RequestRecord and its
                                metrics.parsed.ParsedStream (chunk arrival times, and `sim_t` with
                                --sim-timestamps); off the hot path, only when someone listens

It stays an event rather than a plugin hook because it fires once per request and only a few
listeners want it (self-health with --sim-timestamps, bench/client_probe.py); the run-level hooks
are the plugin protocol of plugin/state.py.
"""

from locust.event import EventHook

stream_parsed = EventHook()
