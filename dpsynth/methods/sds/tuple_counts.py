"""The row-reading passes of sds's aggregation, partition by partition.

sds counts, for k = 1..R, the k-tuples of values each record holds, where a record
contributes at most ``allowed`` (Delta_k, a DP percentile of the number of valid
tuples per record) of them: records with more keep a random ``allowed`` of theirs.
Only two things read rows, and both run per partition of a
:class:`dpsynth.rows.rowsource.RowSource`:

* :func:`valid_histogram`: how many records hold how many valid k-tuples (the DP
  percentile needs only this histogram) and, per partition, how many records exceed
  a given limit;
* :func:`tuple_counts`: exact counts of the valid tuples, records under the limit
  counted whole, records over it through random choices.

The random choices of partition i are drawn from the generator moved on by the draws
of the partitions before it (:func:`dpsynth.rows.rowsource.advance`), so every runner and
chunk size draws exactly the numbers one pass over all rows in order would draw.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ...rows.counting import Subset, count_blocks, flat_index, plan_blocks_cached
from ...rows.rowsource import Part, RowSource, add_counts, advance, set_state
from ...schema import Schema

__all__ = ["LevelSpec", "valid_histogram", "tuple_counts", "lookup_plan", "row_lookup_sum", "capped_counts",
           "records_over"]

Combo = Subset
#: Entries of the (rows x tuples) key buffer of :func:`capped_counts` per step.
_CHUNK = 1 << 22


@dataclass(frozen=True, kw_only=True, eq=False)
class LevelSpec:
    """What a partition needs to count level k: candidate tuples, the previous level's
    reported tuples (k >= 2), each column's excluded code (missing, when empty cells
    are not a value), and whether the 1-way domain is public (every code counts)."""

    k: int
    cand: dict[Combo, np.ndarray] = field(repr=False)
    prev: dict[Combo, np.ndarray] = field(default_factory=dict, repr=False)
    excluded: tuple[int | None, ...]
    public: bool = False

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")


def lookup_plan(tables: dict[Combo, np.ndarray], cards: Sequence[int]) -> list[tuple[Combo, np.ndarray]]:
    """The Boolean tables summed per block of columns (:func:`dpsynth.rows.counting.plan_blocks`):
    a row's number of True cells over all tables is then one lookup per block, not per table."""
    out = []
    for block in plan_blocks_cached(tuple(tables), tuple(int(c) for c in cards)):
        cols = block.columns
        acc = np.zeros(tuple(int(cards[j]) for j in cols), dtype=np.int32)
        for sub in block.subsets:
            shape = [1] * len(cols)
            for j, size in zip(sub, tables[sub].shape):
                shape[cols.index(j)] = size
            acc += tables[sub].reshape(shape)
        out.append((cols, acc.ravel()))
    return out


def row_lookup_sum(cm: np.ndarray, cards, tables: dict[Combo, np.ndarray] | list[tuple[Combo, np.ndarray]],
                   rows: np.ndarray | None = None) -> np.ndarray:
    """For each selected row (all with ``rows=None``), how many of the tables are True at
    its cell; ``tables`` may be a :func:`lookup_plan` of them."""
    plan = lookup_plan(tables, cards) if isinstance(tables, dict) else tables
    size = cm.shape[1] if rows is None else rows.size
    total = np.zeros(size, dtype=np.int64)
    if size == 0:
        return total
    buf = np.empty(size, dtype=np.int64)
    for cols, flat in plan:
        total += flat[flat_index(cm, cards, cols, rows, out=buf)]
    return total


class _Lookups:
    """A level's lookup plans, built on first use (the candidates' only if a row needs them)."""

    def __init__(self, spec: LevelSpec, cards: Sequence[int]):
        self.spec, self.cards = spec, cards

    @functools.cached_property
    def prev(self) -> list[tuple[Combo, np.ndarray]]:
        return lookup_plan(self.spec.prev, self.cards)

    @functools.cached_property
    def cand(self) -> list[tuple[Combo, np.ndarray]]:
        return lookup_plan(self.spec.cand, self.cards)


_LOOKUPS: dict[int, tuple[LevelSpec, _Lookups]] = {}


def _lookups(spec: LevelSpec, cards: Sequence[int]) -> _Lookups:
    """The spec's lookup plans, shared by the partitions this process runs for it."""
    hit = _LOOKUPS.get(id(spec))
    if hit is None or hit[0] is not spec:
        _LOOKUPS.clear()  # one level at a time: the previous level's plans are done
        hit = _LOOKUPS[id(spec)] = (spec, _Lookups(spec, cards))
    return hit[1]


def _valid(cm: np.ndarray, cards: Sequence[int], spec: LevelSpec, look: _Lookups) -> np.ndarray:
    """Valid k-tuples of each row of the chunk (column-major codes ``cm``)."""
    p, n = cm.shape
    if spec.k == 1 and spec.public:
        return np.full(n, p, dtype=np.int64)
    nonmissing = np.zeros(n, dtype=np.int64)
    for j, code in enumerate(spec.excluded):
        if code is None:
            nonmissing += 1
        else:
            nonmissing += cm[j] != code
    if spec.k == 1:
        return nonmissing
    k = spec.k
    # A record whose (k-1)-tuples all survived has C(m, k) valid k-tuples; only the
    # others ("dirty") need a per-tuple lookup.
    survived = row_lookup_sum(cm, cards, look.prev)
    expected = np.array([math.comb(v, k - 1) for v in range(p + 1)], dtype=np.int64)[nonmissing]
    dirty = np.flatnonzero(survived != expected)
    valid = np.array([math.comb(v, k) for v in range(p + 1)], dtype=np.int64)[nonmissing]
    if dirty.size:
        valid[dirty] = row_lookup_sum(cm, cards, look.cand, dirty)
    return valid


def _part_histogram(part: Part, schema: Schema, chunk_rows: int, spec: LevelSpec) -> np.ndarray:
    upper = math.comb(len(schema.columns), spec.k)
    hist = np.zeros(upper + 1, dtype=np.int64)
    look = _lookups(spec, schema.cardinalities)
    for cm in part.chunks(schema, chunk_rows):
        hist += np.bincount(np.clip(_valid(cm, schema.cardinalities, spec, look), 0, upper), minlength=upper + 1)
    return hist


def valid_histogram(source: RowSource, spec: LevelSpec) -> list[np.ndarray]:
    """Per partition (in order): records by number of valid k-tuples, over 0..C(p, k).

    With a public domain every record holds all p 1-tuples: the partitions' row counts
    (Parquet metadata) give the histogram without reading a row.
    """
    if spec.k == 1 and spec.public:
        p = len(source.schema.columns)
        return [np.bincount([p], weights=[part.rows], minlength=p + 1).astype(np.int64) for part in source.parts]
    return source.runner.map(_part_histogram, source.parts, source.schema, source.chunk_rows, spec)


def records_over(hists: Sequence[np.ndarray], allowed: int) -> list[int]:
    """Per partition: records holding more than ``allowed`` valid tuples."""
    return [int(h[allowed + 1 :].sum()) for h in hists]


def capped_counts(cm: np.ndarray, cards, cand: dict[Combo, np.ndarray], rows: np.ndarray, allowed: int,
                  rng: np.random.Generator) -> dict[Combo, np.ndarray]:
    """Counts contributed by records that keep a random ``allowed`` of their valid tuples.

    Draws ``rows.size x len(cand)`` float64 from ``rng``, row by row.
    """
    combos = list(cand)
    flat = [cand[c].ravel() for c in combos]
    out = {c: np.zeros(cand[c].size, dtype=np.int64) for c in combos}
    if rows.size == 0 or allowed <= 0 or not combos:
        return {c: v.reshape(cand[c].shape) for c, v in out.items()}
    step = max(1, _CHUNK // len(combos))
    for start in range(0, rows.size, step):
        r = rows[start : start + step]
        keys = np.empty((r.size, len(combos)), dtype=np.int64)
        valid = np.empty((r.size, len(combos)), dtype=bool)
        for t, c in enumerate(combos):
            keys[:, t] = flat_index(cm, cards, c, r)
            valid[:, t] = flat[t][keys[:, t]]
        u = rng.random(valid.shape)
        u[~valid] = 2.0  # invalid tuples sort last: never picked (rows here have > allowed valid)
        if allowed < len(combos):
            pick = np.argpartition(u, allowed - 1, axis=1)[:, :allowed]
            keep = np.zeros(valid.shape, dtype=bool)
            np.put_along_axis(keep, pick, True, axis=1)
            keep &= valid
        else:
            keep = valid
        for t, c in enumerate(combos):
            sel = keys[keep[:, t], t]
            if sel.size:
                out[c] += np.bincount(sel, minlength=out[c].size)
    return {c: v.reshape(cand[c].shape) for c, v in out.items()}


def _part_counts(part: Part, schema: Schema, chunk_rows: int, spec: LevelSpec, allowed: int,
                 rng: np.random.Generator, over: int) -> dict[Combo, np.ndarray]:
    """``over``: the partition's records above ``allowed`` (none: no per-row lookup needed)."""
    cards = schema.cardinalities
    combos = tuple(spec.cand)
    plan = plan_blocks_cached(combos, tuple(cards))
    out = {c: np.zeros(spec.cand[c].shape, dtype=np.int64) for c in combos}
    look = _lookups(spec, cards)
    for cm in part.chunks(schema, chunk_rows):
        if over == 0:
            add_counts(out, count_blocks(cm, cards, plan))
            continue
        valid = _valid(cm, cards, spec, look)
        capped = np.flatnonzero(valid > allowed)
        sub = cm if capped.size == 0 else np.ascontiguousarray(cm[:, valid <= allowed])
        add_counts(out, count_blocks(sub, cards, plan))
        add_counts(out, capped_counts(cm, cards, spec.cand, capped, allowed, rng))
    return out


def tuple_counts(source: RowSource, spec: LevelSpec, allowed: int, over: Sequence[int],
                 rng: np.random.Generator) -> dict[Combo, np.ndarray]:
    """Counts of every candidate tuple (zero outside the candidates), each record keeping
    at most ``allowed`` of its valid tuples; ``over``: :func:`records_over` per partition.

    Moves ``rng`` on by every draw made, as one pass over the rows in order would.
    """
    if not spec.cand or allowed <= 0:
        return {}
    width = len(spec.cand)
    starts = np.concatenate([[0], np.cumsum(np.asarray(over, dtype=np.int64))]) * width
    jobs = [(part, advance(rng, int(s)), int(o)) for part, s, o in zip(source.parts, starts[:-1], over)]
    counts = source.runner.fold(_part_counts_at, jobs, add_counts, source.schema, source.chunk_rows, spec,
                                int(allowed))
    set_state(rng, advance(rng, int(starts[-1])))
    return {c: np.where(spec.cand[c], counts[c], 0) for c in spec.cand}


def _part_counts_at(job: tuple[Part, np.random.Generator, int], schema: Schema, chunk_rows: int, spec: LevelSpec,
                    allowed: int) -> dict[Combo, np.ndarray]:
    part, rng, over = job
    return _part_counts(part, schema, chunk_rows, spec, allowed, rng, over)
