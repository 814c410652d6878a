"""Slow statistical tests of the one-step inference (CI runs them; marked slow)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpsynth.onestep.tulap import release_counts, two_proportions_test

ALPHA = 1e-6


def _null_pvalues(tests: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(tests):
        xn, yn = release_counts(rng.binomial(200, 0.3), 200, rng.binomial(200, 0.3), 200, 1.0, rng)
        r = two_proportions_test(xn, 200, yn, 200, 1.0, rng, replicates=400)
        out.append((r.p_one_step, r.p_bootstrap))
    return np.array(out)


@pytest.mark.slow
def test_one_step_pvalues_are_uniform_under_the_null_and_the_bootstrap_is_conservative():
    p = _null_pvalues(800, 21)
    assert stats.kstest(p[:, 0], "uniform").pvalue > ALPHA
    # the bootstrap's p-values pile up in the middle (the paper's Figure 2(a)): too few small ones
    assert np.mean(p[:, 1] <= 0.05) < np.mean(p[:, 0] <= 0.05)
    assert stats.binomtest(int(np.sum(p[:, 1] <= 0.05)), len(p), 0.05).pvalue < 1e-3


@pytest.mark.slow
def test_pvalues_of_a_wrong_null_are_not_uniform():
    """The uniformity check can fail: p-values computed with the wrong epsilon are rejected."""
    rng = np.random.default_rng(22)
    out = []
    for _ in range(800):
        xn, yn = release_counts(rng.binomial(200, 0.3), 200, rng.binomial(200, 0.3), 200, 1.0, rng)
        out.append(two_proportions_test(xn, 200, yn, 200, 0.1, rng, replicates=400).p_one_step)
    assert stats.kstest(out, "uniform").pvalue < ALPHA
