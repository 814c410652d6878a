"""The shared proportional-fitting routine (dpsynth/postprocess/fitting.py): dense tables and row weights."""

from __future__ import annotations

import numpy as np

from dpsynth.postprocess.fitting import AxisMargin, CodeMargin, proportional_fit
from dpsynth.postprocess.correction import rake


def _table(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.5, 3.0, size=(3, 4))


def test_a_dense_table_reaches_consistent_margins():
    start, truth = _table(0), _table(1) * 10
    margins = [AxisMargin(0, truth.sum(axis=0)), AxisMargin(1, truth.sum(axis=1))]
    fitted = proportional_fit(start, margins, rounds=200)
    np.testing.assert_allclose(fitted.sum(axis=0), truth.sum(axis=0), rtol=1e-9)
    np.testing.assert_allclose(fitted.sum(axis=1), truth.sum(axis=1), rtol=1e-9)
    # IPF keeps the start's interaction (odds ratios), not the truth's
    odds = lambda t: t[0, 0] * t[1, 1] / (t[0, 1] * t[1, 0])  # noqa: E731
    assert np.isclose(odds(fitted), odds(start)) and not np.isclose(odds(fitted), odds(truth))


def test_row_weights_and_dense_tables_are_the_same_fit():
    """One row per cell, weighted by the cell: raking the rows is fitting the table."""
    start, truth = _table(2), _table(3)
    rows = np.array([(i, j) for i in range(3) for j in range(4)])
    dense = proportional_fit(start, [AxisMargin(1, truth.sum(axis=1)), AxisMargin(0, truth.sum(axis=0))], rounds=7)
    weights = proportional_fit(start.ravel(), [CodeMargin(rows[:, 0], truth.sum(axis=1)),
                                               CodeMargin(rows[:, 1], truth.sum(axis=0))], rounds=7)
    np.testing.assert_allclose(weights, dense.ravel(), rtol=1e-12)


def test_unreachable_cells_stay_empty_and_tolerance_stops_early():
    codes = np.array([[0], [0], [1]])  # code 2 has no row
    w = rake(codes, {0: [1.0, 1.0, 2.0]}, iters=50)
    np.testing.assert_allclose(w, [0.25, 0.25, 0.5])  # shares of the reachable codes
    calls = []

    class Counting(CodeMargin):
        def current(self, x):
            calls.append(1)
            return super().current(x)

    proportional_fit(np.full(3, 1 / 3), [Counting(codes[:, 0], np.array([0.5, 0.5, 0.0]))], rounds=100, tol=1e-12)
    assert len(calls) < 5
