"""What a headless run says on the console: one progress line at a steady interval, then the exact
LLM table and where the results are.

  progress   every PROGRESS_S (10 s), one line from the records the results process received:
             elapsed time, the step (stepped runs and capacity searches), users now, requests
             ended ok and failed so far, output tokens per second of the requests that ended in
             the last interval, TTFT p50/p95 of the successful requests so far (of the level
             running now in a stepped run or a search: levels differ) and streams in flight now.
             A level's TTFT is that of the requests sent at it, all its steps (a search's adaptive
             level is many 2 s slices, each a step of its own, and the slice running now has hardly
             a request that ended), with the first tokens of its streams still open where the run
             tracks them (plugin/progress.py: a capacity search, a web-UI run); "-" until one came.
  Locust's   its periodic per-request table (every 2 s) and its end-of-run tables are its rounded
  tables     live statistics of the same requests (approximate percentiles that disagree with the
             exact table): both are left out, and one line at the end says so; --locust-tables
             prints them.
"""

from __future__ import annotations

import logging
import time
from array import array

import gevent

from metrics.percentiles import percentiles
from metrics.record import FIELD_NAMES, NOT_SERVER_FAILURES
from plugin.progress import OpenStreams
from plugin.state import Plugin, state_of

log = logging.getLogger("llm")

PROGRESS_S = 10.0
_OK, _ERROR, _OUT, _TTFT, _STEP = (FIELD_NAMES.index(n) for n in ("ok", "error", "output_tokens", "ttft_s", "step"))
TABLES_LEFT_OUT = (
    "Locust's own tables are left out: they are its rounded live statistics of the same "
    "requests; the exact figures are in the table above (--locust-tables prints Locust's too)"
)


class Console(Plugin):
    def __init__(self):
        self.greenlet = None
        self.ran = False
        self._reset()

    def _reset(self) -> None:
        # also at construction: a run stopped before its start was announced (a starved machine)
        # still records the requests its users had sent
        self.ok = self.failed = 0
        self.tokens = 0  # output tokens of the successful requests that ended this interval
        self.ttft: dict[int, array] = {}  # step index (-1: no steps) -> TTFT of its successful requests

    def results_init(self, environment) -> None:
        opts = environment.parsed_options
        if opts.headless and not state_of(environment).plan.locust_tables:
            # Locust starts its periodic table after init, unless --only-summary
            opts.only_summary = True

    def run_started(self, run) -> None:
        self._stop()
        self.ran = True
        self._reset()
        if run.environment.parsed_options.headless:
            self.greenlet = gevent.spawn(self._loop, run)

    def rows_recorded(self, run, rows) -> None:
        for row in rows:
            if row[_OK]:
                self.ok += 1
                if row[_OUT] > 0:
                    self.tokens += row[_OUT]
                self.ttft.setdefault(row[_STEP], array("d")).append(row[_TTFT])
            elif row[_ERROR] not in NOT_SERVER_FAILURES:
                self.failed += 1

    def _loop(self, run) -> None:
        last = time.monotonic()
        while True:
            gevent.sleep(PROGRESS_S)
            now = time.monotonic()
            rate, self.tokens = self.tokens / (now - last), 0
            last = now
            log.info("%s", self.line(run, rate))

    def line(self, run, rate: float) -> str:
        environment = run.environment
        elapsed = time.time() - run.started
        parts = [f"progress {int(elapsed) // 60}:{int(elapsed) % 60:02d}"]
        step, keys = _step(run, elapsed), range(-1, 0)
        if step is not None:
            parts.append(step[0])
            keys = range(step[1], step[2] + 1)
        runner = environment.runner
        parts.append(f"{runner.user_count if runner is not None else 0} users")
        parts.append(f"{self.ok:,} ok, {self.failed:,} failed")
        parts.append(f"{rate:,.0f} output tok/s")
        ttft = array("d")
        for k in keys:
            ttft.extend(self.ttft.get(k, ()))
        ttft.extend(_open_first_tokens(environment, keys))
        p = percentiles(ttft, (50, 95))
        parts.append("TTFT p50 -, p95 -" if p is None else f"TTFT p50 {_ms(p[0])}, p95 {_ms(p[1])}")
        state = state_of(environment)
        flying = state.in_flight() if state is not None else None
        parts.append(f"{'?' if flying is None else flying} in flight")
        return " | ".join(parts)

    def _stop(self) -> None:
        g, self.greenlet = self.greenlet, None
        if g is not None:
            g.kill(block=False)

    def run_stopping(self, run) -> None:
        self._stop()

    def results_quitting(self, environment) -> None:
        self._stop()
        opts, state = environment.parsed_options, state_of(environment)
        if not self.ran or not opts.headless or (state.plan is not None and state.plan.locust_tables):
            return
        if getattr(opts, "json", False) or getattr(opts, "json_file", None):
            return  # Locust prints JSON instead of the tables: nothing to leave out
        leave_out_locust_tables()
        print(TABLES_LEFT_OUT, flush=True)


def _open_first_tokens(environment, keys: range) -> list[float]:
    """The TTFT of the streams still open that were sent in steps `keys` and gave their first token,
    where the run tracks its open streams (each load process's latest report; a record and a report's
    entry are never the same request)."""
    state = state_of(environment)
    streams = state.plugin(OpenStreams) if state is not None else None
    if streams is None:
        return []
    return [
        t
        for report in streams.reports(environment)
        for step, t in zip(report["step"], report["ttft"])
        if step in keys and t == t  # NaN: no first token yet
    ]


def _step(run, elapsed: float) -> tuple[str, int, int] | None:
    """("step i (level N)", first, i) of a step ramp or a capacity search now: the step running and
    the first step of its level; None otherwise. The step is numbered as in the per-step table and
    summary.json's `by_step` (from 0), and a level held for more steps names the step its row has
    ("step 3 (level 5 since step 2)")."""
    name = str
    if run.steps is not None:
        levels, i = run.steps.levels, max(run.steps.index_at(elapsed), 0)
        of = f" of 0-{len(levels) - 1}"
    else:
        search = run.search
        if search is None or not search.levels:
            return None
        levels, i, of = search.levels, min(int(elapsed // run.plan.step_s), len(search.levels) - 1), ""
        if search.rate_cap is not None:  # a search in requests/s: its levels are rates
            name = search.load
    first = i
    while first > 0 and levels[first - 1] == levels[i]:
        first -= 1
    since = f" since step {first}" if first < i else ""
    return f"step {i}{of} (level {name(levels[i])}{since})", first, i


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def leave_out_locust_tables() -> None:
    """Locust's shutdown prints `print_stats`, `print_percentile_stats` and `print_error_report`
    of locust.stats after the quitting event; at quitting they become silent for the process."""
    from locust import stats

    def quiet(*_args, **_kw) -> None:
        return None

    stats.print_stats = stats.print_percentile_stats = stats.print_error_report = quiet
