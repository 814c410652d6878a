"""DP estimators for the continuous families (add-or-remove-one neighbours).

* **beta** (the paper's supplement S2): clamp x to [t, 1 - t] with
  ``t = min(1/2, 10 / (log n sqrt n))``; the two sufficient statistics sum log x and
  sum log(1 - x), centred at ``(log t + log(1 - t)) / 2``, move by at most
  ``Delta = |log t - log(1 - t)|`` in l1 when one record is added or removed; each gets
  Laplace noise of scale ``Delta / epsilon`` (on a grid); dividing by n gives the paper's
  noisy means with noise ``Delta / (n epsilon)``; (a, b) maximise the likelihood with the
  noisy statistics plugged in, over a, b >= 1. Pure epsilon-DP. Under the paper's
  neighbours (replace one record, n public) each sum moves by up to Delta, the pair by
  2 Delta: ``neighbours="replace-one"`` doubles the noise (the paper's simulation).
* **normal**: u = (x - centre) / half-width in [-1, 1]; the sums of u and of u^2 - 1/2
  have joint l2 sensitivity sqrt(5)/2; Gaussian noise on a grid (rho-zCDP).
* **Burr XII with a scale** (for columns on schema bounds): a noisy histogram of the
  column's bins (discrete Gaussian, sensitivity 1), then the grouped-data MLE.

``n`` is a noisy record count measured beforehand (adaptive composition), or the
public size in the paper's simulations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import optimize

from ..privacy.accounting import gaussian_sigma
from ..privacy.noise import default_granularity, discrete_gaussian, gaussian_on_grid, grid_sensitivity, laplace_on_grid
from .families import beta_mle_from_stats, burr_cdf, burr_quantile

__all__ = [
    "beta_threshold", "DpBeta", "dp_beta", "noisy_beta_stats", "beta_noise_scale", "DpNormal", "dp_normal", "normal_noise_sigma",
    "NORMAL_L2_SENSITIVITY", "BinnedBurr", "grouped_burr_mle", "noisy_histogram",
]

NORMAL_L2_SENSITIVITY = math.sqrt(5.0) / 2.0


def beta_threshold(n: float) -> float:
    """Clamping threshold t = min(1/2, 10 / (log n sqrt n)) (1/2 for n <= e)."""
    n = float(n)
    if n <= math.e:
        return 0.5
    return min(0.5, 10.0 / (math.log(n) * math.sqrt(n)))


def _beta_delta(t: float) -> float:
    return abs(math.log(t) - math.log1p(-t))


Neighbours = Literal["add-remove", "replace-one"]


def beta_noise_scale(n: float, epsilon: float, neighbours: Neighbours = "add-remove") -> tuple[float, float, float]:
    """(t, Laplace scale on each centred sum, granularity) for size ``n`` and ``epsilon``.

    The joint l1 sensitivity of the two centred sums is Delta when one record is added or
    removed and 2 Delta when one is replaced (the paper's setting, n public)."""
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    if neighbours not in ("add-remove", "replace-one"):
        raise ValueError(f"neighbours must be 'add-remove' or 'replace-one', got {neighbours!r}")
    t = beta_threshold(n)
    delta = _beta_delta(t) * (2.0 if neighbours == "replace-one" else 1.0)
    g = default_granularity(delta / epsilon)
    return t, grid_sensitivity(delta, g, dims=2, norm="l1") / epsilon, g


@dataclass(frozen=True, kw_only=True)
class DpBeta:
    """Result of :func:`dp_beta`: the estimate (a, b), the noisy means ``t1``, ``t2``, the clamping
    threshold, the Laplace scale on each centred sum and the record count ``n`` used."""

    a: float
    b: float
    t1: float          # noisy mean log x
    t2: float          # noisy mean log(1 - x)
    threshold: float
    scale: float       # Laplace scale on each centred sum
    n: float


def noisy_beta_stats(x: np.ndarray, epsilon: float, n: float, rng: np.random.Generator,
                     neighbours: Neighbours = "add-remove") -> tuple[float, float, float, float]:
    """(noisy mean log x, noisy mean log(1 - x), t, Laplace scale): the DP part of :func:`dp_beta`."""
    t, scale, g = beta_noise_scale(n, epsilon, neighbours)
    xc = np.clip(np.asarray(x, dtype=np.float64), t, 1.0 - t)
    centre = 0.5 * (math.log(t) + math.log1p(-t))
    sums = np.array([np.sum(np.log(xc) - centre), np.sum(np.log1p(-xc) - centre)])
    noisy = laplace_on_grid(sums, scale, rng, granularity=g)
    return float(noisy[0]) / n + centre, float(noisy[1]) / n + centre, t, scale


def dp_beta(x: np.ndarray, epsilon: float, n: float, rng: np.random.Generator, lower: float = 1.0,
            neighbours: Neighbours = "add-remove") -> DpBeta:
    """The supplement's epsilon-DP beta estimator on values ``x`` in [0, 1] (see module doc)."""
    t1, t2, t, scale = noisy_beta_stats(x, epsilon, n, rng, neighbours)
    # noisy means can leave the range of a distribution on (0, 1); keep them inside
    t1, t2 = min(t1, -1e-9), min(t2, -1e-9)
    a, b = beta_mle_from_stats(t1, t2, lower)
    return DpBeta(a=float(a), b=float(b), t1=t1, t2=t2, threshold=t, scale=scale, n=float(n))


def normal_noise_sigma(rho: float) -> tuple[float, float]:
    """(sigma on each sum, granularity) of the normal estimator at ``rho``."""
    base = gaussian_sigma(NORMAL_L2_SENSITIVITY, rho)
    g = default_granularity(base)
    return gaussian_sigma(grid_sensitivity(NORMAL_L2_SENSITIVITY, g, dims=2), rho), g


@dataclass(frozen=True, kw_only=True)
class DpNormal:
    """Result of :func:`dp_normal`: mean and standard deviation in the column's units, the noisy
    sums on the rescaled values u in [-1, 1], and the Gaussian sd ``sigma`` on each sum."""

    mu: float
    sd: float
    sums: tuple[float, float]   # noisy sum u and sum (u^2 - 1/2)
    sigma: float


def dp_normal(x: np.ndarray, lo: float, hi: float, rho: float, n: float, rng: np.random.Generator) -> DpNormal:
    """rho-zCDP mean and standard deviation of values clamped to [lo, hi]."""
    if not hi > lo:
        raise ValueError(f"bounds must have lo < hi, got [{lo}, {hi}]")
    centre, half = 0.5 * (lo + hi), 0.5 * (hi - lo)
    u = (np.clip(np.asarray(x, dtype=np.float64), lo, hi) - centre) / half
    sigma, g = normal_noise_sigma(rho)
    s1, s2 = gaussian_on_grid(np.array([u.sum(), np.sum(u * u - 0.5)]), sigma, rng, granularity=g)
    n = max(float(n), 1.0)
    mean_u = float(np.clip(s1 / n, -1.0, 1.0))
    var_u = float(np.clip((s2 + 0.5 * n) / n - mean_u**2, 1e-12, 1.0))
    return DpNormal(mu=centre + half * mean_u, sd=half * math.sqrt(var_u), sums=(float(s1), float(s2)), sigma=sigma)


def noisy_histogram(codes: np.ndarray, cells: int, rho: float, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """Counts of ``codes`` in ``0..cells-1`` plus discrete Gaussian noise (sensitivity 1)."""
    sigma = gaussian_sigma(1.0, rho)
    hist = np.bincount(np.asarray(codes, dtype=np.int64), minlength=cells)[:cells]
    return (hist + discrete_gaussian(sigma, cells, rng)).astype(np.float64), sigma


def _burr_bin_probs(theta: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Probabilities of bins [e_j, e_j+1) of lo + scale * Burr(c, k); the last bin takes the tail."""
    c, k, scale = theta
    f = burr_cdf((edges - edges[0]) / scale, c, k)
    f[-1] = 1.0
    return np.maximum(np.diff(f), 1e-300)


def grouped_burr_mle(counts: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """(c, k, scale) maximising sum_j counts_j log P(bin j); negative counts count as 0."""
    w = np.clip(np.asarray(counts, dtype=np.float64), 0.0, None)
    edges = np.asarray(edges, dtype=np.float64)
    if w.sum() <= 0:
        return np.array([1.0, 1.0, (edges[-1] - edges[0]) / 2.0])
    w = w / w.sum()
    width = edges[-1] - edges[0]

    def negll(p: np.ndarray) -> float:
        theta = np.exp(np.clip(p, -8.0, 8.0))
        return -float(np.dot(w, np.log(_burr_bin_probs(theta, edges))))

    res = optimize.minimize(negll, np.log([2.0, 2.0, width / 3.0]), method="Nelder-Mead",
                            options={"xatol": 1e-7, "fatol": 1e-12, "maxiter": 4000})
    return np.exp(np.clip(res.x, -8.0, 8.0))


@dataclass(frozen=True, kw_only=True)
class BinnedBurr:
    """lo + scale * Burr XII(c, k), clamped to the column's bounds, estimated from its bins.

    theta = (c, k, scale); the sample is the clamped values; T is the grouped MLE of the
    sample's histogram over ``edges`` (the same functional the DP estimator applies to
    the noisy histogram).
    """

    edges: tuple[float, ...]

    def seed(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` uniforms on the open interval (0, 1)."""
        return np.clip(rng.random(n), 1e-16, 1.0 - 1e-16)

    def sample(self, theta: np.ndarray, omega: np.ndarray) -> np.ndarray:
        """lo + scale * Burr XII(c, k) quantiles of ``omega``, clamped to [lo, hi] (the first and
        last edges); one value per seed uniform."""
        lo, hi = self.edges[0], self.edges[-1]
        return np.clip(lo + theta[2] * burr_quantile(omega, float(theta[0]), float(theta[1])), lo, hi)

    def estimate(self, data: np.ndarray) -> np.ndarray:
        """Grouped MLE (c, k, scale) of the histogram of ``data`` over ``edges`` (values outside
        the bounds count in the end bins)."""
        e = np.asarray(self.edges)
        codes = np.clip(np.searchsorted(e[1:-1], data, side="right"), 0, e.size - 2)
        return grouped_burr_mle(np.bincount(codes, minlength=e.size - 1), e)

    def project(self, theta: np.ndarray) -> np.ndarray:
        """``theta`` with every parameter raised to at least 1e-3."""
        return np.maximum(theta, 1e-3)
