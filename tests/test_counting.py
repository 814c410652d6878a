"""The counting engine: exact marginals, block cover, row subsets."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from dpsynth.counting import column_major, count_k_marginals, count_marginals, cover_blocks, flat_index


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


def test_cover_reads_every_subset_once_within_limit():
    _, cards = _table(p=12, seed=3)
    subsets = list(combinations(range(12), 3))
    blocks = cover_blocks(cards, subsets, 2_000)
    seen = [s for _, ws in blocks for s in ws]
    assert sorted(seen) == sorted(subsets)
    for block, wanted in blocks:
        assert all(set(s) <= set(block) for s in wanted)
        size = int(np.prod([cards[j] for j in block]))
        assert size <= 2_000 or len(wanted) == 1
    # blocks share passes: far fewer blocks than subsets
    assert len(blocks) < len(subsets) / 2


def test_oversized_subset_is_its_own_block():
    cards = [50, 60, 70, 2]
    blocks = cover_blocks(cards, [(0, 1, 2), (1, 2, 3)], 1000)
    assert sorted(s for _, ws in blocks for s in ws) == [(0, 1, 2), (1, 2, 3)]


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
