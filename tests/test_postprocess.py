"""Tests of dpsynth.postprocess.correction (marginal correction, Theorem 3.6 of "Private sampling")."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpsynth.postprocess.correction import (
    MarginalCorrectionError,
    correct_marginals,
    marginal_constraints,
    marginal_tables,
    resample,
    reweight,
    unpack_codes,
    walsh_to_tables,
)
from dpsynth.methods.private_sampling import walsh_means, walsh_subsets

PAIRS6 = list(itertools.combinations(range(6), 2))


def _bits(rng, n, probs):
    return (rng.random((n, len(probs))) < np.asarray(probs)).astype(np.uint8)


def _weighted_tables(sample, weights, keys, shapes):
    out = {}
    for key in keys:
        shape = shapes[key]
        flat = np.ravel_multi_index(tuple(sample[:, j] for j in key), shape)
        out[key] = np.bincount(flat, weights=weights, minlength=int(np.prod(shape))).reshape(shape)
    return out


def _max_table_gap(a, b):
    return max(np.abs(a[key] - b[key]).max() for key in a)


@pytest.fixture(scope="module")
def sample_and_targets():
    rng = np.random.default_rng(0)
    Y = _bits(rng, 2000, [0.5] * 6)  # e.g. a private-sampling release
    X = _bits(rng, 5000, np.linspace(0.35, 0.65, 6))  # stands for the source of the targets
    return Y, marginal_tables(X, PAIRS6)


@pytest.mark.parametrize("method, tol", [("lp", 1e-8), ("qp", 1e-5)])
def test_correction_matches_the_target_marginals(sample_and_targets, method, tol):
    Y, T = sample_and_targets
    res = correct_marginals(Y, T, rng=np.random.default_rng(1), method=method)
    assert res.status.startswith("optimal")
    assert res.max_abs_error_before > 0.05  # the sample really was off
    assert res.max_abs_error <= tol
    W = _weighted_tables(Y, res.weights, T.keys(), {k: v.shape for k, v in T.items()})
    assert _max_table_gap(W, T) <= tol
    assert res.weights.min() >= 0 and res.weights.sum() == pytest.approx(1.0)
    # the resampled rows are rows of the sample, and their marginals moved to the targets
    assert res.samples.shape == Y.shape
    assert {tuple(r) for r in res.samples} <= {tuple(r) for r in Y}
    before = _max_table_gap(marginal_tables(Y, PAIRS6), T)
    after = _max_table_gap(marginal_tables(res.samples, PAIRS6), T)
    assert after < before / 2


def test_lp_minimises_the_largest_deviation_from_uniform(sample_and_targets):
    Y, T = sample_and_targets
    k = len(Y)
    w_lp, _, _ = reweight(Y, T, method="lp")
    w_qp, _, _ = reweight(Y, T, method="qp")
    assert np.abs(k * w_lp - 1).max() <= np.abs(k * w_qp - 1).max() + 1e-7
    t = np.abs(k * w_lp - 1).max()
    with pytest.raises(MarginalCorrectionError):  # nothing fits in a band narrower than t
        reweight(Y, T, method="lp", weight_bounds=(1 - 0.9 * t, 1 + 0.9 * t))
    assert np.abs(k * w_qp - 1).max() > 1.5
    bounded, _, _ = reweight(Y, T, method="qp", weight_bounds=(0.25, 1.5))
    assert bounded.min() * k >= 0.25 - 1e-7 and bounded.max() * k <= 1.5 + 1e-7


def test_a_sample_that_already_matches_comes_back_unchanged():
    cube = np.array(list(itertools.product([0, 1], repeat=4)), dtype=np.uint8)
    Z = np.tile(cube, (5, 1))
    T = marginal_tables(Z, itertools.combinations(range(4), 2))
    T3 = marginal_tables(Z, itertools.combinations(range(4), 3))
    for targets in (T, T3):
        for method in ("lp", "qp"):
            res = correct_marginals(Z, targets, rng=np.random.default_rng(2), method=method)
            np.testing.assert_array_equal(res.weights, np.full(len(Z), 1 / len(Z)))
            np.testing.assert_array_equal(res.samples, Z)
    # counts instead of probabilities, and integer-coded rows
    counts = {key: table * 1234 for key, table in T.items()}
    codes = (Z.astype(np.int64) << np.arange(4)).sum(axis=1)
    res = correct_marginals(codes, counts, rng=np.random.default_rng(3), n_bits=4)
    np.testing.assert_array_equal(res.samples, codes)


def test_integer_coded_categorical_features():
    rng = np.random.default_rng(4)
    k = 3000
    Y = np.column_stack([rng.integers(0, 3, k), rng.integers(0, 2, k), rng.integers(0, 4, k)])
    src = np.column_stack([rng.choice(3, k, p=[0.5, 0.3, 0.2]), rng.integers(0, 2, k), rng.choice(4, k, p=[0.1, 0.2, 0.3, 0.4])])
    T = marginal_tables(src, [(0, 1), (1, 2), (0, 2)])
    assert T[(0, 2)].shape == (3, 4)
    res = correct_marginals(Y, T, rng=np.random.default_rng(5), n_out=500)
    assert res.samples.shape == (500, 3) and res.max_abs_error <= 1e-8


def test_noisy_targets_need_the_qp(sample_and_targets):
    Y, T = sample_and_targets
    rng = np.random.default_rng(6)
    noisy = {key: table * 5000 + rng.laplace(scale=20.0, size=table.shape) for key, table in T.items()}
    with pytest.raises(MarginalCorrectionError, match="qp"):
        correct_marginals(Y, noisy, rng=rng, method="lp")
    res = correct_marginals(Y, noisy, rng=rng, method="qp", weight_bounds=(0.0, 5.0))
    assert res.max_abs_error < res.max_abs_error_before
    assert res.weights.max() * len(Y) <= 5.0 + 1e-6


def test_a_target_cell_absent_from_the_sample_is_infeasible_for_the_lp():
    Y = np.array([[0, 0], [0, 1], [1, 0]] * 10, dtype=np.uint8)  # (1, 1) never occurs
    T = {(0, 1): np.array([[0.25, 0.25], [0.25, 0.25]])}
    with pytest.raises(MarginalCorrectionError):
        correct_marginals(Y, T, rng=np.random.default_rng(0), method="lp")


def test_theorem_3_6_weights_stay_close_to_uniform_for_a_regular_density():
    """Sample of a regular density, targets = that density's exact 2-way marginals:
    exact weights exist and are within a factor 1 +- 0.5 of uniform (Theorem 3.6)."""
    rng = np.random.default_rng(7)
    probs = rng.uniform(0.3, 0.7, size=6)
    Y = _bits(rng, 5000, probs)
    T = {
        (i, j): np.outer([1 - probs[i], probs[i]], [1 - probs[j], probs[j]])
        for i, j in PAIRS6
    }
    w, status, _ = reweight(Y, T, method="lp")
    assert status.startswith("optimal")
    assert np.abs(len(Y) * w - 1).max() < 0.5


def test_walsh_coefficients_convert_to_marginal_tables():
    rng = np.random.default_rng(8)
    X = _bits(rng, 1000, [0.2, 0.5, 0.7, 0.4, 0.9])
    coefs = dict(zip(walsh_subsets(5, 3), walsh_means(X, 3)))
    keys = list(itertools.combinations(range(5), 3)) + [(1, 4), (2,)]
    tables = walsh_to_tables(coefs, keys)
    direct = marginal_tables(X, keys)
    for key in keys:
        np.testing.assert_allclose(tables[key], direct[key], atol=1e-12)
    with pytest.raises(ValueError, match="missing"):
        walsh_to_tables({(0,): 0.1, (1,): 0.2}, [(0, 1)])


def test_resampling_is_unbiased_and_keeps_counts_within_one():
    w = np.array([0.05, 0.15, 0.3, 0.5])
    rows = np.arange(4)
    for n_out in (7, 10, 33):
        expected = n_out * w
        tot = np.zeros(4)
        for seed in range(400):
            out = resample(rows, w, n_out, np.random.default_rng(seed))
            counts = np.bincount(out, minlength=4)
            assert counts.sum() == n_out
            assert np.all(np.abs(counts - expected) < 1)
            tot += counts
        # mean of 400 counts, each within 1 of its expectation: sd of the mean <= 0.5/20
        np.testing.assert_allclose(tot / 400, expected, atol=0.13)
    multi = resample(rows, w, 1000, np.random.default_rng(0), scheme="multinomial")
    assert multi.shape == (1000,) and set(np.unique(multi)) <= set(rows)


def test_marginal_constraints_rows_are_cell_indicators():
    Y = np.array([[0, 1], [1, 1], [1, 0]])
    A, b = marginal_constraints(Y, {(0, 1): np.arange(4.0).reshape(2, 2) / 6})
    np.testing.assert_array_equal(A.toarray(), [[0, 0, 0], [1, 0, 0], [0, 0, 1], [0, 1, 0]])
    np.testing.assert_allclose(b, np.arange(4) / 6)


@pytest.mark.parametrize(
    "targets, match",
    [
        ({(0, 7): np.ones((2, 2))}, "outside"),
        ({(0, 0): np.ones((2, 2))}, "repeats"),
        ({(0, 1): np.ones(4)}, "axes"),
        ({(0, 1): np.ones((2, 2)), (1, 2): np.ones((3, 2))}, "cardinality"),
        ({(0,): -np.ones(2)}, "positive sum"),
        ({}, "non-empty"),
    ],
)
def test_invalid_targets_are_rejected(targets, match):
    Y = np.zeros((5, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match=match):
        correct_marginals(Y, targets, rng=np.random.default_rng(0))


def test_unpack_codes():
    np.testing.assert_array_equal(unpack_codes(np.array([0, 1, 6]), 3), [[0, 0, 0], [1, 0, 0], [0, 1, 1]])
    with pytest.raises(ValueError):
        unpack_codes(np.array([8]), 3)
