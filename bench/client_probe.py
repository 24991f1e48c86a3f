"""Bench-only listener: the suite's own per-chunk arrival times and lags, for bench/client_speed.py.

Loaded next to the real locustfile, so the suite runs unchanged:

    CLIENT_PROBE_OUT=/tmp/suite.npz CLIENT_PROBE_WARMUP=8 CLIENT_PROBE_DURATION=20 \\
      locust -f locustfile.py,bench/client_probe.py --headless --sim-timestamps ...

Why a listener and not a record column: the record (metrics/record.py) keeps chunk arrival
times but not the simulator's `sim_t` of each chunk, and per-chunk server times are not in the
simulator's truth log either. The finisher already holds the parsed stream (metrics.parsed.Chunk
keeps `sim_t`) when it builds the record, off the hot path, so it fires `plugin.events.
stream_parsed(rec, parsed)` when anyone listens; this module listens and keeps two floats per
chunk. The self-health monitor (plugin/health_monitor.py) uses the same event for its token lag. No
listener, no cost: the finisher checks for listeners before firing.

The probe also measures its own process: the measurement window starts CLIENT_PROBE_WARMUP
seconds after `test_start` and lasts CLIENT_PROBE_DURATION seconds; CPU seconds come from
/proc/self/stat at both ends. With CLIENT_PROBE_QUIT=1 the probe ends the run when the window
closes, as --run-time would (the suite's start-up is not counted against it); in a distributed
run the master quits once every worker said its window closed. Everything is saved at quit (bench/client_common.py format).
"""

from __future__ import annotations

import array
import os
import sys
import time

import gevent
from locust import events
from locust.runners import MasterRunner, WorkerRunner

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_common import cpu_seconds, save

from plugin import events as llm_events

OUT = os.environ.get("CLIENT_PROBE_OUT", "")
WARMUP = float(os.environ.get("CLIENT_PROBE_WARMUP", "8"))
DURATION = float(os.environ.get("CLIENT_PROBE_DURATION", "20"))
QUIT = os.environ.get("CLIENT_PROBE_QUIT", "") == "1"  # local run: end the run when the window closes


class Probe:
    def __init__(self):
        self.chunk_t = array.array("d")
        self.chunk_lag = array.array("d")
        self.req_id: list[str] = []
        self.req_send = array.array("d")
        self.req_first = array.array("d")
        self.window = [float("nan"), float("nan")]
        self.cpu = [float("nan"), float("nan")]
        self.saved = False

    def on_parsed(self, rec, parsed, **_kw) -> None:
        chunks = parsed.chunks
        if not chunks:
            return
        ct, cl = self.chunk_t, self.chunk_lag
        for c in chunks:
            ct.append(c.t)
            cl.append(c.t - c.sim_t)
        self.req_id.append(rec.request_id)
        self.req_send.append(rec.t_send)
        self.req_first.append(chunks[0].t)

    def measure(self, environment, t0: float) -> None:
        gevent.sleep(max(0.0, t0 + WARMUP - time.perf_counter()))
        self.window[0], self.cpu[0] = time.perf_counter(), cpu_seconds()
        gevent.sleep(max(0.0, self.window[0] + DURATION - time.perf_counter()))
        self.window[1], self.cpu[1] = time.perf_counter(), cpu_seconds()
        if QUIT:  # what --run-time does; in-flight streams finish within --stop-timeout
            runner = environment.runner
            if isinstance(runner, WorkerRunner):
                runner.send_message("client_probe_done", {})
            else:
                runner.quit()

    def save(self) -> None:
        if OUT and not self.saved and self.window[0] == self.window[0]:  # a master measures nothing
            self.saved = True
            save(
                OUT.replace("{pid}", str(os.getpid())),
                self.window,
                self.cpu,
                self.chunk_t,
                self.chunk_lag,
                self.req_id,
                self.req_send,
                self.req_first,
            )


probe = Probe()


@events.init.add_listener
def _init(environment, runner, **_kw):
    """A master ends the run once every worker's window has closed."""
    if isinstance(runner, MasterRunner) and QUIT:
        done = set()

        def on_done(msg, **_kw):
            done.add(msg.node_id)
            if len(done) >= runner.worker_count:
                gevent.spawn(runner.quit)

        runner.register_message("client_probe_done", on_done)


if OUT:
    llm_events.stream_parsed.add_listener(probe.on_parsed)

    @events.test_start.add_listener
    def _start(environment, **_kw):
        if isinstance(environment.runner, MasterRunner):
            return  # runs no users
        gevent.spawn(probe.measure, environment, time.perf_counter())

    @events.test_stop.add_listener
    def _stop(environment, **_kw):  # after the finisher drained (plugin.hooks runs first)
        probe.save()

    @events.quitting.add_listener
    def _quit(environment, **_kw):
        probe.save()
