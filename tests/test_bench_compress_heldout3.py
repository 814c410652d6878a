"""benchmarks/compress_heldout3.py's second held-out set: each table holds the shape it is named for
and declares exactly its ordered columns (the set is fixed before any run; this pins it)."""

import numpy as np

from benchmarks.compress_heldout3 import HELD3, HELD3_SHAPES, ORDERED3, held3_table
from benchmarks.compress_rules import HELD, HELD2, WIDE, load_any, ordered_of


def _shares(name: str) -> tuple[list[str], list[np.ndarray], list[int]]:
    rows, _, shape = HELD3[name]
    names, codes, sizes = load_any(name)
    assert codes.shape == (rows, len(sizes)) and np.array_equal(codes, held3_table(*HELD3[name])[0])
    assert np.all(codes >= 0) and np.all(codes < np.array(sizes))
    return [s[0] for s in HELD3_SHAPES[shape]], [np.bincount(codes[:, j], minlength=s) for j, s in enumerate(sizes)], sizes


def test_the_second_held_out_set_is_new_and_within_the_briefs_bounds() -> None:
    seeds = [seed for _, seed, _ in HELD3.values()]
    assert sorted(seeds) == [51, 52, 53, 54, 55]
    others = {seed for fam in (WIDE, HELD, HELD2) for _, seed, _ in fam.values()}
    assert not others & set(seeds) and not set(HELD3) & (set(WIDE) | set(HELD) | set(HELD2))
    for name, (rows, _, shape) in HELD3.items():
        assert 1_000 <= rows <= 80_000 and 8 <= len(HELD3_SHAPES[shape]) <= 24
        kinds = [s[0] for s in HELD3_SHAPES[shape]]
        sizes = [s[1] for s in HELD3_SHAPES[shape]]
        # the ordered columns, declared numeric by the benchmark: exactly the ordered kinds, all codes
        assert ordered_of(name) == {f"w{j}": s for j, (k, s) in enumerate(zip(kinds, sizes)) if k in ORDERED3}
    assert ordered_of("hg-cats") == {}


def test_gaps_holds_missing_years_inside_the_support_and_heaped_ages() -> None:
    kinds, counts, sizes = _shares("hg-gaps")
    for j, k in enumerate(kinds):
        nz = np.flatnonzero(counts[j])
        if k == "gy":  # exactly the missing years empty, all strictly inside the observed span
            assert np.sum(counts[j] == 0) == HELD3_SHAPES["gaps"][j][2]
            assert nz.min() == 0 and nz.max() == sizes[j] - 1
        if k == "ah":  # heaps on multiples of 5; real small values (under 0.3% of the rows) among them
            five = np.arange(sizes[j]) % 5 == 0
            assert counts[j][five].mean() > 3 * counts[j][~five].mean()
            assert np.sum((counts[j] > 0) & (counts[j] < 0.003 * 20_000)) >= 10


def test_long_holds_high_cardinality_ordered_columns_with_long_empty_tails() -> None:
    kinds, counts, sizes = _shares("hg-long")
    wide = [j for j, k in enumerate(kinds) if k == "lt"]
    assert len(wide) == 4 and all(100 <= sizes[j] <= 300 for j in wide)
    for j in wide:
        nz = np.flatnonzero(counts[j])
        # both tails truly empty, at least a fifth of the codes each; no gap inside the support
        assert nz.min() >= sizes[j] // 5 and sizes[j] - 1 - nz.max() >= sizes[j] // 5
        assert nz.size == nz.max() - nz.min() + 1


def test_small_has_few_rows_and_many_columns() -> None:
    kinds, counts, sizes = _shares("hg-small")
    assert HELD3["hg-small"][0] <= 2_000 and len(sizes) >= 15
    assert sum(k == "s" for k in kinds) >= 6 and sum(s >= 15 for s in sizes) >= 10
    # at this n a real value of a wide column is a handful of rows
    assert sum(np.sum((c > 0) & (c < 10)) for c, s in zip(counts, sizes) if s >= 15) >= 5


def test_cats_is_all_categorical_with_rare_real_values_and_none_empty() -> None:
    kinds, counts, sizes = _shares("hg-cats")
    assert set(kinds) == {"cr"}
    rows = HELD3["hg-cats"][0]
    assert all(np.all(c > 0) for c in counts)  # no value empty
    # each column's declared rare values are real and rare: at least as many under 0.5% of the rows
    assert all(np.sum(c < 0.005 * rows) >= spec[2] for c, spec in zip(counts, HELD3_SHAPES["cats"]))


def test_months_holds_dense_years_a_late_start_and_small_months() -> None:
    kinds, counts, sizes = _shares("hg-months")
    months = [j for j, k in enumerate(kinds) if k == "dm"]
    assert [sizes[j] for j in months] == [240, 120]
    for j in months:
        lead = HELD3_SHAPES["months"][j][2]
        assert np.all(counts[j][:lead] == 0) and np.all(counts[j][lead:] > 0)
        by_year = counts[j].reshape(-1, 12).sum(axis=1)
        dense = by_year > 4 * np.median(by_year)
        assert 2 <= dense.sum() <= 3 and by_year[dense].sum() > 0.4 * counts[j].sum()
        assert np.sum(counts[j] < 0.003 * counts[j].sum()) >= sizes[j] // 2  # most months are small
