"""How good is the release? Accuracy against the DP measurement, from public data only.

:func:`utility` scores the synthetic table on every measured marginal of two or more
columns: its total variation distance (TVD) to the noisy DP marginal, beside the TVD
that the **independent-columns baseline** gets on the same marginal (the product of the
DP 1-way marginals, i.e. what a release that keeps each column's distribution and no
relationship between columns would publish with unlimited rows). Both are compared
with the same noisy target, so neither reads a raw row. The score is ``1 - mean TVD``
(1: matches the DP measurement exactly). :func:`accuracy_section` renders it, the
per-size table (mean and max TVD against the gate's thresholds for every marginal size
k present in ``Measurement.measured``) and the validation details.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..rows.encoding import EncodedTable
from ..gate.scan import CodeCounts
from ..measurement import Measurement, marginal_key
from .html import esc, kv_table, mark, num, over, table

__all__ = ["Utility", "accuracy_section", "measured_section", "measurement_words", "utility", "validation_section"]


def measurement_words(m: Measurement) -> str:
    """How the page names the measurement: a non-DP one is never called "DP"."""
    return "DP measurement" if m.statement.differentially_private else "measurement (NOT differentially private)"


def _distribution(counts: np.ndarray) -> np.ndarray:
    """Noisy counts as a distribution: NaN and negatives to 0, normalised (uniform if empty)."""
    q = np.clip(np.nan_to_num(np.asarray(counts, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0), 0.0, None)
    total = q.sum()
    return q / total if total > 0 else np.full(q.shape, 1.0 / max(1, q.size))


@dataclass(frozen=True, kw_only=True)
class Utility:
    """Mean TVD to the measured multi-column marginals, synthetic and baseline, per size k."""

    by_k: Mapping[int, tuple[int, float, float]] = field(default_factory=dict)  # k -> (count, synth, baseline)

    @property
    def marginals(self) -> int:
        """How many multi-column marginals the score averages over."""
        return sum(n for n, _, _ in self.by_k.values())

    def _mean(self, i: int) -> float | None:
        if not self.marginals:
            return None
        return sum(v[0] * v[i] for v in self.by_k.values()) / self.marginals

    @property
    def synthetic_tvd(self) -> float | None:
        """Mean TVD of the synthetic table to the measured marginals (None when none)."""
        return self._mean(1)

    @property
    def baseline_tvd(self) -> float | None:
        """Mean TVD of the product of measured 1-way marginals (None when none)."""
        return self._mean(2)

    @property
    def score(self) -> float | None:
        """1 - synthetic_tvd: the overall utility score shown in the report."""
        return None if self.synthetic_tvd is None else 1.0 - self.synthetic_tvd

    @property
    def baseline_score(self) -> float | None:
        """1 - baseline_tvd: the independent-columns score shown beside it."""
        return None if self.baseline_tvd is None else 1.0 - self.baseline_tvd


def _synthetic_tvds(codes: CodeCounts, m: Measurement, gate: Mapping[str, Any],
                    keys: list[tuple[str, ...]]) -> dict[tuple[str, ...], float]:
    """The gate's TVDs where it computed them; the rest computed here."""
    known = {str(e.get("marginal")): float(e["tvd"]) for e in gate.get("marginal_errors") or [] if "tvd" in e}
    out = {k: known[marginal_key(k)] for k in keys if marginal_key(k) in known}
    missing = [k for k in keys if k not in out]
    if missing and codes.n > 0:
        from ..evaluation.metrics import tvd_vs_counts

        out |= tvd_vs_counts(codes, {k: m.marginals[k] for k in missing}, groups=m.groups)
    return out


def utility(codes: "CodeCounts | EncodedTable", m: Measurement, gate: Mapping[str, Any]) -> Utility:
    """Scores on every measured marginal of k >= 2 columns whose columns all have a 1-way DP marginal
    (``codes``: the synthetic codes or their counts)."""
    codes = CodeCounts.of(codes, m)
    ones = {nm.attrs[0]: _distribution(nm.counts).ravel() for nm in m.measured if len(nm.attrs) == 1}
    keys = [nm.attrs for nm in m.measured if len(nm.attrs) >= 2 and all(a in ones for a in nm.attrs)]
    if not keys or codes.n == 0:
        return Utility()
    synth = _synthetic_tvds(codes, m, gate, keys)
    per_k: dict[int, list[tuple[float, float]]] = {}
    for key in keys:
        target = _distribution(m.marginals[key]).ravel()
        product = ones[key[0]]
        for a in key[1:]:
            product = np.multiply.outer(product, ones[a])
        product = m.marginal(key).fold(product).ravel()  # merged values: the same cells as the target
        if product.size != target.size:
            continue  # a marginal whose shape does not match its columns' codes: not scored
        base = 0.5 * float(np.abs(product - target).sum())
        per_k.setdefault(len(key), []).append((synth[key], base))
    return Utility(by_k={k: (len(v), float(np.mean([s for s, _ in v])), float(np.mean([b for _, b in v])))
                         for k, v in sorted(per_k.items())})


def _score_box(u: Utility, m: Measurement) -> str:
    if u.score is None:
        one_way = any(len(nm.attrs) == 1 for nm in m.measured)
        why = ("the method measured no marginal of two or more columns, so how well the relationships "
               "between columns survived cannot be scored from public information"
               if one_way or not m.measured else "no measured marginal could be scored")
        return (f'<section class="score" id="utility"><h2>Overall utility</h2><p>Not available: {why}. '
                "The per-column accuracy is below.</p></section>")
    ks = ", ".join(str(k) for k in u.by_k)
    words = measurement_words(m)
    noise = ", and the measurement itself carries DP noise" if m.statement.differentially_private else ""
    better = u.synthetic_tvd < u.baseline_tvd
    verdict = ('<span class="ok">better than independent columns</span>' if better
               else '<span class="bad">not better than independent columns</span>')
    rows = [[esc(k), num(n), num(s), num(b), num(1 - s), num(1 - b)] for k, (n, s, b) in u.by_k.items()]
    return (
        '<section class="score" id="utility"><h2>Overall utility</h2>'
        f'<p><span class="big">{num(u.score, 3)}</span> utility score &nbsp; vs &nbsp; '
        f'<span class="big">{num(u.baseline_score, 3)}</span> for the independent-columns baseline: {verdict}.</p>'
        f'<p class="note"><strong>Definition.</strong> Utility score = 1 &minus; the mean total variation distance '
        f"(TVD, the share of rows that would have to change) between the synthetic table and the {words}, "
        f"over the {num(u.marginals)} measured marginals of {ks} columns. The baseline is the same score for the "
        "product of the measured 1-way marginals, i.e. a table that keeps every column's distribution but no "
        "relationship between columns. Both are computed from the published measurement only, never from "
        f"the raw data; 1 means identical to the measurement{noise}.</p>"
        f'<p class="note"><strong>What it does not say.</strong> The score is measured against the {words} '
        f"of the marginals listed under <a href=\"#measured\">Measured marginals</a>, not against the real table: "
        "relationships between columns that the method did not measure are not scored, and a table fitted "
        "to its own measurement scores well on it by construction. The data owner can score the release "
        "against the real table with <code>--internal-report</code> (a private page in the workspace, never "
        "published).</p>"
        + table(["k", "marginals", "synthetic mean TVD", "baseline mean TVD", "score", "baseline score"],
                rows, numeric=(1, 2, 3, 4, 5))
        + "</section>"
    )


def _chosen_words(m: Measurement) -> str:
    """How the multi-column marginals came to be measured (from the method's public metadata)."""
    variant = str((m.params or {}).get("select", "")).upper()
    if m.meta.get("selected") is not None:
        how = f" by {variant}" if variant else ""
        return (f"chosen{how} from the candidates with part of the privacy budget (the choice itself is "
                "differentially private and charged on the ledger), then measured with noise")
    return "fixed by the method's parameters, then measured with noise"


def measured_section(m: Measurement) -> str:
    """Which marginals the method measured: the 1-way count and every multi-column marginal."""
    ones = [nm.attrs for nm in m.measured if len(nm.attrs) == 1]
    multi = [nm.attrs for nm in m.measured if len(nm.attrs) >= 2]
    selected = [tuple(a) for a in m.meta.get("selected") or []]
    order = {a: i for i, a in enumerate(selected)}
    multi.sort(key=lambda a: (order.get(a, len(order)), len(a), a))
    out = [f'<h2 id="measured">Measured marginals</h2><p>The {measurement_words(m)} holds '
           f"{num(len(ones))} marginal{'s' if len(ones) != 1 else ''} of one column and {num(len(multi))} of "
           f"two or more columns.</p>"]
    if not multi:
        out.append('<p class="note">No relationship between columns was measured: the synthetic table keeps '
                   "each column's distribution only.</p>")
        return "".join(out)
    out.append(f'<p class="note">The marginals of two or more columns were {_chosen_words(m)}. Everything the '
               "synthetic table knows about how columns relate comes from these tables (and what the method "
               "infers from them).</p>")
    items = [[num(i + 1), " &times; ".join(f"<code>{esc(a)}</code>" for a in attrs), num(len(attrs))]
             for i, attrs in enumerate(multi)]
    listing = table(["#", "columns", "k"], items, numeric=(0, 2))
    out.append(listing if len(multi) <= 40 else
               f"<details><summary>All {len(multi)} multi-column marginals</summary>{listing}</details>")
    return "".join(out)


def accuracy_section(codes: CodeCounts, m: Measurement, gate: Mapping[str, Any]) -> str:
    """The utility score and the accuracy for every measured marginal size k."""
    u = utility(codes, m, gate)
    stats = gate.get("statistics") or {}
    by_k = stats.get("marginal_tvd_by_k") or {}
    thresholds = gate.get("thresholds") or {}
    out = [_score_box(u, m)]
    if by_k:
        rows = []
        for k in sorted(by_k, key=lambda s: int(s)):
            v = by_k[k]
            mean_over = over(v.get("mean_tvd"), v.get("mean_threshold"))
            n_over = sum(
                1 for e in gate.get("marginal_errors") or []
                if str(e.get("k")) == str(k) and over(e.get("tvd"), e.get("threshold"))
            )
            base = u.by_k.get(int(k))
            rows.append([
                f"{esc(k)}-way", num(v.get("marginals")),
                f'<span class="bad">{num(v.get("mean_tvd"))}</span>' if mean_over else num(v.get("mean_tvd")),
                num(v.get("mean_threshold")), num(v.get("max_tvd")), num(thresholds.get(f"max_tvd_k{k}")),
                f'<span class="bad">{n_over}</span>' if n_over else "0",
                num(base[2]) if base else "—",
            ])
        out.append(f'<h2 id="accuracy">Marginal accuracy against the {measurement_words(m)}</h2>')
        out.append(
            '<p class="note">For each size k of the marginals the method measured: the TVD between the synthetic '
            "table's marginal and the measured marginal (negative counts clipped, normalised). Each marginal has "
            "its own threshold, from the error that sampling and the DP noise predict for an honest synthesizer: "
            "the larger of twice the predicted mean and the predicted mean plus six standard deviations; the "
            "largest is shown. A method is fitted to what it measured, so a low 1-way TVD is expected; the 2- and "
            "3-way rows show how much of the relationships between columns survived.</p>"
        )
        out.append(table(["marginal size", "marginals", "mean TVD", "mean threshold", "max TVD",
                          "largest threshold", "over their threshold", "baseline mean TVD"],
                         rows, numeric=(1, 2, 3, 4, 5, 6, 7)))
    return "".join(out)


def _observed(obs: Mapping[str, Any], dtype: Any = None) -> str:
    """Compact text of an expectation's observed counts and fractions."""
    parts = [] if dtype is None else [f"dtype&nbsp;<code>{esc(dtype)}</code>"]
    rest = dict(obs)
    if "element_count" in rest and "unexpected_count" in rest:
        n, bad = rest.pop("element_count"), rest.pop("unexpected_count")
        frac = rest.pop("unexpected_fraction", None)
        text = f"unexpected {num(bad)} of {num(n)}"
        if bad and frac is not None:
            text += f" ({num(100 * float(frac), 3)}%)"
        parts.append(text)
        missing, mfrac = rest.pop("missing_count", None), rest.pop("missing_fraction", None)
        if missing:
            parts.append(f"missing {num(missing)}" + ("" if mfrac is None else f" ({num(100 * float(mfrac), 3)}%)"))
    for k, v in rest.items():
        parts.append(f"{esc(k)}&nbsp;{num(v)}")
    return ", ".join(parts) or "—"


def validation_section(gate: Mapping[str, Any]) -> str:
    """The gate's verdict, its row statistics, thresholds and every expectation."""
    success = bool(gate.get("success"))
    stats = gate.get("statistics") or {}
    out = ['<h2 id="validation">Validation</h2>']
    badge = '<span class="badge ok">passed</span>' if success else '<span class="badge bad">failed: not publishable</span>'
    counts = (
        f"{num(stats.get('successful'))} of {num(stats.get('evaluated'))} expectations met"
        if "evaluated" in stats else ""
    )
    out.append(f"<p>{badge} &nbsp; {counts}</p>")
    failed = gate.get("failed") or [
        (f"{e['column']}: " if e.get("column") else "") + str(e.get("name"))
        for e in gate.get("expectations", []) if not e.get("success")
    ]
    if failed:
        out.append("<p>Failed: " + ", ".join(f"<code>{esc(f)}</code>" for f in failed) + "</p>")
    items = []
    for key, label in (("rows", "Rows"), ("rows_expected", "Rows expected"),
                       ("rows_dp_estimate", "DP row estimate"), ("marginals", "DP marginals checked"),
                       ("noise_scale_source", "Noise scale from")):
        if key in stats and stats[key] is not None:
            items.append((label, num(stats[key])))
    if items:
        out.append(kv_table(items))
    thresholds = gate.get("thresholds") or {}
    if thresholds:
        shown = [(k, v) for k, v in thresholds.items() if k != "overridden"]
        overridden = set(thresholds.get("overridden") or [])
        out.append("<details><summary>Thresholds</summary>")
        out.append(table(["threshold", "value", "source"],
                         [[f"<code>{esc(k)}</code>", num(v), "override" if k in overridden else "default"]
                          for k, v in shown], numeric=(1,)))
        out.append("</details>")
    entries = sorted(gate.get("expectations") or [], key=lambda e: bool(e.get("success")))  # failures first
    if entries:
        rows = [[mark(e.get("success")), f"<code>{esc(e.get('name'))}</code>", esc(e.get("column", "")),
                 esc(e.get("expectation", "")), _observed(e.get("observed") or {}, e.get("dtype"))]
                for e in entries]
        classes = ["" if e.get("success") else "failed" for e in entries]
        out.append(f"<details{' open' if failed else ''}><summary>All {len(entries)} expectations</summary>")
        out.append(table(["result", "check", "column", "GE expectation", "observed"], rows, classes))
        out.append("</details>")
    return "".join(out)
