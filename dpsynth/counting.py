"""Exact k-way marginal counts of integer-coded tables, vectorised over rows and columns.

The cost of counting a marginal with one ``bincount`` is a few passes over the rows, so
counting all C(p, k) marginals one by one costs C(p, k) passes. Here the requested
column subsets are first *covered by blocks*: sets of columns whose joint domain is at
most ``max_cells`` cells. Each block is counted with a single ``bincount`` of the
rows' flat cell index in the block (codes combined in C order), and every requested
subset inside the block is read off by summing the block's table over its other axes,
which costs ``max_cells`` per subset instead of a pass over the rows. A block of six
columns of cardinality 7 (117,649 cells) answers twenty 3-way marginals with seven
passes over the rows. The cover is greedy: a block starts from an uncovered subset and
keeps adding the column that completes the most uncovered subsets while the domain
fits.

Counts of all 3-way marginals of 1,000,000 x 20 codes (cardinalities 2-12) take about
0.7 s here, against about 14 s for one ``bincount`` per marginal.

Every table is dense over the columns' full cardinalities (missing codes included),
shaped by the subset's cardinalities with axes in subset order.
"""

from __future__ import annotations

from itertools import combinations
from typing import Iterable, Sequence

import numpy as np

__all__ = [
    "column_major",
    "flat_index",
    "cover_blocks",
    "count_marginals",
    "count_k_marginals",
    "default_max_cells",
]

Subset = tuple[int, ...]

#: Rows combined into one flat-index buffer at a time (bounds temporary memory).
CHUNK_ROWS = 1 << 20


def column_major(codes: np.ndarray) -> np.ndarray:
    """Codes as a C-contiguous (p, n) array: one column per row of the result."""
    arr = np.asarray(codes)
    if arr.ndim != 2:
        raise ValueError(f"codes must be a 2-d array, got shape {arr.shape}")
    if arr.size and arr.min() < 0:
        raise ValueError("codes must be >= 0")
    top = int(arr.max()) if arr.size else 0
    dtype = np.uint8 if top < 256 else (np.uint16 if top < 65536 else np.int64)
    return np.ascontiguousarray(arr.T, dtype=dtype)


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


def _domain(cols: Iterable[int], cards: Sequence[int]) -> int:
    d = 1
    for j in cols:
        d *= int(cards[j])
    return d


def cover_blocks(
    cards: Sequence[int], subsets: Sequence[Subset], max_cells: int
) -> list[tuple[Subset, list[Subset]]]:
    """Greedy cover of ``subsets`` by blocks of joint domain <= ``max_cells``.

    Returns ``(block columns, subsets read off that block)``; each subset is read off
    exactly one block. A subset whose own domain exceeds ``max_cells`` is a block by
    itself.
    """
    todo = sorted({tuple(sorted(s)) for s in subsets})
    if not todo:
        return []
    p = len(cards)
    width = max(len(s) for s in todo)
    # Pad subsets to one width with a sentinel column p that is always "in the block".
    mat = np.full((len(todo), width), p, dtype=np.int64)
    for i, s in enumerate(todo):
        mat[i, : len(s)] = s
    uncovered = np.ones(len(todo), dtype=bool)
    dom = np.array([_domain(s, cards) for s in todo], dtype=np.float64)
    card_arr = np.asarray(cards, dtype=np.float64)
    blocks: list[tuple[Subset, list[Subset]]] = []
    while uncovered.any():
        # Seed: the uncovered subset with the smallest domain (leaves most room to grow).
        idx = np.flatnonzero(uncovered)
        seed = int(idx[np.argmin(dom[idx])])
        in_block = np.zeros(p + 1, dtype=bool)
        in_block[p] = True
        in_block[mat[seed]] = True
        size = dom[seed]
        while True:
            missing = ~in_block[mat]  # (subsets, width)
            n_missing = missing.sum(axis=1)
            cand = uncovered & (n_missing == 1)
            if not cand.any():
                break
            lacking = mat[cand][missing[cand]]
            gain = np.bincount(lacking, minlength=p + 1)[:p].astype(np.float64)
            gain[(size * card_arr) > max_cells] = 0
            best = int(np.argmax(gain))
            if gain[best] <= 0:
                break
            in_block[best] = True
            size *= card_arr[best]
        covered = uncovered & ~(~in_block[mat]).any(axis=1)
        block = tuple(int(j) for j in np.flatnonzero(in_block[:p]))
        blocks.append((block, [todo[i] for i in np.flatnonzero(covered)]))
        uncovered &= ~covered
    return blocks


def _read_off(table: np.ndarray, block: Subset, subset: Subset) -> np.ndarray:
    axes = tuple(i for i, j in enumerate(block) if j not in subset)
    out = table.sum(axis=axes) if axes else table
    return np.ascontiguousarray(out)


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
    out: dict[Subset, np.ndarray] = {}
    buf = np.empty(min(n, CHUNK_ROWS), dtype=np.int64)
    for block, wanted in cover_blocks(cards, subsets, limit):
        shape = tuple(int(cards[j]) for j in block)
        size = _domain(block, cards)
        table = np.zeros(size, dtype=np.int64)
        for start in range(0, n, CHUNK_ROWS):
            rows = slice(start, min(n, start + CHUNK_ROWS))
            idx = flat_index(cm, cards, block, rows, out=buf)
            table += np.bincount(idx, minlength=size)
        table = table.reshape(shape)
        for s in wanted:
            out[s] = _read_off(table, block, s)
    return out


def count_k_marginals(
    codes: np.ndarray, cards: Sequence[int], k: int, *, max_cells: int | None = None
) -> dict[Subset, np.ndarray]:
    """All C(p, k) k-way marginals of row-major ``codes`` (n, p)."""
    cm = column_major(codes)
    return count_marginals(cm, cards, list(combinations(range(cm.shape[0]), k)), max_cells=max_cells)
