"""Hand-written inline SVG charts: self-contained, no script, no font download, no dependency.

Every chart is one `<svg class="chart" data-chart=ID>` with a title, axis titles with units, and
its data marks tagged `class="mark"` (the browser test counts them). Inputs are small numpy arrays
that the caller has already binned; nothing here loops over request records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

import numpy as np

# Okabe-Ito, readable by colour-blind people; the first colour is the main series.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#8c564b", "#000000", "#999999", "#F0E442")
WIDTH, HEIGHT = 572, 300
LEFT, RIGHT, BOTTOM = 64, 16, 46
CHAR_W = 6.6  # rough width of a 12 px sans-serif character, for legend layout


@dataclass
class Series:
    name: str
    x: np.ndarray
    y: np.ndarray
    color: str | None = None
    dash: bool = False
    markers: bool = False
    step: bool = False  # draw as a step function (value holds until the next x)
    fill: bool = False  # shade the area under the line
    connect: bool = False  # join points across NaN values (sparse time bins) instead of breaking


@dataclass
class Ref:
    """A reference line: horizontal (axis='y') or vertical (axis='x'), with a label."""

    axis: str
    value: float
    label: str
    color: str = "#b00020"


@dataclass
class Chart:
    chart_id: str
    title: str
    x_label: str
    y_label: str
    series: list[Series] = field(default_factory=list)
    refs: list[Ref] = field(default_factory=list)
    x_log: bool = False
    y_log: bool = False
    y_zero: bool = True  # include 0 on a linear y axis
    y_max: float | None = None  # cap of the y axis (e.g. 100 for a percentage)
    x_time: bool = False  # x values are seconds: ticks as m:ss when long
    bands: list[tuple[float, float, str]] = field(default_factory=list)  # (x0, x1, label): shaded spans
    note: str = ""


TIME_STEPS = (30, 60, 120, 300, 600, 900, 1200, 1800, 3600, 7200, 10800, 21600)


def nice_ticks(lo: float, hi: float, count: int = 6, time_axis: bool = False) -> np.ndarray:
    """Round tick values (1, 2, 5 x 10^k steps; minutes on long time axes) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return np.array([0.0, 1.0])
    if hi <= lo:
        hi = lo + (abs(lo) if lo else 1.0)
    raw = (hi - lo) / max(1, count - 1)
    if time_axis and hi - lo >= 180:
        step = next((t for t in TIME_STEPS if t >= raw), math.ceil(raw / 3600) * 3600)
    else:
        mag = 10 ** math.floor(math.log10(raw))
        step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step + 1e-9) * step
    stop = math.ceil(hi / step - 1e-9) * step
    ticks = np.arange(start, stop + step * 0.5, step)
    return np.round(ticks, 12)


def log_ticks(lo: float, hi: float) -> np.ndarray:
    lo_e, hi_e = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if hi_e - lo_e <= 2:
        ticks = [m * 10.0**e for e in range(lo_e, hi_e + 1) for m in (1, 2, 5)]
    else:
        ticks = [10.0**e for e in range(lo_e, hi_e + 1)]
    return np.array(ticks)


def fmt_num(v: float) -> str:
    """Compact tick label: 1.2M, 35k, 0.05, 120."""
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    if a >= 1:
        return f"{v:.4g}"
    return f"{v:.2g}"


def fmt_time(v: float, span: float) -> str:
    if span < 180:
        return f"{v:g}"
    m, s = divmod(int(round(v)), 60)
    return f"{m}:{s:02d}"


class _Scale:
    def __init__(self, lo: float, hi: float, p0: float, p1: float, log: bool):
        self.log = log
        if log:
            lo, hi = math.log10(lo), math.log10(hi)
        if hi <= lo:
            hi = lo + 1.0
        self.lo, self.hi, self.p0, self.p1 = lo, hi, p0, p1

    def __call__(self, v):
        v = np.asarray(v, dtype=float)
        if self.log:
            with np.errstate(divide="ignore", invalid="ignore"):
                v = np.log10(v)
        return self.p0 + (v - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)


def _extent(values: list[np.ndarray], log: bool) -> tuple[float, float] | None:
    parts = [np.asarray(v, dtype=float) for v in values if len(v)]
    if not parts:
        return None
    v = np.concatenate(parts)
    v = v[np.isfinite(v)]
    if log:
        v = v[v > 0]
    if v.size == 0:
        return None
    return float(v.min()), float(v.max())


def _legend(names_colors: list[tuple[str, str, bool]], top: float) -> tuple[list[str], float]:
    """Legend items laid out in rows under the title; returns the elements and the height used."""
    out, x, y = [], LEFT, top
    for name, color, dash in names_colors:
        w = 26 + CHAR_W * len(name) + 14
        if x + w > WIDTH - RIGHT and x > LEFT:
            x, y = LEFT, y + 16
        d = ' stroke-dasharray="5 3"' if dash else ""
        out.append(
            f'<line x1="{x}" y1="{y - 4}" x2="{x + 20}" y2="{y - 4}" stroke="{color}" stroke-width="3"{d}/>'
            f'<text x="{x + 25}" y="{y}" class="legend">{escape(name)}</text>'
        )
        x += w
    return out, (y - top + 18) if names_colors else 0


def _path(xs: np.ndarray, ys: np.ndarray, step: bool) -> str:
    """SVG path data, broken at NaN values."""
    parts, pen_down = [], False
    prev_y = None
    for x, y in zip(xs.tolist(), ys.tolist()):  # a few hundred binned points, never records
        if not (math.isfinite(x) and math.isfinite(y)):
            pen_down = False
            continue
        if not pen_down:
            parts.append(f"M{x:.1f},{y:.1f}")
            pen_down = True
        elif step:
            parts.append(f"H{x:.1f}V{y:.1f}")
        else:
            parts.append(f"L{x:.1f},{y:.1f}")
        prev_y = y
    del prev_y
    return "".join(parts)


def _frame(chart: Chart, legend_items: list[tuple[str, str, bool]]) -> tuple[list[str], float]:
    out = [
        f'<svg class="chart" data-chart="{escape(chart.chart_id)}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(chart.title)}">',
        f"<title>{escape(chart.title)}</title>",
        f'<text x="{LEFT}" y="18" class="title">{escape(chart.title)}</text>',
    ]
    top = 36
    if chart.note:
        out.append(f'<text x="{LEFT}" y="33" class="note">{escape(chart.note)}</text>')
        top += 14
    legend, legend_h = _legend(legend_items, top)
    out += legend
    return out, top - 10 + legend_h + 6


def _axes(
    out: list[str],
    chart: Chart,
    xs: _Scale,
    ys: _Scale,
    xt: np.ndarray,
    yt: np.ndarray,
    top: float,
    x_labels: list[str] | None = None,
) -> None:
    bottom = HEIGHT - BOTTOM
    span = (xt[-1] - xt[0]) if len(xt) > 1 else 0
    for t in yt:
        y = float(ys(t))
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">{fmt_num(t)}</text>')
    if x_labels is None:
        for t in xt:
            x = float(xs(t))
            label = fmt_time(t, span) if chart.x_time else fmt_num(t)
            out.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 5}" class="axis"/>')
            out.append(f'<text x="{x:.1f}" y="{bottom + 18}" class="tick" text-anchor="middle">{label}</text>')
    out.append(f'<line x1="{LEFT}" y1="{bottom}" x2="{WIDTH - RIGHT}" y2="{bottom}" class="axis"/>')
    out.append(f'<line x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{bottom}" class="axis"/>')
    xl = chart.x_label + (" (m:ss)" if chart.x_time and span >= 180 else "")
    out.append(
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 10}" class="axis-title" text-anchor="middle">{escape(xl)}</text>'
    )
    cy = (top + bottom) / 2
    out.append(
        f'<text x="16" y="{cy:.1f}" class="axis-title" text-anchor="middle" transform="rotate(-90 16 {cy:.1f})">{escape(chart.y_label)}</text>'
    )


def render(chart: Chart) -> str:
    """A line chart (time series, step curves, CDFs, histograms drawn as step lines)."""
    named = np.cumsum([bool(s.name) for s in chart.series]) - 1  # unnamed helper series take no colour
    colors = [s.color or PALETTE[max(0, int(k)) % len(PALETTE)] for s, k in zip(chart.series, named)]
    out, top = _frame(chart, [(s.name, c, s.dash) for s, c in zip(chart.series, colors) if s.name])
    bottom = HEIGHT - BOTTOM
    xe = _extent(
        [s.x for s in chart.series]
        + [np.array([b[0] for b in chart.bands] + [b[1] for b in chart.bands])]
        + [np.array([r.value for r in chart.refs if r.axis == "x"])],
        chart.x_log,
    )
    ye = _extent([s.y for s in chart.series] + [np.array([r.value for r in chart.refs if r.axis == "y"])], chart.y_log)
    if xe is None or ye is None:
        out.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" class="empty" text-anchor="middle">no data</text></svg>')
        return "\n".join(out)
    x0, x1 = xe
    y0, y1 = ye
    if chart.y_log:
        yt = log_ticks(y0, y1)
        y0, y1 = min(y0, yt[0]), max(y1, yt[-1])
        yt = yt[(yt >= y0) & (yt <= y1)]
    else:
        if chart.y_zero:
            y0 = min(0.0, y0)
        yt = nice_ticks(y0, y1 * 1.05 if y1 > 0 else y1 + 1)
        if chart.y_max is not None:
            yt = yt[yt <= chart.y_max]
            if yt[-1] < chart.y_max:
                yt = np.append(yt, chart.y_max)
        y0, y1 = float(yt[0]), float(yt[-1])
    if chart.x_log:
        xt = log_ticks(x0, x1)
        xt = xt[(xt >= x0 * 0.999) & (xt <= x1 * 1.001)]
        if len(xt) < 2:
            xt = np.array([x0, x1])
    else:
        xt = nice_ticks(x0, x1, time_axis=chart.x_time)
        xt = xt[(xt >= x0 - 1e-9) & (xt <= x1 + 1e-9)]
        if len(xt) < 2:
            xt = np.array([x0, x1])
    xs = _Scale(x0, x1, LEFT, WIDTH - RIGHT, chart.x_log)
    ys = _Scale(y0, y1, bottom, top, chart.y_log)
    for b0, b1, label in chart.bands:
        px0, px1 = float(xs(max(b0, x0))), float(xs(min(b1, x1)))
        if px1 > px0:
            out.append(
                f'<rect x="{px0:.1f}" y="{top}" width="{px1 - px0:.1f}" height="{bottom - top}" class="band">'
                f"<title>{escape(label)}</title></rect>"
            )
    _axes(out, chart, xs, ys, xt, yt, top)
    for s, color in zip(chart.series, colors):
        sx, sy = np.asarray(s.x, dtype=float), np.asarray(s.y, dtype=float)
        if s.connect:
            keep = np.isfinite(sx) & np.isfinite(sy)
            sx, sy = sx[keep], sy[keep]
        px, py = xs(sx), ys(np.clip(sy, y0 if not chart.y_log else 0, None))
        d = _path(np.asarray(px), np.asarray(py), s.step)
        dash = ' stroke-dasharray="6 4"' if s.dash else ""
        if s.fill and d:
            ok = np.isfinite(px) & np.isfinite(py)
            if ok.any():
                fx, fy = np.asarray(px)[ok], np.asarray(py)[ok]
                area = _path(fx, fy, s.step) + f"L{fx[-1]:.1f},{bottom}L{fx[0]:.1f},{bottom}Z"
                out.append(f'<path d="{area}" fill="{color}" fill-opacity="0.15" stroke="none"/>')
        if d:
            out.append(
                f'<path class="mark" d="{d}" fill="none" stroke="{color}" stroke-width="2"{dash}>'
                f"<title>{escape(s.name)}</title></path>"
            )
        if s.markers:
            for x, y, vx, vy in zip(np.asarray(px).tolist(), np.asarray(py).tolist(), sx.tolist(), sy.tolist()):
                if math.isfinite(x) and math.isfinite(y):
                    out.append(
                        f'<circle class="mark" cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}">'
                        f"<title>{escape(s.name)}: {fmt_num(vx)} → {fmt_num(vy)}</title></circle>"
                    )
    for i, r in enumerate(chart.refs):
        if r.axis == "y":
            y = float(ys(r.value))
            out.append(
                f'<line class="ref" x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="{r.color}"/>'
                f'<text x="{WIDTH - RIGHT - 4}" y="{y - 5:.1f}" class="ref-label" text-anchor="end" fill="{r.color}">{escape(r.label)}</text>'
            )
        else:
            x = float(xs(r.value))
            out.append(
                f'<line class="ref" x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="{r.color}"/>'
                f'<text x="{x + 4:.1f}" y="{top + 12 + 14 * (i % 2)}" class="ref-label" fill="{r.color}">{escape(r.label)}</text>'
            )
    out.append("</svg>")
    return "\n".join(out)


def render_bars(
    chart_id: str,
    title: str,
    categories: list[str],
    groups: list[tuple[str, np.ndarray]],
    y_label: str,
    x_label: str = "",
    y_log: bool = False,
    value_fmt=fmt_num,
    note: str = "",
    y_max: float | None = None,
) -> str:
    """Grouped bars: one group per category, one bar per (name, values) series."""
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(groups))]
    chart = Chart(chart_id, title, x_label, y_label, y_log=y_log, note=note)
    out, top = _frame(chart, [(n, c, False) for (n, _), c in zip(groups, colors)])
    bottom = HEIGHT - BOTTOM
    ye = _extent([np.asarray(v, dtype=float) for _, v in groups], y_log)
    if ye is None or not categories:
        out.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" class="empty" text-anchor="middle">no data</text></svg>')
        return "\n".join(out)
    y0, y1 = ye
    if y_log:
        yt = log_ticks(y0, y1)
        y0, y1 = float(yt[0]), float(yt[-1])
    else:
        yt = nice_ticks(0.0, y1 * 1.08 if y1 > 0 else 1.0)
        if y_max is not None and yt[-1] > y_max >= y1:
            yt = np.append(yt[yt < y_max], y_max)
        y0, y1 = 0.0, float(yt[-1])
    ys = _Scale(y0, y1, bottom, top, y_log)
    slot = (WIDTH - RIGHT - LEFT) / len(categories)
    bar_w = slot * 0.8 / max(1, len(groups))
    xs = _Scale(0, 1, LEFT, WIDTH - RIGHT, False)
    _axes(out, chart, xs, ys, np.array([0.0, 1.0]), yt, top, x_labels=categories)
    base_y = float(ys(y0))
    for ci, cat in enumerate(categories):
        cx = LEFT + slot * (ci + 0.5)
        out.append(f'<text x="{cx:.1f}" y="{bottom + 18}" class="tick" text-anchor="middle">{escape(cat)}</text>')
        for gi, ((name, values), color) in enumerate(zip(groups, colors)):
            v = float(values[ci])
            if not math.isfinite(v) or (y_log and v <= 0):
                continue
            y = float(ys(v))
            x = cx - slot * 0.4 + gi * bar_w
            out.append(
                f'<rect class="mark" x="{x:.1f}" y="{y:.1f}" width="{max(1.0, bar_w - 2):.1f}" height="{max(0.5, base_y - y):.1f}" '
                f'fill="{color}"><title>{escape(cat)} {escape(name)}: {value_fmt(v)}</title></rect>'
            )
    out.append("</svg>")
    return "\n".join(out)


def render_stacked(
    chart_id: str,
    title: str,
    x_left: np.ndarray,
    width,
    stacks: list[tuple[str, np.ndarray]],
    x_label: str,
    y_label: str,
    x_time: bool = True,
    note: str = "",
) -> str:
    """Stacked columns over bins starting at x_left, `width` wide (one width for all, or one per
    bin), e.g. errors per class per time bin."""
    colors = [PALETTE[(i + 1) % len(PALETTE)] for i in range(len(stacks))]
    chart = Chart(chart_id, title, x_label, y_label, x_time=x_time, note=note)
    out, top = _frame(chart, [(n, c, False) for (n, _), c in zip(stacks, colors)])
    bottom = HEIGHT - BOTTOM
    if len(x_left) == 0 or not stacks:
        out.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" class="empty" text-anchor="middle">no data</text></svg>')
        return "\n".join(out)
    totals = np.sum([np.asarray(v, dtype=float) for _, v in stacks], axis=0)
    yt = nice_ticks(0.0, max(float(totals.max()), 1e-9) * 1.08)
    widths = np.broadcast_to(np.asarray(width, dtype=float), np.shape(x_left))
    x0, x1 = float(x_left[0]), float(x_left[-1] + widths[-1])
    xt = nice_ticks(x0, x1, time_axis=x_time)
    xt = xt[(xt >= x0 - 1e-9) & (xt <= x1 + 1e-9)]
    xs = _Scale(x0, x1, LEFT, WIDTH - RIGHT, False)
    ys = _Scale(0.0, float(yt[-1]), bottom, top, False)
    _axes(out, chart, xs, ys, xt if len(xt) >= 2 else np.array([x0, x1]), yt, top)
    acc = np.zeros(len(x_left))
    pw = np.maximum(1.0, xs(x_left + widths) - xs(x_left) - 0.5)
    for (name, values), color in zip(stacks, colors):
        v = np.asarray(values, dtype=float)
        nz = np.nonzero(v > 0)[0]
        ya, yb = ys(acc + v), ys(acc)
        px = xs(x_left)
        for i in nz.tolist():  # one rect per non-empty (bin, class): bounded by the bin count
            out.append(
                f'<rect class="mark" x="{px[i]:.1f}" y="{ya[i]:.1f}" width="{pw[i]:.1f}" height="{max(0.5, yb[i] - ya[i]):.1f}" '
                f'fill="{color}"><title>{escape(name)} at {fmt_num(float(x_left[i]))} s: {fmt_num(float(v[i]))}</title></rect>'
            )
        acc = acc + v
    out.append("</svg>")
    return "\n".join(out)


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1180px;color:#1a1a1a;padding:0 16px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin-bottom:6px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f4f6f8}td.l,th.l{text-align:left}tr.overall td{font-weight:600;background:#fafafa}
.pass{color:#0a7a32;font-weight:600}.fail{color:#b00020;font-weight:600}
.capacity{font-size:16px;background:#eef6ff;border-left:4px solid #0072B2;padding:8px 12px;margin:12px 0}
.warn{background:#fff4e5;border-left-color:#D55E00}
.charts{display:flex;flex-wrap:wrap;gap:12px}.muted{color:#666;font-size:12px}
svg.chart{background:#fff;border:1px solid #e3e3e3;max-width:100%;height:auto}
svg .title{font-size:14px;font-weight:600;fill:#1a1a1a}svg .legend,svg .tick{font-size:11px;fill:#333}
svg .axis-title{font-size:12px;fill:#333}svg .grid{stroke:#eee}svg .axis{stroke:#888}
svg .ref{stroke-width:1.5;stroke-dasharray:6 3}svg .ref-label{font-size:11px;font-weight:600}
svg .band{fill:#999;fill-opacity:0.12}svg .empty{font-size:14px;fill:#999}svg .note{font-size:11px;fill:#666}
details{margin:8px 0}code{background:#f4f6f8;padding:1px 4px}
"""
