"""``sds``'s large releases: one bounded pool fitted to the whole tables, then expanded.

Above :func:`expands`' switch a release of ``rows`` records is not drawn chunk by chunk:
a pool of ``m = pool_rows_for(columns)`` records is drawn once from the sampler's model
(or from a latent-class mixture fitted to it, where that fits the measured pairs with flatter
weights: latent.py), reweighted against the whole measurement scaled by ``m / rows`` (every measured k-way
table, the sampling allowance of a ``rows``-record release: :func:`scaled_measurement`;
where a table is still far off, the pool is rounded to equal records and updated:
:func:`update_pool`; where none is, but the gate would read some table above the last
pass's margin, the pool is rounded to equal records and given the last pass alone, kept
where it lowers the worst table: :func:`pass_pool`), and each pool record is then written
about ``weight x rows / m`` times (:func:`copies`, a systematic rounding: floor or ceiling
of its share, summing exactly to ``rows``). The copies are dealt to groups of records
(:func:`.chunked.chunk_count` of them, so a seed gives the same bytes whatever ``chunk_rows``
or runner) by conditional binomials and shuffled within each group with the group's own generator. Cost: the pool's fit, then a
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
from .refit import consistent_targets, effective_size, fit_weights, misfit_ratios, misfit_tables, off_and_ratios, table_checks

__all__ = ["EXPAND_CHUNKS", "POOL_CHUNKS", "LATENT_PART", "UPDATE_PART", "PASS_PART", "OFF_ROUNDS", "OFF_RATIO",
           "HOLD_ROUNDS", "PAIRS_FIRST", "POOL_UPDATE", "UPDATE_RATIO", "UPDATE_MAX_TABLES", "POOL_DESCENT", "LAST_PASS", "expands", "pool_rows_for", "scaled_measurement", "PoolFit", "fit_pool", "fit_off_tables",
           "misfit_ratios", "update_pool", "pass_pool", "copies", "ExpandedSampler"]

#: Releases of more than this many chunks' worth of records (:func:`.chunked.chunk_rows_for`)
#: are expanded from one pool; smaller ones are drawn chunk by chunk as before.
EXPAND_CHUNKS = 8
#: The pool, in chunks' worth of records.
POOL_CHUNKS = 8
#: The part number of the generator of the latent-class pool (latent.py), distinct from every
#: group of copies' (0 .. chunk_count - 1).
LATENT_PART = (1 << 32) - 1
#: The part number of the generator of the pool's record update (:func:`update_pool`).
UPDATE_PART = (1 << 32) - 2
#: The part number of the generator of the last pass on a pool the update left alone (:func:`pass_pool`).
PASS_PART = (1 << 32) - 3
#: Rounds of :func:`fit_off_tables`, the last pass of :func:`fit_pool` (0: no such pass), the
#: tables it targets (misfit above this many times their allowance) and the rounds after them
#: to the pairs held (tuning: the 10M scale table, seed 0; docs/sds-generalisation.md,
#: thirteenth round, second part).
OFF_ROUNDS = 5
OFF_RATIO = 3.0
HOLD_ROUNDS = 3
#: Whether the pool is fitted to the 2-way tables alone before the last pass (the fit to every
#: table, kept where it left fewer tables off, cost 100-260 CPU s and lost on int6 and int7).
PAIRS_FIRST = True
#: Whether a fitted pool that still leaves tables off is rounded to equally weighted records and
#: updated (:func:`update_pool`; docs/sds-generalisation.md, fourteenth round).
POOL_UPDATE = True
#: ... and only where some table's misfit is more than this many times its allowance
#: (:func:`misfit_ratios`; tuning: the 10M scale table, seed 0, passes the gate at a worst ratio
#: of 1.92 without the update, int6 at 1M fails it at 3.03; below this the update is not run,
#: as it cost more than 8 CPU minutes and 5.5 GB at 10M: fourteenth round).
UPDATE_RATIO = 2.0
#: ... and, for the table-by-table update (:data:`POOL_DESCENT` off), only where at most this
#: many tables are off (ratio above 1): that update's cost grows with the tables it retargets (int6 at 1M: 82 off, 75 CPU s; the 10M scale table: 893 off,
#: stopped after 8 CPU minutes at 5.5 GB); the geometric middle of the two tuning counts.
UPDATE_MAX_TABLES = 270
#: Whether the update is the descent on one misfit over every table at once (descent.py; its cost
#: does not grow with the tables off, so :data:`UPDATE_MAX_TABLES` does not apply) rather than
#: the table-by-table update (update.py), which diverged with ~1,000 tables off
#: (docs/sds-generalisation.md, fifteenth round).
POOL_DESCENT = True
#: Whether the descent's records then go through the last pass on the gate's own ratio
#: (lastpass.py: swaps for the tables whose exact gate ratio is above its margin; a no-op where
#: none is; docs/sds-generalisation.md, sixteenth round).
LAST_PASS = True


def pool_rows_for(columns: int) -> int:
    """Records in the expanded release's pool at ``columns`` columns."""
    return POOL_CHUNKS * chunked.chunk_rows_for(columns)


def expands(rows: int, columns: int) -> bool:
    """Whether a release of ``rows`` records at ``columns`` columns is expanded from a pool."""
    return int(rows) > EXPAND_CHUNKS * chunked.chunk_rows_for(columns) and int(rows) > pool_rows_for(columns)


def scaled_measurement(m: Measurement, share: float, rows: int) -> Measurement:
    """``m``'s k-way tables (k >= 2) scaled to a pool of ``share`` x ``rows`` records: counts,
    noise scale and threshold times ``share``; the tables' checks then allow the sampling
    variance of a ``rows``-record release (``sample_rows``), not the pool's own; ``share`` is
    kept as ``pool_share`` (the last pass rebuilds the gate's thresholds from it: lastpass.py)."""
    tables = tuple(dataclasses.replace(
        nm, counts=np.asarray(nm.counts, dtype=np.float64) * share, stddev=float(nm.stddev) * share,
        threshold=None if nm.threshold is None else float(nm.threshold) * share)
        for nm in m.measured if len(nm.attrs) >= 2)
    return dataclasses.replace(m, measured=tables, meta={**m.meta, "sample_rows": float(rows), "pool_share": float(share)})


@dataclass(frozen=True)
class PoolFit:
    """What :func:`fit_pool` found: the pool's ``weights``; counts of ``tables`` (``off`` before
    the fit, ``refitted``, ``left`` off after it); and what :func:`update_pool` reads instead of
    counting every table again: the tables' ``checks`` and, where the fit's last pass computed
    them, the returned weights' misfit ``ratios`` (None: not computed)."""

    weights: np.ndarray
    tables: dict[str, int]
    checks: list = field(default_factory=list)
    ratios: list[float] | None = None


def fit_pool(pool: np.ndarray, m: Measurement, schema: Schema, one_way: Mapping[int, np.ndarray],
             total: float, fit_tables: bool = True) -> PoolFit:
    """Weights of ``pool``'s records honouring the (scaled) measured tables of ``m`` beyond
    their allowance and the 1-way targets ``one_way`` (every column: the pool's own counts
    where a column has none); and counts of tables: ``off`` before the fit, ``refitted``,
    ``left`` off after it (:class:`PoolFit`, with the checks and ratios it counted)."""
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
        return PoolFit(weights, {"off": 0, "refitted": 0, "left": 0}, checks)
    pairs = [c for c in checks if len(c.cols) == 2]
    weights = np.full(pool.shape[0], np.nan)
    if PAIRS_FIRST and pairs and len(pairs) < len(checks):  # the pairs alone, then the last pass
        weights, refitted = fit_weights(pool, pairs, margins, total, compact=True)
    ratios = None
    if np.isfinite(weights).all() and weights.sum() > 0:
        off, ratios = off_and_ratios(pool, checks, weights, total)
    else:
        weights, refitted = fit_weights(pool, checks, margins, total, compact=True)
        off = misfit_tables(checks, weights, total, pool=pool)
    if not PAIRS_FIRST and off and pairs and len(pairs) < len(checks):
        # as refit._best_fit: the 2-way fit alone may leave fewer tables off
        w2, r2 = fit_weights(pool, pairs, margins, total, compact=True)
        off2 = misfit_tables(checks, w2, total, pool=pool) if np.isfinite(w2).all() and w2.sum() > 0 else off
        if len(off2) < len(off):
            weights, refitted, off, ratios = w2, r2, off2, None
    if not (np.isfinite(weights).all() and weights.sum() > 0):  # targets the pool cannot reach: as drawn
        return PoolFit(np.ones(pool.shape[0]), {"off": before, "refitted": 0, "left": before}, checks)
    kept = None  # the ratios of the returned weights, where the last pass computed them
    if off and OFF_ROUNDS > 0:
        weights, off, kept = _fit_off_tables(pool, checks, weights, margins, total, OFF_ROUNDS, before=ratios)
    return PoolFit(weights, {"off": before, "refitted": refitted, "left": len(off)}, checks, kept)


def fit_off_tables(pool: np.ndarray, checks: list, weights: np.ndarray, one_way: Mapping[int, np.ndarray],
                   total: float, rounds: int, ratio: float | None = None) -> tuple[np.ndarray, list[int]]:
    """``weights`` refitted to the tables whose misfit is more than ``ratio`` times their
    allowance (:func:`misfit_ratios`), and the tables then off (ratio above 1).

    ``rounds`` of proportional fitting to those tables (each one's step towards its
    measurement; a table of k >= 3 made to agree with its sub-tables as the pool has them)
    with every other 2-way table held at its current counts, then :data:`HOLD_ROUNDS` to the
    held tables and ``one_way`` alone (the pairs the triples moved come back). Kept only
    when the worst table's ratio falls; else ``weights`` itself. The fit before it targets
    the shortest tables first and, on a pool fitted to the pairs, may end with triples far
    off that it never targeted (the 10M scale table: docs/sds-generalisation.md, thirteenth
    round, second part)."""
    return _fit_off_tables(pool, checks, weights, one_way, total, rounds, ratio)[:2]


def _fit_off_tables(pool: np.ndarray, checks: list, weights: np.ndarray, one_way: Mapping[int, np.ndarray],
                    total: float, rounds: int, ratio: float | None = None,
                    before: list[float] | None = None) -> tuple[np.ndarray, list[int], list[float]]:
    """:func:`fit_off_tables`, and the misfit ratios of the weights it returns; ``before``:
    ``weights``' ratios where the caller counted them (else counted here)."""
    from ...postprocess.fitting import CodeMargin, proportional_fit

    before = misfit_ratios(pool, checks, weights, total) if before is None else before
    target = [i for i, r in enumerate(before) if r > (OFF_RATIO if ratio is None else ratio)]
    if not target or rounds <= 0:
        return weights, [i for i, r in enumerate(before) if r > 1.0], before
    ess = effective_size(weights)
    chosen: dict = {}
    raw: dict = {}
    held = []
    for i, c in enumerate(checks):
        if len(c.cols) != 2 and i not in target:
            continue
        c = c.on(pool)
        est, var = c.estimate(weights, total, ess)
        cells = c.compact_cells()
        if i not in target:
            held.append(CodeMargin(codes=cells, target=est))
            continue
        chosen[i] = CodeMargin(codes=cells, target=c.target(est, one_way, var))
        if len(c.cols) >= 3:
            raw[i] = chosen[i].target
    consistent_targets(chosen, raw, checks, weights, total)
    ones = [CodeMargin(codes=pool[:, j].astype(np.int64), target=t) for j, t in one_way.items()]
    fitted = proportional_fit(weights, [*chosen.values(), *held, *ones], rounds=rounds)
    fitted = proportional_fit(fitted, [*held, *ones], rounds=HOLD_ROUNDS)
    if not (np.isfinite(fitted).all() and fitted.sum() > 0):
        return weights, [i for i, r in enumerate(before) if r > 1.0], before
    after = misfit_ratios(pool, checks, fitted, total)
    if max(after) < max(before):
        return fitted, [i for i, r in enumerate(after) if r > 1.0], after
    return weights, [i for i, r in enumerate(before) if r > 1.0], before


def update_pool(pool: np.ndarray, weights: np.ndarray, scaled: Measurement, schema: Schema,
                one_way: Mapping[int, np.ndarray], total: float, rng: np.random.Generator,
                fitted: PoolFit | None = None) -> np.ndarray | None:
    """``pool`` (weighted by ``weights``) rounded to as many equally weighted records
    (:func:`copies`) and edited by the descent (:func:`.descent.descend`; with
    :data:`POOL_DESCENT` off, the record update :func:`.update.update_tables`) against every
    table of ``scaled`` (:func:`scaled_measurement`: the allowance of the whole release);
    None when no table is more than :data:`UPDATE_RATIO` times off, or, for the record update,
    more than :data:`UPDATE_MAX_TABLES` tables are off (the caller keeps the weighted pool). ``one_way`` and ``total``: the
    1-way targets and the record total at the pool's size, as :func:`fit_pool` takes them.

    The weights can only move mass between records the sampler drew; the update moves
    records, copying one of the new cell's records where it holds some and writing the
    table's values into a record where it holds too few, so it reaches cells the pool
    misses. After the descent, with :data:`LAST_PASS` on, the tables the gate would read above
    its margin are worked on by :func:`.lastpass.last_pass` (swaps on the gate's own ratio).
    ``fitted``: :func:`fit_pool`'s result that gave ``weights``, whose checks of ``scaled``
    and misfit ratios are read instead of counted again (counted afresh where absent: the
    same values).
    Post-processing of the measurement only."""
    from .descent import descend
    from .lastpass import gate_tables, last_pass
    from .update import update_tables

    pool = np.asfortranarray(pool)
    checks = fitted.checks if fitted is not None else table_checks(scaled, schema)
    ratios = fitted.ratios if fitted is not None and fitted.ratios is not None else misfit_ratios(pool, checks, weights, total)
    if max(ratios, default=0.0) <= UPDATE_RATIO:
        return None
    if not POOL_DESCENT and sum(r > 1.0 for r in ratios) > UPDATE_MAX_TABLES:
        return None
    records = np.repeat(np.asarray(pool), copies(weights, pool.shape[0], rng), axis=0)
    if POOL_DESCENT:
        codes = descend(records, checks, one_way, total, schema.cardinalities, rng)[0]
        tables = gate_tables(scaled, schema) if LAST_PASS and scaled is not None else None
        return codes if tables is None else last_pass(codes, tables, rng)[0]
    out = update_tables(records, scaled, schema, one_way, total, rng)
    return None if out is None else out[0]


def pass_pool(pool: np.ndarray, weights: np.ndarray, scaled: Measurement, schema: Schema,
              rng: np.random.Generator) -> tuple[np.ndarray | None, dict[str, Any]] | None:
    """The last pass (:func:`.lastpass.last_pass`) on a fitted pool that :func:`update_pool`
    did not edit (no table more than :data:`UPDATE_RATIO` times off, or none off at all):
    where the gate's view of ``pool`` weighted by ``weights`` (the release's tables before the
    copies' rounding) has some table above :data:`.lastpass.MARGIN`, the pool rounded to as
    many equally weighted records (:func:`copies`, from ``rng``), its columns given the
    weighted pool's 1-way tables (:func:`_weighted_columns`, :func:`.lastpass.set_columns`)
    and passed, and what was done; the records are None (the caller keeps the weighted pool)
    unless the pass leaves the worst table lower than the weighted pool has it: the rounding
    to ``pool``'s size adds the sampling error of that many records, which the pass takes back
    only for the tables above the margin. None
    where no table is above the margin, nothing drawn from ``rng`` (the same bytes); None too
    with :data:`LAST_PASS` off or where the gate's view cannot be rebuilt.
    Post-processing of the measurement only (docs/sds-generalisation.md, seventeenth round,
    second part)."""
    from . import lastpass

    tables = lastpass.gate_tables(scaled, schema) if LAST_PASS and scaled is not None else None
    if not tables:
        return None
    ratios = lastpass.weighted_gate_ratios(pool, weights, tables)
    if not (ratios > lastpass.MARGIN).any():
        return None
    records = np.repeat(np.asarray(pool), copies(weights, pool.shape[0], rng), axis=0)
    goals = _weighted_columns(pool, weights, schema.cardinalities, records.shape[0], rng)
    # the columns given the weighted pool's 1-way tables, then swaps (the columns stay as set)
    codes, done = lastpass.last_pass(records, tables, rng, goals=goals)
    moved = done.pop("column_moves")
    kept = done["worst_after"] < float(ratios.max())
    info = {"pool_passed": int(kept), "pass_above_weighted": int((ratios > lastpass.MARGIN).sum()),
            "pass_worst_weighted": round(float(ratios.max()), 4), "pass_column_moves": moved,
            **{f"pass_{k}": round(v, 4) if isinstance(v, float) else v for k, v in done.items()}}
    return codes if kept else None, info


def _weighted_columns(pool: np.ndarray, weights: np.ndarray, cards, rows: int,
                      rng: np.random.Generator) -> dict[int, np.ndarray]:
    """Each column's 1-way table of ``pool`` weighted by ``weights``, rounded to ``rows`` whole
    records (:func:`.update.integer_target`): what the pool rounded to equal records is given
    back (:func:`.lastpass.set_columns`; the rounding alone leaves the 1-way tables the sampling
    error of the pool's size: the 10M scale table, a column at .995 of its gate threshold,
    .49 weighted)."""
    from .update import integer_target

    w = np.clip(np.asarray(weights, dtype=np.float64), 0.0, None)
    goals = {}
    for j, card in enumerate(cards):
        goal = integer_target(np.bincount(pool[:, j], weights=w, minlength=int(card)), rows, rng)
        if goal is not None and goal.size == int(card):
            goals[j] = goal
    return goals


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

    @property
    def fit(self) -> dict[str, Any]:
        """What the pool's fit, update and last pass did (``info``), as the manifest's
        ``synthesis.fit`` states it (:func:`dpsynth.pipeline.synthetic.write_fit_record`)."""
        return {k: v.item() if isinstance(v, np.generic) else v for k, v in self.info.items()}

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
