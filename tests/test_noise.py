"""Statistical tests of the samplers.

Each test uses a fixed seed and a false-alarm rate of 1e-6, and shows that the same
test rejects a sampler whose scale is off by a factor 0.7 or 1.3.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpsynth.privacy.noise import (
    default_granularity,
    discrete_gaussian,
    discrete_laplace,
    gaussian_on_grid,
    grid_sensitivity,
    laplace_on_grid,
)

ALPHA = 1e-6
N = 200_000


def _pmf_gauss(sigma: float, support: np.ndarray) -> np.ndarray:
    w = np.exp(-(support.astype(float) ** 2) / (2 * sigma * sigma))
    tail = np.arange(-int(60 * sigma) - 60, int(60 * sigma) + 61)
    return w / np.exp(-(tail.astype(float) ** 2) / (2 * sigma * sigma)).sum()


def _pmf_laplace(scale: float, support: np.ndarray) -> np.ndarray:
    q = math.exp(-1.0 / scale)
    return (1 - q) / (1 + q) * q ** np.abs(support)


def _chi2_pvalue(samples: np.ndarray, pmf, scale: float) -> float:
    """Chi-square goodness of fit against the exact pmf; sparse tails pooled."""
    lim = int(math.ceil(6 * scale)) + 1
    support = np.arange(-lim, lim + 1)
    p = pmf(scale, support)
    expected = p * samples.size
    counts = np.bincount(np.clip(samples, -lim - 1, lim + 1) + lim + 1, minlength=2 * lim + 3)
    obs = counts[1:-1].astype(float)
    tails = counts[0] + counts[-1]
    keep = expected >= 20
    obs_k, exp_k = obs[keep], expected[keep]
    obs_rest = obs[~keep].sum() + tails
    exp_rest = samples.size - exp_k.sum()
    if exp_rest > 0:
        obs_k, exp_k = np.append(obs_k, obs_rest), np.append(exp_k, exp_rest)
    return float(stats.chisquare(obs_k, exp_k).pvalue)


@pytest.mark.parametrize("sigma", [0.8, 3.0, 25.0])
def test_discrete_gaussian_has_the_right_law(sigma):
    rng = np.random.default_rng(12345)
    x = discrete_gaussian(sigma, N, rng)
    assert x.dtype == np.int64
    assert _chi2_pvalue(x, _pmf_gauss, sigma) > ALPHA
    for wrong in (0.7, 1.3):
        y = discrete_gaussian(sigma * wrong, N, rng)
        assert _chi2_pvalue(y, _pmf_gauss, sigma) < ALPHA


@pytest.mark.parametrize("scale", [0.5, 2.0, 20.0])
def test_discrete_laplace_has_the_right_law(scale):
    rng = np.random.default_rng(54321)
    x = discrete_laplace(scale, N, rng)
    assert _chi2_pvalue(x, _pmf_laplace, scale) > ALPHA
    for wrong in (0.7, 1.3):
        y = discrete_laplace(scale * wrong, N, rng)
        assert _chi2_pvalue(y, _pmf_laplace, scale) < ALPHA


def test_shapes_and_zero_scale():
    rng = np.random.default_rng(0)
    assert discrete_gaussian(2.0, (3, 4), rng).shape == (3, 4)
    assert not discrete_gaussian(0.0, 5, rng).any()
    assert not discrete_laplace(0.0, 5, rng).any()
    with pytest.raises(ValueError, match="sigma"):
        discrete_gaussian(-1.0, 3, rng)


def test_real_noise_lands_on_the_grid():
    rng = np.random.default_rng(7)
    values = np.array([0.1, 1 / 3, 123.456789, -5.0])
    g = default_granularity(2.0)
    for out in (gaussian_on_grid(values, 2.0, rng), laplace_on_grid(values, 2.0, rng)):
        k = out / g
        assert np.all(k == np.rint(k))  # exact multiples: no low-order float bits to leak
    # the noise has the requested spread
    big = gaussian_on_grid(np.zeros(N), 2.0, rng)
    assert abs(big.std() - 2.0) < 0.02
    assert grid_sensitivity(1.0, 0.01, dims=4) == pytest.approx(1.02)
    with pytest.raises(ValueError, match="finite"):
        gaussian_on_grid(np.array([np.nan]), 1.0, rng)
