"""Server-side metrics in the results: scrape Prometheus endpoints while the run goes on.

`--server-metrics URL[,URL...]` names endpoints in the Prometheus text format (vLLM's `/metrics`,
SGLang's, a DCGM or node exporter, ...). The process that writes results (master or local) scrapes
each one every `--server-metrics-interval` (default 5 s) in a greenlet: once when the run starts
(before any request is sent: the baseline), then on the interval, and once more when the run stops
(after the drain). Everything it read lands in `results/<run-id>/server_metrics.parquet`:

  timestamp   float64  epoch seconds when the scrape's response arrived
  source      string   the URL (any user:password@ removed)
  metric      string   the sample name, canonical (vLLM's renamed metrics mapped, see ALIASES)
  labels      string   the sample's labels as JSON with sorted keys (a histogram's `le` included)
  value       float64
  raw_metric  string   the sample name as the server sent it

A scrape that fails (refused, timeout, HTTP error, unparsable text) is logged once per URL and
counted; it never stops the run. summary.json gets a `server_metrics` section:

  sources          the URLs
  scrapes          successful scrapes (all sources together); failed_scrapes likewise
  counter_deltas   increase during the run of vLLM's own counters, summed over their labels and
                   over the sources (reset-aware: a restarted server's counter is not negative):
                   vllm:request_success_total, vllm:prompt_tokens_total, vllm:generation_tokens_total
                   (null when no source exposed it)
  client_counts    the client's view of the same run, from every record (not only the window):
                   requests_ok, prompt_tokens and output_tokens of successful requests, requests
  by_source        per URL: scrapes, failed_scrapes, last_error, counter_deltas

so `counter_deltas["vllm:generation_tokens_total"]` can be checked against
`client_counts["output_tokens"]` (equal when every request succeeded and the server counts what
it streamed; the server also counts tokens of requests the client cut off or saw fail).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import urllib.error
import urllib.request

import gevent
from prometheus_client.parser import text_string_to_metric_families

from core.arrow import lazy_schema, rows_to_arrow
from core.tls import VERIFIED, TlsPolicy, client_context
from core.urls import public_url
from metrics.diagnosis import METRIC_NAMES as DIAGNOSIS_METRICS
from metrics.record import FIELD_NAMES
from plugin.setup import SLOW_PROBE_S
from plugin.state import Plugin
from runfolder.layout import SERVER_METRICS

log = logging.getLogger("llm.server_metrics")

FILE_NAME = SERVER_METRICS


# The columns of server_metrics.parquet (core/arrow.py: pyarrow loads at the first call)
arrow_schema = lazy_schema(
    lambda pa: [
        ("timestamp", pa.float64()),
        ("source", pa.string()),
        ("metric", pa.string()),
        ("labels", pa.string()),
        ("value", pa.float64()),
        ("raw_metric", pa.string()),
    ]
)
FLUSH_ROWS = 50_000
BASELINE_WAIT_S = 1.0  # the longest the load waits for the first scrape
MAX_BODY_BYTES = 64 * 1024 * 1024

# vLLM renamed metrics between releases; `metric` carries the current name, `raw_metric` the sent one.
ALIASES = {
    "vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc",  # renamed with the V1 engine
    "vllm:time_per_output_token_seconds": "vllm:inter_token_latency_seconds",  # deprecated in 0.11
}
ALIAS_PREFIXES = (("vllm:gpu_prefix_cache_", "vllm:prefix_cache_"),)  # queries, hits (V1 early names)
_SUFFIXES = ("", "_total", "_bucket", "_count", "_sum", "_created", "_gsum", "_gcount", "_info")

DELTA_COUNTERS = ("vllm:request_success_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total")


def canonical(name: str) -> str:
    """The current name of a (possibly renamed) vLLM sample name; other names unchanged."""
    for old, new in ALIAS_PREFIXES:
        if name.startswith(old):
            return new + name[len(old) :]
    for suffix in _SUFFIXES:
        if suffix and not name.endswith(suffix):
            continue
        base = name[: len(name) - len(suffix)] if suffix else name
        if base in ALIASES:
            return ALIASES[base] + suffix
    return name


def parse_text(text: str, now: float, source: str) -> tuple[list[tuple], dict[str, float]]:
    """Prometheus text -> rows (`arrow_schema` order) and the totals of DELTA_COUNTERS (summed over labels)."""
    samples = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.append((s.name, s.labels, s.value))
    present = {name for name, _, _ in samples}
    rows, totals = [], {}
    for raw, labels, value in samples:
        name = canonical(raw)
        if name != raw and name in present:
            continue  # the server sends the old and the new name (deprecation period): keep the new one
        value = float(value)
        rows.append((now, source, name, json.dumps(labels, sort_keys=True, separators=(",", ":")), value, raw))
        if name in DELTA_COUNTERS and math.isfinite(value):
            totals[name] = totals.get(name, 0.0) + value
    return rows, totals


def _base(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def increase(series: list[float]) -> float:
    """Increase of a counter over successive readings; a drop is a reset (the counter restarted at 0)."""
    total = 0.0
    for a, b in zip(series, series[1:]):
        total += b - a if b >= a else b
    return total


class _Source:
    def __init__(self, url: str):
        self.url = url
        self.public = public_url(url)
        self.scrapes = 0
        self.failed = 0
        self.last_error: str | None = None
        self.logged = False
        self.series: dict[str, list[float]] = {}
        self.values: dict[str, float] = {}  # every metric's latest value, summed over its label sets

    def deltas(self) -> dict:
        return {name: (_int_if_whole(increase(s)) if len(s) >= 2 else None) for name, s in self.series.items()}


def _int_if_whole(x: float):
    return int(x) if float(x).is_integer() else x


class ServerMetricsScraper:
    """One run's scraping: baseline, periodic scrapes, final scrape, Parquet file, summary section."""

    def __init__(self, urls: list[str], interval_s: float, results_path: str, tls: TlsPolicy = VERIFIED):
        self.sources = [_Source(u) for u in urls]
        # an https endpoint is checked by the run's TLS policy, as the load's connections are
        self._opener = opener(tls)
        self.interval_s = interval_s
        self.timeout_s = scrape_timeout(interval_s)
        self.path = os.path.join(results_path, FILE_NAME)
        import pyarrow.parquet as pq

        self._writer = pq.ParquetWriter(self.path, arrow_schema(), compression="zstd")
        self._pending: list[tuple] = []
        self._loop = None
        self.closed = False
        self.client = {"requests": 0, "requests_ok": 0, "prompt_tokens": 0, "output_tokens": 0}
        # (time, metric, value, labels, source) of every label set of the metrics the knee's diagnosis
        # reads (a few per scrape; the labels of the info gauges state the server's configuration; the
        # source tells the replicas of a spread apart: each has its own diagnosis)
        self.gauges: list[tuple[float, str, float, str, str]] = []

    # -- scraping -----------------------------------------------------------------------------

    def _fetch(self, url: str) -> str:
        return fetch(self._opener, url, self.timeout_s)

    def _scrape_one(self, src: _Source) -> None:
        try:
            with gevent.Timeout(self.timeout_s + 1.0):
                text = self._fetch(src.url)
            rows, totals = parse_text(text, time.time(), src.public)
        except (Exception, gevent.Timeout) as e:
            src.failed += 1
            src.last_error = describe_error(e)
            if not src.logged:
                src.logged = True
                log.warning(
                    "--server-metrics: scraping %s failed (%s); the run goes on, failures are counted",
                    src.public,
                    src.last_error,
                )
            return
        if self.closed:  # a late first scrape, after the file was closed
            return
        src.scrapes += 1
        for name, value in totals.items():
            src.series.setdefault(name, []).append(value)
        values: dict[str, float] = {}
        for row in rows:  # (time, source, name, labels, value, raw name)
            if math.isfinite(row[4]):
                values[row[2]] = values.get(row[2], 0.0) + row[4]
        src.values = values
        self.gauges.extend(
            (row[0], row[2], row[4], row[3], row[1]) for row in rows if _base(row[2]) in DIAGNOSIS_METRICS
        )
        self._pending.extend(rows)

    def scrape(self) -> None:
        """Scrape every source once (concurrently), then write what arrived if enough piled up."""
        if self.closed:
            return
        gevent.joinall([gevent.spawn(self._scrape_one, s) for s in self.sources], timeout=self.timeout_s + 5.0)
        if len(self._pending) >= FLUSH_ROWS:
            self._flush()

    def _run(self) -> None:
        next_at = time.monotonic() + self.interval_s
        while not self.closed:
            gevent.sleep(max(0.0, next_at - time.monotonic()))
            if self.closed:
                break
            self.scrape()
            next_at += self.interval_s
            if next_at < time.monotonic():  # a slow scrape: skip the missed ticks, do not burst
                next_at = time.monotonic() + self.interval_s

    def start(self, slow: set[str] = frozenset()) -> None:
        """The baseline, before the first request (run_started precedes spawning). Locust's -t clock
        runs from the start, so the load waits for it at most BASELINE_WAIT_S, and not at all for
        the endpoints in `slow` (slow or silent when asked before the clock: ServerMetrics.probe);
        their first scrape goes on beside the load."""
        scrapes = {gevent.spawn(self._scrape_one, s): s for s in self.sources}
        gevent.joinall([g for g, s in scrapes.items() if s.url not in slow], timeout=BASELINE_WAIT_S)
        late = [s for g, s in scrapes.items() if not g.ready() and s.url not in slow]
        if late:
            log.warning(
                "--server-metrics: %s had not answered its first scrape in %g s; the load starts without "
                "waiting (a reading that comes later may count the first requests in its counters)",
                ", ".join(s.public for s in late),
                BASELINE_WAIT_S,
            )
        self._loop = gevent.spawn(self._run)

    def latest(self) -> dict[str, float]:
        """The newest value of every metric (gauges too: the web UI shows running and waiting
        requests and KV-cache use), summed over label sets and sources (live views)."""
        out: dict[str, float] = {}
        for src in self.sources:
            for name, value in src.values.items():
                out[name] = out.get(name, 0.0) + value
        return out

    def frame(self):
        """The diagnosis' metrics scraped so far (timestamp, metric, value, labels, source), as
        server_metrics.parquet holds them: what metrics/diagnosis.py aligns to the levels, live and at the end."""
        import pandas as pd  # loaded only by the process that writes results

        return pd.DataFrame(self.gauges, columns=["timestamp", "metric", "value", "labels", "source"])

    # -- client side --------------------------------------------------------------------------

    def add_rows(self, rows) -> None:
        c = self.client
        for row in rows:
            c["requests"] += 1
            if row[_OK]:
                c["requests_ok"] += 1
                if row[_PROMPT] is not None and row[_PROMPT] >= 0:
                    c["prompt_tokens"] += int(row[_PROMPT])
                if row[_OUTPUT] is not None and row[_OUTPUT] >= 0:
                    c["output_tokens"] += int(row[_OUTPUT])

    # -- end ----------------------------------------------------------------------------------

    def _flush(self) -> None:
        if self._pending:
            rows, self._pending = self._pending, []
            self._writer.write_table(rows_to_arrow(rows, arrow_schema()))

    def stop(self) -> dict:
        """The last scrape, close the file; return the summary section."""
        if not self.closed:
            if self._loop is not None:
                self._loop.kill(block=True, timeout=self.timeout_s + 6.0)
            self.scrape()
            self.closed = True
            self._flush()
            self._writer.close()
        return self.section()

    def section(self) -> dict:
        per_source = {
            s.public: {
                "scrapes": s.scrapes,
                "failed_scrapes": s.failed,
                "last_error": s.last_error,
                "counter_deltas": s.deltas(),
            }
            for s in self.sources
        }
        deltas = {}
        for name in DELTA_COUNTERS:
            values = [s.deltas().get(name) for s in self.sources]
            values = [v for v in values if v is not None]
            deltas[name] = _int_if_whole(sum(values)) if values else None
        return {
            "sources": [s.public for s in self.sources],
            "interval_s": self.interval_s,
            "file": FILE_NAME,
            "scrapes": sum(s.scrapes for s in self.sources),
            "failed_scrapes": sum(s.failed for s in self.sources),
            "counter_deltas": deltas,
            "client_counts": dict(self.client),
            "by_source": per_source,
        }


def scrape_timeout(interval_s: float) -> float:
    """How long one scrape may take: the interval, within 1-10 s."""
    return max(1.0, min(10.0, interval_s))


def opener(tls: TlsPolicy):
    """Straight to the endpoint, like the load itself (proxy variables of the environment are
    ignored); an https endpoint is checked by the run's TLS policy, as the load's connections are."""
    return urllib.request.build_opener(_NO_PROXY, urllib.request.HTTPSHandler(context=client_context(tls)))


def fetch(opener_, url: str, timeout_s: float) -> str:
    """One endpoint's Prometheus text."""
    req = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1"})
    with opener_.open(req, timeout=timeout_s) as resp:
        body = resp.read(MAX_BODY_BYTES + 1)
        charset = resp.headers.get_content_charset() or "utf-8"
    if len(body) > MAX_BODY_BYTES:
        raise ValueError(f"response larger than {MAX_BODY_BYTES // (1024 * 1024)} MiB")
    return body.decode(charset, errors="replace")


_NO_PROXY = urllib.request.ProxyHandler({})

_I = {name: i for i, name in enumerate(FIELD_NAMES)}
_OK, _PROMPT, _OUTPUT = _I["ok"], _I["prompt_tokens"], _I["output_tokens"]


def describe_error(e: BaseException) -> str:
    """One short reason for a failed scrape (also plugin/gpu.py's exporter reads)."""
    if isinstance(e, gevent.Timeout):
        return "timed out"
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code}"
    if isinstance(e, urllib.error.URLError):
        return str(e.reason)
    return f"{type(e).__name__}: {e}"


# -- wiring --------------------------------------------------------------------------------------


class ServerMetrics(Plugin):
    """Scrapes the server side's Prometheus endpoints during each run (--server-metrics, checked
    with the rest of the plan) into server_metrics.parquet and summary.json."""

    def __init__(self):
        self.scraper: ServerMetricsScraper | None = None
        self.slow: set[str] = set()  # endpoints slow or silent when asked before the run's clock (probe)

    def probe(self, host: str, plan) -> None:
        """Before the run's clock starts (plugin/run.py probe_target): each endpoint asked once and
        timed. One slower than SLOW_PROBE_S, or silent, is said in one line, and the run's first
        scrape does not hold up the load for it."""
        self.slow = set()
        if not plan.server_metrics:
            return
        asker, timeout = opener(plan.tls), scrape_timeout(plan.server_metrics_interval_s)

        def ask(url: str) -> tuple[float, str | None]:
            started = time.monotonic()
            try:
                with gevent.Timeout(timeout + 1.0):
                    fetch(asker, url, timeout)
            except (Exception, gevent.Timeout) as e:
                return time.monotonic() - started, describe_error(e)
            return time.monotonic() - started, None

        asks = {url: gevent.spawn(ask, url) for url in plan.server_metrics}
        gevent.joinall(list(asks.values()))
        for url, g in asks.items():
            took, error = g.value
            if took > SLOW_PROBE_S:
                self.slow.add(url)
                log.warning(
                    "--server-metrics: %s took %.1f s%s when asked before the run; the run's first scrape "
                    "goes on beside the load instead of holding it up",
                    public_url(url),
                    took,
                    f" ({error})" if error else "",
                )

    def run_started(self, run) -> None:
        plan = run.plan
        slow, self.slow = self.slow, set()
        if not plan.server_metrics:
            return
        scraper = self.scraper = ServerMetricsScraper(
            list(plan.server_metrics), plan.server_metrics_interval_s, run.writer.path, plan.tls
        )
        log.info(
            "scraping server metrics from %s every %gs",
            ", ".join(s.public for s in scraper.sources),
            plan.server_metrics_interval_s,
        )
        scraper.start(slow)

    def rows_recorded(self, run, rows) -> None:
        if self.scraper is not None:
            self.scraper.add_rows(rows)

    def run_stopping(self, run) -> None:
        scraper, self.scraper = self.scraper, None
        if scraper is not None:
            run.summary_extra["server_metrics"] = scraper.stop()
            run.server_gauges = scraper.frame()  # the knee's diagnosis reads them (plugin/run.py)

    def latest(self) -> dict | None:
        """The running scraper's newest values (the web UI's server gauges); None when off."""
        return self.scraper.latest() if self.scraper is not None else None

    def frame(self):
        """The running scraper's diagnosis metrics so far (the live view's diagnosis); None when off."""
        return self.scraper.frame() if self.scraper is not None else None
