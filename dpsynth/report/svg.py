"""The report's charts as plain SVG text: no plotting library, milliseconds per chart.

matplotlib took 0.5-1 s per chart here (a 20-column table: 10-30 s of a release, more
than the method itself) plus 0.5 s to import. These functions write the same two kinds
of chart directly as SVG: grouped bars (a column's synthetic distribution beside its DP
marginal) and a strip chart (each marginal's TVD against its own threshold, by marginal
size). Output is deterministic (no time stamps, fixed jitter) and self-contained (no
fonts, scripts or links), so it can be embedded as an ``<img>`` data URI under the
report's Content-Security-Policy. :func:`svg_data_uri` does that encoding.

Pure functions of numbers and labels: the report (:mod:`dpsynth.report`) decides what
to plot and with which captions.
"""

from __future__ import annotations

import base64
import html
import math
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["bar_chart_svg", "tvd_strip_svg", "svg_data_uri", "nice_ticks"]

_FONT = 'font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif"'
_INK, _MUTED, _RULE = "#1f2328", "#59636e", "#d1d9e0"


def _x(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _f(v: float) -> str:
    """A coordinate with at most one decimal (short files, stable output)."""
    return f"{v:.1f}".rstrip("0").rstrip(".")


def nice_ticks(top: float, target: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``top`` (steps of 1, 2, 2.5 or 5 x 10^k)."""
    if not math.isfinite(top) or top <= 0:
        return [0.0, 1.0]
    raw = top / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = int(math.ceil(top / step - 1e-9))
    return [round(i * step, 12) for i in range(n + 1)]


def _tick_label(v: float) -> str:
    return f"{v:.3g}"


def _frame(width: int, height: int, title: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" {_FONT} font-size="12">',
        f"<title>{_x(title)}</title>",
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
    ]


def _y_axis(parts: list[str], ticks: Sequence[float], y_of, left: float, right: float, label: str,
            top: float, bottom: float) -> None:
    for t in ticks:
        y = y_of(t)
        parts.append(f'<line x1="{_f(left)}" x2="{_f(right)}" y1="{_f(y)}" y2="{_f(y)}" stroke="{_RULE}" '
                     'stroke-width="0.6"/>')
        parts.append(f'<text x="{_f(left - 5)}" y="{_f(y + 4)}" text-anchor="end" fill="{_MUTED}">'
                     f"{_tick_label(t)}</text>")
    mid = (top + bottom) / 2
    parts.append(f'<text transform="translate(13 {_f(mid)}) rotate(-90)" text-anchor="middle" fill="{_MUTED}">'
                 f"{_x(label)}</text>")


def bar_chart_svg(
    title: str,
    labels: Sequence[str],
    series: Sequence[tuple[np.ndarray, str]],
    *,
    ylabel: str = "share of rows",
    show_labels: bool = True,
    width: int = 560,
    height: int = 300,
) -> str:
    """Grouped bars: one group per label, one bar per ``(values, colour)`` series.

    Labels are never cut: slanted when there are many or long ones, vertical when one is
    longer than 12 characters, and the chart grows downwards to hold the longest."""
    n = len(labels)
    longest = max((len(s) for s in labels), default=0)
    slanted = show_labels and (n > 6 or longest > 8)
    vertical = slanted and longest > 12
    left, right, top = 56.0, width - 10.0, 30.0
    bottom = height - (78.0 if slanted else 26.0 if show_labels else 12.0)
    if slanted:  # room for the longest label: ~6.6 px a character, along the text's slope
        height = int(math.ceil(bottom + 14.0 + longest * 6.6 * (1.0 if vertical else 0.643)))
    values = [np.nan_to_num(np.asarray(v, dtype=np.float64).ravel()[:n], nan=0.0) for v, _ in series]
    ticks = nice_ticks(max((float(v.max()) for v in values if v.size), default=0.0))
    scale = (bottom - top) / ticks[-1]

    def y_of(v: float) -> float:
        return bottom - max(0.0, v) * scale

    parts = _frame(width, height, title)
    parts.append(f'<text x="8" y="18" font-weight="bold" font-size="13" fill="{_INK}">{_x(title)}</text>')
    _y_axis(parts, ticks, y_of, left, right, ylabel, top, bottom)
    slot = (right - left) / max(1, n)
    bar = slot * 0.8 / max(1, len(series))
    for s, ((_, colour), v) in enumerate(zip(series, values)):
        rects = []
        for i in range(min(n, v.size)):
            x = left + i * slot + slot * 0.1 + s * bar
            y = y_of(float(v[i]))
            rects.append(f"M{_f(x)} {_f(bottom)}V{_f(y)}h{_f(bar)}V{_f(bottom)}z")
        parts.append(f'<path d="{"".join(rects)}" fill="{colour}"/>')
    parts.append(f'<line x1="{_f(left)}" x2="{_f(right)}" y1="{_f(bottom)}" y2="{_f(bottom)}" stroke="{_MUTED}"/>')
    if show_labels:
        for i, lab in enumerate(labels):
            x = left + (i + 0.5) * slot
            if slanted:
                parts.append(f'<text transform="translate({_f(x + 4 if vertical else x + 3)} {_f(bottom + 8)}) '
                             f'rotate({-90 if vertical else -40})" text-anchor="end" fill="{_INK}">{_x(lab)}</text>')
            else:
                parts.append(f'<text x="{_f(x)}" y="{_f(bottom + 16)}" text-anchor="middle" fill="{_INK}">'
                             f"{_x(lab)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _dots(points: Sequence[tuple[float, float]], size: float, colour: str) -> str:
    """Round dots as one path of zero-length strokes with round caps (compact for many points)."""
    d = "".join(f"M{_f(x)} {_f(y)}h0" for x, y in points)
    return f'<path d="{d}" stroke="{colour}" stroke-width="{_f(size)}" stroke-linecap="round" fill="none"/>'


def tvd_strip_svg(errors: Sequence[Mapping[str, Any]], *, width: int = 760, height: int = 340) -> str | None:
    """Each marginal's TVD (dot) and its threshold (dash), grouped by marginal size k.

    Marginals over their threshold are red diamonds; the orange bar is each group's mean.
    ``errors``: the gate's ``marginal_errors`` (``k``, ``tvd``, ``threshold``).
    """
    if not errors:
        return None
    ks = sorted({int(e["k"]) for e in errors})
    left, right, top, bottom = 56.0, width - 170.0, 30.0, height - 44.0
    tv_all = [float(e["tvd"]) for e in errors]
    th_all = [float(e["threshold"]) for e in errors if e.get("threshold") is not None]
    ticks = nice_ticks(max(tv_all + th_all + [0.0]))
    scale = (bottom - top) / ticks[-1]

    def y_of(v: float) -> float:
        return bottom - max(0.0, min(v, ticks[-1])) * scale

    slot = (right - left) / len(ks)
    parts = _frame(width, height, "Marginal error by marginal size")
    parts.append(f'<text x="8" y="18" font-size="13" fill="{_INK}">Marginal error by marginal size</text>')
    _y_axis(parts, ticks, y_of, left, right, "TVD: synthetic vs DP marginal", top, bottom)
    rng = np.random.default_rng(0)  # jitter only: reproducible pictures
    ok, over, dashes, links, means = [], [], [], [], []
    for i, k in enumerate(ks):
        group = [e for e in errors if int(e["k"]) == k]
        centre = left + (i + 0.5) * slot
        jitter = rng.uniform(-0.28, 0.28, size=len(group)) if len(group) > 1 else np.zeros(1)
        for e, j in zip(group, jitter):
            x, tv = centre + j * slot, float(e["tvd"])
            th = e.get("threshold")
            bad = th is not None and tv > float(th)
            (over if bad else ok).append((x, y_of(tv)))
            if th is not None:
                dashes.append(f"M{_f(x - 5)} {_f(y_of(float(th)))}h10")
                links.append(f"M{_f(x)} {_f(y_of(tv))}V{_f(y_of(float(th)))}")
        mean = float(np.mean([float(e["tvd"]) for e in group]))
        means.append(f"M{_f(centre - 0.34 * slot)} {_f(y_of(mean))}h{_f(0.68 * slot)}")
        parts.append(f'<text x="{_f(centre)}" y="{_f(bottom + 16)}" text-anchor="middle" fill="{_INK}">k = {k}</text>')
        parts.append(f'<text x="{_f(centre)}" y="{_f(bottom + 31)}" text-anchor="middle" fill="{_MUTED}">'
                     f"({len(group)} marginals)</text>")
    parts.append(f'<path d="{"".join(links)}" stroke="#c9d1d9" stroke-width="0.8" fill="none"/>')
    parts.append(f'<path d="{"".join(dashes)}" stroke="#59636e" stroke-width="1.5" fill="none"/>')
    parts.append(_dots(ok, 5, "#3b6ea5"))
    if over:
        d = "".join(f"M{_f(x)} {_f(y - 4.5)}l4.5 4.5l-4.5 4.5l-4.5 -4.5z" for x, y in over)
        parts.append(f'<path d="{d}" fill="#c62828"/>')
    parts.append(f'<path d="{"".join(means)}" stroke="#d9822b" stroke-width="2.5" fill="none"/>')
    parts.append(f'<line x1="{_f(left)}" x2="{_f(right)}" y1="{_f(bottom)}" y2="{_f(bottom)}" stroke="{_MUTED}"/>')
    lx = right + 16
    legend = [("TVD", _dots([(lx + 5, top + 6)], 5, "#3b6ea5")),
              ("its threshold", f'<path d="M{_f(lx)} {_f(top + 26)}h10" stroke="#59636e" stroke-width="1.5"/>'),
              ("mean TVD", f'<path d="M{_f(lx - 2)} {_f(top + 46)}h14" stroke="#d9822b" stroke-width="2.5"/>')]
    if over:
        legend.append(("TVD over its threshold",
                       f'<path d="M{_f(lx + 5)} {_f(top + 61.5)}l4.5 4.5l-4.5 4.5l-4.5 -4.5z" fill="#c62828"/>'))
    for row, (text, mark) in enumerate(legend):
        parts.append(mark)
        parts.append(f'<text x="{_f(lx + 18)}" y="{_f(top + 10 + 20 * row)}" fill="{_INK}">{_x(text)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def svg_data_uri(svg: str) -> str:
    """``data:image/svg+xml;base64,...`` for an ``<img src>`` (allowed by ``img-src data:``)."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")
