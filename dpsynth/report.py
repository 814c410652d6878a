"""A release's HTML report: one self-contained page that opens offline.

:func:`build_report` renders the release summary (name, method, parameters, rows,
privacy budget), the privacy ledger, the validation gate's summary and matplotlib
plots (Agg, embedded as base64 PNG): each column's synthetic distribution beside its
DP marginal, and the marginal error (TVD) by marginal size against the gate's
thresholds.

Everything shown is public: the schema, the DP measurement, the synthetic codes, the
manifest and the gate summary (counts and fractions). No raw row is read. The page
loads nothing from anywhere (no remote CSS, script, font or image; a
Content-Security-Policy forbids it) and every piece of text is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .encoding import EncodedTable
from .methods.base import Measurement
from .privacy.budget import Charge, total_epsilon
from .schema import Column, Schema

__all__ = ["build_report"]

_LABEL_CHARS = 18
_MAX_BARS = 60
#: Columns with more codes than this get a plot across the whole page width.
_WIDE_CODES = 14
_DP_COLOUR = "#8fb4d9"
_SYNTH_COLOUR = "#d9822b"

_CSS = """
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


# --- small formatting helpers ------------------------------------------------------


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def release_label(privacy: Mapping[str, Any]) -> str:
    """The page header's words: a release that is not DP says so first."""
    if privacy.get("differentially_private", True):
        return "Differentially private synthetic data release"
    return "NOT differentially private synthetic data release"


#: The privacy fields a report states in machine-readable form (``dpsynth verify`` compares them).
PRIVACY_META = ("epsilon", "delta", "rho", "rho_spent", "epsilon_spent", "neighbours", "differentially_private",
                "guarantee", "statement")


def privacy_meta_tags(privacy: Mapping[str, Any]) -> list[str]:
    return [
        f'<meta name="dpsynth:{k}" content="{_e(json.dumps(privacy.get(k)))}">' for k in PRIVACY_META
    ]


def _num(x: Any, digits: int = 4) -> str:
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
            return f"{v:.{digits - 1}e}"
        return f"{v:.{digits}g}"
    return _e(x)


def _kv_table(rows: Iterable[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], row_class: Sequence[str] | None = None,
           numeric: Sequence[int] = ()) -> str:
    """Cells are HTML already (escape before passing); ``numeric`` columns align right."""
    h = "".join(f"<th>{_e(c)}</th>" for c in head)
    out = []
    for i, r in enumerate(rows):
        cls = f' class="{row_class[i]}"' if row_class and row_class[i] else ""
        cells = "".join(
            f'<td class="num">{c}</td>' if j in numeric else f"<td>{c}</td>" for j, c in enumerate(r)
        )
        out.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{h}</tr></thead><tbody>{''.join(out)}</tbody></table>"


def _mark(success: Any) -> str:
    return '<span class="ok">&#10004; pass</span>' if success else '<span class="bad">&#10008; fail</span>'


def _short(label: str, n: int = _LABEL_CHARS) -> str:
    return label if len(label) <= n else label[: n - 1] + "…"


# --- plots -------------------------------------------------------------------------


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
            ax.bar(x - 0.2, dp, width=0.4, color=_DP_COLOUR)
            ax.bar(x + 0.2, synth, width=0.4, color=_SYNTH_COLOUR)
        else:
            ax.bar(x, synth, width=0.6, color=_SYNTH_COLOUR)
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


# --- sections ------------------------------------------------------------------------


def _summary_section(manifest: Mapping[str, Any], schema: Schema, codes: EncodedTable, m: Measurement) -> str:
    privacy = manifest.get("privacy") or {}
    params = manifest.get("parameters", m.params) or {}
    params_html = (
        ", ".join(f"<code>{_e(k)}={_e(v)}</code>" for k, v in sorted(params.items())) if params else "none"
    )
    rows = manifest.get("rows", codes.n)
    rows_req = manifest.get("rows_requested")
    items = [
        ("Release", _e(manifest.get("name", "—"))),
        ("Method", f"<code>{_e(manifest.get('method', m.method))}</code>"),
        ("Parameters", params_html),
        ("Schema", f"{_e(manifest.get('schema', schema.name))} ({len(schema.columns)} columns)"),
        ("Synthetic rows", _num(rows) + ("" if rows_req is None else f" (requested {_num(rows_req)})")),
        ("Privacy budget", f"&epsilon; = {_num(privacy.get('epsilon'))}, &delta; = {_num(privacy.get('delta'))}, "
                           f"&rho; = {_num(privacy.get('rho'))} (zCDP)"),
        ("Spent", _spent(privacy, m)),
    ]
    if privacy.get("accounting"):
        items.append(("Accounting", _e(privacy["accounting"])))
    if privacy.get("neighbours"):
        items.append(("Neighbouring tables", _e(privacy["neighbours"])))
    if privacy.get("headline") or privacy.get("statement"):
        items.append(("Guarantee", _e(" ".join(x for x in (privacy.get("headline"), privacy.get("statement")) if x))))
    for note in privacy.get("notes", []):
        items.append(("Note", _e(note)))
    if privacy.get("dataset"):
        items.append(("Lifetime budget", _lifetime_line(privacy["dataset"])))
    if manifest.get("seed_commitment"):
        items.append(("Seed commitment", f"<code>{_e(manifest['seed_commitment'])}</code>"))
    return "<h2>Release</h2>" + _kv_table(items)


def _spent(privacy: Mapping[str, Any], m: Measurement) -> str:
    """Spent budget: total epsilon (pure parts plus the converted zCDP part) and its rho part."""
    eps = privacy.get("epsilon_spent")
    if eps is None and privacy.get("delta") is not None:
        eps = m.total_epsilon(float(privacy["delta"]))
    pure = sum(c.epsilon for c in m.charges)
    text = f"&epsilon; = {_num(eps)} (zCDP part &rho; = {_num(privacy.get('rho_spent', m.rho))}"
    return text + (f", pure &epsilon; part {_num(pure)})" if pure else ")")


def _lifetime_line(ds: Mapping[str, Any]) -> str:
    """The dataset's cumulative spend over all its releases (from the registry, via the manifest)."""
    spent = (f"&epsilon; = {_num(ds.get('spent_epsilon_including_this'))} spent by "
             f"{_num(ds.get('releases_including_this'))} release(s) of dataset <code>{_e(ds.get('name'))}</code>")
    if ds.get("cap_epsilon") is None:
        return spent + ", <strong>no lifetime cap declared</strong>"
    return spent + f", cap &epsilon; = {_num(ds['cap_epsilon'])} (&delta; = {_num(ds.get('cap_delta'))})"


def _ledger_section(manifest: Mapping[str, Any], m: Measurement) -> str:
    """The ledger: each stage's zCDP (rho) and pure-epsilon cost, and the (epsilon, delta) total.

    The total is :func:`~dpsynth.privacy.budget.total_epsilon` of the stages (pure parts
    add, the zCDP part converts), the same function the ledger and the manifest use.
    """
    privacy = manifest.get("privacy") or {}
    stages = privacy.get("ledger")
    charges = [Charge.from_dict(s) for s in stages] if stages else list(m.charges)
    rho_total = sum(c.rho for c in charges)
    eps_total = sum(c.epsilon for c in charges)

    def share(part: float, whole: float) -> str:
        return f"{100 * part / whole:.1f}%" if whole > 0 and part > 0 else "—"

    rows = [
        [f"<code>{_e(c.stage)}</code>", _e(c.mechanism), _num(c.rho), _num(c.epsilon),
         share(c.rho, rho_total) if c.rho else share(c.epsilon, eps_total)]
        for c in charges
    ]
    rows.append(["<strong>total</strong>", "", f"<strong>{_num(rho_total)}</strong>",
                 f"<strong>{_num(eps_total)}</strong>", ""])
    delta = privacy.get("delta")
    total = ""
    if delta is not None:
        eps = total_epsilon(charges, float(delta))
        total = (f'<p>Total: &epsilon; = <strong>{_num(eps)}</strong> at &delta; = {_num(delta)} '
                 "(pure &epsilon; parts added, the &rho; part converted).</p>")
    note = (
        '<p class="note">Each stage\'s cost: zCDP stages in &rho; (they add up, and their sum converts to '
        "(&epsilon;, &delta;)), pure-DP stages in &epsilon; (added by basic composition). Share = the "
        "stage's part of the total of its kind.</p>"
    )
    head = ["stage", "mechanism", "rho", "pure epsilon", "share"]
    return "<h2>Privacy ledger</h2>" + note + _table(head, rows, numeric=(2, 3, 4)) + total


def _over(value: Any, limit: Any) -> bool:
    try:
        return float(value) > float(limit)
    except (TypeError, ValueError):
        return False


def _observed(obs: Mapping[str, Any], dtype: Any = None) -> str:
    """Compact text of an expectation's observed counts and fractions."""
    parts = [] if dtype is None else [f"dtype&nbsp;<code>{_e(dtype)}</code>"]
    rest = dict(obs)
    if "element_count" in rest and "unexpected_count" in rest:
        n, bad = rest.pop("element_count"), rest.pop("unexpected_count")
        frac = rest.pop("unexpected_fraction", None)
        text = f"unexpected {_num(bad)} of {_num(n)}"
        if bad and frac is not None:
            text += f" ({_num(100 * float(frac), 3)}%)"
        parts.append(text)
        missing, mfrac = rest.pop("missing_count", None), rest.pop("missing_fraction", None)
        if missing:
            parts.append(f"missing {_num(missing)}" + ("" if mfrac is None else f" ({_num(100 * float(mfrac), 3)}%)"))
    for k, v in rest.items():
        parts.append(f"{_e(k)}&nbsp;{_num(v)}")
    return ", ".join(parts) or "—"


def _validation_section(gate: Mapping[str, Any]) -> str:
    success = bool(gate.get("success"))
    stats = gate.get("statistics") or {}
    out = ["<h2>Validation</h2>"]
    badge = '<span class="badge ok">passed</span>' if success else '<span class="badge bad">failed: not publishable</span>'
    counts = (
        f"{_num(stats.get('successful'))} of {_num(stats.get('evaluated'))} expectations met"
        if "evaluated" in stats else ""
    )
    out.append(f"<p>{badge} &nbsp; {counts}</p>")
    failed = gate.get("failed") or [
        (f"{e['column']}: " if e.get("column") else "") + str(e.get("name"))
        for e in gate.get("expectations", []) if not e.get("success")
    ]
    if failed:
        out.append("<p>Failed: " + ", ".join(f"<code>{_e(f)}</code>" for f in failed) + "</p>")
    items = []
    for key, label in (("rows", "Rows"), ("rows_expected", "Rows expected"),
                       ("rows_dp_estimate", "DP row estimate"), ("marginals", "DP marginals checked"),
                       ("noise_scale_source", "Noise scale from")):
        if key in stats and stats[key] is not None:
            items.append((label, _num(stats[key])))
    if items:
        out.append(_kv_table(items))

    by_k = stats.get("marginal_tvd_by_k") or {}
    thresholds = gate.get("thresholds") or {}
    if by_k:
        rows = []
        for k in sorted(by_k, key=lambda s: int(s)):
            v = by_k[k]
            mean_over = _over(v.get("mean_tvd"), v.get("mean_threshold"))
            n_over = sum(
                1 for e in gate.get("marginal_errors") or []
                if str(e.get("k")) == str(k) and _over(e.get("tvd"), e.get("threshold"))
            )
            rows.append([
                _e(k), _num(v.get("marginals")),
                f'<span class="bad">{_num(v.get("mean_tvd"))}</span>' if mean_over else _num(v.get("mean_tvd")),
                _num(v.get("mean_threshold")), _num(v.get("max_tvd")), _num(thresholds.get(f"max_tvd_k{k}")),
                f'<span class="bad">{n_over}</span>' if n_over else "0",
            ])
        out.append("<h3>Marginal accuracy against the DP measurement</h3>")
        out.append(
            '<p class="note">TVD between each marginal of the synthetic table and the noisy DP marginal '
            "(negative counts clipped, normalised). Each marginal has its own threshold, from the error "
            "that sampling and the DP noise predict for an honest synthesizer: the larger of twice the "
            "predicted mean and the predicted mean plus six standard deviations. The largest is shown.</p>"
        )
        out.append(_table(["k", "marginals", "mean TVD", "mean threshold", "max TVD", "largest threshold",
                           "over their threshold"], rows, numeric=(1, 2, 3, 4, 5, 6)))
    if thresholds:
        shown = [(k, v) for k, v in thresholds.items() if k != "overridden"]
        over = set(thresholds.get("overridden") or [])
        out.append("<details><summary>Thresholds</summary>")
        out.append(_table(["threshold", "value", "source"],
                          [[f"<code>{_e(k)}</code>", _num(v), "override" if k in over else "default"]
                           for k, v in shown], numeric=(1,)))
        out.append("</details>")

    entries = list(gate.get("expectations") or [])
    if entries:
        entries.sort(key=lambda e: bool(e.get("success")))  # failures first, order kept otherwise
        rows, classes = [], []
        for e in entries:
            rows.append([
                _mark(e.get("success")),
                f"<code>{_e(e.get('name'))}</code>",
                _e(e.get("column", "")),
                _e(e.get("expectation", "")),
                _observed(e.get("observed") or {}, e.get("dtype")),
            ])
            classes.append("" if e.get("success") else "failed")
        out.append(f"<details{' open' if failed else ''}><summary>All {len(entries)} expectations</summary>")
        out.append(_table(["result", "check", "column", "GE expectation", "observed"], rows, classes))
        out.append("</details>")
    return "".join(out)


def _plots_section(schema: Schema, codes: EncodedTable, m: Measurement, gate: Mapping[str, Any]) -> str:
    errors = list(gate.get("marginal_errors") or [])
    one_way_tvd = {e["marginal"]: float(e["tvd"]) for e in errors if int(e.get("k", 0)) == 1}
    out = ["<h2>Plots</h2>"]
    tvd_png = _tvd_plot(errors)
    if tvd_png is not None:
        out.append('<figure style="max-width:820px">' + _img(tvd_png, "TVD by marginal size"))
        out.append("<figcaption>Each dot is one DP marginal; dashes are their thresholds, the orange bar "
                   "the mean.</figcaption></figure>")
    out.append("<h3>Columns: synthetic distribution vs DP marginal</h3>")
    out.append(
        '<p class="note">Share of rows per code. The DP marginal is the noisy 1-way histogram of the '
        "measurement with negative counts set to 0, normalised.</p>"
        f'<p class="key"><span class="swatch" style="background:{_DP_COLOUR}"></span>DP marginal'
        f'<span class="swatch" style="background:{_SYNTH_COLOUR}"></span>synthetic</p>'
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


def _guidance_section(m: Measurement, schema: Schema) -> str:
    """A warning box when the small-sample guard predicts a loss to independent columns."""
    from .guidance import assess

    advice = assess(m, schema)
    if advice is None or not advice.below_baseline:
        return ""
    return f'<section class="warning"><h2>Utility warning</h2><p>{_e(advice.message)}</p></section>'


def build_report(
    manifest: Mapping[str, Any],
    schema: Schema,
    codes: EncodedTable,
    measurement: Measurement,
    gate: Mapping[str, Any],
) -> str:
    """The release report as one self-contained HTML page (a string).

    ``manifest``: the release manifest (or the part known so far: missing keys show as
    "—"); ``codes``: the synthetic codes; ``gate``: the summary of
    :func:`dpsynth.gate.run_gate`.
    """
    title = f"dpsynth release report: {manifest.get('name', schema.name)}"
    status = "passed" if gate.get("success") else "failed"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src data:; style-src 'unsafe-inline'\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        *privacy_meta_tags(manifest.get("privacy", {})),
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<header><h1>{_e(title)}</h1>",
        f'<p class="muted">{_e(release_label(manifest.get("privacy", {})))} &middot; validation {status} '
        "&middot; everything on this page is computed from the DP measurement, the synthetic table "
        "and the public schema.</p></header>",
        _guidance_section(measurement, schema),
        _summary_section(manifest, schema, codes, measurement),
        _ledger_section(manifest, measurement),
        _validation_section(gate),
        _plots_section(schema, codes, measurement, gate),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
