"""sds's aggregates table (one row per reported tuple) to and from its dense tables: the same
frame and tables as a row-by-row reading, and no copy of the frame's code columns held on the
way (a 10M-row release's frame has about 2M rows: issue 25, docs/scale.md, sds-peak)."""

from __future__ import annotations

import tracemalloc
from itertools import combinations

import numpy as np
import pandas as pd

from dpsynth.methods.sds import aggregates_frame, tables_from_frame
from dpsynth.schema import schema_from_dict


def _schema(cards):
    return schema_from_dict({"name": "frame", "columns": [
        {"name": f"c{j}", "type": "categorical", "values": [f"v{i}" for i in range(c)]}
        for j, c in enumerate(cards)]})


def _levels(cards, rng, density=0.7):
    """Reported tables of every 1-, 2- and 3-tuple: random positive counts, some cells 0."""
    levels = []
    for k in (1, 2, 3):
        level = {}
        for combo in combinations(range(len(cards)), k):
            shape = tuple(cards[j] for j in combo)
            tab = rng.integers(1, 1000, size=shape).astype(np.int64) * (rng.random(shape) < density)
            if tab.any():
                level[combo] = tab
        levels.append(level)
    return levels


def _reference_frame(levels, schema):
    """The frame read row by row: length, one code per column (-1 when absent), count."""
    rows = []
    for k, level in enumerate(levels, start=1):
        for combo, tab in level.items():
            for cell in zip(*np.nonzero(tab)):
                codes = [-1] * len(schema.columns)
                for j, code in zip(combo, cell):
                    codes[j] = int(code)
                rows.append([k, *codes, int(tab[cell])])
    names = ["length", *[f"col:{c.name}" for c in schema.columns], "count"]
    frame = pd.DataFrame(rows, columns=names)
    return frame.astype({"length": np.int8, "count": np.int64,
                         **{n: np.int32 for n in names[1:-1]}})


def test_the_frame_is_the_row_by_row_reading_and_reads_back_to_the_tables():
    rng = np.random.default_rng(3)
    cards = [2, 3, 4, 5, 3]
    schema, levels = _schema(cards), _levels(cards, rng)
    frame = aggregates_frame(levels, schema)
    pd.testing.assert_frame_equal(frame, _reference_frame(levels, schema), check_exact=True)
    assert isinstance(frame.index, pd.RangeIndex)
    for shuffled in (frame, frame.sample(frac=1.0, random_state=0).reset_index(drop=True)):
        back = tables_from_frame(shuffled, schema, 3)
        for got, want in zip(back, levels):
            assert sorted(got) == sorted(want)
            for combo in want:
                assert got[combo].dtype == np.int64 and np.array_equal(got[combo], want[combo])
    # the groups come back ordered by which columns they hold (column 0 the most significant, absent first)
    assert list(tables_from_frame(frame, schema, 3)[1]) == sorted(levels[1], key=lambda c: [j in c for j in range(5)])


def test_an_empty_frame_reads_back_to_empty_levels():
    schema = _schema([2, 3])
    frame = aggregates_frame([{}, {}], schema)
    assert len(frame) == 0 and list(frame.dtypes) == [np.int8, np.int32, np.int32, np.int64]
    assert tables_from_frame(frame, schema, 2) == [{}, {}]


def _peak(fn, *args):
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        out = fn(*args)
        return out, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _wide():
    cards = [8] * 12
    return _schema(cards), _levels(cards, np.random.default_rng(5), density=0.9)


def test_the_frame_is_built_without_a_copy_of_its_code_columns():
    schema, levels = _wide()
    frame, peak = _peak(aggregates_frame, levels, schema)
    n, held = len(frame), int(frame.memory_usage(index=False).sum())
    assert n > 100_000
    # the frame itself and one table's cell indices: no per-tuple pieces joined, no copy
    # into the frame (before: three copies of the int32 code columns, 3 x 5.6 MB here)
    assert peak < held + (2 << 20), (peak, held)


def test_the_tables_are_read_back_without_a_copy_of_the_code_columns():
    schema, levels = _wide()
    frame = aggregates_frame(levels, schema)
    n = len(frame)
    tables, peak = _peak(tables_from_frame, frame, schema, 3)
    dense = sum(t.nbytes for level in tables for t in level.values())
    # the dense tables and a few int64 per frame row (the group key, its order): before, an
    # int64 copy of every code column (12 x 8 bytes a row) was made first
    assert peak < dense + 4 * 8 * n + (1 << 20), (peak, dense, n)
