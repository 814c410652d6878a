"""The data owner's private page: the release's accuracy against the real table.

Unlike the published report (:mod:`dpsynth.report`, computed from the DP measurement
only), this page reads the encoded real table, so it is NOT differentially private: it
is written to the private workspace only, never published, and says so at the top. It
scores every 2-way marginal and a fixed sample of 3-way marginals (all of them when
there are at most ``max_triples``): the total variation distance (TVD) between the real
and the synthetic table's cross-tabulation, beside the TVD that independent columns
(the product of the real 1-way marginals) would get, and whether the method measured
that marginal.

The counts come chunk by chunk (:func:`stream_marginals`): the real codes and the
synthetic table are read partition by partition on a row runner, and only count tables
(grouped so that at most ``cell_budget`` cells are held at once) and the TVDs are kept, so
memory is flat in the number of rows; the numbers are those of the whole tables.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from ..evaluation.metrics import DEFAULT_MAX_CELLS, plan_blocks, tvd
from ..gate.scan import CodeCounts
from ..rows.counting import Subset
from ..rows.encoding import EncodedTable
from ..rows.rowsource import Part, RowSource, count_marginals
from .html import CSS, esc, num, table

__all__ = ["MarginalScore", "complete_records", "internal_page", "internal_subsets", "score_marginals",
           "stream_marginals"]

MAX_TRIPLES = 200

#: Count cells held at once per table while the internal report counts (int64: 32 MB).
CELL_BUDGET = 1 << 22


@dataclass(frozen=True)
class MarginalScore:
    """One marginal's accuracy against the real table."""

    columns: tuple[str, ...]
    tvd: float  # synthetic vs real
    independent_tvd: float  # product of the real 1-way marginals vs real
    measured: bool


def _shares(codes: EncodedTable | CodeCounts, cols: Sequence[int]) -> np.ndarray:
    """The marginal of sorted columns ``cols`` as shares (flat, C order)."""
    if isinstance(codes, CodeCounts):
        counts = np.asarray(codes.counts[tuple(cols)]).astype(np.float64).ravel()
    else:
        shape = tuple(int(codes.schema.cardinalities[c]) for c in cols)
        flat = np.ravel_multi_index(tuple(codes.codes[:, c].astype(np.int64) for c in cols), shape)
        counts = np.bincount(flat, minlength=int(np.prod(shape))).astype(np.float64)
    total = counts.sum()
    return counts / total if total > 0 else counts


def score_marginals(real: EncodedTable | CodeCounts, synth: EncodedTable | CodeCounts,
                    subsets: Iterable[tuple[int, ...]], measured: set[tuple[str, ...]]) -> list[MarginalScore]:
    """TVD of each subset's marginal (synthetic and independent columns) against the real
    table; each table whole, or its counts (every 1-way marginal and every subset scored)."""
    names = real.schema.names
    ones = {j: _shares(real, (j,)) for j in range(len(names))}
    out = []
    for cols in subsets:
        truth = _shares(real, cols)
        product = ones[cols[0]]
        for c in cols[1:]:
            product = np.multiply.outer(product, ones[c]).ravel()
        key = tuple(names[c] for c in cols)
        out.append(MarginalScore(
            columns=key,
            tvd=0.5 * float(np.abs(_shares(synth, cols) - truth).sum()),
            independent_tvd=0.5 * float(np.abs(product - truth).sum()),
            measured=frozenset(key) in {frozenset(m) for m in measured},
        ))
    return out


def internal_subsets(d: int, max_triples: int = MAX_TRIPLES) -> tuple[list[Subset], list[Subset], int]:
    """Every pair; the triples, sampled with a fixed seed when there are more than ``max_triples``."""
    pairs = list(itertools.combinations(range(d), 2))
    triples = list(itertools.combinations(range(d), 3))
    total = len(triples)
    if total > max_triples:
        pick = np.random.default_rng(0).choice(total, size=max_triples, replace=False)
        triples = [triples[i] for i in sorted(pick)]
    return pairs, triples, total


def _summary_rows(scores: dict[int, list[MarginalScore]], totals: dict[int, int]) -> list[list[str]]:
    rows = []
    for k, group in scores.items():
        if not group:
            continue
        tv = np.array([s.tvd for s in group])
        ind = np.array([s.independent_tvd for s in group])
        better = int(np.sum(tv < ind))
        shown = f"{num(len(group))}" + ("" if len(group) == totals[k] else f" (a sample of {num(totals[k])})")
        rows.append([f"{k}-way", shown, num(float(tv.mean())), num(float(tv.max())), num(float(ind.mean())),
                     f"{num(1000 * (1 - float(tv.mean())), 4)}", f"{better} of {len(group)}"])
    return rows


def _detail(group: list[MarginalScore], k: int) -> str:
    worst = sorted(group, key=lambda s: -s.tvd)
    rows = [[" &times; ".join(f"<code>{esc(c)}</code>" for c in s.columns), num(s.tvd), num(s.independent_tvd),
             '<span class="bad">worse</span>' if s.tvd >= s.independent_tvd else "better",
             "yes" if s.measured else "no"] for s in worst]
    head = ["columns", "TVD synthetic vs real", "TVD independent columns vs real", "vs independent",
            "measured by the method"]
    return (f"<details{' open' if k == 2 else ''}><summary>Every {k}-way marginal scored, worst first "
            f"({len(group)})</summary>" + table(head, rows, numeric=(1, 2)) + "</details>")


def internal_page(release: str, label: str, real: EncodedTable | CodeCounts, synth: EncodedTable | CodeCounts,
                  measured: set[tuple[str, ...]], max_triples: int = MAX_TRIPLES) -> tuple[str, dict]:
    """The private HTML page and its summary (JSON-ready): every 2-way marginal and up to
    ``max_triples`` 3-way marginals scored against the real table (tables whole, or their
    counts from :func:`stream_marginals` over :func:`internal_subsets` and the 1-way ones)."""
    d = len(real.schema.columns)
    pairs, triples, total3 = internal_subsets(d, max_triples)
    scores = {2: score_marginals(real, synth, pairs, measured), 3: score_marginals(real, synth, triples, measured)}
    totals = {2: len(pairs), 3: total3}
    summary = {str(k): {"marginals": len(g), "of": totals[k], "mean_tvd": float(np.mean([s.tvd for s in g])),
                        "max_tvd": float(np.max([s.tvd for s in g])),
                        "independent_mean_tvd": float(np.mean([s.independent_tvd for s in g]))}
               for k, g in scores.items() if g}
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">',
        f"<title>INTERNAL accuracy report: {esc(release)}</title><style>{CSS}</style></head><body>",
        f"<header><h1>Accuracy against the real table: {esc(release)}</h1></header>",
        f'<section class="privacy notdp"><h2>{esc(label)}</h2><p class="lead">This page was computed from the '
        "raw data. Keep it in the private workspace: do not publish it, attach it to the release or send it "
        "to anyone who may not see the raw data. The published report scores the release against the DP "
        "measurement instead.</p></section>",
        '<h2>Summary</h2><p class="note">TVD: total variation distance between the real and the synthetic '
        "table's cross-tabulation of the columns (0 identical, 1 disjoint). Independent columns: the product "
        "of the real 1-way marginals, i.e. what a release that keeps no relationship between columns would "
        "get with unlimited rows. Score: 1000 &times; (1 &minus; mean TVD). The 3-way marginals are a fixed "
        f"sample when there are more than {num(max_triples)}.</p>",
        table(["marginals", "scored", "mean TVD", "max TVD", "independent columns mean TVD", "score",
               "better than independent"], _summary_rows(scores, totals), numeric=(1, 2, 3, 4, 5)),
        *(_detail(g, k) for k, g in scores.items() if g),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n", summary


# --- counting in chunks -------------------------------------------------------------------


def _groups(subsets: Sequence[Subset], cards: Sequence[int], budget: int) -> list[list[Subset]]:
    """``subsets`` in order, cut into runs of at most ``budget`` cells (a larger one alone)."""
    groups: list[list[Subset]] = []
    held = budget + 1
    for s in subsets:
        cells = math.prod(int(cards[j]) for j in s)
        if held + cells > budget:
            groups.append([])
            held = 0
        groups[-1].append(s)
        held += cells
    return groups


def stream_marginals(real: RowSource, synth: RowSource, subsets: Sequence[Subset], keep: Iterable[Subset], *,
                     cell_budget: int | None = None) -> tuple[dict[Subset, float], CodeCounts, CodeCounts]:
    """Exact counts of ``subsets`` (sorted column tuples) in both tables, read partition by
    partition on their runners, a group of at most ``cell_budget`` cells (default
    :data:`CELL_BUDGET`) at a time.

    Returns the TVD of every subset, real vs synthetic, in the order the whole-table
    :func:`dpsynth.evaluation.metrics.iter_tvds` yields them (so means over them are the
    same numbers), and the counts of the ``keep`` subsets in each table."""
    cards = real.schema.cardinalities
    wanted = set(keep)
    tvds: dict[Subset, float] = {}
    kept: tuple[dict[Subset, np.ndarray], dict[Subset, np.ndarray]] = ({}, {})
    budget = CELL_BUDGET if cell_budget is None else int(cell_budget)
    for group in _groups(list(dict.fromkeys(subsets)), cards, budget):
        r, q = count_marginals(real, group), count_marginals(synth, group)
        for s in group:
            tvds[s] = tvd(r[s], q[s])
            if s in wanted:
                kept[0][s], kept[1][s] = r[s], q[s]
    order = [s for block in plan_blocks(list(tvds), cards, max_cells=DEFAULT_MAX_CELLS) for s in block.subsets]
    return ({s: tvds[s] for s in order}, CodeCounts(schema=real.schema, n=real.rows, counts=kept[0]),
            CodeCounts(schema=synth.schema, n=synth.rows, counts=kept[1]))


def _part_complete(part: Part, schema: Any, chunk_rows: int, missing: tuple[int | None, ...]) -> int:
    """Records of one partition in which no column holds its missing code."""
    total = 0
    for cm in part.chunks(schema, chunk_rows):
        complete = np.ones(cm.shape[1], dtype=bool)
        for j, m in enumerate(missing):
            if m is not None:
                complete &= cm[j] != m
        total += int(np.count_nonzero(complete))
    return total


def complete_records(source: RowSource) -> float:
    """Share of the source's records with no missing code (what
    :func:`dpsynth.evaluation.metrics.complete_share` gives on the whole table)."""
    if source.rows == 0:
        raise ValueError("table has no rows")
    missing = tuple(source.schema.missing_codes)
    count = source.runner.fold(_part_complete, source.parts, lambda a, b: a + b, source.schema,
                               source.chunk_rows, missing)
    return float(count / source.rows)
