"""Proportional fitting (iterative proportional fitting, raking): the library's one routine.

A nonnegative array is rescaled one margin at a time, cell by cell, until each margin
matches its target. Two kinds of margin cover every use: a dense table summed over one
axis (``sds`` fitting a k-table to its (k-1)-tables) and row weights summed per code of a
column (raking a sample to 1-way marginals, :func:`dpsynth.postprocess.correction.rake`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

__all__ = ["AxisMargin", "CodeMargin", "Margin", "proportional_fit"]


class Margin(Protocol):
    """One constraint of :func:`proportional_fit`: a margin of the fitted array and its target."""

    target: np.ndarray

    def current(self, x: np.ndarray) -> np.ndarray:
        """The margin of ``x`` (same shape as ``target``)."""
        ...

    def rescale(self, x: np.ndarray, ratio: np.ndarray) -> np.ndarray:
        """``x`` with every cell multiplied by the ratio of the margin cell it falls in."""
        ...


@dataclass(frozen=True)
class AxisMargin:
    """A dense table summed over ``axis``; ``target`` has the table's shape without that axis."""

    axis: int
    target: np.ndarray

    def current(self, x: np.ndarray) -> np.ndarray:
        """The table summed over the axis."""
        return x.sum(axis=self.axis)

    def rescale(self, x: np.ndarray, ratio: np.ndarray) -> np.ndarray:
        """The table with each slice along the axis scaled by ``ratio``."""
        return x * np.expand_dims(ratio, self.axis)


@dataclass(frozen=True)
class CodeMargin:
    """Row weights summed per code: row ``i`` holds code ``codes[i]``; ``target`` has one
    entry per code."""

    codes: np.ndarray
    target: np.ndarray

    def current(self, x: np.ndarray) -> np.ndarray:
        """The weight of each code."""
        return np.bincount(self.codes, weights=x, minlength=self.target.size)

    def rescale(self, x: np.ndarray, ratio: np.ndarray) -> np.ndarray:
        """Each row's weight scaled by its code's ratio (indexing, not ``take``: the same values,
        and for uint16 codes, as ``sds`` keeps its cells, about half the time)."""
        return x * ratio[self.codes]


def _share_gap(current: np.ndarray, target: np.ndarray) -> float:
    """Largest gap between the margin's shares and the target's shares on reachable cells."""
    reach = current > 0
    goal = np.where(reach, target, 0.0)
    return float(np.abs(current / max(float(current.sum()), 1e-300) - goal / max(float(goal.sum()), 1e-300)).max())


def proportional_fit(x: np.ndarray, margins: Sequence[Margin], *, rounds: int, tol: float | None = None) -> np.ndarray:
    """``x`` (>= 0) rescaled so that each margin approaches its target.

    Each round visits the margins in order and multiplies every cell by
    ``target / current`` of its margin cell. A margin cell whose current sum is 0 cannot
    be reached and keeps its cells at 0. Stops after ``rounds`` rounds, or earlier when
    ``tol`` is given and, during a whole round, every margin's shares were within ``tol``
    of its target's shares (on reachable cells). For consistent reachable targets this
    converges to the array closest to ``x`` in Kullback-Leibler divergence among those
    matching every target. With targets of different totals the last margin visited
    sets the result's total (raking uses shares only).
    """
    for _ in range(rounds):
        worst = 0.0
        for m in margins:
            cur = m.current(x)
            ratio = np.where(cur > 0, m.target / np.maximum(cur, 1e-300), 0.0)
            x = m.rescale(x, ratio)
            if tol is not None:
                worst = max(worst, _share_gap(cur, m.target))
        if tol is not None and worst < tol:
            break
    return x
