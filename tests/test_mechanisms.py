"""Shared privacy mechanisms: each one's charge, and its output distribution.

Statistical tests use a fixed seed and alpha = 1e-6, and show they reject a wrong
noise scale or epsilon (x0.7 and x1.3).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate

from dpsynth.privacy.accounting import gaussian_rho
from dpsynth.privacy.budget import Budget, Charge, Ledger, total_epsilon
from dpsynth.privacy.mechanisms import (
    dp_percentile,
    exponential_charge,
    exponential_mechanism,
    gaussian_charge,
    gaussian_counts,
    laplace_charge,
    laplace_counts,
    percentile_scores,
    report_noisy_max,
    report_noisy_max_charge,
)
from dpsynth.privacy.noise import discrete_laplace_sd
from noise_stats import ALPHA, frequency_pvalue, variance_pvalue

WRONG = (0.7, 1.3)


def test_gaussian_counts_noise_matches_its_charge():
    charge = gaussian_charge("g", rho=0.02, sensitivity=2.0)
    counts = np.zeros(20_000, dtype=np.int64)
    out = gaussian_counts(counts, charge, np.random.default_rng(1), sensitivity=2.0)
    assert out.charge is charge and out.mechanism == "gaussian"
    assert gaussian_rho(2.0, out.stddev) == pytest.approx(charge.rho)  # rho = s^2 / (2 sigma^2)
    assert out.stddev == pytest.approx(charge.detail["sigma"])
    assert np.all(out.values == np.round(out.values))  # integer noise on counts
    assert variance_pvalue(out.values, out.stddev, "gaussian") > ALPHA
    for f in WRONG:
        assert variance_pvalue(out.values, f * out.stddev, "gaussian") < ALPHA


def test_laplace_counts_noise_matches_its_charge():
    charge = laplace_charge("l", epsilon=0.5)
    assert charge.rho == 0 and charge.epsilon == 0.5
    assert total_epsilon([charge], 1e-6) == pytest.approx(0.5)
    out = laplace_counts(np.full(20_000, 7), charge, np.random.default_rng(2))
    assert out.stddev == pytest.approx(discrete_laplace_sd(2.0))
    noise = out.values - 7
    assert variance_pvalue(noise, out.stddev, "laplace") > ALPHA
    for f in WRONG:
        assert variance_pvalue(noise, f * out.stddev, "laplace") < ALPHA


def test_mechanisms_refuse_a_charge_of_the_other_kind():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="zCDP"):
        gaussian_counts(np.zeros(3), laplace_charge("l", 1.0), rng)
    with pytest.raises(ValueError, match="pure-epsilon"):
        laplace_counts(np.zeros(3), gaussian_charge("g", 0.1), rng)


def test_exponential_mechanism_charges():
    br = exponential_charge("e", 0.4)
    assert br.rho == pytest.approx(0.4**2 / 8) and br.epsilon == 0  # bounded range
    pure = exponential_charge("e", 0.4, bounded_range=False)
    assert pure.epsilon == 0.4 and pure.rho == 0
    assert report_noisy_max_charge("r", 0.3).epsilon == 0.3
    budget = Budget(epsilon=1.0, delta=1e-6)
    Ledger(budget, [br, Charge(stage="g", rho=budget.rho - br.rho)])  # composes with Gaussian stages


SCORES = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 2.5, -1.0])


def _selections(pick, epsilon: float, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.bincount([pick(SCORES, epsilon, 1.0, rng) for _ in range(n)], minlength=SCORES.size)


def test_exponential_mechanism_selection_frequencies():
    eps = 1.0
    counts = _selections(exponential_mechanism, eps, 30_000, 5)

    def probs(e: float) -> np.ndarray:
        w = np.exp(e * SCORES / 2.0)
        return w / w.sum()

    assert frequency_pvalue(counts, probs(eps)) > ALPHA
    for f in WRONG:
        assert frequency_pvalue(counts, probs(f * eps)) < ALPHA


def _rnm_probs(scores: np.ndarray, epsilon: float) -> np.ndarray:
    """P[i wins] for argmax(score + Exp(scale 2/eps)), by numerical integration."""
    b = 2.0 / epsilon

    def cdf(y):
        return 0.0 if y < 0 else -math.expm1(-y / b)

    out = []
    for i, si in enumerate(scores):
        def f(x, i=i, si=si):
            dens = math.exp(-(x - si) / b) / b
            return dens * math.prod(cdf(x - sj) for j, sj in enumerate(scores) if j != i)

        pts = sorted(s for s in scores if s > si)
        out.append(integrate.quad(f, si, si + 60 * b, points=pts or None, limit=200)[0])
    p = np.array(out)
    return p / p.sum()


def test_report_noisy_max_selection_frequencies():
    eps = 1.0
    counts = _selections(report_noisy_max, eps, 30_000, 6)
    assert frequency_pvalue(counts, _rnm_probs(SCORES, eps)) > ALPHA
    for f in WRONG:
        assert frequency_pvalue(counts, _rnm_probs(SCORES, f * eps)) < ALPHA


def test_dp_percentile_is_report_noisy_max_on_percentile_scores():
    x = np.random.default_rng(3).integers(0, 30, 500)
    a = dp_percentile(x, 95, 0.5, 30, np.random.default_rng(9))
    scores = percentile_scores(x, 95, 30)
    # the sds draw, written out: same generator calls, same result
    rng = np.random.default_rng(9)
    assert a == int(np.argmax(scores + rng.exponential(scale=2.0 / 0.5, size=scores.size)))
