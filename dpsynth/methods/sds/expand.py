"""``sds``'s large releases: one bounded pool fitted to the whole tables, then expanded.

Above :func:`expands`' switch a release of ``rows`` records is not drawn chunk by chunk:
a pool of ``m = pool_rows_for(columns)`` records is drawn once from the sampler's model
(or from a latent-class mixture fitted to it, where that fits the measured pairs with flatter
weights: latent.py), reweighted against the whole measurement scaled by ``m / rows`` (every measured k-way
table, the sampling allowance of a ``rows``-record release: :func:`scaled_measurement`),
and each pool record is then written about ``weight x rows / m`` times (:func:`copies`, a
systematic rounding: floor or ceiling of its share, summing exactly to ``rows``). The
copies are dealt to groups of records (:func:`.chunked.chunk_count` of them, so a seed
gives the same bytes whatever ``chunk_rows`` or runner) by conditional binomials and
shuffled within each group with the group's own generator. Cost: the pool's fit, then a
copy per released record; memory: the pool. The release repeats records (about rows / m
times each): docs/scale.md, "sds above the switch".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

import numpy as np

from ...measurement import Measurement
from ...schema import Schema
from . import chunked
from .refit import fit_weights, misfit_tables, table_checks

__all__ = ["EXPAND_CHUNKS", "POOL_CHUNKS", "LATENT_PART", "expands", "pool_rows_for", "scaled_measurement", "fit_pool",
           "copies", "ExpandedSampler"]

#: Releases of more than this many chunks' worth of records (:func:`.chunked.chunk_rows_for`)
#: are expanded from one pool; smaller ones are drawn chunk by chunk as before.
EXPAND_CHUNKS = 8
#: The pool, in chunks' worth of records.
POOL_CHUNKS = 8
#: The part number of the generator of the latent-class pool (latent.py), distinct from every
#: group of copies' (0 .. chunk_count - 1).
LATENT_PART = (1 << 32) - 1


def pool_rows_for(columns: int) -> int:
    """Records in the expanded release's pool at ``columns`` columns."""
    return POOL_CHUNKS * chunked.chunk_rows_for(columns)


def expands(rows: int, columns: int) -> bool:
    """Whether a release of ``rows`` records at ``columns`` columns is expanded from a pool."""
    return int(rows) > EXPAND_CHUNKS * chunked.chunk_rows_for(columns) and int(rows) > pool_rows_for(columns)


def scaled_measurement(m: Measurement, share: float, rows: int) -> Measurement:
    """``m``'s k-way tables (k >= 2) scaled to a pool of ``share`` x ``rows`` records: counts,
    noise scale and threshold times ``share``; the tables' checks then allow the sampling
    variance of a ``rows``-record release (``sample_rows``), not the pool's own."""
    tables = tuple(dataclasses.replace(
        nm, counts=np.asarray(nm.counts, dtype=np.float64) * share, stddev=float(nm.stddev) * share,
        threshold=None if nm.threshold is None else float(nm.threshold) * share)
        for nm in m.measured if len(nm.attrs) >= 2)
    return dataclasses.replace(m, measured=tables, meta={**m.meta, "sample_rows": float(rows)})


def fit_pool(pool: np.ndarray, m: Measurement, schema: Schema, one_way: Mapping[int, np.ndarray],
             total: float, fit_tables: bool = True) -> tuple[np.ndarray, dict[str, int]]:
    """Weights of ``pool``'s records honouring the (scaled) measured tables of ``m`` beyond
    their allowance and the 1-way targets ``one_way`` (every column: the pool's own counts
    where a column has none); and counts of tables: ``off`` before the fit, ``refitted``,
    ``left`` off after it."""
    from ...postprocess.fitting import CodeMargin, proportional_fit

    pool = np.asfortranarray(pool)
    margins = {j: np.clip(np.asarray(one_way[j], dtype=np.float64), 0.0, None) if j in one_way
               else np.bincount(pool[:, j], minlength=c.cardinality).astype(np.float64)
               for j, c in enumerate(schema.columns)}
    checks = table_checks(m, schema) if fit_tables else []
    before = len(misfit_tables(checks, np.ones(pool.shape[0]), total, pool=pool)) if checks else 0
    if not before:
        ones = [CodeMargin(codes=pool[:, j].astype(np.int64), target=t) for j, t in margins.items() if j in one_way]
        weights = proportional_fit(np.ones(pool.shape[0]), ones, rounds=20) if ones else np.ones(pool.shape[0])
        return weights, {"off": 0, "refitted": 0, "left": 0}
    weights, refitted = fit_weights(pool, checks, margins, total, compact=True)
    off = misfit_tables(checks, weights, total, pool=pool)
    pairs = [c for c in checks if len(c.cols) == 2]
    if off and pairs and len(pairs) < len(checks):
        # as refit._best_fit: the 2-way fit alone may leave fewer tables off
        w2, r2 = fit_weights(pool, pairs, margins, total, compact=True)
        off2 = misfit_tables(checks, w2, total, pool=pool) if np.isfinite(w2).all() and w2.sum() > 0 else off
        if len(off2) < len(off):
            weights, refitted, off = w2, r2, off2
    if not (np.isfinite(weights).all() and weights.sum() > 0):  # targets the pool cannot reach: as drawn
        return np.ones(pool.shape[0]), {"off": before, "refitted": 0, "left": before}
    return weights, {"off": before, "refitted": refitted, "left": len(off)}


def copies(weights: np.ndarray, rows: int, rng: np.random.Generator) -> np.ndarray:
    """How many times each pool record is written: ``rows`` x its share of ``weights``,
    rounded systematically (floor or ceiling each, summing exactly to ``rows``; one
    uniform offset)."""
    w = np.clip(np.asarray(weights, dtype=np.float64), 0.0, None)
    edges = np.minimum(np.floor(np.cumsum(w / float(w.sum())) * rows + rng.random()), rows)
    edges[-1] = rows
    return np.diff(np.concatenate(([0.0], edges))).astype(np.int64)


@dataclass
class ExpandedSampler(chunked.PartStream):
    """A release of ``rows`` records written as copies of ``pool``'s records (``counts``
    each), handed out in order (see the module docstring). ``sample(n, rng)`` ignores its
    generator: group ``i`` uses ``SeedSequence(key, spawn_key=(i,))``."""

    sequential: ClassVar[bool] = True
    rows: int
    pool: np.ndarray
    counts: np.ndarray
    key: list[int]
    #: The pool's fitted weights (``counts`` is their rounding to the release's records).
    weights: np.ndarray | None = None
    info: dict[str, Any] = field(default_factory=dict)
    sizes: list[int] = field(init=False)
    _left: np.ndarray = field(init=False)
    _drawn: int = field(init=False, default=0)
    _buffer: Any = field(init=False, default=None)

    def __post_init__(self) -> None:
        if int(self.counts.sum()) != self.rows:
            raise ValueError(f"the copies sum to {int(self.counts.sum())}, not the release's {self.rows} records")
        self.sizes = chunked.chunk_sizes(self.rows, chunked.chunk_count(self.rows, self.pool.shape[1]))
        self._left = np.asarray(self.counts, dtype=np.int64).copy()
        self._buffer = self.pool[:0]

    def _next_part(self) -> np.ndarray:
        i = self._drawn
        rng = chunked.part_rng(self.key, i)
        groups = len(self.sizes) - i
        take = self._left if groups == 1 else rng.binomial(self._left, 1.0 / groups)
        self._left = self._left - take
        self._drawn += 1
        out = np.repeat(self.pool, take, axis=0)
        return out[rng.permutation(out.shape[0])]

    def _empty(self) -> np.ndarray:
        return self.pool[:0]
