"""What an honest synthesizer's error against each DP marginal is predicted to be.

Pure functions of a DP measurement and a synthetic row count, shared by the release gate
(:mod:`dpsynth.gate.thresholds` builds its thresholds on them) and by methods that fit a
model until it meets what the gate will allow (``pgm``'s released fit): the DP estimate of
the row count, the predicted TVD of each marginal and its spread, and the default per-marginal
threshold ``max(min_factor E_m, E_m + sd_factor SD_m)``. The maths and its reasons are in the
docstring of :mod:`dpsynth.gate.thresholds`. No Great Expectations here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..measurement import Measurement
from .metrics import clipped_distributions

__all__ = [
    "DEFAULT_SD_FACTOR",
    "DEFAULT_MIN_FACTOR",
    "RowEstimate",
    "allowed_tvd",
    "allowed_tvds",
    "dp_row_estimate",
    "predicted_tvd",
    "predicted_tvd_sd",
    "predicted_tvds",
]

#: Standard deviations of the predicted TVD a marginal may exceed its predicted mean by.
DEFAULT_SD_FACTOR = 6.0
#: Every threshold is at least this multiple of the predicted mean TVD.
DEFAULT_MIN_FACTOR = 2.0


@dataclass(frozen=True)
class RowEstimate:
    """DP estimate of the private table's row count, from the measurement alone."""

    value: float
    #: Standard deviation of the noisiest single total a method could size its output from.
    noisiest_total_sd: float
    source: str


def dp_row_estimate(m: Measurement) -> RowEstimate | None:
    """The measurement's own estimate of the row count (None if it has no marginal or count)."""
    one_way = [nm for nm in m.measured if len(nm.attrs) == 1] or list(m.measured)
    noisiest = max((math.sqrt(nm.counts.size) * nm.stddev for nm in one_way), default=0.0)
    if m.records is not None:
        return RowEstimate(m.records.value, noisiest, "measured record count")
    value = m.estimated_records()
    if value is None:
        return None
    return RowEstimate(float(value), noisiest, "inverse-variance mean of 1-way totals")


def _target(noisy: np.ndarray) -> np.ndarray:
    """The DP marginal as a distribution: NaN and negatives to 0, normalised (uniform if empty)."""
    q = np.clip(np.nan_to_num(np.asarray(noisy, dtype=np.float64).ravel(), nan=0.0, posinf=0.0, neginf=0.0), 0.0, None)
    total = q.sum()
    return q / total if total > 0 else np.full(q.size, 1.0 / max(1, q.size))


def _cell_scales(noisy: np.ndarray, rows: int, records: float, sigma: float) -> np.ndarray:
    q = _target(noisy)
    n = max(1, int(rows))
    big_n = max(1.0, float(records))
    return np.sqrt(q * (1.0 - q) / n + (float(sigma) / big_n) ** 2)


def predicted_tvd(noisy: np.ndarray, rows: int, records: float, sigma: float) -> float:
    """Expected TVD between an honest ``rows``-row synthetic marginal and this DP marginal.

    ``E_m = sum_i s_i / sqrt(2 pi)`` with ``s_i = sqrt(q_i (1 - q_i) / rows +
    (sigma / records)^2)``; see the module docstring.
    """
    return float(_cell_scales(noisy, rows, records, sigma).sum() / math.sqrt(2.0 * math.pi))


def predicted_tvd_sd(noisy: np.ndarray, rows: int, records: float, sigma: float) -> float:
    """Its standard deviation: ``0.5 sqrt(1 - 2/pi) sqrt(sum_i s_i^2 + max_i s_i^2)``."""
    s = _cell_scales(noisy, rows, records, sigma)
    if s.size == 0:
        return 0.0
    return float(0.5 * math.sqrt(1.0 - 2.0 / math.pi) * math.sqrt(float(np.sum(s**2) + np.max(s) ** 2)))



def predicted_tvds(tables: Sequence[np.ndarray], rows: int, records: float,
                   sigmas: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`predicted_tvd` and :func:`predicted_tvd_sd` of many DP marginals at once (one
    array pass instead of a dozen small ones per marginal: an sds release states a thousand)."""
    flat, starts, sizes = _segments(tables)
    q = clipped_distributions(flat, starts, sizes)
    n, big_n = max(1, int(rows)), max(1.0, float(records))
    noise = np.repeat((np.asarray(sigmas, dtype=np.float64) / big_n) ** 2, sizes)
    s = np.sqrt(q * (1.0 - q) / n + noise)
    predicted = np.add.reduceat(s, starts) / math.sqrt(2.0 * math.pi)
    spread = 0.5 * math.sqrt(1.0 - 2.0 / math.pi) * np.sqrt(
        np.add.reduceat(s * s, starts) + np.maximum.reduceat(s, starts) ** 2)
    return predicted, spread


def _segments(tables: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tables flattened one after the other, each one's start and size (none may be empty)."""
    sizes = np.array([np.asarray(t).size for t in tables], dtype=np.int64)
    if sizes.size == 0 or sizes.min() < 1:
        raise ValueError("every table needs at least one cell")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flat = np.concatenate([np.asarray(t, dtype=np.float64).ravel() for t in tables])
    return flat, starts, sizes


def allowed_tvd(predicted: float, spread: float, sd_factor: float = DEFAULT_SD_FACTOR,
                min_factor: float = DEFAULT_MIN_FACTOR) -> float:
    """The gate's default threshold of one marginal: ``max(min_factor E_m, E_m + sd_factor SD_m)``."""
    return max(min_factor * predicted, predicted + sd_factor * spread)


def allowed_tvds(m: Measurement, rows: int) -> dict[tuple[str, ...], float]:
    """Every measured marginal's default gate threshold for a synthetic table of ``rows`` rows
    drawn from ``m`` (the row count the gate compares against: :func:`dp_row_estimate`, else
    ``rows``), keyed by the marginal's columns. Empty when ``m`` measured no marginal."""
    if not m.measured:
        return {}
    estimate = dp_row_estimate(m)
    records = estimate.value if estimate is not None else float(max(1, rows))
    pred, sd = predicted_tvds([nm.counts for nm in m.measured], rows, records, [nm.stddev for nm in m.measured])
    return {tuple(nm.attrs): allowed_tvd(float(pred[i]), float(sd[i])) for i, nm in enumerate(m.measured)}
