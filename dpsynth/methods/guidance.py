"""Small-sample guard: will a release beat sampling its columns independently?

A method that learns correlations from noisy k-way tables only helps where the
dependence between two columns is larger than the noise on their 2-way table. Both are
predictable before publishing, from the DP measurement alone (post-processing):

* the noise: a 2-way table of ``d`` cells with per-cell noise sd ``s`` on about ``N``
  records (the DP row estimate) is off by a TVD of about ``d s / (N sqrt(2 pi))``;
* the dependence: the energy (sum of squares) of the measured 2-way table's deviation
  from the product of its margins, against the noise energy ``d s^2``.

:func:`assess` compares the two over every measured pair and returns an
:class:`Advice` that the pipeline prints and the report shows, with a suggestion (a
shorter reporting length, a larger budget, or the independent baseline ``marginals``).
Nothing here reads rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Mapping

import numpy as np

from .base import Measurement
from ..schema import Schema

__all__ = ["Advice", "assess", "pair_noise_tvd"]

#: A release is predicted to lose to independent columns when the mean, over column
#: pairs, of (deviation energy from independence) / (noise energy) of the measured 2-way
#: tables is below this. Set on the tuning half of benchmarks/sds_matrix.py, where cells
#: that beat the baseline had >= 0.47 and cells that lost <= 0.24 (clipping at 0 removes
#: part of the noise energy, so a table of pure noise scores below 1).
MIN_SIGNAL_TO_NOISE = 0.35


@dataclass(frozen=True, kw_only=True)
class Advice:
    """What the guard predicts for one release."""

    below_baseline: bool
    informative_pairs: int
    pairs: int
    mean_noise_tvd2: float
    signal_to_noise: float
    message: str

    def to_dict(self) -> dict[str, Any]:
        """The advice as plain JSON values."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def pair_noise_tvd(cells: int, noise_sd: float, records: float) -> float:
    """Expected TVD that independent noise of sd ``noise_sd`` adds to a ``cells``-cell table."""
    return min(1.0, cells * noise_sd / (max(records, 1.0) * math.sqrt(2.0 * math.pi)))


def _two_way_tables(m: Measurement, schema: Schema) -> dict[tuple[int, int], np.ndarray]:
    """Measured 2-way tables: the measurement's own 2-way marginals (for an sds measurement
    saved before sds stated them, its aggregates' 2-way rows)."""
    out: dict[tuple[int, int], np.ndarray] = {}
    for attrs, counts in m.marginals.items():
        if len(attrs) == 2 and attrs not in m.groups:  # a marginal on merged values has other shapes
            a, b = schema.index(attrs[0]), schema.index(attrs[1])
            out[(a, b)] = np.asarray(counts, dtype=np.float64).reshape(
                schema.columns[a].cardinality, schema.columns[b].cardinality)
    if not out and "aggregates" in m.tables and m.method == "sds":
        from .sds import tables_from_frame

        frame = m.tables["aggregates"]
        if "length" in frame.columns:  # only the 2-way rows: a fraction of the frame, a fraction of the time
            frame = frame[frame["length"].to_numpy() == 2]
            R = 2
        else:
            R = int(m.meta.get("reporting_length", 2))
        levels = tables_from_frame(frame, schema, R)
        if len(levels) >= 2:
            out = {c: t.astype(np.float64) for c, t in levels[1].items()}
    return out


def _noise_sd2(meta: Mapping[str, Any]) -> float | None:
    sd = meta.get("noise_sd")
    if isinstance(sd, (list, tuple)) and len(sd) >= 2:
        return float(sd[1])
    return None


def _one_way_only(m: Measurement) -> Advice | None:
    """sds measured only its 1-way level (``auto_length``): the release is independent columns."""
    meta = m.meta
    if m.method != "sds" or int(meta.get("reporting_length", 1)) != 1 \
            or int(meta.get("reporting_length_requested", 1)) < 2:
        return None
    ratio = float(meta.get("pair_noise_ratio", float("nan")))
    message = (
        f"expected utility at most that of the independent-columns baseline: at this budget and about "
        f"{float(m.records.value) if m.records is not None else float('nan'):.0f} records the 2-way tables "
        f"would be noise (expected noise TVD {ratio:.2f} per table), so sds measured only the 1-way "
        f"marginals and samples the columns independently (like method 'marginals'). Consider a larger "
        f"epsilon (4x the epsilon roughly halves the noise) or fewer columns."
    )
    return Advice(below_baseline=True, informative_pairs=0, pairs=0, mean_noise_tvd2=min(1.0, ratio),
                  signal_to_noise=0.0, message=message)


def assess(m: Measurement, schema: Schema) -> Advice | None:
    """The guard's prediction, or None when the measurement holds no 2-way information."""
    if (only := _one_way_only(m)) is not None:
        return only
    sd2 = _noise_sd2(m.meta)
    tables = _two_way_tables(m, schema)
    if sd2 is None or m.records is None or not tables:
        return None
    n = float(m.records.value)
    noise, dep = [], []
    for a, b in combinations(range(len(schema.columns)), 2):
        shape = (schema.columns[a].cardinality, schema.columns[b].cardinality)
        t = np.clip(tables.get((a, b), np.zeros(shape)), 0.0, None)
        total = t.sum()
        noise.append(pair_noise_tvd(t.size, sd2, n))
        if total <= 0:
            dep.append(0.0)
            continue
        # Energy of the deviation from independence against the noise energy: the
        # dependence is detectable when it exceeds what the noise alone would give.
        indep = np.outer(t.sum(axis=1), t.sum(axis=0)) / total
        dev = float(np.sum((t - indep) ** 2))
        dep.append(dev / (sd2 * sd2 * t.size))
    noise_a, dep_a = np.asarray(noise), np.asarray(dep)
    informative = int(np.count_nonzero(dep_a > 1.0))
    pairs = int(noise_a.size)
    snr = float(dep_a.mean()) if pairs else 0.0
    below = pairs > 0 and snr < MIN_SIGNAL_TO_NOISE
    if below:
        message = (
            f"expected utility below the independent-columns baseline: the measured 2-way tables are "
            f"mostly noise (signal/noise {snr:.2f} < {MIN_SIGNAL_TO_NOISE}; {informative} of {pairs} column "
            f"pairs above their noise; about {n:.0f} records). Consider a larger epsilon (4x the "
            f"epsilon roughly halves the noise), fewer columns, reporting_length=2, or method 'marginals'."
        )
    else:
        message = (f"signal/noise of the 2-way tables {snr:.2f}: {informative} of {pairs} column pairs show a "
                   f"dependence above their noise")
    return Advice(below_baseline=bool(below), informative_pairs=informative, pairs=pairs,
                  mean_noise_tvd2=float(noise_a.mean()), signal_to_noise=snr,
                  message=message)
