"""Statistical checks shared by the mechanism tests and the method conformance suite.

:func:`variance_pvalue` tests that pooled noise draws have the variance a mechanism
states: the sum of squares is compared with a scaled chi-square whose first two
moments match it under the stated distribution (exactly chi-square for Gaussian
noise; for discrete Laplace noise the scale and degrees of freedom absorb its
kurtosis). :func:`frequency_pvalue` is Pearson's chi-square on selection counts.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

ALPHA = 1e-6


def _laplace_fourth_moment(sd: float) -> float:
    """E X^4 of the discrete Laplace (two-sided geometric) with standard deviation ``sd``.

    With ``P[X = x]`` proportional to ``q^|x|``: ``E X^2 = 2q / (1-q)^2`` and
    ``E X^4 = 2q (1 + 10q + q^2) / (1-q)^4``; q solves the first for ``sd``.
    """
    v = sd * sd
    q = ((v + 1.0) - math.sqrt(2.0 * v + 1.0)) / v
    return 2.0 * q * (1.0 + 10.0 * q + q * q) / (1.0 - q) ** 4


def variance_pvalue(noise: np.ndarray, stddev: float, mechanism: str) -> float:
    """Two-sided p-value of "these draws have standard deviation ``stddev``" under ``mechanism``."""
    x = np.asarray(noise, dtype=np.float64).ravel()
    n = x.size
    if n == 0 or stddev <= 0:
        raise ValueError("need draws and a positive stated stddev")
    v = stddev * stddev
    if mechanism == "gaussian":
        m4 = 3.0 * v * v
    elif mechanism == "laplace":
        m4 = _laplace_fourth_moment(stddev)
    else:
        raise ValueError(f"no variance test for mechanism {mechanism!r}")
    mean, var = n * v, n * (m4 - v * v)
    scale, dof = var / (2.0 * mean), 2.0 * mean * mean / var
    s = float(np.sum(x * x)) / scale
    return float(2.0 * min(stats.chi2.cdf(s, dof), stats.chi2.sf(s, dof)))


def pooled_pvalue(groups: list[tuple[np.ndarray, float, str]]) -> float:
    """One p-value for noise stated in several groups ``(draws, stddev, mechanism)``.

    Gaussian draws are pooled after dividing by their stddev (chi-square on all of
    them); Laplace draws are pooled per stated scale (their kurtosis depends on it).
    The smallest group p-value, Bonferroni-corrected, is returned.
    """
    pooled: dict[tuple[str, float], list[np.ndarray]] = {}
    for noise, sd, mech in groups:
        x = np.asarray(noise, dtype=np.float64).ravel()
        key = (mech, 1.0) if mech == "gaussian" else (mech, float(sd))
        pooled.setdefault(key, []).append(x / sd if mech == "gaussian" else x)
    ps = [variance_pvalue(np.concatenate(parts), sd, mech) for (mech, sd), parts in pooled.items()]
    return min(1.0, min(ps) * len(ps))


def frequency_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """Pearson chi-square p-value of observed ``counts`` against probabilities ``probs``."""
    counts = np.asarray(counts, dtype=np.float64)
    expected = np.asarray(probs, dtype=np.float64) * counts.sum()
    return float(stats.chisquare(counts, expected).pvalue)
