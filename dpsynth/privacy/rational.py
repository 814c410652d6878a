"""The exact rational noise scales the samplers of :mod:`dpsynth.privacy.exact` draw with.

A float is a dyadic rational ``m * 2^e``. The exact samplers need the scale as a ratio of
integers small enough for int64 arithmetic, so a requested scale is rounded UP (never
down: a larger scale only adds privacy) to a dyadic rational with a bounded numerator:

* Gaussian ``sigma``: 24 significant bits (relative increase below ``2^-23``, about 1.2e-7),
  and at least a multiple of ``2^-27`` (coarser only below sigma = 1/8: keeps the
  arithmetic of tiny sigmas in int64); the result is itself a float, the sigma every
  measurement states;
* Laplace ``scale``: the float exactly (53 bits) whenever it is at least ``2^-10``; below
  that, rounded up to a multiple of ``2^-62`` (a noise that is 0 with probability
  ``1 - 2e^-1024`` or more either way).

Standard library only: :mod:`dpsynth.privacy.accounting` uses it without numpy.
"""

from __future__ import annotations

import math
from fractions import Fraction

__all__ = ["GAUSSIAN_BITS", "MAX_SCALE", "dyadic_ceil", "gaussian_sigma_exact", "laplace_scale_exact"]

GAUSSIAN_BITS = 24
MAX_SCALE = 2.0**48  # noise of a larger scale would not fit the int64 outputs safely
_GAUSSIAN_MIN_EXP = -27
_LAPLACE_MIN_EXP = -62


def _finite_positive(name: str, value: float) -> float:
    v = float(value)
    if not (math.isfinite(v) and v > 0.0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if v > MAX_SCALE:
        raise ValueError(f"{name} = {v!r} is above 2^48: noise that large does not fit int64 counts")
    return v


def dyadic_ceil(x: float, bits: int, min_exp: int | None = None) -> Fraction:
    """The smallest ``n * 2^k >= x`` with ``n < 2^bits`` (and ``k >= min_exp`` if given)."""
    if not (math.isfinite(x) and x > 0.0):
        raise ValueError(f"need a finite number > 0, got {x!r}")
    _, e = math.frexp(x)  # x = f * 2^e with 0.5 <= f < 1
    k = e - bits
    if min_exp is not None:
        k = max(k, min_exp)
    step = Fraction(2) ** k
    n = math.ceil(Fraction(x) / step)
    return n * step


def gaussian_sigma_exact(sigma: float) -> Fraction:
    """The sigma the exact discrete Gaussian draws for a requested ``sigma`` (> 0): ``sigma``
    rounded up to 24 significant bits and to a multiple of 2^-27; ``float()`` of it is exact."""
    return dyadic_ceil(_finite_positive("sigma", sigma), GAUSSIAN_BITS, _GAUSSIAN_MIN_EXP)


def laplace_scale_exact(scale: float) -> Fraction:
    """The scale the exact discrete Laplace draws for a requested ``scale`` (> 0): the float
    itself when ``scale >= 2^-10``, else rounded up to a multiple of ``2^-62``."""
    return dyadic_ceil(_finite_positive("scale", scale), 53, _LAPLACE_MIN_EXP)
