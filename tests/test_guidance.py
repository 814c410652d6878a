"""The small-sample guard reads only the 2-way rows of sds's aggregates (issue 14 item 3:
it ran twice per release over every row, 0.3-2.5 s each on the 8,000 x 20 table)."""

from __future__ import annotations

import dataclasses

import numpy as np

from benchmarks.sds_matrix import make_table
from dpsynth.rows.encoding import EncodedTable
from dpsynth.methods.guidance import _two_way_tables
from dpsynth.methods import get_method
from dpsynth.methods.sds import tables_from_frame
from dpsynth.privacy.budget import Budget, Ledger


def test_two_way_tables_from_the_two_way_rows_equal_those_from_the_whole_frame():
    schema, codes = make_table(3_000, 8, 6, 0.25, 0.2, seed=5)
    method = get_method("sds", {})
    budget = Budget(epsilon=4.0, delta=1e-6)
    m = method.measure(EncodedTable(schema, codes), Ledger(budget, method.plan(schema, budget)),
                       np.random.default_rng(1))
    frame = m.tables["aggregates"]
    assert set(frame["length"]) >= {1, 2, 3}  # the frame holds every level
    full = tables_from_frame(frame, schema, 3)[1]
    # a measurement saved before sds stated its 2-way tables: read from the frame's 2-way rows
    older = dataclasses.replace(m, measured=tuple(nm for nm in m.measured if len(nm.attrs) == 1))
    fast = _two_way_tables(older, schema)
    assert full and set(fast) == set(full)
    for pair, table in full.items():
        assert np.array_equal(fast[pair], table)
    # today's measurements state them (noisy counts before normalisation): those are read
    stated = _two_way_tables(m, schema)
    assert set(stated) == set(full)
    for nm in m.measured:
        if len(nm.attrs) == 2:
            pair = tuple(schema.index(a) for a in nm.attrs)
            assert np.array_equal(stated[pair], nm.counts)
