"""The counting engine: exact k-way marginal counts of integer-coded tables.

A k-way marginal is the contingency table of k columns over the full cross-product
of their codes (missing is a code of its own), dense, shaped by the columns'
cardinalities with axes in subset order.

:func:`iter_marginals` counts many of them in few passes over the rows: the requested
column subsets are covered by *blocks* of columns whose joint domain stays small
(``max_cells``); each block is counted once (codes combined into one flat index with
strides, one ``bincount``) and every requested subset inside it is obtained by summing
the block's table over the other axes. One pass over a block of five columns yields
ten 3-way, ten 2-way and five 1-way marginals. Blocks are produced lazily: at most one
block's table lives in memory, plus one index buffer of ``chunk_rows`` entries.
Counts of all 3-way marginals of 1,000,000 x 20 codes take about 0.7 s here, against
about 14 s for one ``bincount`` per marginal.

DP methods count through :func:`count_marginals` on column-major codes
(:func:`column_major`), with a block size tuned to the number of rows;
:func:`flat_index` gives per-record tuple keys. Utility metrics (TVD) live in
:mod:`dpsynth.evaluation.metrics`, the NIST score in :mod:`dpsynth.evaluation.nist_score`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from itertools import combinations
from typing import Iterable, Iterator, Sequence

import numpy as np

from .table import EncodedTable, code_dtype

__all__ = [
    "Subset",
    "Block",
    "CodesLike",
    "DEFAULT_MAX_CELLS",
    "DEFAULT_CHUNK_ROWS",
    "MAX_DENSE_CELLS",
    "column_major",
    "flat_index",
    "k_subsets",
    "plan_blocks",
    "plan_blocks_cached",
    "marginal_counts",
    "iter_marginals",
    "iter_marginals_many",
    "count_marginals",
    "count_k_marginals",
    "count_blocks",
    "default_max_cells",
]

Subset = tuple[int, ...]
CodesLike = np.ndarray | EncodedTable

#: Largest joint domain (cells) of a block counted in one bincount. 2**16 cells keep
#: the index in uint16 and the int64 counts (512 KiB) in a core's L2 cache; see
#: benchmarks/marginal_counting.py for the measurements behind the choice.
DEFAULT_MAX_CELLS = 1 << 16
#: Rows indexed per bincount call: bounds the index buffer whatever the table size.
DEFAULT_CHUNK_ROWS = 1 << 20
#: A single requested marginal larger than this is refused (a dense int64 table of
#: 2**27 cells takes 1 GiB); :func:`tvd` of such tables goes through a sparse path.
MAX_DENSE_CELLS = 1 << 27
_MAX_BLOCK_WIDTH = 8


# --- inputs --------------------------------------------------------------------


def _codes_array(codes: CodesLike) -> np.ndarray:
    arr = codes.codes if isinstance(codes, EncodedTable) else np.asarray(codes)
    if arr.ndim != 2:
        raise ValueError(f"codes must be a 2-D (rows, columns) array, got {arr.ndim} dimension(s)")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"codes must hold integers, got dtype {arr.dtype}")
    return arr


def _cards(cardinalities: Sequence[int], p: int) -> tuple[int, ...]:
    cards = tuple(int(c) for c in cardinalities)
    if len(cards) != p:
        raise ValueError(f"{len(cards)} cardinalities for {p} columns")
    if any(c < 1 for c in cards):
        raise ValueError("every cardinality must be at least 1")
    return cards


def column_major(codes: CodesLike, cards: Sequence[int] | None = None) -> np.ndarray:
    """Codes as a C-contiguous (p, n) array in the smallest code type: one column per row.

    With ``cards``, every code must lie in ``0..card-1`` (a code outside would silently
    alias into a neighbouring cell of a flat index: it is a bug upstream, never a row
    oddity); without, codes must be >= 0.
    """
    arr = _codes_array(codes)
    if cards is None:
        if arr.size and arr.min() < 0:
            raise ValueError("codes must be >= 0")
        cards = (int(arr.max()) + 1 if arr.size else 1,)
    elif arr.shape[0]:
        lo, hi = arr.min(axis=0), arr.max(axis=0)
        bad = np.flatnonzero((lo < 0) | (hi >= np.asarray(cards)))
        if bad.size:
            raise ValueError(f"codes outside 0..cardinality-1 in column(s) {bad.tolist()}")
    return np.ascontiguousarray(arr.T, dtype=code_dtype(cards))


def _resolve_subsets(subsets: Iterable[Sequence[int]], p: int) -> list[Subset]:
    out: list[Subset] = []
    seen: set[Subset] = set()
    for s in subsets:
        t = tuple(sorted(int(j) for j in s))
        if not t:
            raise ValueError("a marginal needs at least one column")
        if len(set(t)) != len(t):
            raise ValueError(f"subset {tuple(s)} repeats a column")
        if t[0] < 0 or t[-1] >= p:
            raise ValueError(f"subset {tuple(s)} names a column outside 0..{p - 1}")
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def k_subsets(p: int, ks: int | Iterable[int]) -> list[Subset]:
    """All k-subsets of ``range(p)`` for each k in ``ks`` (k > p gives none), sorted."""
    ks = (ks,) if isinstance(ks, (int, np.integer)) else tuple(ks)
    if any(int(k) < 1 for k in ks):
        raise ValueError(f"marginal orders must be >= 1, got {ks}")
    return [s for k in sorted(set(int(k) for k in ks)) for s in combinations(range(p), k)]


# --- planning ------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """Columns counted together in one pass, and the requested subsets read off them."""

    columns: Subset
    subsets: tuple[Subset, ...]


def _domain(cols: Iterable[int], cards: Sequence[int]) -> int:
    return math.prod(cards[j] for j in cols)


def plan_blocks(
    subsets: Iterable[Sequence[int]],
    cardinalities: Sequence[int],
    *,
    max_cells: int = DEFAULT_MAX_CELLS,
    max_width: int = _MAX_BLOCK_WIDTH,
) -> tuple[Block, ...]:
    """Greedy cover of the requested subsets by blocks of joint domain <= ``max_cells``.

    Each block starts from the first uncovered subset (largest first, then
    lexicographic) and grows by the column that completes the most uncovered
    subsets, preferring small cardinalities, while the domain allows. Every requested
    subset is assigned to exactly one block. A subset whose own domain exceeds
    ``max_cells`` becomes a block on its own. Deterministic for given inputs.
    """
    cards = tuple(int(c) for c in cardinalities)
    p = len(cards)
    targets = sorted(_resolve_subsets(subsets, p), key=lambda s: (-len(s), s))
    uncovered = set(targets)
    sizes = sorted({len(t) for t in targets})
    blocks: list[Block] = []
    cursor = 0
    while uncovered:
        while targets[cursor] not in uncovered:
            cursor += 1
        block = list(targets[cursor])
        dom = _domain(block, cards)
        while len(block) < max_width:
            best: tuple[int, int, int] | None = None
            members = set(block)
            for c in range(p):
                if c in members or dom * cards[c] > max_cells:
                    continue
                gain = 0
                for size in sizes:
                    for rest in combinations(block, size - 1):
                        if tuple(sorted(rest + (c,))) in uncovered:
                            gain += 1
                key = (gain, -cards[c], -c)
                if gain and (best is None or key > best):
                    best = key
            if best is None:
                break
            c = -best[2]
            block.append(c)
            dom *= cards[c]
        cols = tuple(sorted(block))
        mine = tuple(
            s for size in reversed(sizes) for s in combinations(cols, size) if s in uncovered
        )
        uncovered.difference_update(mine)
        blocks.append(Block(columns=cols, subsets=mine))
    return tuple(blocks)


@functools.lru_cache(maxsize=64)
def plan_blocks_cached(subsets: tuple[Subset, ...], cardinalities: tuple[int, ...],
                       max_cells: int = DEFAULT_MAX_CELLS) -> tuple[Block, ...]:
    """:func:`plan_blocks` remembered per process (partitions of one table share a plan)."""
    return plan_blocks(subsets, cardinalities, max_cells=max_cells)


# --- counting ------------------------------------------------------------------


def marginal_counts(codes: CodesLike, cardinalities: Sequence[int], subset: Sequence[int]) -> np.ndarray:
    """Counts of one marginal, shaped by the subset's cardinalities (axes in subset order).

    The plain per-subset reference: ``ravel_multi_index`` then ``bincount``.
    """
    arr = _codes_array(codes)
    cards = _cards(cardinalities, arr.shape[1])
    subset = tuple(int(j) for j in subset)
    dims = tuple(cards[j] for j in subset)
    size = math.prod(dims)
    if size > MAX_DENSE_CELLS:
        raise ValueError(f"marginal {subset} has {size} cells, more than {MAX_DENSE_CELLS}")
    if arr.shape[0] == 0:
        return np.zeros(dims, dtype=np.int64)
    flat = np.ravel_multi_index(tuple(arr[:, j] for j in subset), dims)
    return np.bincount(flat, minlength=size).astype(np.int64, copy=False).reshape(dims)


def _block_counts(cols: np.ndarray, block: Subset, cards: Sequence[int], chunk_rows: int) -> np.ndarray:
    """Joint counts of the block's columns (C order), by Horner-combined flat indices."""
    dims = tuple(cards[j] for j in block)
    size = math.prod(dims)
    n = cols.shape[1]
    counts = np.zeros(size, dtype=np.int64)
    if n == 0:
        return counts.reshape(dims)
    idx_type = code_dtype((size,))
    if idx_type == np.uint8:
        idx_type = np.dtype(np.uint16)  # bincount converts anyway; uint8 saves nothing
    step = max(1, min(chunk_rows, n))
    buf = np.empty(step, dtype=idx_type)
    for start in range(0, n, step):
        stop = min(n, start + step)
        idx = buf[: stop - start]
        np.copyto(idx, cols[block[0], start:stop], casting="unsafe")
        for j in block[1:]:
            np.multiply(idx, cards[j], out=idx)
            np.add(idx, cols[j, start:stop], out=idx, dtype=idx_type)
        part = np.bincount(idx, minlength=size)
        if start == 0 and stop == n:
            counts = part.astype(np.int64, copy=False)
        else:
            counts += part
    return counts.reshape(dims)


def _read_off(
    table: np.ndarray, block: Subset, subsets: Sequence[Subset], cards: Sequence[int]
) -> list[np.ndarray]:
    """Each subset's table, summed from the smallest already-computed superset."""
    cache: dict[Subset, np.ndarray] = {block: table}
    out = []
    for s in subsets:  # largest subsets first (plan order), so smaller ones reuse them
        src = min((c for c in cache if set(s) <= set(c)), key=lambda c: _domain(c, cards))
        if src == s:
            out.append(cache[s])
            continue
        axes = tuple(i for i, j in enumerate(src) if j not in s)
        res = cache[src].sum(axis=axes)
        cache[s] = res
        out.append(res)
    return out


def count_blocks(
    cm: np.ndarray, cards: Sequence[int], plan: Sequence[Block], *, chunk_rows: int = DEFAULT_CHUNK_ROWS
) -> dict[Subset, np.ndarray]:
    """Counts of every subset of a block plan (:func:`plan_blocks`) in column-major codes
    ``cm``: the per-chunk step of counting a table read in pieces, planned once."""
    out: dict[Subset, np.ndarray] = {}
    for block in plan:
        table = _block_counts(cm, block.columns, cards, chunk_rows)
        out.update(zip(block.subsets, _read_off(table, block.columns, block.subsets, cards)))
    return out


def iter_marginals_many(
    tables: Sequence[CodesLike],
    cardinalities: Sequence[int],
    subsets: Iterable[Sequence[int]],
    *,
    max_cells: int = DEFAULT_MAX_CELLS,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> Iterator[tuple[Subset, list[np.ndarray]]]:
    """Like :func:`iter_marginals` for several tables over the same columns at once.

    Yields ``(subset, [counts in table 0, counts in table 1, ...])``; one plan serves
    all tables, so real and synthetic marginals arrive side by side.
    """
    if not tables:
        raise ValueError("no tables given")
    p = _codes_array(tables[0]).shape[1]
    cards = _cards(cardinalities, p)
    cols = []
    for t in tables:
        if _codes_array(t).shape[1] != p:
            raise ValueError("all tables must have the same columns")
        cols.append(column_major(t, cards))
    plan = plan_blocks(subsets, cards, max_cells=max_cells)
    for block in plan:
        if block.columns in block.subsets and _domain(block.columns, cards) > MAX_DENSE_CELLS:
            raise ValueError(
                f"marginal {block.columns} has {_domain(block.columns, cards)} cells, "
                f"more than {MAX_DENSE_CELLS}"
            )
    for block in plan:
        per_table = [
            _read_off(_block_counts(c, block.columns, cards, chunk_rows), block.columns, block.subsets, cards)
            for c in cols
        ]
        for i, s in enumerate(block.subsets):
            yield s, [tab[i] for tab in per_table]


def iter_marginals(
    codes: CodesLike,
    cardinalities: Sequence[int],
    subsets: Iterable[Sequence[int]],
    *,
    max_cells: int = DEFAULT_MAX_CELLS,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> Iterator[tuple[Subset, np.ndarray]]:
    """Counts of every requested marginal, lazily: yields ``(subset, counts)``.

    ``subset`` is the sorted tuple of column indices, ``counts`` an int64 array shaped
    by their cardinalities (axis i = column subset[i]). Each distinct subset is yielded
    exactly once, in the order of the block plan (not the order given).
    """
    many = iter_marginals_many([codes], cardinalities, subsets, max_cells=max_cells, chunk_rows=chunk_rows)
    for s, (counts,) in many:
        yield s, counts


# --- the DP methods' entry points ------------------------------------------------


def default_max_cells(n_rows: int) -> int:
    """Block domain limit: big enough to share passes, small enough to stay in cache.

    Reading a subset off a block costs about ``max_cells``; a pass over the rows costs
    ``n_rows``. Measured here: 2**16 is best at a million rows; small tables prefer
    smaller blocks.
    """
    return int(min(1 << 16, max(1 << 10, 1 << int(np.log2(max(n_rows, 1) / 8 + 1)))))


def flat_index(
    cm: np.ndarray,
    cards: Sequence[int],
    cols: Sequence[int],
    rows: np.ndarray | slice | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """C-order flat cell index of each row in the table of ``cols`` (int64)."""
    sel = slice(None) if rows is None else rows
    first = cm[cols[0], sel]
    if out is None:
        out = first.astype(np.int64)
    else:
        out = out[: first.shape[0]]
        out[...] = first
    for j in cols[1:]:
        out *= int(cards[j])
        out += cm[j, sel]
    return out


def count_marginals(
    cm: np.ndarray,
    cards: Sequence[int],
    subsets: Sequence[Subset],
    *,
    max_cells: int | None = None,
) -> dict[Subset, np.ndarray]:
    """Counts of every requested marginal from column-major codes ``cm`` (see :func:`column_major`).

    Returns ``{subset: int64 array shaped by the subset's cardinalities}`` with the
    subset's columns in increasing order.
    """
    p, n = cm.shape
    if len(cards) != p:
        raise ValueError(f"{len(cards)} cardinalities for {p} columns")
    limit = default_max_cells(n) if max_cells is None else int(max_cells)
    return dict(iter_marginals(cm.T, cards, subsets, max_cells=limit, chunk_rows=DEFAULT_CHUNK_ROWS))


def count_k_marginals(
    codes: np.ndarray, cards: Sequence[int], k: int, *, max_cells: int | None = None
) -> dict[Subset, np.ndarray]:
    """All C(p, k) k-way marginals of row-major ``codes`` (n, p)."""
    cm = column_major(codes)
    return count_marginals(cm, cards, list(combinations(range(cm.shape[0]), k)), max_cells=max_cells)
