"""DP two-sample test of proportions with Tulap noise, p-values by one-step or bootstrap.

Tulap(m, b, 0) = m + G1 - G2 + U with G1, G2 i.i.d. geometric, P(G = k) = (1 - b) b^k,
and U uniform on (-1/2, 1/2); with b = exp(-epsilon) a count of sensitivity 1 plus
Tulap(0, b, 0) is epsilon-DP. The curator releases X~ = X + N1 and Y~ = Y + N2 for
X ~ Bin(n, theta_X), Y ~ Bin(m, theta_Y) (n, m public). To test H0: theta_X = theta_Y
against theta_Y > theta_X, the statistic is Y~ and its null distribution is approximated
given the efficient pooled estimate theta_hat = (X~ + Y~) / (n + m):

* one-step: for each of R seeds, Z = G(theta_hat, omega), theta* = clip(2 theta_hat - T(Z)),
  Y~* = G(theta*, omega)'s second count; p = (1 + #{Y~* >= Y~}) / (R + 1);
* parametric bootstrap: the same with Y~* taken from Z.

G(theta, omega) uses, per group, one uniform for the binomial (inverse CDF) and the
Tulap noise drawn once, so the same omega serves every theta.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["tulap", "tulap_cdf", "TwoProportions", "two_proportions_test", "release_counts"]


def _check_b(b: float) -> float:
    if not 0.0 <= b < 1.0:
        raise ValueError(f"Tulap b must lie in [0, 1), got {b!r}")
    return float(b)


def tulap(size: int | tuple[int, ...], b: float, rng: np.random.Generator, m: float = 0.0) -> np.ndarray:
    """Samples of Tulap(m, b, 0)."""
    b = _check_b(b)
    if b == 0.0:
        g = np.zeros(size)
    else:
        # numpy's geometric counts trials (>= 1): subtract 1 for failures before success
        g = rng.geometric(1.0 - b, size) - rng.geometric(1.0 - b, size)
    return m + g + rng.random(size) - 0.5


def tulap_cdf(x: np.ndarray, b: float, m: float = 0.0) -> np.ndarray:
    """CDF of Tulap(m, b, 0): P(D <= k - 1) + P(D = k) (x - k + 1/2), k = round(x - m).

    D = G1 - G2 has P(D = d) = (1 - b) / (1 + b) b^|d|.
    """
    b = _check_b(b)
    x = np.asarray(x, dtype=np.float64) - m
    k = np.floor(x + 0.5)
    frac = x - k + 0.5

    def below(j: np.ndarray) -> np.ndarray:  # P(D <= j)
        neg = np.power(b, -np.minimum(j, 0.0)) / (1.0 + b)
        pos = 1.0 - np.power(b, np.maximum(j, 0.0) + 1.0) / (1.0 + b)
        return np.where(j < 0, neg, pos)

    pk = (1.0 - b) / (1.0 + b) * np.power(b, np.abs(k))
    return below(k - 1.0) + pk * frac


def release_counts(x: int, n: int, y: int, m: int, epsilon: float, rng: np.random.Generator) -> tuple[float, float]:
    """The curator's epsilon-DP release (X + N1, Y + N2)."""
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be a finite number, got {epsilon!r}")
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    if not (0 <= x <= n and 0 <= y <= m):
        raise ValueError("counts must lie between 0 and their group sizes")
    noise = tulap(2, math.exp(-epsilon), rng)
    return float(x + noise[0]), float(y + noise[1])


@dataclass(frozen=True, kw_only=True)
class TwoProportions:
    """Result of :func:`two_proportions_test`: the pooled estimate, the one-step and
    bootstrap one-sided p-values, and the number of replicates used."""

    theta_hat: float
    p_one_step: float
    p_bootstrap: float
    replicates: int


def two_proportions_test(
    x_noisy: float, n: int, y_noisy: float, m: int, epsilon: float, rng: np.random.Generator,
    replicates: int = 1000,
) -> TwoProportions:
    """One-sided p-values for H0: theta_X = theta_Y vs theta_Y > theta_X (see module doc).

    Post-processing of the released counts only: it costs no privacy.
    """
    if n < 1 or m < 1:
        raise ValueError(f"group sizes must be >= 1, got n={n}, m={m}")
    if replicates < 1:
        raise ValueError(f"replicates must be >= 1, got {replicates}")
    for what, value in (("x_noisy", x_noisy), ("y_noisy", y_noisy), ("epsilon", epsilon)):
        if not math.isfinite(value):
            raise ValueError(f"{what} must be a finite number, got {value!r}")
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    b = math.exp(-epsilon)
    theta_hat = float(np.clip((x_noisy + y_noisy) / (n + m), 0.0, 1.0))
    u = rng.random((2, replicates))
    noise = tulap((2, replicates), b, rng)

    def draw(theta: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        return (stats.binom.ppf(u[0], n, theta) + noise[0], stats.binom.ppf(u[1], m, theta) + noise[1])

    zx, zy = draw(theta_hat)
    theta_star = np.clip(2.0 * theta_hat - (zx + zy) / (n + m), 0.0, 1.0)
    _, yy = draw(theta_star)
    p_one = (1.0 + np.sum(yy >= y_noisy)) / (replicates + 1.0)
    p_boot = (1.0 + np.sum(zy >= y_noisy)) / (replicates + 1.0)
    return TwoProportions(theta_hat=theta_hat, p_one_step=float(p_one), p_bootstrap=float(p_boot),
                          replicates=replicates)
