"""``sds``'s refit by changing records: honour the measured tables without a pool.

The reweighting refit (:mod:`.refit`) draws a pool of records from the sampler's model and
reweights it; it can only keep combinations the sampler drew, and a chunk's reweighted
pool is worth fewer records than the chunk. This refit edits the records themselves: for
each measured table that is off beyond its noise it moves a share of the records in
over-filled cells to under-filled cells, rewriting only that table's columns, and cycles
over the tables (shortest first, the 1-way tables last) with a shrinking share until none
is off. Post-processing only: it reads the measurement, never the rows. Design and
figures: docs/sds-generalisation.md, tenth round.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ...measurement import Measurement
from ...postprocess.fitting import CodeMargin
from ...schema import Schema
from .refit import TableCheck, consistent_targets, misfit_ratios, table_checks

__all__ = ["UPDATE_ROUNDS", "FIRST_SHARE", "SHARE_DECAY", "integer_target", "move_records", "update_tables"]

#: Rounds of test-and-move at most (each: every table still off, then the 1-way tables).
UPDATE_ROUNDS = 20
#: Share of a cell's surplus moved in the first round, and its decay per round.
FIRST_SHARE = 0.5
SHARE_DECAY = 0.7
#: The share never falls below this.
LAST_SHARE = 0.2
#: How strongly the order of the moved records follows their over-representation.
PRESSURE_WEIGHT = 10.0
#: Copies of one record per move into its cell, at most (the rest are rewritten).
COPIES = 1
#: Tables moved per round at most (None: every table chosen): the worst by misfit over
#: allowance. The moves' cost grows with the tables moved (docs/sds-generalisation.md,
#: fourteenth round, second part).
ROUND_TABLES: int | None = None


def integer_target(target: np.ndarray, rows: int, rng: np.random.Generator) -> np.ndarray | None:
    """``target`` (>= 0 after clipping) scaled to ``rows`` records and rounded to whole
    records that sum to ``rows`` (systematic rounding: each cell gets the floor or the
    ceiling of its share); None when it holds no mass."""
    t = np.clip(np.asarray(target, dtype=np.float64).ravel(), 0.0, None)
    s = float(t.sum())
    if s <= 0 or rows <= 0:
        return None
    return allocate(t / s, rows, rng)


def allocate(p: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """``k`` whole units over cells with shares ``p`` (summing to 1): floor or ceiling of
    ``k * p`` each, summing exactly to ``k`` (systematic, with a random offset)."""
    edges = np.minimum(np.floor(np.cumsum(p) * k + rng.random()), k)
    edges[-1] = k
    return np.diff(np.concatenate(([0.0], edges))).astype(np.int64)


def move_records(codes: np.ndarray, cols: Sequence[int], shape: Sequence[int], cells: np.ndarray,
                 goal: np.ndarray, share: float, rng: np.random.Generator,
                 rank: np.ndarray | None = None, copy: bool = True) -> int:
    """Move about ``share`` of each over-filled cell's surplus (count above ``goal``) to the
    under-filled cells in proportion to their deficit (in place); returns how many records
    moved.

    ``rank`` (a permutation of the records, most over-represented first; random when None)
    says which records leave a cell (the first) and which are copied into one (the last).
    A record moved to a cell that holds records becomes a copy of one of them, each copied
    at most once (every column: the other columns keep the joint the records have in that
    cell, so a structural dependence such as an empty column is not broken). The records
    moved beyond that, into a cell holding too few or none (a combination the sampler
    never drew), get the cell's values on ``cols`` only, as every moved record does
    without ``copy``."""
    count = np.bincount(cells, minlength=goal.size)
    gap = count - goal
    surplus = np.clip(gap, 0, None)
    deficit = np.clip(-gap, 0, None)
    if not surplus.any() or not deficit.any():
        return 0
    take = np.floor(share * surplus + rng.random(goal.size)).astype(np.int64)
    if not take.any():
        return 0
    small = goal.size <= 1 << 16
    order = rng.permutation(cells.size) if rank is None else rank
    leaving = order[take[cells[order]] > 0]  # the records of cells giving some, in rank order
    by_cell = _by_cell(cells, leaving, small)
    cell_of = cells[by_cell]
    starts = np.concatenate(([0], np.cumsum(np.bincount(cell_of, minlength=goal.size))[:-1]))
    picked = by_cell[np.arange(by_cell.size) - starts[cell_of] < take[cell_of]]
    dest = np.repeat(np.arange(goal.size), allocate(deficit / float(deficit.sum()), picked.size, rng))
    dest = dest[rng.permutation(dest.size)]
    srt = np.argsort(dest, kind="stable")
    k = np.empty(dest.size, dtype=np.int64)  # the k-th record moved into its cell
    k[srt] = np.arange(dest.size) - np.searchsorted(dest[srt], dest[srt])
    held = (k < COPIES * count[dest]) & copy  # each record of a cell is copied at most COPIES times per move
    if held.any():
        d = dest[held]
        inner = np.flatnonzero(deficit[cells] > 0)  # the records of the cells receiving some
        inner = inner[rng.permutation(inner.size)]  # the donors: at random within their cells
        pool = _by_cell(cells, inner, small)
        first = np.concatenate(([0], np.cumsum(np.bincount(cells[pool], minlength=goal.size))[:-1]))
        codes[picked[held]] = codes[pool[first[d] + k[held] % count[d]]]
    if not held.all():
        coords = np.unravel_index(dest[~held], tuple(shape))
        for a, j in enumerate(cols):
            codes[picked[~held], j] = coords[a]
    return int(picked.size)


def _by_cell(cells: np.ndarray, order: np.ndarray, small: bool) -> np.ndarray:
    """The records of ``order`` grouped by cell (stable: within a cell, in ``order``)."""
    return order[np.argsort(cells[order].astype(np.uint16) if small else cells[order], kind="stable")]


def pressure(codes: np.ndarray, tables: Sequence[tuple[TableCheck, np.ndarray]]) -> np.ndarray:
    """How over-represented each record of ``codes`` is over ``tables`` (checks with their
    whole-record goals): the sum of its cells' relative surplus (count - goal) / (goal + 1),
    the gradient of a chi-square-like misfit in the record's multiplicity."""
    g = np.zeros(codes.shape[0])
    for check, goal in tables:
        cells = check.on(codes).cells
        count = np.bincount(cells, minlength=goal.size)
        g += ((count - goal) / (goal + 1.0))[cells]
    return g


def soft_rank(g: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The records in a random order that favours the over-represented: a weighted draw
    without replacement with weights exp(g / sd(g)) (capped at e^3 either way), so that a
    cell's surplus leaves mostly by its most over-represented records without always
    taking the same ones (a strict order moved blocks of records alike on other columns)."""
    sd = float(g.std())
    w = np.exp(np.clip(g / sd, -3.0, 3.0) * PRESSURE_WEIGHT) if sd > 0 else np.ones(g.size)
    return np.argsort(np.log(rng.random(g.size) + 1e-300) / w, kind="stable")[::-1]


def _permuted_key(flat: np.ndarray, shape: tuple[int, ...], perm: np.ndarray) -> np.ndarray:
    """Row-major cell indices re-read with the axes in order ``perm``."""
    coords = np.unravel_index(flat, shape)
    return np.ravel_multi_index(tuple(coords[a] for a in perm), tuple(shape[a] for a in perm))


def _retarget(checks: Sequence[TableCheck], new: Sequence[int], chosen: dict[int, np.ndarray],
              codes: np.ndarray, one_way: Mapping[int, np.ndarray], total: float) -> None:
    """Targets (as the reweighting refit sets them) for the tables in ``new``, then the
    k >= 3 targets made consistent with their sub-tables' (:func:`.refit.consistent_targets`)."""
    n = codes.shape[0]
    ones = np.ones(n)
    raw: dict[int, np.ndarray] = {}
    counts: dict[int, np.ndarray] = {}  # the k >= 3 tables' counts: no table's cells are held
    for i in new:
        c = checks[i].on(codes)
        est, var = c.estimate(ones, total, float(n))
        chosen[i] = c.target(est, one_way, var)
        if len(c.cols) >= 3:
            raw[i] = chosen[i]
            counts[i] = np.bincount(c.cells, weights=ones, minlength=c.noisy.size)
    if not raw:
        return
    empty = np.zeros(0, dtype=np.int64)
    margins = {i: CodeMargin(codes=empty, target=t) for i, t in chosen.items()}
    consistent_targets(margins, raw, checks, ones, total, counts=counts)
    for i in raw:
        chosen[i] = margins[i].target


def _next_tables(checks: Sequence[TableCheck], off: Sequence[int], chosen: Mapping[int, np.ndarray]) -> list[int]:
    """The tables to (re)target this round: the off tables of the shortest length that
    has an off table not targeted before (else of every length off), as
    :func:`.refit.fit_weights` chooses them."""
    lens = sorted({len(checks[i].cols) for i in off})
    k = next((n for n in lens if any(i not in chosen for i in off if len(checks[i].cols) == n)), lens[-1])
    return [i for i in off if len(checks[i].cols) <= k]


def _off_ratios(checks: Sequence[TableCheck], codes: np.ndarray, total: float) -> dict[int, float]:
    """The tables equally weighted ``codes`` miss beyond their noise, each with its misfit over
    its allowance (:func:`.refit.misfit_ratios`)."""
    ratios = misfit_ratios(codes, checks, np.ones(codes.shape[0]), float(total))
    return {i: r for i, r in enumerate(ratios) if r > 1.0}


def _worst(new: Sequence[int], ratios: Mapping[int, float]) -> list[int]:
    """At most :data:`ROUND_TABLES` of ``new``: those with the highest ``ratios``."""
    if ROUND_TABLES is None or len(new) <= ROUND_TABLES:
        return list(new)
    return sorted(new, key=lambda i: (-ratios[i], i))[:ROUND_TABLES]


def update_tables(raw: np.ndarray, m: Measurement, schema: Schema, one_way: Mapping[int, np.ndarray],
                  total: float, rng: np.random.Generator, lengths: Sequence[int] | None = None
                  ) -> tuple[np.ndarray, int] | None:
    """``raw``'s records edited until no measured k-way table (k >= 2, or only
    ``lengths``) is off beyond its noise, then matched exactly to the 1-way targets
    ``one_way`` (scaled to the records); None when no table is off (the caller keeps
    ``raw``). Returns the records and how many tables were targeted. A function of the
    measurement, the records and ``rng`` only, so it serves a chunk as well as a whole
    release."""
    n = raw.shape[0]
    checks = table_checks(m, schema, lengths=lengths)
    codes = np.array(raw, dtype=np.int64, order="F")
    off = _off_ratios(checks, codes, total) if n else {}
    if not off:
        return None
    ones = {j: np.clip(np.asarray(t, dtype=np.float64), 0.0, None) for j, t in one_way.items()}
    chosen: dict[int, np.ndarray] = {}
    one_checks = [(_one_way_check(j, t), integer_target(t, n, rng)) for j, t in sorted(ones.items())
                  if int(codes[:, j].max()) < t.size]
    one_checks = [(c, g) for c, g in one_checks if g is not None]
    share = FIRST_SHARE
    for _ in range(UPDATE_ROUNDS):
        if not off:
            break
        new = _worst(_next_tables(checks, off, chosen), off)
        new = sorted(new, key=lambda i: (len(checks[i].cols), i))
        _retarget(checks, new, chosen, codes, ones, total)
        goals = [(checks[i], integer_target(chosen[i], n, rng)) for i in new]
        goals = [(c, g) for c, g in goals if g is not None]
        rank = soft_rank(pressure(codes, goals + one_checks), rng)
        for c, goal in goals + one_checks:
            c = c.on(codes)
            move_records(codes, c.cols, c.shape, c.cells, goal, share, rng, rank)
        share = max(LAST_SHARE, share * SHARE_DECAY)
        off = _off_ratios(checks, codes, total)
    for c, goal in one_checks:  # exact, and rewriting the column alone keeps the others exact too
        move_records(codes, c.cols, c.shape, codes[:, c.cols[0]].copy(), goal, 1.0, rng, copy=False)
    return np.ascontiguousarray(codes), len(chosen)


def _one_way_check(j: int, target: np.ndarray) -> TableCheck:
    """Column ``j``'s 1-way target as a table (for :func:`pressure` and the moves)."""
    return TableCheck(cols=(j,), shape=(int(target.size),), cells=np.zeros(0, dtype=np.int64),
                      noisy=target, suppressed=np.zeros(target.size, dtype=bool), threshold=0.0, stddev=1.0)
