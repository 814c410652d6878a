"""sds's complete sampler: parents chosen from the measured 3-way tables (issue 27 section 3).

A column built as (a + b) mod c shows almost nothing against a or b alone; shortlisting its
parents by single-parent mutual information never offered the pair (a, b), so the sampler
lost the interaction (docs/sds-generalisation.md, ninth round).
"""

from __future__ import annotations

import numpy as np

from dpsynth.methods import get_method
from dpsynth.methods.sds.complete import _sample_complete
from dpsynth.privacy.budget import Budget, Ledger
from dpsynth.rows.encoding import EncodedTable
from dpsynth.schema import schema_from_dict

#: Columns of the parity table: 0-4 a cluster (copies of column 0), 5 and 6 weakly tied to
#: it (a copy of column 0, resp. 1, on 30% of records), 7 = (5 + 6) mod 4 on 90% of records,
#: else a copy of column 0: each of 5 and 6 alone says almost nothing about 7, while the
#: cluster says a little, so a shortlist by single-parent MI offers 7 only cluster parents.
A, B, PARITY = 5, 6, 7


def _parity_table(n: int = 20_000, seed: int = 5) -> tuple:
    rng = np.random.default_rng(seed)
    codes = np.empty((n, 8), dtype=np.uint8)
    codes[:, 0] = rng.integers(0, 4, n)
    for j in range(1, 5):
        codes[:, j] = np.where(rng.random(n) < 0.8, codes[:, 0], rng.integers(0, 4, n))
    codes[:, A] = np.where(rng.random(n) < 0.3, codes[:, 0], rng.integers(0, 4, n))
    codes[:, B] = np.where(rng.random(n) < 0.3, codes[:, 1], rng.integers(0, 4, n))
    codes[:, PARITY] = np.where(rng.random(n) < 0.9, (codes[:, A] + codes[:, B]) % 4, codes[:, 0])
    schema = schema_from_dict({"name": "parity", "columns": [
        {"name": f"c{j}", "type": "categorical", "values": [f"v{v}" for v in range(4)]} for j in range(8)]})
    return schema, codes


def _model(epsilon: float = 20.0):
    schema, codes = _parity_table()
    method = get_method("sds", {"fit_pairs": False})
    budget = Budget(epsilon=epsilon, delta=1e-6)
    ledger = Ledger(budget, method.plan(schema, budget))
    m = method.measure(EncodedTable(schema=schema, codes=codes), ledger, np.random.default_rng(0))
    model, _, _ = method._complete_model(m, schema)
    return method, model, codes


def _triple(codes: np.ndarray) -> np.ndarray:
    idx = (codes[:, A].astype(np.int64) * 4 + codes[:, B]) * 4 + codes[:, PARITY]
    return np.bincount(idx, minlength=64) / len(codes)


def test_a_parity_column_gets_its_two_parents_in_every_order():
    _, model, _ = _model()
    for first in range(8):
        fam = {j: set(par) | {j} for j, par in model.order(first)}
        # some column of the triple is drawn from the other two: the family holds it
        assert any(fam[j] == {A, B, PARITY} for j in (A, B, PARITY)), (first, model.order(first))


def test_the_sampled_parity_triple_is_close_to_the_real_one():
    method, model, codes = _model()
    raw = _sample_complete(model, len(codes), method.params, np.random.default_rng(1))
    tvd = 0.5 * float(np.abs(_triple(raw) - _triple(codes)).sum())
    # one family holds the triple: TVD within sampling and noise (measured .037); the
    # shortlist by single-parent MI drew the parity column from the cluster (measured .675)
    assert tvd < 0.1, tvd


def test_the_joint_gain_sees_the_interaction_and_not_the_cluster():
    _, model, _ = _model()
    assert model.joint_gain(A, B, PARITY) > 0.5
    assert model.joint_gain(A, PARITY, B) > 0.5
    # a pair of cluster columns adds nothing about the parity column beyond its pairs
    assert abs(model.joint_gain(1, 2, PARITY)) < 0.05


def test_the_generator_reports_its_parity_columns_without_changing_its_table():
    """benchmarks/sds_matrix.py's make_table: ``structure`` lists each column's parents and
    whether it is a parity column, and the table's bytes are the same with or without it."""
    from benchmarks.sds_matrix import make_table

    structure: list = []
    _, plain = make_table(3_000, 10, 6, 0.0, 0.0, seed=8000, interactions=0.6)
    _, codes = make_table(3_000, 10, 6, 0.0, 0.0, seed=8000, interactions=0.6, structure=structure)
    assert np.array_equal(plain, codes)
    assert [j for j, _, _ in structure] == list(range(10))
    parity = [(j, par) for j, par, inter in structure if inter]
    assert parity
    for j, (a, b) in parity:  # (a + b) mod card on about 90% of the records
        card = int(codes[:, j].max()) + 1
        assert np.mean(codes[:, j] == (codes[:, a].astype(int) + codes[:, b]) % card) > 0.85
