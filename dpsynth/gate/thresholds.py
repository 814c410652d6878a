"""The gate's threshold maths: what the noise and the sample size predict.

Pure functions of the DP measurement and the synthetic row count (no Great
Expectations here): the DP row estimate and its band, the predicted TVD of an honest
synthesizer against each DP marginal, and the resulting per-marginal and per-size
thresholds, with the user's overrides. The prediction itself and the default per-marginal
threshold live in :mod:`dpsynth.evaluation.predicted`, which methods import too (``pgm``
fits its released model until it meets them); this module adds the overrides and the checks.

Thresholds: what the noise and the sample size predict
------------------------------------------------------
For a DP marginal with ``d`` cells, noisy counts ``y`` and noise scale ``sigma``, let
``q = clip(y, 0) / sum(clip(y, 0))``, ``n`` the synthetic rows and ``N`` the DP
estimate of the private row count. An honest synthesizer's cell ``i`` deviates from
``q_i`` by two roughly independent, roughly Gaussian errors:

* sampling ``n`` rows: standard deviation ``sqrt(q_i (1 - q_i) / n)``;
* the noise itself: a synthesizer that recovers the true distribution ``p`` instead of
  reproducing ``q`` (for example by fitting several noisy marginals consistently) is
  off by ``|p_i - q_i| ~ sigma / N``.

With ``s_i = sqrt(q_i (1 - q_i) / n + (sigma / N)^2`` and, for a centred Gaussian ``X``
of scale ``s``, ``E|X| = sqrt(2/pi) s`` and ``Var|X| = (1 - 2/pi) s^2``, the TVD
``0.5 sum_i |X_i|`` has the predicted mean and standard deviation::

    E_m  = sum_i s_i / sqrt(2 pi)
    SD_m = 0.5 sqrt(1 - 2/pi) sqrt(sum_i s_i^2 + max_i s_i^2)

(cells treated as independent; the ``max_i s_i^2`` term covers the two-cell case, where
both cells move together and the TVD is one half-normal ``|X_1|``.)

Default thresholds (all overridable per release, see :data:`THRESHOLD_KEYS`):

* per marginal: ``t_m = max(min_factor * E_m, E_m + sd_factor * SD_m)`` with
  ``sd_factor = 6`` and ``min_factor = 2``. In the worst case for the tail, two cells,
  ``t_m = 0.80 s + 6 * 0.52 s = 3.9 s`` for a TVD distributed as ``|N(0, s^2)|``:
  ``P(TVD > t_m) ~ 1e-4``. With more cells the TVD is a sum of many half-normals,
  close to Gaussian, and six standard deviations leave room for model error (a
  synthesizer that neither samples ``q`` exactly nor recovers ``p`` exactly); the floor
  of twice the predicted error keeps large marginals, whose spread is small, from
  failing an honest but imperfect fit. A broken synthesizer (columns shuffled or
  swapped, labels shifted, uniform output) misses the DP marginal by a TVD of order
  0.1-0.5, many times ``E_m`` wherever DP synthesis is meaningful.
* mean over the M marginals of size k:
  ``max(min_factor * mean(E_m), mean(E_m) + sd_factor * sqrt(sum SD_m^2) / M)``: the
  same rule for the mean of M errors (independent marginals assumed for its spread).
  It catches a systematic excess too small to push any single marginal over.
* ``max_tvd_k<k>`` given: every k-way marginal's threshold is that number instead.

Measured with the baseline (one release per seed, every 1-way marginal): the largest
TVD / t_m was 0.71 on the demo table at epsilon 1 (200 releases, 2,000 marginals),
0.19 at epsilon 0.1, 0.80 at epsilon 10, 0.76 with 200 synthetic rows, and 0.70 on
NIST national2019 at epsilon 1 (40 releases, 960 marginals); the mean TVD reached at
most 0.66 of its threshold. Swapping two demo columns gives TVD ~0.2 against
thresholds ~0.04-0.05.

Noise scale ``sigma`` of a marginal: the ``stddev`` its :class:`~dpsynth.measurement.NoisyMarginal`
states (the measurement contract; a method that states 0 gets the sampling term only).

Row count: with ``expected_rows`` the count must be exact. Otherwise the DP estimate
``N`` is the measurement's :meth:`~dpsynth.measurement.Measurement.estimated_records` (the
measured record count, else the inverse-variance mean of the 1-way marginals' totals); the
band is ``N (1 +/- row_count_tolerance)`` with the default tolerance
``max(0.01, 5 * max_m sqrt(d_m) sigma_m / N)``: a method may size its output from any
single noisy total, whose standard deviation is ``sqrt(d_m) sigma_m``.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

import numpy as np

from ..evaluation.predicted import (  # noqa: F401  (the gate's names for the shared maths)
    DEFAULT_MIN_FACTOR,
    DEFAULT_SD_FACTOR,
    RowEstimate,
    _target,
    allowed_tvd,
    dp_row_estimate,
    predicted_tvd,
    predicted_tvd_sd,
    predicted_tvds,
)

__all__ = [
    "THRESHOLD_KEYS",
    "DEFAULT_SD_FACTOR",
    "DEFAULT_MIN_FACTOR",
    "GateError",
    "RowEstimate",
    "dp_row_estimate",
    "marginal_limits",
    "predicted_tvd",
    "predicted_tvd_sd",
    "predicted_tvds",
]

#: Floor of the relative row-count tolerance when no row count was requested.
MIN_ROW_TOLERANCE = 0.01
#: Standard deviations of the noisiest single total allowed in the row-count band.
ROW_TOLERANCE_SDS = 5.0
#: Smallest per-marginal threshold (keeps ratios finite for a point-mass marginal).
_MIN_THRESHOLD = 1e-9

#: Keys accepted in ``thresholds`` (``<k>`` is a marginal size: 1, 2, 3...).
THRESHOLD_KEYS = (
    "max_tvd_k<k>",
    "mean_tvd_k<k>",
    "row_count_tolerance",
    "sd_factor",
    "min_factor",
    "max_code_mismatch_share",
)
_TVD_KEY = re.compile(r"^(max|mean)_tvd_k([1-9][0-9]*)$")
_SCALAR_KEYS = ("row_count_tolerance", "sd_factor", "min_factor", "max_code_mismatch_share")


class GateError(ValueError):
    """A public problem with the gate's inputs (bad thresholds, a folder in the way)."""


def _positive_number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        return None
    v = float(x)
    return v if math.isfinite(v) and v >= 0 else None


def _overrides(thresholds: Mapping[str, float] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in (thresholds or {}).items():
        if not isinstance(key, str) or not (key in _SCALAR_KEYS or _TVD_KEY.match(key)):
            raise GateError(f"unknown threshold {key!r}; known: {', '.join(THRESHOLD_KEYS)}")
        v = _positive_number(value)
        if v is None:
            raise GateError(f"threshold {key!r} must be a finite number >= 0, got {value!r}")
        if key == "max_code_mismatch_share" and v > 1:
            raise GateError("threshold 'max_code_mismatch_share' is a share: at most 1")
        out[key] = v
    return out



def _row_band(
    expected_rows: int | None, estimate: RowEstimate | None, over: Mapping[str, float]
) -> tuple[int, int | None, float | None]:
    """(min, max, relative tolerance) of the synthetic row count; max None: unbounded."""
    if expected_rows is not None:
        return int(expected_rows), int(expected_rows), 0.0
    if estimate is None:
        return 1, None, None
    if "row_count_tolerance" in over:
        tol = over["row_count_tolerance"]
    else:
        tol = max(MIN_ROW_TOLERANCE, ROW_TOLERANCE_SDS * estimate.noisiest_total_sd / estimate.value)
    lo = max(1, math.floor(estimate.value * (1.0 - tol)))
    hi = max(lo, math.ceil(estimate.value * (1.0 + tol)))
    return lo, hi, tol




def marginal_limits(
    group: Sequence[tuple[str, ...]],
    predicted: Mapping[tuple[str, ...], float],
    spread: Mapping[tuple[str, ...], float],
    k: int,
    over: Mapping[str, float],
) -> tuple[dict[tuple[str, ...], float], float]:
    """Per-marginal thresholds of the k-way marginals in ``group``, and their mean's threshold.

    ``t_m = max(min_factor E_m, E_m + sd_factor SD_m)`` (or the fixed ``max_tvd_k<k>``);
    the mean's threshold is the same rule for the mean of the group's errors (or the
    fixed ``mean_tvd_k<k>``). See the module docstring.
    """
    sd_factor = over.get("sd_factor", DEFAULT_SD_FACTOR)
    min_factor = over.get("min_factor", DEFAULT_MIN_FACTOR)
    fixed = over.get(f"max_tvd_k{k}")
    limit = {
        key: max(
            _MIN_THRESHOLD,
            fixed if fixed is not None else allowed_tvd(predicted[key], spread[key], sd_factor, min_factor),
        )
        for key in group
    }
    mean_pred = float(np.mean([predicted[key] for key in group]))
    mean_sd = math.sqrt(sum(spread[key] ** 2 for key in group)) / len(group)
    mean_limit = over.get(f"mean_tvd_k{k}", max(min_factor * mean_pred, mean_pred + sd_factor * mean_sd))
    return limit, float(mean_limit)
