"""GPU telemetry aligned to the load levels, and the capacity in the deployment's terms.

The readings (plugin/gpu.py writes them to `gpu_telemetry.parquet`, one row per GPU per reading)
are cut to each window exactly as the load's figures are: a level's window is its `by_step`
entry's (its warm-up excluded), the run's is summary.json's `window`. Per window:

  utilisation   mean over the GPUs and their readings; p95 of every reading of every GPU
  memory        mean per GPU, and the fullest GPU's peak (MiB)
  power         the GPUs' draw together: the sum of each GPU's mean (W)
  energy        the GPUs together over the window (J): the increase of the exporter's energy
                counter (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION) when every GPU has one, else each
                GPU's power integrated over the window (linear between readings, the window's
                edges interpolated; beyond the first or last reading the power is held, the
                counter grows at its last rate); None when the readings do not cover the window
                (a gap of more than MAX_GAP_INTERVALS intervals at an edge)

and the load of the same window (the summary's throughput, tokens counted where they arrived):

  tokens        tokens/s x the window's seconds: the tokens that arrived inside it
  J/token       energy / output tokens, and energy / total (prompt + output) tokens
  cost          --gpu-hour-price x GPUs x the window's hours / tokens x 10^6: per million output
                tokens and per million total tokens
  per GPU       requests/min, output and total tokens/s divided by the deployment's GPU count
                (--gpus, else the GPUs the telemetry saw)

For the diagnosis of the knee (metrics/diagnosis.py): `GpuSection.at(users).utilization_pct_mean`
in summary.json is the GPUs' busy share at that level (None without telemetry), e.g. "GPU busy
26 % at the knee: not compute-bound"; from a results folder alone, `read_readings(folder)` and
`window_figures(readings, start, end)` give the same figures for any window.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from metrics.percentiles import percentile
from metrics.schema import Summary
from metrics.schema.figures import Span, Step
from metrics.schema.server_side import GpuDevice, GpuFigures, GpuSection

FILE_NAME = "gpu_telemetry.parquet"
# one row per GPU per reading; NaN where the source did not say (nvidia-smi has no energy counter)
COLUMNS = (
    "timestamp",
    "gpu",
    "name",
    "utilization_pct",
    "memory_used_mib",
    "memory_total_mib",
    "power_w",
    "sm_clock_mhz",
    "energy_j",
)
MAX_GAP_INTERVALS = 2.5  # readings this many intervals short of a window's edge: its energy is unknown

if TYPE_CHECKING:  # pandas is loaded by the process that reads results, never by a load process
    import pandas as pd


def read_readings(folder: str) -> pd.DataFrame | None:
    """The readings of a results folder (None when the run had no telemetry)."""
    path = os.path.join(folder, FILE_NAME)
    if not os.path.isfile(path):
        return None
    import pandas as pd

    return pd.read_parquet(path)


def _inside(readings: pd.DataFrame, start: float, end: float) -> pd.DataFrame:
    t = readings["timestamp"]
    return readings[(t >= start) & (t <= end)]


def _mean(values) -> float | None:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else None


def _integral(t: np.ndarray, y: np.ndarray, start: float, end: float) -> float:
    """The integral over [start, end] of y(t), linear between readings, held flat beyond them."""
    inner = t[(t > start) & (t < end)]
    grid = np.concatenate([[start], inner, [end]])
    values = np.interp(grid, t, y)
    return float(np.sum((values[1:] + values[:-1]) * np.diff(grid)) / 2.0)


def _counter_at(t: np.ndarray, c: np.ndarray, x: float) -> float:
    """A counter's value at x: linear between readings; beyond them at the rate of the nearest two
    (as the power held at the edge: a counter held flat would say the GPU drew nothing there)."""
    if t[0] <= x <= t[-1] or t.size < 2:
        return float(np.interp(x, t, c))
    i = 0 if x < t[0] else -2
    rate = (c[i + 1] - c[i]) / (t[i + 1] - t[i]) if t[i + 1] > t[i] else 0.0
    edge = 0 if x < t[0] else -1
    return float(c[edge] + rate * (x - t[edge]))


def energy(readings: pd.DataFrame, start: float, end: float, interval_s: float) -> tuple[float | None, str | None]:
    """(joules, source) of the GPUs together over [start, end]; (None, None) when a GPU's readings do
    not cover the window or it has no power reading."""
    if readings is None or readings.empty or end <= start:
        return None, None
    gap = MAX_GAP_INTERVALS * interval_s
    per_gpu, sources = [], set()
    for _, g in readings.groupby("gpu", sort=True):
        g = g.sort_values("timestamp")
        t = g["timestamp"].to_numpy(dtype=float)
        counter = g["energy_j"].to_numpy(dtype=float)
        power = g["power_w"].to_numpy(dtype=float)
        if not t.size or t[0] > start + gap or t[-1] < end - gap:
            return None, None
        has_counter = np.isfinite(counter)
        if has_counter.sum() >= 2 and np.all(np.diff(counter[has_counter]) >= 0):  # a monotonic counter
            tc, c = t[has_counter], counter[has_counter]
            if tc[0] > start + gap or tc[-1] < end - gap:
                return None, None
            a, b = _counter_at(tc, c, start), _counter_at(tc, c, end)
            per_gpu.append(float(b - a))
            sources.add("counter")
            continue
        has_power = np.isfinite(power)
        tp, p = t[has_power], power[has_power]
        if not tp.size or tp[0] > start + gap or tp[-1] < end - gap:
            return None, None
        per_gpu.append(_integral(tp, p, start, end))
        sources.add("power")
    if not per_gpu:
        return None, None
    return float(sum(per_gpu)), ("counter" if sources == {"counter"} else "power")


def window_figures(readings: pd.DataFrame | None, start: float, end: float, interval_s: float = 1.0) -> GpuFigures:
    """The telemetry figures of one window (the load's figures left empty: `figures` adds them)."""
    out = GpuFigures(window=Span(start=start, end=end))
    if readings is None or readings.empty:
        return out
    w = _inside(readings, start, end)
    out.readings = int(len(w))
    if not len(w):
        return out
    util = w["utilization_pct"].to_numpy(dtype=float)
    mem = w["memory_used_mib"].to_numpy(dtype=float)
    out.utilization_pct_mean = _mean(util)
    out.utilization_pct_p95 = percentile(util, 95)
    out.memory_used_mib_mean = _mean(mem)
    out.memory_used_mib_peak = float(np.nanmax(mem)) if np.isfinite(mem).any() else None
    powers = [m for m in (_mean(g) for _, g in w.groupby("gpu")["power_w"]) if m is not None]
    out.power_w_mean = float(sum(powers)) if powers else None
    out.sm_clock_mhz_mean = _mean(w["sm_clock_mhz"])
    out.energy_j, out.energy_source = energy(readings, start, end, interval_s)
    return out


def _div(a, b) -> float | None:
    return None if a is None or b is None or not b else float(a) / float(b)


def figures(
    telemetry: GpuFigures, users: int | None, throughput, seconds: float, gpus: int | None, price: float | None
) -> GpuFigures:
    """`telemetry`'s window with the load it carried (`throughput`: the window's Throughput over
    `seconds`) in the deployment's terms: per minute, per GPU, per token and per million tokens."""
    out = telemetry.model_copy(update={"users": users})
    th = throughput
    rps, out_tps, tot_tps = th.requests_per_s, th.output_tokens_per_s, th.total_tokens_per_s
    out.requests_per_min = None if rps is None else rps * 60.0
    out.sessions_per_min = None if th.sessions_per_s is None else th.sessions_per_s * 60.0
    out.output_tokens_per_s, out.total_tokens_per_s = out_tps, tot_tps
    out.requests_per_min_per_gpu = _div(out.requests_per_min, gpus)
    out.output_tokens_per_s_per_gpu = _div(out_tps, gpus)
    out.total_tokens_per_s_per_gpu = _div(tot_tps, gpus)
    if out.energy_j is not None and seconds > 0:
        out.joules_per_output_token = _div(out.energy_j, None if out_tps is None else out_tps * seconds)
        out.joules_per_token = _div(out.energy_j, None if tot_tps is None else tot_tps * seconds)
    if price is not None and gpus:
        per_s = price * gpus / 3600.0  # what the deployment costs per second
        out.cost_per_million_output_tokens = _div(per_s * 1e6, out_tps)
        out.cost_per_million_tokens = _div(per_s * 1e6, tot_tps)
    return out


def level_figures(
    step: Step, readings: pd.DataFrame | None, gpus: int | None, price: float | None, interval_s: float = 1.0
) -> GpuFigures:
    """A load level's figures: its telemetry and its load, over its window."""
    start, end = step.window.start, step.window.end
    return figures(
        window_figures(readings, start, end, interval_s), step.users, step.throughput, end - start, gpus, price
    )


def devices(readings: pd.DataFrame | None, start: float, end: float) -> list[GpuDevice]:
    """Each GPU the telemetry saw, with its utilisation and power over the run's window."""
    if readings is None or readings.empty:
        return []
    out = []
    for gid, g in readings.groupby("gpu", sort=True):
        w = _inside(g, start, end)
        names = [n for n in g["name"].astype(str) if n]
        total = g["memory_total_mib"].to_numpy(dtype=float)
        out.append(
            GpuDevice(
                id=str(gid),
                name=names[-1] if names else "",
                readings=int(len(w)),
                memory_total_mib=float(np.nanmax(total)) if np.isfinite(total).any() else None,
                utilization_pct_mean=_mean(w["utilization_pct"]),
                power_w_mean=_mean(w["power_w"]),
            )
        )
    return sorted(out, key=lambda d: (len(d.id), d.id))


def gpu_section(
    summary: Summary,
    readings: pd.DataFrame | None,
    *,
    source: str | None = None,
    interval_s: float = 1.0,
    gpus: int | None = None,
    price: float | None = None,
    failed: int = 0,
    last_error: str | None = None,
    file: str | None = None,
) -> GpuSection:
    """summary.json's `gpu`: the telemetry and the load per level, over the run, and at the capacity.
    `gpus`: --gpus (None: the GPUs the telemetry saw)."""
    w = summary.window
    seen = devices(readings, w.start, w.end)
    count, origin = (gpus, "--gpus") if gpus else ((len(seen), "telemetry") if seen else (None, None))
    overall = figures(
        window_figures(readings, w.start, w.end, interval_s), None, summary.overall.throughput, w.seconds, count, price
    )
    steps = [level_figures(st, readings, count, price, interval_s) for st in summary.by_step or []]
    capacity = None
    cap = summary.capacity
    if cap is not None and cap.users is not None:
        met = [f for f, st in zip(steps, summary.by_step or []) if st.users == cap.users and not st.partial]
        capacity = met[-1] if met else None
    section = GpuSection(
        source=source,
        interval_s=interval_s if source else None,
        file=file,
        readings=0 if readings is None else int(len(readings)),
        failed_readings=failed,
        last_error=last_error,
        devices=seen,
        gpus=count,
        gpus_from=origin,
        gpu_hour_price=price,
        overall=overall,
        by_step=steps,
        capacity=capacity,
    )
    section.sentence = sentence(section, cap.slo if cap is not None else "")
    return section


def _n(x, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def describe_figures(f: GpuFigures, gpus: int | None, price: float | None) -> str:
    """One window's figures in words (the report's GPU block and the capacity line)."""
    parts = [f"{_n(f.requests_per_min, 1)} requests/min"]
    if f.sessions_per_min is not None:
        parts.append(f"{_n(f.sessions_per_min, 1)} sessions/min")
    parts.append(f"{_n(f.output_tokens_per_s)} output and {_n(f.total_tokens_per_s)} total tokens/s")
    if gpus:
        parts.append(
            f"per GPU {_n(f.requests_per_min_per_gpu, 1)} requests/min, {_n(f.output_tokens_per_s_per_gpu)} output "
            f"and {_n(f.total_tokens_per_s_per_gpu)} total tokens/s"
        )
    text = ", ".join(parts)
    if f.utilization_pct_mean is not None:
        text += f"; GPU busy {_n(f.utilization_pct_mean)} % (p95 {_n(f.utilization_pct_p95)} %), {_n(f.power_w_mean)} W"
    if f.joules_per_output_token is not None:
        text += f", {_n(f.joules_per_output_token, 3)} J per output token ({_n(f.joules_per_token, 3)} J per token)"
    if f.cost_per_million_output_tokens is not None:
        text += (
            f"; {_n(f.cost_per_million_output_tokens, 2)} per million output tokens "
            f"({_n(f.cost_per_million_tokens, 2)} per million tokens) at {price:g} per GPU-hour"
        )
    return text


def sentence(section: GpuSection, slo: str = "") -> str:
    """The capacity in the deployment's terms (or the run's window when no level met an SLO)."""
    gpus = section.gpus
    where = {"--gpus": "", "telemetry": " (as the telemetry saw)", None: ""}[section.gpus_from]
    on = f" on {gpus} GPU{'s' if gpus != 1 else ''}{where}" if gpus else ""
    if section.capacity is not None:
        at = f"at the capacity{f' ({slo})' if slo else ''}, {section.capacity.users} users{on}: "
        return at + describe_figures(section.capacity, gpus, section.gpu_hour_price)
    return f"over the run's window{on}: " + describe_figures(section.overall, gpus, section.gpu_hour_price)
