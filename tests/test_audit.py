"""Empirical privacy audit of the count mechanism on neighbouring datasets.

Two neighbouring datasets differ by one record, so a count is c on one and c + 1 on
the other. We run the mechanism many times on both, and for every threshold event
{output >= t} (and {output <= t}) compute a Clopper-Pearson confidence interval on
each probability. An (epsilon, delta)-DP mechanism must satisfy
P[M(D) in S] <= e^epsilon P[M(D') in S] + delta, so

    epsilon_lb = ln((lower(P[M(D) in S]) - delta) / upper(P[M(D') in S]))

is a lower bound on the true epsilon with high confidence. It must not exceed the
claimed epsilon; a deliberately under-noised mechanism must be caught.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpsynth.privacy import Budget, discrete_gaussian, discrete_laplace, gaussian_sigma

TRIALS = 1_000_000
CONFIDENCE_ALPHA = 1e-6


def _cp(k: int, n: int, alpha: float) -> tuple[float, float]:
    lo = stats.beta.ppf(alpha, k, n - k + 1) if k > 0 else 0.0
    hi = stats.beta.ppf(1 - alpha, k + 1, n - k) if k < n else 1.0
    return float(lo), float(hi)


def epsilon_lower_bound(out_d: np.ndarray, out_d2: np.ndarray, delta: float) -> float:
    thresholds = np.unique(np.concatenate([out_d, out_d2]))
    thresholds = thresholds[(thresholds > np.percentile(out_d, 0.01)) & (thresholds < np.percentile(out_d, 99.99))]
    alpha = CONFIDENCE_ALPHA / (4 * max(1, thresholds.size))  # Bonferroni over all events
    s_d, s_d2 = np.sort(out_d), np.sort(out_d2)
    n = out_d.size
    best = 0.0
    for t in thresholds:
        for a, b in ((s_d2, s_d), (s_d, s_d2)):
            ge_a = n - np.searchsorted(a, t, side="left")
            ge_b = n - np.searchsorted(b, t, side="left")
            le_a = np.searchsorted(a, t, side="right")
            le_b = np.searchsorted(b, t, side="right")
            for ka, kb in ((ge_a, ge_b), (le_a, le_b)):
                lo_a, _ = _cp(int(ka), n, alpha)
                _, hi_b = _cp(int(kb), n, alpha)
                if lo_a - delta > 0 and hi_b > 0:
                    best = max(best, math.log((lo_a - delta) / hi_b))
    return best


def _gaussian_count(count: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    return count + discrete_gaussian(sigma, TRIALS, rng)


@pytest.mark.slow
def test_gaussian_count_mechanism_audit():
    budget = Budget(epsilon=1.0, delta=1e-6)
    sigma = gaussian_sigma(1.0, budget.rho)  # sensitivity 1: one record moves a count by one
    rng = np.random.default_rng(2026)
    honest = epsilon_lower_bound(_gaussian_count(0, sigma, rng), _gaussian_count(1, sigma, rng), budget.delta)
    assert honest <= budget.epsilon
    weak = sigma / 4
    caught = epsilon_lower_bound(_gaussian_count(0, weak, rng), _gaussian_count(1, weak, rng), budget.delta)
    assert caught > budget.epsilon
    print(f"gaussian audit: claimed eps 1.0, lower bound honest {honest:.3f}, under-noised {caught:.3f}")


@pytest.mark.slow
def test_laplace_count_mechanism_audit():
    eps = 1.0
    rng = np.random.default_rng(2027)
    honest = epsilon_lower_bound(
        discrete_laplace(1 / eps, TRIALS, rng), 1 + discrete_laplace(1 / eps, TRIALS, rng), 0.0
    )
    assert honest <= eps
    assert honest > 0.8  # the pure-DP bound is tight: the audit gets close to it
    caught = epsilon_lower_bound(
        discrete_laplace(0.5 / eps, TRIALS, rng), 1 + discrete_laplace(0.5 / eps, TRIALS, rng), 0.0
    )
    assert caught > eps
    print(f"laplace audit: claimed eps 1.0, lower bound honest {honest:.3f}, under-noised {caught:.3f}")
