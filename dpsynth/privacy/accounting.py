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
    "load_solver",
    "rho_from_epsilon",
    "rho_from_pure_epsilon",
    "gaussian_rho",
    "gaussian_sigma",
]


def _epsilon_at_order(alpha: float, rho: float, log_inv_delta: float) -> float:
    return alpha * rho + (
        log_inv_delta + (alpha - 1.0) * math.log1p(-1.0 / alpha) - math.log(alpha)
    ) / (alpha - 1.0)


def load_solver() -> None:
    """Imports the solver :func:`epsilon_from_rho` uses (scipy.optimize, about 0.4 s), for a
    caller that wants the import done now (the CLI, before it forks its gate worker, which
    needs scipy too)."""
    import scipy.optimize  # noqa: F401


def epsilon_from_rho(rho: float, delta: float) -> float:
    """Smallest epsilon such that rho-zCDP implies (epsilon, delta)-DP (CKS 2020)."""
    if not (rho >= 0.0 and math.isfinite(rho)):
        raise ValueError(f"rho must be a finite number >= 0, got {rho!r}")
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    if rho == 0.0:
        return 0.0
    from scipy.optimize import minimize_scalar  # here: reading a manifest or ledger need not load scipy

    log_inv_delta = math.log(1.0 / delta)
    # The objective is convex in alpha on (1, inf); its minimiser sits near
    # 1 + sqrt(log(1/delta)/rho).  Search on log(alpha - 1) around that point.
    guess = math.log(math.sqrt(log_inv_delta / rho))
    res = minimize_scalar(
        lambda t: _epsilon_at_order(1.0 + math.exp(t), rho, log_inv_delta),
        bounds=(guess - 12.0, guess + 12.0),
        method="bounded",
        options={"xatol": 1e-12},
    )
    eps = float(res.fun)
    # The classic bound is never beaten by a failed search: take the smaller.
    classic = rho + 2.0 * math.sqrt(rho * log_inv_delta)
    return max(0.0, min(eps, classic))


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
