"""The release report's plots (SVG from :mod:`dpsynth.report.svg`, embedded as base64 data URIs).

Kept apart from the HTML so that plotting can change (or be skipped) without touching
the page: :func:`plots_section` draws the marginal error by marginal size and each
column's synthetic distribution beside its DP marginal.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..gate.scan import CodeCounts
from ..measurement import Measurement
from .svg import bar_chart_svg, svg_data_uri, tvd_strip_svg
from ..schema import Column, Schema
from .html import esc as _e
from .html import num as _num
from .html import over as _over
from .html import short as _short

__all__ = ["bar_labels", "plots_section"]

_MAX_BARS = 60
#: Columns with more codes than this get a plot across the whole page width.
_WIDE_CODES = 14
DP_COLOUR = "#8fb4d9"
SYNTH_COLOUR = "#d9822b"


def _img(svg: str, alt: str) -> str:
    return f'<img src="{svg_data_uri(svg)}" alt="{_e(alt)}">'


def _distribution(counts: np.ndarray) -> np.ndarray:
    x = np.clip(np.nan_to_num(np.asarray(counts, dtype=np.float64).ravel(), nan=0.0), 0.0, None)
    total = x.sum()
    return x / total if total > 0 else np.zeros_like(x)


def bar_labels(col: Column) -> list[str]:
    """Each code's label in full (never cut), the missing-value code named as such."""
    labels = list(col.labels())
    if col.nullable:
        token = col.missing[0]
        labels[-1] = f"(missing: {token})" if token.strip() else "(missing)"
    return labels


def _column_plot(col: Column, synth: np.ndarray, dp: np.ndarray | None) -> str:
    """One column's synthetic distribution beside its DP marginal, as SVG (:mod:`dpsynth.report.svg`)."""
    labels = bar_labels(col)
    series = [(dp, DP_COLOUR), (synth, SYNTH_COLOUR)] if dp is not None else [(synth, SYNTH_COLOUR)]
    return bar_chart_svg(_short(col.name, 80), labels, series, show_labels=len(labels) <= _MAX_BARS,
                         width=1100 if len(labels) > _WIDE_CODES else 560)


def _tvd_plot(errors: Sequence[Mapping[str, Any]]) -> str | None:
    return tvd_strip_svg(errors)


def plots_section(schema: Schema, codes: CodeCounts, m: Measurement, gate: Mapping[str, Any]) -> str:
    """The report's Plots section: error by marginal size, then one chart per column."""
    errors = list(gate.get("marginal_errors") or [])
    one_way_tvd = {e["marginal"]: float(e["tvd"]) for e in errors if int(e.get("k", 0)) == 1}
    out = ['<h2 id="plots">Plots</h2>']
    tvd_svg = _tvd_plot(errors)
    if tvd_svg is not None:
        out.append('<figure style="max-width:820px">' + _img(tvd_svg, "TVD by marginal size"))
        out.append("<figcaption>Each dot is one DP marginal; dashes are their thresholds, the orange bar "
                   "the mean.</figcaption></figure>")
    out.append("<h3>Columns: synthetic distribution vs DP marginal</h3>")
    out.append(
        '<p class="note">Share of rows per code. The DP marginal is the noisy 1-way histogram of the '
        "measurement with negative counts set to 0, normalised.</p>"
        f'<p class="key"><span class="swatch" style="background:{DP_COLOUR}"></span>DP marginal'
        f'<span class="swatch" style="background:{SYNTH_COLOUR}"></span>synthetic</p>'
    )
    limits = {e["marginal"]: e.get("threshold") for e in errors if int(e.get("k", 0)) == 1}
    figures = []
    for j, col in enumerate(schema.columns):
        counts = np.asarray(codes.one_way(j))[: col.cardinality]
        synth = _distribution(counts)
        dp_raw = m.marginals.get((col.name,))
        dp = _distribution(dp_raw) if dp_raw is not None and np.size(dp_raw) == col.cardinality else None
        svg = _column_plot(col, synth, dp)
        caption = f"{_e(col.name)}: {col.cardinality} codes"
        if col.name in one_way_tvd:
            tvd_text = f"TVD {_num(one_way_tvd[col.name])}"
            if _over(one_way_tvd[col.name], limits.get(col.name)):
                tvd_text = f'<span class="bad">{tvd_text}, over its threshold</span>'
            caption += f"; {tvd_text}"
            if limits.get(col.name) is not None:
                caption += f" (threshold {_num(limits[col.name])})"
        if dp is None:
            caption += "; no 1-way DP marginal in the measurement: synthetic only"
        if col.cardinality > _MAX_BARS:
            caption += "; too many codes to label"
        cls = ' class="wide"' if col.cardinality > _WIDE_CODES else ""
        figures.append(f"<figure{cls}>{_img(svg, col.name)}<figcaption>{caption}</figcaption></figure>")
    out.append('<div class="grid">' + "".join(figures) + "</div>")
    return "".join(out)
