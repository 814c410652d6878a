"""Exact k-way marginal counts of integer-coded tables, and per-row flat cell indices.

The block engine itself lives in :func:`dpsynth.metrics.iter_marginals` (requested
column subsets are covered by blocks of joint domain <= ``max_cells``; each block is
counted with one ``bincount`` and its subsets are read off by summing). This module
adapts it to the column-major codes the sds method works on, with a block size tuned
to the number of rows, and provides :func:`flat_index` for per-record tuple keys.

Counts of all 3-way marginals of 1,000,000 x 20 codes (cardinalities 2-12) take about
0.7 s here, against about 14 s for one ``bincount`` per marginal.

Every table is dense over the columns' full cardinalities (missing codes included),
shaped by the subset's cardinalities with axes in subset order.
"""

from __future__ import annotations

from itertools import combinations
from typing import Sequence

import numpy as np

from .metrics import iter_marginals

__all__ = [
    "column_major",
    "flat_index",
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
    return dict(iter_marginals(cm.T, cards, subsets, max_cells=limit, chunk_rows=CHUNK_ROWS))


def count_k_marginals(
    codes: np.ndarray, cards: Sequence[int], k: int, *, max_cells: int | None = None
) -> dict[Subset, np.ndarray]:
    """All C(p, k) k-way marginals of row-major ``codes`` (n, p)."""
    cm = column_major(codes)
    return count_marginals(cm, cards, list(combinations(range(cm.shape[0]), k)), max_cells=max_cells)
