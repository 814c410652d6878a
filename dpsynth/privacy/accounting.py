"""zCDP accounting and its conversion to (epsilon, delta)-DP.

Every mechanism in dpsynth is accounted in rho-zCDP (Bun & Steinke 2016):

* a Gaussian mechanism with L2 sensitivity ``s`` and noise scale ``sigma`` costs
  ``rho = s**2 / (2 sigma**2)``;
* a pure ``eps``-DP step costs ``rho = eps**2 / 2``;
* costs add up under composition.

The total converts to (epsilon, delta)-DP with the conversion of Canonne, Kamath and
Steinke (2020, Corollary 13), which is tighter than the classic
``rho + 2 sqrt(rho log(1/delta))``:

    epsilon(rho, delta) = inf_{a > 1}  a*rho + (log(1/delta) + (a-1) log(1 - 1/a) - log(a)) / (a - 1)
"""

from __future__ import annotations

import math

from .rational import MAX_SCALE, gaussian_sigma_exact

__all__ = [
    "epsilon_from_rho",
    "rho_from_epsilon",
    "rho_from_pure_epsilon",
    "gaussian_rho",
    "gaussian_sigma",
]


def _epsilon_at_order(alpha: float, rho: float, log_inv_delta: float) -> float:
    return alpha * rho + (
        log_inv_delta + (alpha - 1.0) * math.log1p(-1.0 / alpha) - math.log(alpha)
    ) / (alpha - 1.0)


# Float rounding in the objective's dozen operations moves it by a few ulps of the size of its
# terms (measured: up to 1.2e-15 of epsilon below its 50-digit value); the conversion adds this
# share of that size, so the epsilon it states is never below the true infimum.
_ROUNDING = 2.0**-48


def _rounded_up(alpha: float, rho: float, log_inv_delta: float) -> float:
    """:func:`_epsilon_at_order` plus a bound on its float rounding error."""
    size = alpha * rho + (
        log_inv_delta + (alpha - 1.0) * -math.log1p(-1.0 / alpha) + math.log(alpha)
    ) / (alpha - 1.0)
    return _epsilon_at_order(alpha, rho, log_inv_delta) + _ROUNDING * size


def _best_order(rho: float, log_inv_delta: float) -> float:
    """The order alpha = 1 + u minimising :func:`_epsilon_at_order` (``inf`` if out of range).

    The objective's derivative in alpha is ``rho - (log(1/delta) - log alpha) / (alpha - 1)**2``,
    so the minimiser is the root of ``h(u) = rho u**2 + log(1 + u) - log(1/delta)``, which is
    increasing in ``u > 0``, negative at 0 and non-negative at ``sqrt(log(1/delta) / rho)``.
    Newton steps kept inside that shrinking bracket (a bisection when a step leaves it) reach
    the root to a few ulps in about ten steps."""
    lo, hi = 0.0, math.sqrt(log_inv_delta / rho)
    if not math.isfinite(hi):
        return math.inf
    u = hi
    for _ in range(200):
        h = rho * u * u + math.log1p(u) - log_inv_delta
        if h > 0.0:
            hi = u
        elif h < 0.0:
            lo = u
        else:
            break
        step = h / (2.0 * rho * u + 1.0 / (1.0 + u))
        nxt = u - step
        if not lo < nxt < hi:
            nxt = 0.5 * (lo + hi)
        if nxt == u or hi - lo <= 4e-16 * hi:
            break
        u = nxt
    return 1.0 + u


def epsilon_from_rho(rho: float, delta: float) -> float:
    """Smallest epsilon such that rho-zCDP implies (epsilon, delta)-DP (CKS 2020).

    The objective is evaluated at the order :func:`_best_order` finds: any order > 1 gives a
    valid epsilon, so the result is never below the infimum, and the order is the minimiser's
    to a few ulps (docs/privacy.md, "The conversion's solver")."""
    if not (rho >= 0.0 and math.isfinite(rho)):
        raise ValueError(f"rho must be a finite number >= 0, got {rho!r}")
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    if rho == 0.0:
        return 0.0
    log_inv_delta = math.log(1.0 / delta)
    # Bun & Steinke's bound, valid at every rho: the answer if the order is out of float range
    classic = (rho + 2.0 * math.sqrt(rho * log_inv_delta)) * (1.0 + _ROUNDING)
    alpha = _best_order(rho, log_inv_delta)
    if not (alpha > 1.0 and math.isfinite(alpha)):
        return classic
    return max(0.0, min(_rounded_up(alpha, rho, log_inv_delta), classic))


def rho_from_epsilon(epsilon: float, delta: float) -> float:
    """Largest rho whose (epsilon, delta) conversion stays within ``epsilon``."""
    if not (epsilon > 0.0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    lo, hi = 0.0, epsilon  # epsilon(rho) >= rho, so rho <= epsilon
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if epsilon_from_rho(mid, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * max(1.0, hi):
            break
    return lo


def rho_from_pure_epsilon(epsilon: float) -> float:
    """A pure epsilon-DP step is (epsilon**2 / 2)-zCDP."""
    if not (epsilon >= 0.0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    return 0.5 * epsilon * epsilon


def gaussian_rho(sensitivity: float, sigma: float) -> float:
    """zCDP cost of (discrete or continuous) Gaussian noise of scale sigma."""
    if sigma <= 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")
    return sensitivity * sensitivity / (2.0 * sigma * sigma)


def gaussian_sigma(sensitivity: float, rho: float) -> float:
    """Noise scale that makes a Gaussian mechanism rho-zCDP: ``sensitivity / sqrt(2 rho)``
    rounded up to the sigma the exact discrete Gaussian samples (24 significant bits, see
    :mod:`dpsynth.privacy.rational`), so the sigma a measurement states is the one drawn."""
    if rho <= 0:
        raise ValueError(f"rho must be > 0, got {rho!r}")
    sigma = sensitivity / math.sqrt(2.0 * rho)
    if not (0.0 < sigma <= MAX_SCALE):
        return sigma  # 0 (no noise) or too large to sample: discrete_gaussian says so
    return float(gaussian_sigma_exact(sigma))
