"""Shared DP mechanisms, each tied to the :class:`~dpsynth.privacy.budget.Charge` it costs.

Methods plan a charge with a ``*_charge`` function (public information only), spend it
through the ledger, and hand the spent charge to the mechanism, which draws noise
calibrated to exactly that charge:

* :func:`gaussian_counts`: discrete Gaussian noise on counts; a charge of ``rho`` with
  L2 sensitivity ``s`` gives ``sigma = s / sqrt(2 rho)`` (rho-zCDP);
* :func:`laplace_counts`: discrete Laplace noise on counts; a pure charge ``epsilon``
  with L1 sensitivity ``s`` gives scale ``s / epsilon`` (epsilon-DP);
* :func:`exponential_mechanism`: one index, ``P[i]`` proportional to
  ``exp(epsilon * score_i / (2 sensitivity))``, sampled by Gumbel-max. It is
  epsilon-DP and, being epsilon-bounded-range, ``epsilon^2 / 8``-zCDP (Cesar & Rogers
  2021): :func:`exponential_charge` charges the zCDP cost by default (four times
  cheaper than converting pure epsilon to ``epsilon^2 / 2``), or pure epsilon on request;
* :func:`report_noisy_max`: argmax of scores plus exponential noise of scale
  ``2 sensitivity / epsilon`` (epsilon-DP; charged as pure epsilon or its
  ``epsilon^2 / 2`` zCDP equivalent); :func:`dp_percentile` uses it.

Samplers are the discrete ones of :mod:`dpsynth.privacy.noise`: counts stay integers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .accounting import gaussian_sigma
from .budget import Charge
from .noise import discrete_gaussian, discrete_laplace, discrete_laplace_sd, sampled_laplace_scale

__all__ = [
    "Noised",
    "gaussian_charge",
    "gaussian_counts",
    "laplace_charge",
    "laplace_counts",
    "exponential_charge",
    "exponential_epsilon_for_rho",
    "exponential_mechanism",
    "exponential_probabilities",
    "report_noisy_max",
    "report_noisy_max_charge",
    "percentile_scores",
    "percentile_scores_hist",
    "dp_percentile_hist",
    "dp_percentile",
]


@dataclass(frozen=True, kw_only=True, eq=False)
class Noised:
    """Noisy values with the per-value noise standard deviation and the charge they cost."""

    values: np.ndarray
    stddev: float
    mechanism: str
    charge: Charge


def _positive(name: str, value: float) -> float:
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v


def gaussian_charge(stage: str, rho: float, *, sensitivity: float = 1.0) -> Charge:
    """The charge of a Gaussian measurement of L2 sensitivity ``sensitivity`` costing ``rho``."""
    sigma = gaussian_sigma(_positive("sensitivity", sensitivity), rho)
    return Charge(stage=stage, rho=rho, mechanism="gaussian",
                  detail={"sensitivity_l2": float(sensitivity), "sigma": sigma})


def gaussian_counts(
    counts: np.ndarray, charge: Charge, rng: np.random.Generator, *, sensitivity: float = 1.0
) -> Noised:
    """``counts`` plus discrete Gaussian noise calibrated to the zCDP charge ``charge.rho``.

    ``sensitivity``: how far one record (added or removed) moves ``counts`` in L2 norm.
    The charge must be a pure zCDP one (``epsilon == 0``, ``rho > 0``).
    """
    if charge.epsilon or not charge.rho > 0:
        raise ValueError(f"stage {charge.stage!r}: Gaussian noise needs a zCDP charge (rho > 0, no epsilon)")
    sigma = gaussian_sigma(_positive("sensitivity", sensitivity), charge.rho)
    arr = np.asarray(counts)
    noisy = (arr + discrete_gaussian(sigma, arr.shape, rng)).astype(np.float64)
    return Noised(values=noisy, stddev=sigma, mechanism="gaussian", charge=charge)


def laplace_charge(stage: str, epsilon: float, *, sensitivity: float = 1.0) -> Charge:
    """The pure-epsilon charge of a Laplace measurement of L1 sensitivity ``sensitivity``."""
    eps = _positive("epsilon", epsilon)
    return Charge(stage=stage, epsilon=eps, mechanism="laplace",
                  detail={"sensitivity_l1": float(sensitivity),
                          "scale": sampled_laplace_scale(_positive("sensitivity", sensitivity) / eps)})


def laplace_counts(
    counts: np.ndarray, charge: Charge, rng: np.random.Generator, *, sensitivity: float = 1.0
) -> Noised:
    """``counts`` plus discrete Laplace noise of scale ``sensitivity / charge.epsilon``.

    ``sensitivity``: how far one record moves ``counts`` in L1 norm. The charge must be a
    pure-epsilon one (``rho == 0``, ``epsilon > 0``).
    """
    if charge.rho or not charge.epsilon > 0:
        raise ValueError(f"stage {charge.stage!r}: Laplace noise needs a pure-epsilon charge (epsilon > 0, no rho)")
    scale = sampled_laplace_scale(_positive("sensitivity", sensitivity) / charge.epsilon)  # the one drawn
    arr = np.asarray(counts)
    noisy = (arr + discrete_laplace(scale, arr.shape, rng)).astype(np.float64)
    return Noised(values=noisy, stddev=discrete_laplace_sd(scale), mechanism="laplace", charge=charge)


def exponential_charge(stage: str, epsilon: float, *, bounded_range: bool = True) -> Charge:
    """Cost of one :func:`exponential_mechanism` call at ``epsilon``.

    ``bounded_range=True``: ``rho = epsilon^2 / 8`` (zCDP, composes with Gaussian
    stages); ``False``: pure ``epsilon`` (basic composition).
    """
    eps = _positive("epsilon", epsilon)
    if bounded_range:
        return Charge(stage=stage, rho=eps * eps / 8.0, mechanism="exponential",
                      detail={"epsilon": eps, "accounting": "bounded range: epsilon^2/8 zCDP"})
    return Charge(stage=stage, epsilon=eps, mechanism="exponential", detail={"accounting": "pure epsilon"})


def exponential_mechanism(
    scores: np.ndarray,
    epsilon: float,
    sensitivity: float,
    rng: np.random.Generator,
    allowed: Callable[[int], bool] | None = None,
) -> int:
    """Index ``i`` drawn with probability proportional to ``exp(epsilon * scores[i] / (2 sensitivity))``.

    Gumbel-max: the argmax of the scaled scores plus independent standard Gumbel noise
    has exactly that distribution. ``sensitivity``: how far one record moves any score.
    Cost: :func:`exponential_charge`. With ``allowed`` (a test on public information
    only), the draw is the mechanism restricted to the indices it accepts: the Gumbel-max
    of a subset is its own argmax, so only the best few keys are tested.
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    if s.size == 0 or not np.all(np.isfinite(s)):
        raise ValueError("scores must be a non-empty array of finite numbers")
    logits = (_positive("epsilon", epsilon) / (2.0 * _positive("sensitivity", sensitivity))) * s
    keys = logits + rng.gumbel(size=s.size)
    if allowed is None:
        return int(np.argmax(keys))
    for i in np.argsort(-keys, kind="stable"):
        if allowed(int(i)):
            return int(i)
    raise ValueError("no candidate is allowed")


def exponential_probabilities(scores: np.ndarray, epsilon: float, sensitivity: float) -> np.ndarray:
    """The selection probabilities of :func:`exponential_mechanism` (for tests and audits)."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    z = (_positive("epsilon", epsilon) / (2.0 * _positive("sensitivity", sensitivity))) * s
    z = np.exp(z - z.max())
    return z / z.sum()


def exponential_epsilon_for_rho(rho: float) -> float:
    """The epsilon whose exponential mechanism costs exactly ``rho`` (bounded range)."""
    return math.sqrt(8.0 * _positive("rho", rho))


def report_noisy_max_charge(stage: str, epsilon: float) -> Charge:
    """Cost of one :func:`report_noisy_max` call at ``epsilon``: pure ``epsilon``."""
    return Charge(stage=stage, epsilon=_positive("epsilon", epsilon), mechanism="report_noisy_max")


def report_noisy_max(
    scores: np.ndarray, epsilon: float, sensitivity: float, rng: np.random.Generator
) -> int:
    """argmax of ``scores`` plus exponential noise of scale ``2 sensitivity / epsilon`` (epsilon-DP).

    Cost: :func:`report_noisy_max_charge` (or ``rho = epsilon^2 / 2`` in a zCDP plan).
    """
    s = np.asarray(scores, dtype=np.float64)
    scale = 2.0 * _positive("sensitivity", sensitivity) / _positive("epsilon", epsilon)
    return int(np.argmax(s + rng.exponential(scale=scale, size=s.size)))


def percentile_scores(values: np.ndarray, percentage: float, upper: int) -> np.ndarray:
    """Quality of each candidate 0..upper as the percentile: minus the records that must change.

    With r = ceil(q n / 100), v is the q-th percentile iff #{x <= v} >= r and
    #{x < v} < r; the score is -max(0, r - #{x <= v}, #{x < v} - r + 1). Adding or
    removing one record moves it by at most 1.
    """
    x = np.clip(np.asarray(values, dtype=np.int64), 0, upper)
    return percentile_scores_hist(np.bincount(x, minlength=upper + 1), percentage)


def percentile_scores_hist(hist: np.ndarray, percentage: float) -> np.ndarray:
    """:func:`percentile_scores` from the histogram of the values over 0..upper (counted in pieces)."""
    hist = np.asarray(hist, dtype=np.int64)
    n = int(hist.sum())
    r = max(1, math.ceil(percentage / 100.0 * n - 1e-9))
    le = np.cumsum(hist)
    lt = le - hist
    return -np.maximum(0, np.maximum(r - le, lt - r + 1)).astype(np.float64)


def dp_percentile_hist(hist: np.ndarray, percentage: float, epsilon: float, rng: np.random.Generator) -> int:
    """:func:`dp_percentile` from the histogram of the values over 0..upper."""
    return report_noisy_max(percentile_scores_hist(hist, percentage), epsilon, 1.0, rng)


def dp_percentile(values: np.ndarray, percentage: float, epsilon: float, upper: int, rng: np.random.Generator) -> int:
    """epsilon-DP percentile of integers in [0, upper] (report noisy max on :func:`percentile_scores`)."""
    return report_noisy_max(percentile_scores(values, percentage, upper), epsilon, 1.0, rng)

