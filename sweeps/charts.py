"""The sweep's two charts, inline SVG drawn with reports/svg.py's frame, axes and scales: each
point's figure with its interval as an error bar. A side of an interval that is not bounded (a
capacity search that missed no level) is drawn as an arrow to the chart's edge."""

from __future__ import annotations

import math
from html import escape

import numpy as np

from reports.svg import BOTTOM, HEIGHT, LEFT, PALETTE, RIGHT, WIDTH, Chart, _axes, _frame, _Scale, fmt_num, nice_ticks

BAR = "#555"


def _num(v) -> float:
    return float(v) if v is not None and math.isfinite(float(v)) else math.nan


def _empty(out: list[str]) -> str:
    out.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" class="empty" text-anchor="middle">no data</text></svg>')
    return "\n".join(out)


def per_point(chart_id: str, title: str, y_label: str, labels: list[str], values, lo, hi, note: str = "") -> str:
    """One marker per point (in grid order) at its value, with a vertical bar from lo to hi."""
    v, lo_, hi_ = (np.array([_num(x) for x in a]) for a in (values, lo, hi))
    names, setting = point_labels(labels)
    chart = Chart(chart_id, title, setting or "point", y_label, note=note)
    out, top = _frame(chart, [])
    finite = np.concatenate([v[np.isfinite(v)], lo_[np.isfinite(lo_)], hi_[np.isfinite(hi_)]])
    if not labels or finite.size == 0:
        return _empty(out)
    bottom = HEIGHT - BOTTOM
    yt = nice_ticks(0.0, float(finite.max()) * 1.1 or 1.0)
    ys = _Scale(0.0, float(yt[-1]), bottom, top, False)
    xs = _Scale(0, 1, LEFT, WIDTH - RIGHT, False)
    _axes(out, chart, xs, ys, np.array([0.0, 1.0]), yt, top, x_labels=labels)
    slot = (WIDTH - RIGHT - LEFT) / len(labels)
    for i, label in enumerate(labels):
        cx = LEFT + slot * (i + 0.5)
        out.append(
            f'<text x="{cx:.1f}" y="{bottom + 18}" class="tick" text-anchor="middle">{escape(_short(names[i], slot))}</text>'
        )
        if not math.isfinite(v[i]):
            out.append(f'<text x="{cx:.1f}" y="{bottom - 6}" class="note" text-anchor="middle">none</text>')
            continue
        y = float(ys(v[i]))
        _vbar(out, cx, ys, lo_[i], hi_[i], top)
        out.append(
            f'<circle class="mark" cx="{cx:.1f}" cy="{y:.1f}" r="4.5" fill="{PALETTE[0]}"><title>{escape(label)}: '
            f"{fmt_num(v[i])} [{_b(lo_[i])}, {_b(hi_[i])}]</title></circle>"
        )
    out.append("</svg>")
    return "\n".join(out)


def _b(x: float) -> str:
    return fmt_num(x) if math.isfinite(x) else "unbounded"


CHAR_PX = 6.6  # the width of a tick label's character, near enough to place and shorten labels


def _short(label: str, slot: float) -> str:
    """The label cut to `slot` pixels, its end kept (a point's last setting is what tells it apart)."""
    most = max(4, int(slot / CHAR_PX))
    return label if len(label) <= most else "…" + label[-(most - 1) :]


def point_labels(labels: list[str]) -> tuple[list[str], str]:
    """The points' labels without the setting they all name, and that setting's name: a grid of
    one setting labels its points `cb_max_batch_tokens=256`, `=1024`, ..., and a chart shows
    256, 1024, ... with the name once."""
    pairs = [label.split("=", 1) for label in labels]
    names = {p[0] for p in pairs}
    if labels and len(names) == 1 and all(len(p) == 2 and "," not in p[1] for p in pairs):
        return [p[1] for p in pairs], names.pop()
    return list(labels), ""


def _place_labels(marks: list[tuple[float, float, str]], right: float) -> list[tuple[float, float, str, str]]:
    """(x, y, anchor, text) for each mark's label: beside its marker, to the left where it would
    run past `right`, moved down a line at a time where it would overlap a label placed before
    (placed from the top marker down, so that labels keep their markers' order)."""
    placed: list[tuple[float, float, float]] = []  # (x0, x1, y) of the labels placed
    out = []
    for cx, cy, text in sorted(marks, key=lambda m: m[1]):
        width = len(text) * CHAR_PX
        start = cx + 7 if cx + 7 + width <= right else cx - 7 - width
        y = cy - 6
        for _ in range(len(marks)):
            if not any(start < x1 and x0 < start + width and abs(y - py) < 12 for x0, x1, py in placed):
                break
            y += 12
        placed.append((start, start + width, y))
        out.append((cx + 7 if start > cx else cx - 7, y, "start" if start > cx else "end", text))
    return out


def _vbar(out: list[str], cx: float, ys: _Scale, lo: float, hi: float, top: float) -> None:
    y_lo = float(ys(lo)) if math.isfinite(lo) else None
    y_hi = float(ys(hi)) if math.isfinite(hi) else top  # unbounded above: to the top, with an arrow
    if y_lo is None:
        return
    out.append(
        f'<line class="errorbar" x1="{cx:.1f}" y1="{y_lo:.1f}" x2="{cx:.1f}" y2="{y_hi:.1f}" stroke="{BAR}" stroke-width="1.5"/>'
    )
    out.append(
        f'<line x1="{cx - 5:.1f}" y1="{y_lo:.1f}" x2="{cx + 5:.1f}" y2="{y_lo:.1f}" stroke="{BAR}" stroke-width="1.5"/>'
    )
    if math.isfinite(hi):
        out.append(
            f'<line x1="{cx - 5:.1f}" y1="{y_hi:.1f}" x2="{cx + 5:.1f}" y2="{y_hi:.1f}" stroke="{BAR}" stroke-width="1.5"/>'
        )
    else:
        out.append(
            f'<path d="M{cx - 5:.1f},{y_hi + 7:.1f}L{cx:.1f},{y_hi:.1f}L{cx + 5:.1f},{y_hi + 7:.1f}" fill="none" stroke="{BAR}" stroke-width="1.5"/>'
        )


def pareto_front(x: np.ndarray, y: np.ndarray) -> list[int]:
    """Indices of the points no other point beats on both (lower x and higher y), by x."""
    idx = [i for i in range(len(x)) if math.isfinite(x[i]) and math.isfinite(y[i])]
    front = [i for i in idx if not any((x[j] <= x[i] and y[j] >= y[i]) and (x[j] < x[i] or y[j] > y[i]) for j in idx)]
    return sorted(front, key=lambda i: x[i])


def pareto(
    chart_id: str,
    title: str,
    x_label: str,
    y_label: str,
    labels: list[str],
    x,
    x_lo,
    x_hi,
    y,
    y_lo,
    y_hi,
    note: str = "",
) -> str:
    """Throughput against P95 TTFT, a marker per point with both intervals as bars, and the front
    (the points no other point beats on both) joined by a line."""
    xv, xl, xh, yv, yl, yh = (np.array([_num(a) for a in arr]) for arr in (x, x_lo, x_hi, y, y_lo, y_hi))
    names, setting = point_labels(labels)
    chart = Chart(
        chart_id,
        title,
        x_label,
        y_label,
        note="; ".join(filter(None, [note, setting and f"points labelled by {setting}"])),
    )
    out, top = _frame(chart, [("Pareto front", PALETTE[1], True), ("point", PALETTE[0], False)])
    ok = np.isfinite(xv) & np.isfinite(yv)
    if not ok.any():
        return _empty(out)
    bottom = HEIGHT - BOTTOM
    xall = np.concatenate([xv[ok], xl[np.isfinite(xl)], xh[np.isfinite(xh)]])
    yall = np.concatenate([yv[ok], yl[np.isfinite(yl)], yh[np.isfinite(yh)]])
    xt = nice_ticks(0.0, float(xall.max()) * 1.08 or 1.0)
    yt = nice_ticks(0.0, float(yall.max()) * 1.1 or 1.0)
    xs = _Scale(0.0, float(xt[-1]), LEFT, WIDTH - RIGHT, False)
    ys = _Scale(0.0, float(yt[-1]), bottom, top, False)
    _axes(out, chart, xs, ys, xt, yt, top)
    front = pareto_front(xv, yv)
    if len(front) > 1:
        d = "".join(
            ("M" if k == 0 else "L") + f"{float(xs(xv[i])):.1f},{float(ys(yv[i])):.1f}" for k, i in enumerate(front)
        )
        out.append(
            f'<path class="front" d="{d}" fill="none" stroke="{PALETTE[1]}" stroke-width="2" stroke-dasharray="6 4"/>'
        )
    marks = []
    for i in np.nonzero(ok)[0].tolist():
        cx, cy = float(xs(xv[i])), float(ys(yv[i]))
        marks.append((cx, cy, _short(names[i], 140)))
        _vbar(out, cx, ys, yl[i], yh[i], top)
        if math.isfinite(xl[i]) and math.isfinite(xh[i]):
            x0, x1 = float(xs(xl[i])), float(xs(xh[i]))
            out.append(
                f'<line class="errorbar" x1="{x0:.1f}" y1="{cy:.1f}" x2="{x1:.1f}" y2="{cy:.1f}" stroke="{BAR}" stroke-width="1.5"/>'
            )
        color = PALETTE[1] if i in front else PALETTE[0]
        out.append(
            f'<circle class="mark" cx="{cx:.1f}" cy="{cy:.1f}" r="4.5" fill="{color}"><title>{escape(labels[i])}: '
            f"{fmt_num(yv[i])} [{_b(yl[i])}, {_b(yh[i])}] at {fmt_num(xv[i])} [{_b(xl[i])}, {_b(xh[i])}]</title></circle>"
        )
    for lx, ly, anchor, text in _place_labels(marks, WIDTH):
        out.append(f'<text x="{lx:.1f}" y="{ly:.1f}" class="tick" text-anchor="{anchor}">{escape(text)}</text>')
    out.append("</svg>")
    return "\n".join(out)
