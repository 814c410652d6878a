"""The release report's plots (matplotlib, Agg, embedded as base64 PNG).

Kept apart from the HTML so that plotting can change (or be skipped) without touching
the page: :func:`plots_section` draws the marginal error by marginal size and each
column's synthetic distribution beside its DP marginal.
"""

from __future__ import annotations

import base64
import io
from typing import Any, Mapping, Sequence

import numpy as np

from ..encoding import EncodedTable
from ..measurement import Measurement
from ..schema import Column, Schema
from .html import esc as _e
from .html import num as _num
from .html import over as _over
from .html import short as _short

__all__ = ["plots_section"]

_MAX_BARS = 60
#: Columns with more codes than this get a plot across the whole page width.
_WIDE_CODES = 14
DP_COLOUR = "#8fb4d9"
SYNTH_COLOUR = "#d9822b"


def _png(fig) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _img(data: str, alt: str) -> str:
    return f'<img src="data:image/png;base64,{data}" alt="{_e(alt)}">'


def _distribution(counts: np.ndarray) -> np.ndarray:
    x = np.clip(np.nan_to_num(np.asarray(counts, dtype=np.float64).ravel(), nan=0.0), 0.0, None)
    total = x.sum()
    return x / total if total > 0 else np.zeros_like(x)


def _column_plot(col: Column, synth: np.ndarray, dp: np.ndarray | None) -> str:
    import matplotlib

    from matplotlib.figure import Figure

    labels = col.labels()
    wide = len(labels) > _WIDE_CODES
    slanted = len(labels) > 6 or max(map(len, labels)) > 8
    with matplotlib.rc_context({"text.parse_math": False, "font.size": 9}):
        fig = Figure(figsize=(11.0 if wide else 5.6, 3.0), layout="constrained")
        ax = fig.add_subplot()
        x = np.arange(len(labels))
        if dp is not None:
            ax.bar(x - 0.2, dp, width=0.4, color=DP_COLOUR)
            ax.bar(x + 0.2, synth, width=0.4, color=SYNTH_COLOUR)
        else:
            ax.bar(x, synth, width=0.6, color=SYNTH_COLOUR)
        if len(labels) <= _MAX_BARS:
            ax.set_xticks(
                x, [_short(lab) for lab in labels],
                rotation=40 if slanted else 0, ha="right" if slanted else "center",
                rotation_mode="anchor" if slanted else "default",
            )
        ax.set_ylabel("share of rows")
        ax.set_title(_short(col.name, 80), loc="left", fontweight="bold")
        ax.spines[["top", "right"]].set_visible(False)
        return _png(fig)


def _tvd_plot(errors: Sequence[Mapping[str, Any]]) -> str | None:
    if not errors:
        return None
    import matplotlib

    from matplotlib.figure import Figure

    ks = sorted({int(e["k"]) for e in errors})
    with matplotlib.rc_context({"text.parse_math": False, "font.size": 9}):
        fig = Figure(figsize=(7.5, 3.4), layout="constrained")
        ax = fig.add_subplot()
        rng = np.random.default_rng(0)  # jitter only: reproducible pictures
        for i, k in enumerate(ks):
            group = [e for e in errors if int(e["k"]) == k]
            tv = np.array([float(e["tvd"]) for e in group])
            th = np.array([float(e.get("threshold", np.nan)) for e in group])
            jitter = rng.uniform(-0.28, 0.28, size=tv.size) if tv.size > 1 else np.zeros(1)
            over = tv > th
            ax.scatter(i + jitter[~over], tv[~over], s=18, color="#3b6ea5", label="TVD" if i == 0 else None, zorder=3)
            if over.any():
                ax.scatter(i + jitter[over], tv[over], s=28, color="#c62828", marker="D",
                           label="TVD over its threshold", zorder=4)
            ax.vlines(i + jitter, tv, th, color="#c9d1d9", lw=0.8, zorder=1)
            ax.scatter(i + jitter, th, s=60, marker="_", color="#59636e", label="its threshold" if i == 0 else None, zorder=2)
            ax.hlines(tv.mean(), i - 0.34, i + 0.34, color="#d9822b", lw=2, label="mean TVD" if i == 0 else None)
        ax.set_xticks(range(len(ks)), [f"k = {k}\n({sum(int(e['k']) == k for e in errors)} marginals)" for k in ks])
        ax.set_xlim(-0.6, len(ks) - 0.4)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("TVD: synthetic vs DP marginal")
        ax.set_title("Marginal error by marginal size", loc="left")
        ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        ax.spines[["top", "right"]].set_visible(False)
        return _png(fig)


def plots_section(schema: Schema, codes: EncodedTable, m: Measurement, gate: Mapping[str, Any]) -> str:
    """The report's Plots section: error by marginal size, then one chart per column."""
    errors = list(gate.get("marginal_errors") or [])
    one_way_tvd = {e["marginal"]: float(e["tvd"]) for e in errors if int(e.get("k", 0)) == 1}
    out = ['<h2 id="plots">Plots</h2>']
    tvd_png = _tvd_plot(errors)
    if tvd_png is not None:
        out.append('<figure style="max-width:820px">' + _img(tvd_png, "TVD by marginal size"))
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
        counts = np.bincount(codes.codes[:, j].astype(np.int64), minlength=col.cardinality)[: col.cardinality]
        synth = _distribution(counts)
        dp_raw = m.marginals.get((col.name,))
        dp = _distribution(dp_raw) if dp_raw is not None and np.size(dp_raw) == col.cardinality else None
        png = _column_plot(col, synth, dp)
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
        figures.append(f"<figure{cls}>{_img(png, col.name)}<figcaption>{caption}</figcaption></figure>")
    out.append('<div class="grid">' + "".join(figures) + "</div>")
    return "".join(out)
