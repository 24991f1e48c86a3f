"""GPU telemetry during a run: read by the process that writes results, aligned to the load levels.

`--gpu-telemetry` names the source:

  nvidia-smi    on the GPU host itself: one long-lived `nvidia-smi --query-gpu=... -lms N` process
                for the whole run (not one process per reading), every GPU it sees, each reading
                stamped with nvidia-smi's own timestamp (so a late line still lands in its window),
                its output read through a pseudo-terminal (line by line, nothing held back at the end)
  URL           a DCGM exporter's Prometheus endpoint (or a node exporter's textfile collector
                with DCGM's names), read every --gpu-telemetry-interval with prometheus-client's
                parser: DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED / _FREE (/ _RESERVED),
                DCGM_FI_DEV_POWER_USAGE, DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ),
                DCGM_FI_DEV_SM_CLOCK, one GPU per `gpu` label

Before any load the source is tried once (`check`): nvidia-smi missing or failing, a URL that does
not answer or serves no DCGM metric, is bad input (one line, exit 2). During the run a reading that
fails is counted and logged once; it never stops the run. At its end the readings go to
`gpu_telemetry.parquet` (metrics/gpu.py COLUMNS) and summary.json gets `gpu` (metrics/gpu.py):
per level utilisation, memory, power, energy per token, cost per million tokens with
--gpu-hour-price, and the capacity per GPU (--gpus, else the GPUs seen). --gpus or
--gpu-hour-price alone (no telemetry) still give the per-GPU and cost figures.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from datetime import datetime

import gevent
import gevent.os
import gevent.subprocess
from prometheus_client.parser import text_string_to_metric_families

from core.arrow import lazy_schema, rows_to_arrow
from core.errors import InputError
from core.urls import public_url
from metrics.gpu import COLUMNS, FILE_NAME, gpu_section
from plugin.server_metrics import describe_error
from plugin.state import Plugin

log = logging.getLogger("llm.gpu")

NVIDIA_SMI = "nvidia-smi"
QUERY = "timestamp,index,utilization.gpu,memory.used,memory.total,power.draw,clocks.sm,name"  # name last: it may hold commas
MAX_BODY_BYTES = 16 * 1024 * 1024


# The columns of gpu_telemetry.parquet (core/arrow.py: pyarrow loads at the first call)
arrow_schema = lazy_schema(
    lambda pa: [
        ("timestamp", pa.float64()),
        ("gpu", pa.string()),
        ("name", pa.string()),
        *((c, pa.float64()) for c in COLUMNS[3:]),
    ]
)

DCGM = {  # DCGM exporter's field -> (column, factor to the column's unit)
    "DCGM_FI_DEV_GPU_UTIL": ("utilization_pct", 1.0),
    "DCGM_FI_DEV_FB_USED": ("memory_used_mib", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 1e-3),  # mJ since the driver loaded
}
FB_OTHERS = ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")  # used + free + reserved = the GPU's memory
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # straight to the exporter, as the load goes


def is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


def _number(text: str) -> float:
    """A value nvidia-smi printed; NaN for [N/A], [Not Supported] and the like."""
    try:
        return float(text.strip())
    except ValueError:
        return math.nan


def _smi_time(text: str, fallback: float) -> float:
    """nvidia-smi's timestamp ('2026/12/01 22:57:02.123', local time) as epoch seconds."""
    try:
        return datetime.strptime(text.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
    except ValueError:
        return fallback


def parse_smi_line(line: str, arrived: float) -> tuple | None:
    """One line of `nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits` -> a row (`arrow_schema`
    order), or None when it is not one."""
    parts = line.strip().split(",", 7)
    if len(parts) != 8 or not parts[1].strip().isdigit():
        return None
    ts, index, util, used, total, power, clock, name = parts
    return (
        _smi_time(ts, arrived),
        index.strip(),
        name.strip(),
        _number(util),
        _number(used),
        _number(total),
        _number(power),
        _number(clock),
        math.nan,
    )


def parse_dcgm(text: str, now: float) -> list[tuple]:
    """A DCGM exporter's text -> one row per GPU (`arrow_schema` order); [] when it has no DCGM_FI_DEV_ field."""
    gpus: dict[str, dict] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            # the parser names a counter's sample NAME_total (DCGM declares its energy a counter)
            name = (
                s.name[: -len("_total")] if s.name.endswith("_total") and s.name[: -len("_total")] in DCGM else s.name
            )
            if name not in DCGM and name not in FB_OTHERS:
                continue
            gid = s.labels.get("gpu") or s.labels.get("UUID") or s.labels.get("device") or "0"
            g = gpus.setdefault(gid, {"name": s.labels.get("modelName", "")})
            g[name] = float(s.value)
    rows = []
    for gid, g in gpus.items():
        values = {col: g[name] * factor for name, (col, factor) in DCGM.items() if name in g}
        used = g.get("DCGM_FI_DEV_FB_USED")
        total = (
            used + g["DCGM_FI_DEV_FB_FREE"] + g.get("DCGM_FI_DEV_FB_RESERVED", 0.0)
            if used is not None and "DCGM_FI_DEV_FB_FREE" in g
            else math.nan
        )
        rows.append(
            (
                now,
                gid,
                g["name"],
                values.get("utilization_pct", math.nan),
                values.get("memory_used_mib", math.nan),
                total,
                values.get("power_w", math.nan),
                values.get("sm_clock_mhz", math.nan),
                values.get("energy_j", math.nan),
            )
        )
    return sorted(rows, key=lambda r: (len(r[1]), r[1]))


def fetch(url: str, timeout_s: float) -> str:
    req = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1"})
    with _OPENER.open(req, timeout=timeout_s) as resp:
        body = resp.read(MAX_BODY_BYTES + 1)
        charset = resp.headers.get_content_charset() or "utf-8"
    if len(body) > MAX_BODY_BYTES:
        raise ValueError(f"response larger than {MAX_BODY_BYTES >> 20} MiB")
    return body.decode(charset, errors="replace")


# -- before the run -------------------------------------------------------------------------------


def check(source: str, timeout_s: float = 15.0) -> list[tuple]:
    """Read the source once, before any load: its rows, or InputError naming --gpu-telemetry."""
    if not source:
        return []
    if is_url(source):
        shown = public_url(source)
        try:
            rows = parse_dcgm(fetch(source, min(timeout_s, 10.0)), time.time())
        except Exception as e:
            raise InputError(
                f"--gpu-telemetry: {shown} cannot be read ({describe_error(e)}); give a DCGM exporter's "
                "metrics URL that answers from this machine, e.g. http://gpu-box:9400/metrics"
            ) from None
        if not rows:
            raise InputError(
                f"--gpu-telemetry: {shown} serves no DCGM_FI_DEV_ metric; give a DCGM exporter's metrics "
                "URL (dcgm-exporter, e.g. http://gpu-box:9400/metrics)"
            )
        return rows
    exe = shutil.which(NVIDIA_SMI)
    if exe is None:
        raise InputError(
            "--gpu-telemetry: nvidia-smi is not on PATH on this machine (the one that writes results); "
            "run the suite (its master) on the GPU host, or give a DCGM exporter's metrics URL"
        )
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise InputError(
            f"--gpu-telemetry: nvidia-smi did not run ({e}); check the NVIDIA driver on this machine"
        ) from None
    rows = [r for r in (parse_smi_line(line, time.time()) for line in out.stdout.splitlines()) if r is not None]
    if out.returncode != 0 or not rows:
        said = (out.stderr.strip() or out.stdout.strip() or f"exit code {out.returncode}").splitlines()[0][:200]
        raise InputError(
            f"--gpu-telemetry: nvidia-smi found no GPU to read ({said}); check the NVIDIA driver, or "
            "give a DCGM exporter's metrics URL"
        )
    return rows


# -- during the run -------------------------------------------------------------------------------


class GpuSampler:
    """One run's readings: a long-lived nvidia-smi, or the exporter read on the interval."""

    def __init__(self, source: str, interval_s: float):
        self.source, self.interval_s = source, interval_s
        self.public = public_url(source) if is_url(source) else source
        self.rows: list[tuple] = []
        self.failed = 0
        self.last_error: str | None = None
        self._logged = False
        self._proc = None
        self._pty = -1
        self._said = ""  # nvidia-smi's first line that was not a reading (its message, when it fails)
        self._loop = None
        self.stopped = False

    def _failed(self, what: str) -> None:
        self.failed += 1
        self.last_error = what
        if not self._logged:
            self._logged = True
            log.warning(
                "--gpu-telemetry: reading %s failed (%s); the run goes on, failures are counted", self.public, what
            )

    def start(self) -> None:
        if is_url(self.source):
            # the first reading now, before the first request (run_started precedes spawning): a
            # window's energy needs readings at both its edges, and a loop started beside the
            # users' spawning can take its first one seconds late on a busy client
            self._scrape_once()
            self._loop = gevent.spawn(self._scrape_loop)
            return
        ms = max(100, int(round(self.interval_s * 1000)))
        # its output goes to a terminal (a pty), where C's stdio writes every line at once: into a pipe
        # it would be held in a 4 KiB buffer (about a minute of readings of one GPU) and lost when
        # nvidia-smi is stopped
        self._pty, slave = os.openpty()
        try:
            self._proc = gevent.subprocess.Popen(
                [
                    shutil.which(NVIDIA_SMI) or NVIDIA_SMI,
                    f"--query-gpu={QUERY}",
                    "--format=csv,noheader,nounits",
                    "-lms",
                    str(ms),
                ],
                stdin=subprocess.DEVNULL,
                stdout=slave,
                stderr=slave,
            )
        finally:
            os.close(slave)
        gevent.os.make_nonblocking(self._pty)
        self._loop = gevent.spawn(self._read_smi)

    def _read_smi(self) -> None:
        pending = b""
        while True:
            try:
                data = gevent.os.nb_read(self._pty, 65536)
            except OSError:  # EIO: nvidia-smi ended and the terminal closed
                data = b""
            if not data:
                break
            *lines, pending = (pending + data).split(b"\n")
            for raw in lines:
                self._line(raw.decode(errors="replace").strip())
        self._line(pending.decode(errors="replace").strip())
        os.close(self._pty)
        if not self.stopped:  # nvidia-smi ended on its own
            self._failed(f"nvidia-smi exited (exit code {self._proc.wait()}{': ' + self._said if self._said else ''})")

    def _line(self, line: str) -> None:
        if not line:
            return
        row = parse_smi_line(line, time.time())
        if row is None:
            self._said = self._said or line[:200]
            self._failed(f"unreadable line {line[:120]!r}")
        else:
            self.rows.append(row)

    def _scrape_once(self) -> None:
        sent = time.time()
        try:
            with gevent.Timeout(max(1.0, min(10.0, self.interval_s)) + 1.0):
                text = fetch(self.source, max(1.0, min(10.0, self.interval_s)))
            rows = parse_dcgm(text, (sent + time.time()) / 2)  # the exporter answered between the two
        except (Exception, gevent.Timeout) as e:
            self._failed(describe_error(e))
            return
        if rows:
            self.rows.extend(rows)
        else:
            self._failed("no DCGM_FI_DEV_ metric in the response")

    def _scrape_loop(self) -> None:
        next_at = time.monotonic()  # start() has just read
        while not self.stopped:
            next_at += self.interval_s
            gevent.sleep(max(0.0, next_at - time.monotonic()))
            if self.stopped:
                return
            self._scrape_once()
            if next_at < time.monotonic():  # a slow exporter: skip the missed ticks, do not burst
                next_at = time.monotonic()

    def latest(self) -> dict | None:
        """The newest reading of each GPU, together: {gpus, utilization_pct, power_w, memory_used_mib}."""
        newest: dict[str, tuple] = {}
        for row in reversed(self.rows[-256:]):
            newest.setdefault(row[1], row)
        if not newest:
            return None
        rows = list(newest.values())

        def mean(i):
            v = [r[i] for r in rows if math.isfinite(r[i])]
            return sum(v) / len(v) if v else None

        power = [r[6] for r in rows if math.isfinite(r[6])]
        return {
            "gpus": len(rows),
            "utilization_pct": mean(3),
            "memory_used_mib": mean(4),
            "power_w": sum(power) if power else None,
        }

    def stop(self) -> None:
        if self.stopped:
            return
        if is_url(self.source):
            self.stopped = True
            if self._loop is not None:
                self._loop.kill(block=True, timeout=15)
            self._scrape_once()  # the last reading, after the drain
            return
        self.stopped = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except gevent.subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if self._loop is not None:
            self._loop.join(timeout=5)  # the lines it printed before it ended

    def write(self, path: str) -> None:
        import pyarrow.parquet as pq

        rows = sorted(self.rows, key=lambda r: (r[0], len(r[1]), r[1]))
        pq.write_table(rows_to_arrow(rows, arrow_schema()), path, compression="zstd")


# -- wiring ---------------------------------------------------------------------------------------


class GpuTelemetry(Plugin):
    """--gpu-telemetry readings during each run, and summary.json's `gpu` (also with --gpus or
    --gpu-hour-price alone)."""

    def __init__(self):
        self.sampler: GpuSampler | None = None
        self.done: GpuSampler | None = None  # the run's sampler once stopped (its readings)
        self.path: str | None = None

    def run_started(self, run) -> None:
        self.done = self.path = None
        plan = run.plan
        if not plan.gpu_telemetry:
            return
        self.sampler = GpuSampler(plan.gpu_telemetry, plan.gpu_telemetry_interval_s)
        log.info("reading GPU telemetry from %s every %gs", self.sampler.public, plan.gpu_telemetry_interval_s)
        self.sampler.start()

    def run_stopping(self, run) -> None:
        sampler, self.sampler = self.sampler, None
        if sampler is None:
            return
        sampler.stop()
        self.path = f"{run.writer.path}/{FILE_NAME}"
        try:
            sampler.write(self.path)
        except OSError as e:
            log.error(
                "--gpu-telemetry: %s could not be written (%s); summary.json keeps the figures", self.path, e.strerror
            )
        self.done = sampler

    def summary_computed(self, run, summary) -> None:
        plan = run.plan
        if not (plan.gpu_telemetry or plan.gpus or plan.gpu_hour_price):
            return
        import pandas as pd

        s = self.done
        readings = pd.DataFrame(s.rows, columns=list(COLUMNS)) if s is not None else None
        if s is not None and not s.rows:
            log.warning(
                "--gpu-telemetry: no reading arrived from %s during the run (%s)", s.public, s.last_error or "none sent"
            )
        section = run.summary_extra["gpu"] = gpu_section(
            summary,
            readings,
            source=s.public if s else None,
            interval_s=plan.gpu_telemetry_interval_s,
            gpus=plan.gpus,
            price=plan.gpu_hour_price,
            failed=s.failed if s else 0,
            last_error=s.last_error if s else None,
            file=FILE_NAME if s else None,
        )
        if plan.gpus and section.devices and len(section.devices) != plan.gpus:
            log.warning(
                "--gpus %d while %s sees %d GPUs: power and energy per token are all %d GPUs', the figures per GPU "
                "and the cost are for %d",
                plan.gpus,
                section.source,
                len(section.devices),
                len(section.devices),
                plan.gpus,
            )

    def run_finished(self, run, summary) -> None:
        if summary.gpu is not None:  # beside the capacity the console printed
            print(f"In the deployment's terms: {summary.gpu.sentence}", flush=True)

    def latest(self) -> dict | None:
        """The running sampler's newest readings (the web UI's live view); None when off."""
        return self.sampler.latest() if self.sampler is not None else None
