"""A backend that stands out, said on the console while the run goes on: the first time a flag of
summary.json's rule (metrics/backends.py `judge_backends`: a share more than 20 % off the fair
share beyond a fair draw's noise, or a TTFT or TPOT p50 1.5 times the others') marks a backend, one
line, once per backend and kind of flag:

    backend http://10.0.0.12:8000 flagged while the run goes on: slower: TTFT p50 412.0 ms against
    101.3 ms on the others (4.07x) (the requests that ended in the last 60 s; summary.json backends at the end)

Every CHECK_S, over the requests that ended in the last WINDOW_S (the web UI's longest window),
on the results process, for runs over several --host URLs or behind a --backend-header balancer.
The web UI's live view shows the same rule's flags per window (webui/live.py). Each record kept is
a few numbers (when it ended, its backend, its outcome, TTFT and TPOT), so the check stays cheap.
"""

from __future__ import annotations

import logging
import time
from collections import deque

import gevent

from metrics.percentiles import percentiles
from metrics.record import FIELD_NAMES
from plugin.state import Plugin

log = logging.getLogger("llm")

CHECK_S = 2.0
WINDOW_S = 60.0
_I = {n: FIELD_NAMES.index(n) for n in ("wall_send", "e2e_s", "ok", "ttft_s", "tpot_s", "backend")}


class BackendFlags(Plugin):
    def __init__(self):
        self.greenlet = None
        self.ended: deque = deque()  # (ended, backend, ok, ttft_s, tpot_s) of the recent records
        self.said: set[tuple[str, str]] = set()
        self.known: tuple[str, ...] = ()
        self.count: int | None = None

    def run_started(self, run) -> None:
        from plugin.run import spread_over

        self._stop()
        self.ended.clear()
        self.said = set()
        self.known, self.count = spread_over(run.environment.host or ""), run.plan.backend_count
        if self.known or run.plan.backend_header:
            self.greenlet = gevent.spawn(self._loop)

    def rows_recorded(self, run, rows) -> None:
        if self.greenlet is None:
            return
        for row in rows:
            e2e = row[_I["e2e_s"]]
            end = row[_I["wall_send"]] + (e2e if e2e is not None and e2e == e2e else 0.0)  # NaN: not ended by a token
            self.ended.append((end, row[_I["backend"]], row[_I["ok"]], row[_I["ttft_s"]], row[_I["tpot_s"]]))

    def _loop(self) -> None:
        while True:
            gevent.sleep(CHECK_S)
            for line in self.check(time.time()):
                log.warning("%s", line)

    def check(self, now: float) -> list[str]:
        """The lines of the flags that appeared since the last check (each said once)."""
        from metrics.backends import judge_backends
        from metrics.schema.backends import BackendShare

        while self.ended and self.ended[0][0] < now - WINDOW_S:
            self.ended.popleft()  # records arrive about in the order they ended; a late one goes at the next check
        recent = [r for r in self.ended if now - WINDOW_S <= r[0] <= now and r[1]]
        names = sorted({r[1] for r in recent} | set(self.known))
        rows, ok = [], {}
        for name in names:
            mine = [r for r in recent if r[1] == name]
            good = [r for r in mine if r[2]]
            ok[name] = len(good)
            rows.append(
                BackendShare(
                    backend=name,
                    sent=len(mine),
                    ttft_p50_ms=_p50_ms([r[3] for r in good]),
                    tpot_p50_ms=_p50_ms([r[4] for r in good]),
                )
            )
        judge_backends(rows, ok, self.count)
        out = []
        for row in rows:
            for flag in row.flags:
                kind = flag.split(":")[0].split(" ")[0]  # "share" or "slower"
                if (row.backend, kind) not in self.said:
                    self.said.add((row.backend, kind))
                    out.append(
                        f"backend {row.backend} flagged while the run goes on: {flag} (the requests that ended in "
                        f"the last {WINDOW_S:g} s; summary.json backends at the end)"
                    )
        return out

    def _stop(self) -> None:
        g, self.greenlet = self.greenlet, None
        if g is not None:
            g.kill(block=False)

    def run_stopping(self, run) -> None:
        self._stop()

    def results_quitting(self, environment) -> None:
        self._stop()


def _p50_ms(values: list) -> float | None:
    """The p50 (metrics/percentiles.py, as a block's) of the known values, in ms; None without one."""
    p = percentiles(values, (50,))  # a missing value (None, NaN) is left out
    return None if p is None else p[0] * 1000.0
