"""The counting adapter used by sds: exact marginals, row subsets, flat indices."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from dpsynth.rows.counting import column_major, count_k_marginals, count_marginals, flat_index


def _table(n=2_000, p=7, seed=0):
    rng = np.random.default_rng(seed)
    cards = [int(c) for c in rng.integers(2, 9, size=p)]
    codes = np.stack([rng.integers(0, c, size=n) for c in cards], axis=1).astype(np.uint8)
    return codes, cards


def _naive(codes, cards, cols):
    idx = np.zeros(codes.shape[0], dtype=np.int64)
    for j in cols:
        idx = idx * cards[j] + codes[:, j]
    return np.bincount(idx, minlength=int(np.prod([cards[j] for j in cols]))).reshape([cards[j] for j in cols])


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("max_cells", [None, 8, 64, 4096])
def test_all_k_marginals_exact(k, max_cells):
    codes, cards = _table()
    got = count_k_marginals(codes, cards, k, max_cells=max_cells)
    assert set(got) == set(combinations(range(codes.shape[1]), k))
    for cols, tab in got.items():
        np.testing.assert_array_equal(tab, _naive(codes, cards, cols))


# The block cover itself is dpsynth.rows.counting.plan_blocks, tested in test_metrics.py
# (every subset read off once, within the limit, oversized subsets alone).


def test_row_subset_and_flat_index():
    codes, cards = _table(n=500)
    rows = np.arange(0, 500, 3)
    cm = column_major(codes)
    got = count_marginals(np.ascontiguousarray(cm[:, rows]), cards, [(1, 4)])
    np.testing.assert_array_equal(got[(1, 4)], _naive(codes[rows], cards, (1, 4)))
    idx = flat_index(cm, cards, (0, 2, 5), rows)
    expect = (codes[rows, 0].astype(np.int64) * cards[2] + codes[rows, 2]) * cards[5] + codes[rows, 5]
    np.testing.assert_array_equal(idx, expect)


def test_rejects_negative_codes():
    with pytest.raises(ValueError):
        column_major(np.array([[0, -1]]))
