"""Last step of ``sds``'s complete sampler: honour every measured k-way table it misses.

The complete sampler draws every column from R - 1 parents, so a set of columns that
never meets in one family (a pair, or a triple whose interaction no family holds) gets
only the dependence the network implies. Where a measured k-way table (k = 2 .. R) says,
beyond its noise, that the sample is wrong, the records are reweighted to a target
between the sample and the measurement, and the release is drawn from the reweighted
pool. Post-processing only (it reads the measurement, never the rows). A table's cells
are computed from the pool when it is tested and kept only for the tables refitted, so
memory grows with the tables that need a refit, not with all C(p, k) of them. The
reasoning and the numbers are in docs/sds.md, "Honouring the measured tables".
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Container, Mapping, Sequence

import numpy as np

from ...postprocess.fitting import AxisMargin, CodeMargin, proportional_fit
from ...measurement import Measurement
from ...schema import Schema

__all__ = ["POOL_FACTOR", "DISCREPANCY_Z", "record_cells", "TableCheck", "PairCheck", "table_checks", "pair_checks",
           "misfit_tables", "misfit_ratios", "off_and_ratios", "misfit_pairs", "fit_weights", "consistent_targets", "honour_tables", "honour_pairs", "pool_size"]

#: Records in the reweighted pool per released record. When the weights' effective size
#: falls below the release's (the draw would repeat records), the pool doubles once.
POOL_FACTOR = 4
#: Largest pool in records (memory: pool x columns int64).
POOL_MAX_ROWS = 2_000_000
#: A measured table is refitted when its misfit exceeds its cells by this many standard
#: deviations of a chi-square with as many degrees of freedom (a false alarm ~1e-9).
DISCREPANCY_Z = 6.0
#: Passes of test-and-refit (fitting some pairs moves others); rounds of fitting per pass.
PASSES = 4
ROUNDS = 20


def record_cells(records: np.ndarray, cols: Sequence[int], shape: Sequence[int]) -> np.ndarray:
    """Each record's cell (int64, row-major) in the table of columns ``cols`` (sizes ``shape``):
    the first column's code, then for each next column times its size plus its code (each
    column read contiguously when ``records`` is column-major). The row-major twin of
    :func:`dpsynth.rows.counting.flat_index`, which reads column-major code blocks."""
    cells = records[:, cols[0]].astype(np.int64)
    for j, size in zip(cols[1:], shape[1:]):
        cells *= size
        cells += records[:, j]
    return cells


@dataclass(frozen=True)
class TableCheck:
    """A measured k-way table (k >= 2) seen from a pool of records.

    ``cells``: each record's cell (row-major over the columns' codes; empty until
    :meth:`on` computes them from a pool); ``noisy``: the stated counts (flat);
    ``suppressed``: cells published as 0 because their noisy count was not above
    ``threshold``; ``stddev``: the per-cell noise; ``share``: the part of the release this
    table is (1 for a whole release, a chunk's share of the rows in a chunked one);
    ``sample_rows``: when > 0, the estimate's sampling variance is that of this many records
    instead of the pool's effective size (an expanded pool: its records are repeated into a
    release of ``sample_rows`` records, expand.py).
    """

    cols: tuple[int, ...]
    shape: tuple[int, ...]
    cells: np.ndarray
    noisy: np.ndarray
    suppressed: np.ndarray
    threshold: float
    stddev: float
    share: float = 1.0
    sample_rows: float = 0.0

    def on(self, pool: np.ndarray) -> "TableCheck":
        """This table with ``cells`` computed from ``pool``'s records."""
        return dataclasses.replace(self, cells=record_cells(pool, self.cols, self.shape))

    def estimate(self, weights: np.ndarray, total: float, ess: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The pool's counts of this table scaled to ``total`` records, and their sampling
        variance (multinomial, at the weights' effective size ``ess``, computed when None)."""
        counts = np.bincount(self.cells, weights=weights, minlength=self.noisy.size)
        counts = counts * (total / max(float(counts.sum()), 1e-300))
        size = self.sample_rows if self.sample_rows > 0 else effective_size(weights) if ess is None else ess
        return counts, np.clip(counts * (1.0 - counts / max(total, 1e-300)), 0.0, None) * (total / size)

    def misfit(self, estimate: np.ndarray, variance: np.ndarray | float = 0.0) -> float:
        """Squared distance to the measurement, each cell in units of its variance (the
        noise's plus the estimate's own ``variance``): reported cells by their noisy count,
        suppressed cells only by how far ``estimate`` exceeds the threshold."""
        scale = self.stddev**2 + np.broadcast_to(np.asarray(variance, dtype=np.float64), estimate.shape)
        gap = np.where(self.suppressed, np.clip(estimate - self.threshold, 0.0, None), self.noisy - estimate)
        return float(np.sum(gap**2 / scale))

    def is_off(self, estimate: np.ndarray, variance: np.ndarray | float = 0.0, z: float = DISCREPANCY_Z) -> bool:
        """Whether the misfit is beyond what noise explains (chi-square, d = cells).

        For a chunk (``share`` s < 1) the excess allowed is s times a whole table's: a bias
        of the sampler recurs in every chunk, so the chunks' excesses add up (about 1 / s
        of them) where their sampling errors do not."""
        return self.misfit(estimate, variance) > self.allowance(z)

    def compact_cells(self) -> np.ndarray:
        """:attr:`cells` as uint16 where the table's cells fit (a quarter of the memory of int64
        indices, the same fit), else as they are."""
        return self.cells.astype(np.uint16) if self.noisy.size <= 1 << 16 else self.cells

    def allowance(self, z: float = DISCREPANCY_Z) -> float:
        """The misfit noise explains (:meth:`is_off`'s bound): d cells plus ``z`` sds of a
        chi-square on d, times ``share``."""
        d = self.noisy.size
        return d + z * math.sqrt(2.0 * d) * self.share

    def target(self, estimate: np.ndarray, one_way: Mapping[int, np.ndarray],
               variance: np.ndarray | float = 0.0) -> np.ndarray:
        """Counts between the pool and the measurement, on the 1-way tables' margins.

        The step towards the measurement is the smallest that leaves a misfit of one noise
        variance per cell (what an honest sample of the truth would show); a suppressed
        cell is observed as ``min(estimate, threshold + stddev)``. The result is fitted to
        the k 1-way tables, the least noisy statistics of the release.
        """
        d = self.noisy.size
        left = d * self.share  # a chunk's part of a whole table's allowance
        step = 1.0 - math.sqrt(left / max(self.misfit(estimate, variance), left))
        seen = np.where(self.suppressed, np.minimum(estimate, self.threshold + self.stddev), self.noisy)
        t = np.clip(estimate + step * (seen - estimate), 0.0, None) + 1e-12
        axes = np.unravel_index(np.arange(d), self.shape)
        margins = [CodeMargin(codes=axes[i], target=np.asarray(one_way[j], dtype=np.float64))
                   for i, j in enumerate(self.cols) if j in one_way]
        return proportional_fit(t, margins, rounds=50) if margins else t


#: The name the 2-way refit had (issue 9); every k now shares one class.
PairCheck = TableCheck


def table_checks(m: Measurement, schema: Schema, pool: np.ndarray | None = None,
                 lengths: Sequence[int] | None = None) -> list[TableCheck]:
    """One :class:`TableCheck` per k-way table (k >= 2; only ``lengths`` when given) the
    measurement states with noise; with ``pool``, each with its cells (memory: one int64
    per record and table: test tables one at a time with :func:`misfit_tables` instead)."""
    cards = schema.cardinalities
    share = min(1.0, max(1e-9, float(m.meta.get("chunk_share", 1.0))))  # set by ChunkedSampler.shares
    sample_rows = float(m.meta.get("sample_rows", 0.0))  # set by expand.scaled_measurement
    out = []
    for nm in m.measured:
        k = len(nm.attrs)
        if k < 2 or not nm.stddev > 0 or (lengths is not None and k not in lengths):
            continue
        cols = tuple(schema.index(x) for x in nm.attrs)
        noisy = np.asarray(nm.counts, dtype=np.float64).ravel()
        tau = max(0.0, float(nm.threshold or 0.0))
        c = TableCheck(cols=cols, shape=tuple(cards[j] for j in cols), cells=np.zeros(0, dtype=np.int64),
                       noisy=noisy, suppressed=noisy <= tau, threshold=tau, stddev=float(nm.stddev),
                       share=share, sample_rows=sample_rows)
        out.append(c if pool is None else c.on(pool))
    return out


def pair_checks(pool: np.ndarray, m: Measurement, schema: Schema) -> list[TableCheck]:
    """The measured 2-way tables' checks on ``pool`` (cells computed)."""
    return table_checks(m, schema, pool, lengths=(2,))


def effective_size(weights: np.ndarray) -> float:
    """(sum w)^2 / sum w^2: how many equally weighted records the weights are worth."""
    return float(weights.sum()) ** 2 / max(float(np.sum(weights * weights)), 1e-300)


def misfit_tables(checks: Sequence[TableCheck], weights: np.ndarray, total: float,
                  pool: np.ndarray | None = None, skip: Container[int] = ()) -> list[int]:
    """Indices of the tables the weighted pool misses beyond their noise (not in ``skip``).
    With ``pool``, each table's cells are computed from it, tested and dropped."""
    ess = effective_size(weights)
    out = []
    for i, c in enumerate(checks):
        if i in skip:
            continue
        c = c if pool is None else c.on(pool)
        if c.is_off(*c.estimate(weights, total, ess)):
            out.append(i)
    return out


def misfit_ratios(pool: np.ndarray, checks: Sequence[TableCheck], weights: np.ndarray, total: float) -> list[float]:
    """Each table's misfit over its allowance (above 1: off, :meth:`TableCheck.is_off`),
    its cells computed from ``pool`` and dropped."""
    return off_and_ratios(pool, checks, weights, total)[1]


def off_and_ratios(pool: np.ndarray, checks: Sequence[TableCheck], weights: np.ndarray,
                   total: float) -> tuple[list[int], list[float]]:
    """:func:`misfit_tables` (with ``pool``) and :func:`misfit_ratios` of the same weights from
    one computation of each table's cells (the tables off by :meth:`TableCheck.is_off`)."""
    ess = effective_size(weights)
    off, ratios = [], []
    for i, c in enumerate(checks):
        c = c.on(pool)
        estimate, variance = c.estimate(weights, total, ess)
        if c.is_off(estimate, variance):
            off.append(i)
        ratios.append(c.misfit(estimate, variance) / c.allowance())
    return off, ratios


def misfit_pairs(checks: list[TableCheck], weights: np.ndarray, total: float) -> list[int]:
    """Indices of the tables (cells computed) the weighted pool misses beyond their noise."""
    return misfit_tables(checks, weights, total)


def fit_weights(pool: np.ndarray, checks: list[TableCheck], one_way: Mapping[int, np.ndarray],
                total: float, compact: bool = False) -> tuple[np.ndarray, int]:
    """Record weights of ``pool`` honouring every table it missed, and how many it refitted.

    Each pass (re)targets the shortest tables still off, a table refitted before too
    (fitting longer tables moves it), each against the current weights, then fits the
    weights to every chosen table and, last, to the 1-way tables.
    Checks without cells get them from ``pool`` while tested; only a chosen table's are kept
    (with ``compact``, as uint16 where its cells fit: a quarter of the memory, the same fit).
    """
    weights = np.ones(pool.shape[0])
    chosen: dict[int, CodeMargin] = {}
    raw: dict[int, np.ndarray] = {}  # the k >= 3 targets before :func:`consistent_targets`
    ones = [CodeMargin(codes=pool[:, j].astype(np.int64), target=np.asarray(t, dtype=np.float64))
            for j, t in one_way.items()]

    lazy = any(c.cells.size != pool.shape[0] for c in checks)
    lengths = sorted({len(c.cols) for c in checks})
    for _ in range(PASSES * max(1, len(lengths))):
        new = misfit_tables(checks, weights, total, pool=pool if lazy else None)
        if not new:
            break
        # the shortest tables first: a longer table off only through its sub-tables is
        # usually back within its noise once they are fitted (and fitting both at once
        # would chase two targets for the same sub-table). A length whose tables still off
        # were all targeted before does not hold the longer ones back: one pair that no
        # weighting of the pool brings within its noise left every triple unfitted
        # (tuning int2 of benchmarks/sds_matrix.py, epsilon 2 seed 1: a triple at 2.2 times
        # its gate threshold); those tables are re-targeted with the next length.
        lens = sorted({len(checks[i].cols) for i in new})
        k = next((n for n in lens if any(i not in chosen for i in new if len(checks[i].cols) == n)), lens[-1])
        new = [i for i in new if len(checks[i].cols) <= k]
        ess = effective_size(weights)
        for i in new:
            c = checks[i].on(pool) if lazy else checks[i]
            est, var = c.estimate(weights, total, ess)
            cells = c.compact_cells() if compact else c.cells
            chosen[i] = CodeMargin(codes=cells, target=c.target(est, one_way, var))
            if len(c.cols) >= 3:
                raw[i] = chosen[i].target
        consistent_targets(chosen, raw, checks, weights, total)
        weights = proportional_fit(weights, [*chosen.values(), *ones], rounds=ROUNDS)
    return weights, len(chosen)


def consistent_targets(chosen: dict[int, CodeMargin], raw: Mapping[int, np.ndarray],
                       checks: Sequence[TableCheck], weights: np.ndarray, total: float,
                       counts: Mapping[int, np.ndarray] | None = None) -> None:
    """Make the chosen targets of k >= 3 agree with the targets of their (k-1)-sub-tables
    (in place; post-processing of DP outputs only).

    Each k-way target is its own (``raw``) target fitted to its (k-1)-sub-tables: the
    chosen target of a sub-table that has one, else the weighted pool's current table.
    (A sub-table not measured is left free.) The targets then share every sub-table they overlap on, so fitting the weights to all
    of them converges instead of pulling a pair between its own target and the pair sums
    of the noisier triples that contain it (held-out int3 and int5 of
    benchmarks/sds_matrix.py: a pair refused at 1.03 times its gate threshold after a
    triple was refitted). Shorter targets first, so a triple's pairs are final. ``counts``:
    the weighted pool's tables of ``raw``'s tables, given by a caller that holds no cells for
    them (the record update: :func:`.update._retarget`); else counted from ``chosen``'s codes.
    """
    by_cols = {checks[i].cols: i for i in chosen}
    measured = {c.cols for c in checks}
    for i in sorted(raw, key=lambda i: len(checks[i].cols)):
        c = checks[i]
        codes = chosen[i].codes
        est = (np.asarray(counts[i], dtype=np.float64) if counts is not None
               else np.bincount(codes, weights=weights, minlength=c.noisy.size))
        est = (est * (total / max(float(est.sum()), 1e-300))).reshape(c.shape)
        margins = []
        for d in range(len(c.cols)):
            sub = c.cols[:d] + c.cols[d + 1:]
            if sub in by_cols:
                margins.append(AxisMargin(d, np.asarray(chosen[by_cols[sub]].target).reshape(est.sum(axis=d).shape)))
            elif sub in measured:  # within its noise: kept as the pool has it
                margins.append(AxisMargin(d, est.sum(axis=d)))
        fitted = proportional_fit(np.asarray(raw[i], dtype=np.float64).reshape(c.shape) + 1e-12, margins,
                                  rounds=50)
        chosen[i] = CodeMargin(codes=codes, target=fitted.ravel())


def _best_fit(pool: np.ndarray, checks: list[TableCheck], one_way: Mapping[int, np.ndarray],
              total: float) -> tuple[np.ndarray, int]:
    """:func:`fit_weights` on every table, or on the 2-way tables alone when that leaves
    no more tables (of any k) beyond their noise: fitting triples can push pairs fitted
    before off again (held-out int3 of benchmarks/sds_matrix.py at epsilon 2: one pair at
    1.03 times its gate threshold, where the 2-way fit published)."""
    weights, refitted = fit_weights(pool, checks, one_way, total)
    pairs = [c for c in checks if len(c.cols) == 2]
    if len(pairs) == len(checks) or not pairs:
        return weights, refitted
    w2, r2 = fit_weights(pool, pairs, one_way, total)
    if not (np.isfinite(w2).all() and w2.sum() > 0):
        return weights, refitted
    lazy = pool if any(c.cells.size != pool.shape[0] for c in checks) else None
    if len(misfit_tables(checks, w2, total, pool=lazy)) < len(misfit_tables(checks, weights, total, pool=lazy)):
        return w2, r2
    return weights, refitted


def pool_size(rows: int, factor: int = POOL_FACTOR) -> int:
    """Records in the pool for a release of ``rows`` records (``factor`` per record, at
    most :data:`POOL_MAX_ROWS`, never fewer than ``rows``)."""
    return max(rows, min(factor * rows, POOL_MAX_ROWS))


def honour_tables(raw: np.ndarray, draw: Callable[[int], np.ndarray], m: Measurement, schema: Schema,
                  one_way: Mapping[int, np.ndarray], total: float, rng: np.random.Generator,
                  lengths: Sequence[int] | None = None) -> tuple[np.ndarray, int] | None:
    """``raw``'s records redrawn from a reweighted pool when a measured k-way table (every
    k >= 2, or only ``lengths``) says they are off; None when none is (the caller keeps
    ``raw``). ``draw(k)`` samples k more records from the same model; ``one_way`` holds a
    target table per column. A function of the measurement, a table of codes and ``rng``
    only, so it refits one chunk of a release as well as a whole one."""
    from ...postprocess.correction import resample

    n = raw.shape[0]
    checks = table_checks(m, schema, lengths=lengths)
    # column-major: every table's cells read two or three whole columns of the pool
    pool = np.asfortranarray(raw)
    if n == 0 or not misfit_tables(checks, np.ones(n), total, pool=pool):
        return None
    weights, refitted = np.ones(n), 0
    for attempt, factor in enumerate((POOL_FACTOR, 2 * POOL_FACTOR)):
        size = pool_size(n, factor)
        if attempt and size <= pool.shape[0]:  # at the cap: refitting the same pool gives the same weights
            break
        if size > pool.shape[0]:
            pool = _grown(pool, draw(size - pool.shape[0]))
        margins = {j: np.clip(np.asarray(one_way[j], dtype=np.float64), 0.0, None) if j in one_way
                   else np.bincount(pool[:, j], minlength=c.cardinality).astype(np.float64)
                   for j, c in enumerate(schema.columns)}
        weights, refitted = _best_fit(pool, checks, margins, total)
        if not (np.isfinite(weights).all() and weights.sum() > 0):  # targets the pool cannot reach
            return None
        if effective_size(weights) >= n:  # worth as many records as the release: no repeats needed
            break
    out = resample(pool, weights, n, rng)
    return np.ascontiguousarray(out[rng.permutation(n)]), refitted


def _grown(pool: np.ndarray, more: np.ndarray) -> np.ndarray:
    """``pool`` with the records of ``more`` appended, column-major."""
    out = np.empty((pool.shape[0] + more.shape[0], pool.shape[1]), dtype=np.result_type(pool, more), order="F")
    out[: pool.shape[0]] = pool
    out[pool.shape[0]:] = more
    return out


def honour_pairs(raw: np.ndarray, draw: Callable[[int], np.ndarray], m: Measurement, schema: Schema,
                 one_way: Mapping[int, np.ndarray], total: float, rng: np.random.Generator
                 ) -> tuple[np.ndarray, int] | None:
    """:func:`honour_tables` on the 2-way tables only (the refit of issue 9)."""
    return honour_tables(raw, draw, m, schema, one_way, total, rng, lengths=(2,))
