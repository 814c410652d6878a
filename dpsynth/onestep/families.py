"""Continuous families for the one-step engine: normal, Burr XII and beta.

Each family draws its seed as uniforms and samples by its quantile function, so
``sample(theta, omega)`` moves smoothly with ``theta`` for a fixed seed (the paper's
Example 4). Estimators are maximum likelihood (closed form for the normal, a
one-dimensional profile for Burr XII, Newton on the sufficient statistics for the beta).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

__all__ = ["Normal", "BurrXII", "Beta", "burr_cdf", "burr_quantile", "beta_mle_from_stats"]

_TINY = 1e-9
_BETA_MAX = 1e6  # upper bound of a and b (noisy statistics can push the MLE to infinity)


def _uniforms(n: int, rng: np.random.Generator) -> np.ndarray:
    if n < 1:
        raise ValueError(f"a sample needs n >= 1 records, got {n}")
    # open interval (0, 1): quantile functions are finite there
    return np.clip(rng.random(n), 1e-16, 1.0 - 1e-16)


@dataclass(frozen=True, kw_only=True)
class Normal:
    """N(mu, sigma^2), theta = (mu, sigma); T = (mean, standard deviation with ddof 0)."""

    min_sigma: float = _TINY

    def seed(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` uniforms on the open interval (0, 1); ValueError for n < 1."""
        return _uniforms(n, rng)

    def sample(self, theta: np.ndarray, omega: np.ndarray) -> np.ndarray:
        """mu + sigma * Phi^-1(omega): one normal value per seed uniform."""
        return theta[0] + theta[1] * special.ndtri(omega)

    def estimate(self, data: np.ndarray) -> np.ndarray:
        """(mean, standard deviation with ddof 0) of ``data``."""
        return np.array([np.mean(data), np.std(data)])

    def project(self, theta: np.ndarray) -> np.ndarray:
        """``theta`` with sigma raised to at least ``min_sigma``."""
        return np.array([theta[0], max(theta[1], self.min_sigma)])

    def exact(self, theta_hat: np.ndarray, omega: np.ndarray) -> np.ndarray:
        """The exact solution of T(Y) = theta_hat (location-scale: standardise the seed's normals)."""
        e = special.ndtri(omega)
        sd = np.std(e)
        if sd == 0:
            raise ValueError("the seed has no spread: the location-scale solution needs n >= 2")
        return theta_hat[0] + theta_hat[1] * (e - e.mean()) / sd


def burr_cdf(x: np.ndarray, c: float, k: float) -> np.ndarray:
    """F(x) = 1 - (1 + x^c)^(-k) for x > 0."""
    x = np.maximum(np.asarray(x, dtype=np.float64), 0.0)
    return -np.expm1(-k * np.log1p(x**c))


def burr_quantile(u: np.ndarray, c: float, k: float) -> np.ndarray:
    """F^-1(u) = ((1 - u)^(-1/k) - 1)^(1/c)."""
    return np.expm1(-np.log1p(-np.asarray(u)) / k) ** (1.0 / c)


@dataclass(frozen=True, kw_only=True)
class BurrXII:
    """Burr XII(c, k) on x > 0, theta = (c, k); T = MLE with k profiled out.

    For fixed c the MLE of k is n / sum log(1 + x^c), so the likelihood is maximised
    over log c alone (bounded scalar search).
    """

    min_param: float = 1e-3
    max_log_c: float = 6.0

    def seed(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` uniforms on the open interval (0, 1); ValueError for n < 1."""
        return _uniforms(n, rng)

    def sample(self, theta: np.ndarray, omega: np.ndarray) -> np.ndarray:
        """Burr XII(c, k) quantiles of the seed uniforms ``omega``."""
        return burr_quantile(omega, float(theta[0]), float(theta[1]))

    def estimate(self, data: np.ndarray) -> np.ndarray:
        """Maximum likelihood (c, k) of the positive values of ``data``, k profiled out and
        log c searched in [-max_log_c, max_log_c]; ValueError with fewer than two positive values."""
        x = np.asarray(data, dtype=np.float64)
        x = x[x > 0]
        if x.size < 2:
            raise ValueError("Burr XII maximum likelihood needs at least two positive values")
        logx = np.log(x)
        n, slog = x.size, float(logx.sum())

        def negll(log_c: float) -> float:
            c = math.exp(log_c)
            s = float(np.sum(np.logaddexp(0.0, c * logx)))  # sum log(1 + x^c)
            k = n / s
            return -(n * math.log(c) + n * math.log(k) + (c - 1.0) * slog - n - s)

        res = optimize.minimize_scalar(negll, bounds=(-self.max_log_c, self.max_log_c), method="bounded",
                                       options={"xatol": 1e-10})
        c = math.exp(res.x)
        return np.array([c, n / float(np.sum(np.logaddexp(0.0, c * logx)))])

    def project(self, theta: np.ndarray) -> np.ndarray:
        """``theta`` with c and k raised to at least ``min_param``."""
        return np.maximum(theta, self.min_param)


def beta_mle_from_stats(t1: float, t2: float, lower: float = _TINY) -> np.ndarray:
    """argmax over a, b >= lower of (a - 1) t1 + (b - 1) t2 - log B(a, b).

    ``t1``, ``t2`` are mean log x and mean log(1 - x) (possibly noisy). The objective is
    strictly concave: projected Newton steps with backtracking; a coordinate held at
    its bound while the gradient pushes it out is optimised over the other alone.
    """
    def f(x: np.ndarray) -> float:
        return float((x[0] - 1.0) * t1 + (x[1] - 1.0) * t2 - special.betaln(x[0], x[1]))

    g1, g2 = math.exp(min(t1, -1e-12)), math.exp(min(t2, -1e-12))
    denom = max(1.0 - g1 - g2, 1e-6)
    x = np.clip(np.array([0.5 + g1 / (2.0 * denom), 0.5 + g2 / (2.0 * denom)]), max(lower, 1e-3), 1e6)
    fx = f(x)
    for _ in range(200):
        dab, tab = special.digamma(x.sum()), special.polygamma(1, x.sum())
        g = np.array([t1 - special.digamma(x[0]) + dab, t2 - special.digamma(x[1]) + dab])
        h = np.array([[tab - special.polygamma(1, x[0]), tab], [tab, tab - special.polygamma(1, x[1])]])
        free = ~(((x <= lower) & (g < 0)) | ((x >= _BETA_MAX) & (g > 0)))
        d = np.zeros(2)
        if free.all() and np.linalg.det(h) > 1e-300:
            d = -np.linalg.solve(h, g)
        else:
            d[free] = -g[free] / np.minimum(np.diag(h)[free], -1e-300)
        step = 1.0
        while True:
            xn = np.clip(x + step * d, lower, _BETA_MAX)
            fn = f(xn)
            if fn >= fx - 1e-15 or step < 1e-12:
                break
            step *= 0.5
        done = np.all(np.abs(xn - x) <= 1e-12 * (1.0 + np.abs(x)))
        x, fx = xn, fn
        if done:
            break
    return x


@dataclass(frozen=True, kw_only=True)
class Beta:
    """Beta(a, b) on (0, 1), theta = (a, b); T = MLE from the two sufficient statistics.

    ``lower`` bounds both parameters from below (the DP estimator of the supplement
    restricts the space to a, b >= 1; the projection uses the same space).
    """

    lower: float = _TINY

    def seed(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` uniforms on the open interval (0, 1); ValueError for n < 1."""
        return _uniforms(n, rng)

    def sample(self, theta: np.ndarray, omega: np.ndarray) -> np.ndarray:
        """Beta(a, b) quantiles of the seed uniforms ``omega`` (values in [0, 1])."""
        return special.betaincinv(float(theta[0]), float(theta[1]), omega)

    def estimate(self, data: np.ndarray) -> np.ndarray:
        """Maximum likelihood (a, b >= ``lower``) from the mean log x and mean log(1 - x) of
        ``data`` clipped into (0, 1)."""
        x = np.clip(np.asarray(data, dtype=np.float64), 1e-300, 1.0 - 1e-16)
        return beta_mle_from_stats(float(np.mean(np.log(x))), float(np.mean(np.log1p(-x))), self.lower)

    def project(self, theta: np.ndarray) -> np.ndarray:
        """``theta`` with a and b raised to at least ``lower``."""
        return np.maximum(theta, self.lower)
