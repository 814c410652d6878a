"""HTML building blocks of the release report: the page's CSS, escaping, number
formatting and tables. Every text that reaches the page passes through :func:`esc`
(or a helper that calls it); numbers go through :func:`num`.
"""

from __future__ import annotations

import html
import math
from typing import Any, Iterable, Sequence

import numpy as np

__all__ = ["CSS", "esc", "num", "size", "kv_table", "table", "mark", "short", "over"]

_LABEL_CHARS = 18

CSS = """
:root { --ok: #1a7f37; --bad: #c62828; --ink: #1f2328; --muted: #59636e; --rule: #d1d9e0; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
       max-width: 1100px; margin: 0 auto; padding: 1.5rem; line-height: 1.45; }
h1 { font-size: 1.6rem; margin: 0 0 .3rem; overflow-wrap: anywhere; }
h2 { font-size: 1.25rem; margin: 2rem 0 .6rem; padding-bottom: .25rem; border-bottom: 1px solid var(--rule); }
h3 { font-size: 1.05rem; margin: 1.2rem 0 .4rem; }
p.note, .muted { color: var(--muted); font-size: .9rem; }
table { border-collapse: collapse; margin: .4rem 0 1rem; font-size: .92rem; }
th, td { text-align: left; padding: .3rem .7rem; border-bottom: 1px solid var(--rule); vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.kv th { width: 13rem; background: none; }
.badge { display: inline-block; padding: .15rem .6rem; border-radius: 1rem; font-weight: 600; color: #fff; }
.ok { color: var(--ok); font-weight: 600; } .bad { color: var(--bad); font-weight: 600; }
.badge.ok { background: var(--ok); color: #fff; } .badge.bad { background: var(--bad); color: #fff; }
section.privacy { border: 2px solid var(--ok); background: #f0faf2; border-radius: .5rem; padding: .2rem 1.2rem .6rem; }
section.privacy.notdp { border: 3px solid var(--bad); background: #fff0f0; }
section.privacy h2 { border: none; margin-top: .8rem; }
section.privacy.notdp h2 { color: var(--bad); font-size: 1.5rem; }
section.privacy p.lead { font-size: 1.08rem; }
section.score { border: 1px solid var(--rule); border-radius: .5rem; padding: .2rem 1.2rem .6rem; margin-top: 1.2rem; }
.big { font-size: 1.6rem; font-weight: 700; font-variant-numeric: tabular-nums; }
figure.wide { grid-column: 1 / -1; }
.key { font-size: .85rem; color: var(--muted); }
.swatch { display: inline-block; width: .9rem; height: .9rem; vertical-align: -.1rem; margin: 0 .3rem 0 .8rem; }
tr.failed td { background: #fff0f0; }
section.warning { border: 2px solid #c60; background: #fff6e8; padding: 0 1em; }
code { font-size: .88em; background: #f6f8fa; padding: .05rem .3rem; border-radius: .2rem; overflow-wrap: anywhere; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(500px, 1fr)); gap: 1rem; }
figure { margin: 0; padding: .5rem; border: 1px solid var(--rule); border-radius: .4rem; }
figure img { width: 100%; height: auto; display: block; }
figcaption { font-size: .85rem; color: var(--muted); margin-top: .3rem; overflow-wrap: anywhere; }
details summary { cursor: pointer; font-weight: 600; margin: .4rem 0; }
td > code, td > .ok, td > .bad { white-space: nowrap; overflow-wrap: normal; }
"""


def esc(x: Any) -> str:
    """HTML-escaped text of ``x`` (None: empty)."""
    return html.escape("" if x is None else str(x), quote=True)


def num(x: Any, digits: int = 4) -> str:
    """A number for the page: thousands separators for whole numbers, ``digits``
    significant digits otherwise, scientific notation when very large or small; None,
    NaN and infinities show as a dash."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, (int, np.integer)):
        return f"{int(x):,}"
    if isinstance(x, (float, np.floating)):
        v = float(x)
        if not math.isfinite(v):
            return "—"
        if v == 0:
            return "0"
        if v.is_integer() and abs(v) < 1e15:
            return f"{int(v):,}"
        if abs(v) >= 1e5 or abs(v) < 1e-3:
            mantissa, exp = f"{v:.{digits - 1}e}".split("e")
            if "." in mantissa:
                mantissa = mantissa.rstrip("0").rstrip(".")
            return f"{mantissa}e{int(exp)}"
        return f"{v:.{digits}g}"
    return esc(x)


def size(n_bytes: int) -> str:
    """A file size in words: bytes, KB or MB (powers of 1000)."""
    if n_bytes < 1000:
        return f"{n_bytes} bytes"
    if n_bytes < 1_000_000:
        return f"{n_bytes / 1000:.1f} KB"
    return f"{n_bytes / 1_000_000:.1f} MB"


def kv_table(rows: Iterable[tuple[str, str]]) -> str:
    """Two-column key/value table; keys are escaped, values are HTML already."""
    body = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def table(head: Sequence[str], rows: Iterable[Sequence[str]], row_class: Sequence[str] | None = None,
          numeric: Sequence[int] = ()) -> str:
    """Cells are HTML already (escape before passing); ``numeric`` columns align right."""
    h = "".join(f"<th>{esc(c)}</th>" for c in head)
    out = []
    for i, r in enumerate(rows):
        cls = f' class="{row_class[i]}"' if row_class and row_class[i] else ""
        cells = "".join(
            f'<td class="num">{c}</td>' if j in numeric else f"<td>{c}</td>" for j, c in enumerate(r)
        )
        out.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{h}</tr></thead><tbody>{''.join(out)}</tbody></table>"


def mark(success: Any) -> str:
    """A green tick "pass" or a red cross "fail"."""
    return '<span class="ok">&#10004; pass</span>' if success else '<span class="bad">&#10008; fail</span>'


def short(label: str, n: int = _LABEL_CHARS) -> str:
    """``label`` cut to ``n`` characters with an ellipsis."""
    return label if len(label) <= n else label[: n - 1] + "…"


def over(value: Any, limit: Any) -> bool:
    """``value > limit`` for numbers; False when either is missing or not a number."""
    try:
        return float(value) > float(limit)
    except (TypeError, ValueError):
        return False
