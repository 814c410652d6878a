"""Vectorised noise samplers.

Counts get integer-valued noise: the discrete Laplace (two-sided geometric) and the
discrete Gaussian of Canonne, Kamath and Steinke (2020). Both have exactly the privacy
guarantees of their continuous versions (a discrete Gaussian of scale sigma on a count
of sensitivity s is s^2/(2 sigma^2)-zCDP), and both are sampled exactly, on integers
(:mod:`dpsynth.privacy.exact`), at a rational scale no smaller than the one requested
(:func:`sampled_sigma`, :func:`sampled_laplace_scale`; docs/privacy.md).

Real-valued outputs never receive textbook floating-point noise: the low bits of
``x + Laplace()`` computed in floats reveal ``x`` (Mironov 2012). Instead the value is
rounded to a grid of spacing ``granularity`` and integer noise is added in grid units,
so every output is an exact multiple of the granularity. Rounding can move two
neighbouring inputs apart by up to one grid step per coordinate; callers calibrate
with :func:`grid_sensitivity`.

Samplers take a ``numpy.random.Generator`` and draw only ``rng.integers`` from it. It is
seeded from the OS entropy pool unless the caller derives it from a secret seed (see
:mod:`dpsynth.privacy.rng`): the same seed gives the same noise.
"""

from __future__ import annotations

import math

import numpy as np

from . import exact
from .rational import gaussian_sigma_exact, laplace_scale_exact

__all__ = [
    "discrete_laplace",
    "discrete_laplace_sd",
    "discrete_gaussian",
    "sampled_laplace_scale",
    "sampled_sigma",
    "gaussian_on_grid",
    "laplace_on_grid",
    "grid_sensitivity",
    "default_granularity",
]


def _check_scale(name: str, value: float) -> float:
    value = float(value)
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def _shape(size: int | tuple[int, ...]) -> tuple[int, ...]:
    return (int(size),) if isinstance(size, (int, np.integer)) else tuple(int(d) for d in size)


def sampled_laplace_scale(scale: float) -> float:
    """The scale :func:`discrete_laplace` draws for ``scale``: the float itself when it is
    ``>= 2^-10``, else rounded up to a multiple of ``2^-62`` (``0`` stays ``0``)."""
    scale = _check_scale("scale", scale)
    return float(laplace_scale_exact(scale)) if scale else 0.0


def sampled_sigma(sigma: float) -> float:
    """The sigma :func:`discrete_gaussian` draws for ``sigma``: rounded up to 24 significant
    bits (relative increase < 1.2e-7), exactly representable; ``0`` stays ``0``."""
    sigma = _check_scale("sigma", sigma)
    return float(gaussian_sigma_exact(sigma)) if sigma else 0.0


def discrete_laplace(scale: float, size: int | tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Samples with P[X = x] proportional to exp(-|x| / scale), as int64, drawn exactly.

    CKS 2020 Algorithm 2 for the rational scale :func:`sampled_laplace_scale` (``t / s``):
    only uniform integers from ``rng`` and integer comparisons; vectorised.
    """
    scale = _check_scale("scale", scale)
    shape = _shape(size)
    total = int(np.prod(shape, dtype=np.int64))
    if scale == 0.0 or total == 0:
        return np.zeros(shape, dtype=np.int64)
    frac = laplace_scale_exact(scale)
    t, s = frac.numerator, frac.denominator
    return exact.fill(total, lambda m: exact.laplace_pass(t, s, m, rng), exact.laplace_rate(t, s)).reshape(shape)


def discrete_laplace_sd(scale: float) -> float:
    """Standard deviation of :func:`discrete_laplace`: ``sqrt(2 q) / (1 - q)`` with ``q = exp(-1/scale)``."""
    scale = _check_scale("scale", scale)
    if scale == 0.0:
        return 0.0
    q = math.exp(-1.0 / scale)
    return math.sqrt(2.0 * q) / (1.0 - q)


def discrete_gaussian(sigma: float, size: int | tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Samples with P[X = x] proportional to exp(-x^2 / (2 sigma'^2)), as int64, drawn exactly,
    where ``sigma' = sampled_sigma(sigma) >= sigma``.

    CKS 2020 Algorithm 3: discrete Laplace proposals of integer scale
    ``t = floor(sigma') + 1``, each kept with probability
    ``exp(-(|Y| - sigma'^2/t)^2 / (2 sigma'^2))`` by Bernoulli draws of integer ratios.
    """
    sigma = _check_scale("sigma", sigma)
    shape = _shape(size)
    total = int(np.prod(shape, dtype=np.int64))
    if sigma == 0.0 or total == 0:
        return np.zeros(shape, dtype=np.int64)
    frac = gaussian_sigma_exact(sigma)
    t = math.floor(frac) + 1

    def draw(m: int) -> np.ndarray:
        y = exact.laplace_pass(t, 1, m, rng)
        return y[exact.gaussian_accept(np.abs(y), frac, t, rng)]

    return exact.fill(total, draw, exact.laplace_rate(t, 1) * exact.gaussian_rate(t)).reshape(shape)


def default_granularity(scale: float) -> float:
    """A power of two about 2^-10 of the noise scale: negligible extra error."""
    scale = _check_scale("scale", scale)
    if scale == 0.0:
        return 2.0**-30
    return 2.0 ** math.floor(math.log2(scale) - 10)


def grid_sensitivity(sensitivity: float, granularity: float, dims: int = 1, norm: str = "l2") -> float:
    """Sensitivity after rounding each of ``dims`` coordinates to the grid.

    Rounding moves each coordinate by at most granularity/2, so two neighbouring
    inputs can drift apart by at most one step per coordinate.
    """
    if norm == "l2":
        return float(sensitivity) + granularity * math.sqrt(dims)
    if norm == "l1":
        return float(sensitivity) + granularity * dims
    raise ValueError(f"norm must be 'l1' or 'l2', got {norm!r}")


def _to_grid(values: np.ndarray, granularity: float) -> np.ndarray:
    if not (math.isfinite(granularity) and granularity > 0):
        raise ValueError(f"granularity must be > 0, got {granularity!r}")
    v = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(v)):
        raise ValueError("values to be noised must be finite (clip them to the schema bounds first)")
    return np.rint(v / granularity)


def gaussian_on_grid(
    values: np.ndarray, sigma: float, rng: np.random.Generator, granularity: float | None = None
) -> np.ndarray:
    """``values`` plus Gaussian noise of scale ``sigma``, every output a multiple of the grid.

    Calibrate ``sigma`` for :func:`grid_sensitivity` of the true sensitivity.
    """
    sigma = _check_scale("sigma", sigma)
    g = default_granularity(sigma) if granularity is None else float(granularity)
    k = _to_grid(values, g)
    noisy = k + discrete_gaussian(sigma / g, k.shape, rng)
    return noisy * g


def laplace_on_grid(
    values: np.ndarray, scale: float, rng: np.random.Generator, granularity: float | None = None
) -> np.ndarray:
    """``values`` plus Laplace noise of scale ``scale`` on a grid (see :func:`gaussian_on_grid`)."""
    scale = _check_scale("scale", scale)
    g = default_granularity(scale) if granularity is None else float(granularity)
    k = _to_grid(values, g)
    noisy = k + discrete_laplace(scale / g, k.shape, rng)
    return noisy * g
