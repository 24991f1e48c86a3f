"""Client LLM metrics for Prometheus, served by the process that writes results.

Enabled with `--prometheus-port N` (0 = off, the default) on the master or the single local
process, in headless and web UI mode alike; `--prometheus-host` (default 127.0.0.1, a private
interface) says where to listen. Workers serve nothing: every record reaches the master anyway.
The endpoint is `http://HOST:PORT/metrics` (any path answers), in Prometheus text format.

Everything is fed from the suite's `rows_recorded` event, which sees every record exactly once,
so each count here equals the records in requests.parquet: a metric never disagrees with the
results folder, only lags it by the worker report interval (3 s) in distributed runs.

Metrics (label `request_class` always; `step` only on records of a step shape, step >= 0):

  llm_ttft_seconds          histogram  TTFT of successful requests
  llm_tpot_seconds          histogram  TPOT of successful requests with more than one output token
  llm_itl_seconds           histogram  every gap between consecutive token-bearing chunks
                                       (pooled, one observation per gap) of successful requests
  llm_e2e_seconds           histogram  end-to-end latency of successful requests
  llm_requests_total        counter    every record, label `outcome` = "ok" or its failure class
                                       (metrics.record.ERROR_CLASSES, e.g. http_429, timeout, stopped)
  llm_prompt_tokens_total   counter    prompt tokens of successful requests (where the server said)
  llm_output_tokens_total   counter    output tokens of successful requests
  llm_users                 gauge      running virtual users (all workers)
  llm_in_flight_requests    gauge      requests on the wire, counted by every load process (workers
                                       report theirs every 3 s)
  llm_target_rate           gauge      open-loop target arrival rate in requests/s, 0 otherwise
  llm_worker_cpu_percent    gauge      CPU of each worker process (label `worker` = worker index;
                                       "local" in a local run), from Locust's heartbeats
  llm_master_cpu_percent    gauge      CPU of the master process (distributed runs)

The definitions are those of summary.json (README "Metric definitions"); only the successful requests
enter the latency histograms, as in the summary. No option value (and never the API key) is
ever a label value: labels are request classes, steps, outcomes and worker indexes only.

Buckets (seconds, upper bounds; +Inf is implicit). LLM latencies span five orders of magnitude,
so the bounds run roughly 1-1.5-2-3-5-7.5 per decade, which keeps `histogram_quantile` within
about 25-50 % of the true value everywhere in the range:

  TTFT  5 ms .. 10 min   (a queued request on an overloaded server waits minutes)
  TPOT  1 ms .. 10 s     (a fast small model streams a token every few ms)
  ITL   1 ms .. 10 s     (a gap of 0 s, several chunks read at once, falls in the first bucket)
  E2E   50 ms .. 30 min

The collector keeps plain bucket arrays and renders them at scrape time (numpy per batch of
records, not one `observe` call per chunk: ITL alone can be tens of thousands of values per second).
It is served by gevent's own WSGI server (one greenlet, no threads), with prometheus-client's WSGI
app over a registry of its own (the process's global registry is left alone). A scrape while the
run is being written is safe: gevent switches only at I/O, and neither side does I/O midway.
"""

from __future__ import annotations

import logging
import math

import gevent
import numpy as np
from locust.runners import STATE_MISSING, MasterRunner
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.metrics_core import Metric

from metrics.record import ERROR_CLASSES, FIELD_NAMES
from plugin.interrupts import fail
from plugin.state import Plugin

log = logging.getLogger("llm.prometheus")

DEFAULT_PORT_IN_COMPOSE = 9646  # docker-compose.yml and deploy/prometheus/prometheus.yml

TTFT_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    4.0,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    45.0,
    60.0,
    90.0,
    120.0,
    180.0,
    300.0,
    600.0,
)
TPOT_BUCKETS = (
    0.001,
    0.002,
    0.003,
    0.004,
    0.005,
    0.0075,
    0.01,
    0.0125,
    0.015,
    0.02,
    0.025,
    0.03,
    0.04,
    0.05,
    0.06,
    0.075,
    0.1,
    0.125,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
)
ITL_BUCKETS = TPOT_BUCKETS
E2E_BUCKETS = (
    0.05,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    4.0,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    45.0,
    60.0,
    90.0,
    120.0,
    180.0,
    300.0,
    600.0,
    900.0,
    1800.0,
)

HISTOGRAMS = {
    "llm_ttft_seconds": (
        TTFT_BUCKETS,
        "Time to first token (first chunk carrying generated text) of successful requests, seconds.",
    ),
    "llm_tpot_seconds": (
        TPOT_BUCKETS,
        "Time per output token after the first, (t_last - t_first) / (output_tokens - 1), successful requests, seconds.",
    ),
    "llm_itl_seconds": (
        ITL_BUCKETS,
        "Gaps between consecutive token-bearing chunks of successful requests (pooled), seconds.",
    ),
    "llm_e2e_seconds": (
        E2E_BUCKETS,
        "End-to-end latency (last token-bearing chunk - send) of successful requests, seconds.",
    ),
}

_I = {name: i for i, name in enumerate(FIELD_NAMES)}
_CLASS, _STEP, _OK, _ERROR = _I["request_class"], _I["step"], _I["ok"], _I["error"]
_TTFT, _E2E, _TPOT = _I["ttft_s"], _I["e2e_s"], _I["tpot_s"]
_PROMPT, _OUTPUT, _CHUNKS = _I["prompt_tokens"], _I["output_tokens"], _I["chunk_times"]
_OUTCOMES = frozenset(ERROR_CLASSES)


def _labels(key: tuple) -> dict:
    """(request_class, step) -> label dict; the step label only for step-shape records."""
    cls, step = key
    return {"request_class": cls} if step < 0 else {"request_class": cls, "step": str(step)}


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


class _Buckets:
    """Counts per bucket (the last one is +Inf, not cumulative) and the sum of one label set."""

    __slots__ = ("counts", "total")

    def __init__(self, n_bounds: int):
        self.counts = np.zeros(n_bounds + 1, dtype=np.int64)
        self.total = 0.0


class ClientMetrics:
    """The records' metrics, kept as bucket arrays and counters; a prometheus-client collector."""

    def __init__(self, environment=None):
        self.environment = environment
        self.bounds = {name: np.asarray(b, dtype=float) for name, (b, _) in HISTOGRAMS.items()}
        self.hists: dict[str, dict[tuple, _Buckets]] = {name: {} for name in HISTOGRAMS}
        self.requests: dict[tuple, int] = {}  # (class, step, outcome) -> records
        self.prompt_tokens: dict[tuple, int] = {}
        self.output_tokens: dict[tuple, int] = {}
        self.records = 0

    # -- feeding -----------------------------------------------------------------------------

    def observe_rows(self, rows) -> None:
        """Add a batch of records (tuples or lists in FIELD_NAMES order)."""
        values: dict[str, dict[tuple, list]] = {name: {} for name in HISTOGRAMS}
        ttft, tpot, itl, e2e = (values[n] for n in HISTOGRAMS)
        for row in rows:
            cls = str(row[_CLASS])
            step = int(row[_STEP]) if row[_STEP] is not None else -1
            key = (cls, step if step >= 0 else -1)
            self.records += 1
            if not row[_OK]:
                err = row[_ERROR] or "unknown"
                outcome = err if err in _OUTCOMES else "other"
                okey = (cls, key[1], outcome)
                self.requests[okey] = self.requests.get(okey, 0) + 1
                continue
            okey = (cls, key[1], "ok")
            self.requests[okey] = self.requests.get(okey, 0) + 1
            if _finite(row[_TTFT]):
                ttft.setdefault(key, []).append(row[_TTFT])
            if _finite(row[_E2E]):
                e2e.setdefault(key, []).append(row[_E2E])
            if _finite(row[_TPOT]):
                tpot.setdefault(key, []).append(row[_TPOT])
            times = row[_CHUNKS]
            if times is not None and len(times) > 1:
                itl.setdefault(key, []).extend(b - a for a, b in zip(times, times[1:]))
            p, o = row[_PROMPT], row[_OUTPUT]
            if p is not None and p >= 0:
                self.prompt_tokens[key] = self.prompt_tokens.get(key, 0) + int(p)
            if o is not None and o >= 0:
                self.output_tokens[key] = self.output_tokens.get(key, 0) + int(o)
        for name, per_key in values.items():
            bounds = self.bounds[name]
            store = self.hists[name]
            for key, vals in per_key.items():
                v = np.asarray(vals, dtype=float)
                v = v[np.isfinite(v)]
                if v.size == 0:
                    continue
                b = store.get(key)
                if b is None:
                    b = store[key] = _Buckets(bounds.size)
                # le semantics: a value equal to a bound belongs to that bound's bucket.
                b.counts += np.bincount(np.searchsorted(bounds, v, side="left"), minlength=bounds.size + 1)
                b.total += float(v.sum())

    # -- exposition --------------------------------------------------------------------------

    def collect(self):
        for name, (bounds, doc) in HISTOGRAMS.items():
            m = Metric(name, doc, "histogram")
            for key, b in sorted(self.hists[name].items()):
                labels = _labels(key)
                cumulative = np.cumsum(b.counts)
                for le, c in zip(bounds, cumulative[:-1]):
                    m.add_sample(name + "_bucket", {**labels, "le": _le(le)}, float(c))
                m.add_sample(name + "_bucket", {**labels, "le": "+Inf"}, float(cumulative[-1]))
                m.add_sample(name + "_count", labels, float(cumulative[-1]))
                m.add_sample(name + "_sum", labels, b.total)
            yield m
        m = Metric(
            "llm_requests", "Requests recorded, by request class and outcome (ok or the failure class).", "counter"
        )
        for (cls, step, outcome), n in sorted(self.requests.items()):
            m.add_sample("llm_requests_total", {**_labels((cls, step)), "outcome": outcome}, float(n))
        yield m
        for base, store, doc in (
            ("llm_prompt_tokens", self.prompt_tokens, "Prompt tokens of successful requests (server usage)."),
            ("llm_output_tokens", self.output_tokens, "Output tokens of successful requests."),
        ):
            m = Metric(base, doc, "counter")
            for key, n in sorted(store.items()):
                m.add_sample(base + "_total", _labels(key), float(n))
            yield m
        yield from self._gauges()

    def _gauges(self):
        env = self.environment
        runner = getattr(env, "runner", None)
        users = float(runner.user_count) if runner is not None else 0.0
        yield _gauge("llm_users", "Running virtual users (all workers).", users)
        yield _gauge(
            "llm_in_flight_requests",
            "Requests on the wire (counted by each load process; workers report every 3 s).",
            _in_flight(env, users),
        )
        yield _gauge(
            "llm_target_rate", "Open-loop target arrival rate in requests/s; 0 when not open loop.", _target_rate(env)
        )
        m = Metric("llm_worker_cpu_percent", "CPU usage of each load-generating process, percent of one core.", "gauge")
        if isinstance(runner, MasterRunner):
            for client in list(runner.clients.values()):
                if client.state != STATE_MISSING:
                    m.add_sample(
                        "llm_worker_cpu_percent",
                        {"worker": str(runner.get_worker_index(client.id))},
                        float(client.cpu_usage),
                    )
            yield m
            yield _gauge(
                "llm_master_cpu_percent",
                "CPU usage of the master process, percent of one core.",
                float(runner.current_cpu_usage),
            )
        else:
            if runner is not None:
                m.add_sample("llm_worker_cpu_percent", {"worker": "local"}, float(runner.current_cpu_usage))
            yield m


def _le(bound: float) -> str:
    return repr(float(bound))


def _gauge(name: str, doc: str, value: float) -> Metric:
    m = Metric(name, doc, "gauge")
    m.add_sample(name, {}, float(value))
    return m


def _number(value) -> float | None:
    try:
        value = value() if callable(value) else value
        value = float(value)
    except Exception:
        return None
    return value if math.isfinite(value) else None


def _in_flight(env, users: float) -> float:
    """Requests on the wire (plugin/state.py `in_flight`: every load process counts its own;
    workers report theirs every 3 s); before a run starts, one per user."""
    state = getattr(env, "llm", None) if env is not None else None
    value = _number(state.in_flight()) if state is not None else None
    return users if value is None else value


def _target_rate(env) -> float:
    """Open loop's target rate (requests/s) from the run's plan; 0 when not open loop."""
    state = getattr(env, "llm", None) if env is not None else None
    plan = state.plan if state is not None else None
    return _number(plan.request_rate) or 0.0 if plan is not None else 0.0


class MetricsServer:
    """`ClientMetrics` in its own registry, on gevent's WSGI server (a greenlet, no thread)."""

    def __init__(self, environment, host: str, port: int):
        from gevent.pywsgi import WSGIServer

        self.metrics = ClientMetrics(environment)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.metrics)
        self.server = WSGIServer((host, port), make_wsgi_app(self.registry), log=None, error_log=log)
        self.server.start()  # binds now: a taken port is an error before any load
        self.host, self.port = host, self.server.server_port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        self.server.stop(timeout=1)


class Prometheus(Plugin):
    """Client metrics at http://HOST:PORT/metrics on the process that writes results (--prometheus-port)."""

    def __init__(self):
        self.server: MetricsServer | None = None
        self.linger_s = 0.0

    def results_init(self, environment) -> None:
        if environment.parsed_options is None:
            return
        endpoint = environment.llm.plan.prometheus  # --prometheus-*, parsed with the run's plan at init
        port, host, self.linger_s = endpoint.port, endpoint.host, endpoint.linger_s
        if not port:
            return
        try:
            self.server = MetricsServer(environment, host, port)
        except OSError as e:
            fail(f"--prometheus-port: cannot listen on {host}:{port} ({e.strerror or e}); choose another port")
        log.info("Prometheus metrics on %s", self.server.url)

    def rows_recorded(self, run, rows) -> None:
        if self.server is not None:
            self.server.metrics.observe_rows(rows)

    def results_quitting(self, environment) -> None:
        """Last thing before the process exits: keep /metrics up --prometheus-linger longer, so a
        scraper (scrape interval below the linger) reads the final counts of a headless run."""
        if self.server is not None and self.linger_s > 0:
            log.info("serving final metrics on %s for %gs (--prometheus-linger)", self.server.url, self.linger_s)
            gevent.sleep(self.linger_s)
