"""Noisy count tables made into distributions, and rows allocated to a distribution.

Post-processing only (no privacy cost): :func:`project_to_total` turns a noisy histogram
into the nearest non-negative table with a known total; :func:`allocate_counts` and
:func:`allocated_draw` give ``n`` records to the values of a distribution with each value's
count the floor or the ceiling of its expected count (the total exact), in place of ``n``
independent draws. Used by ``marginals`` and ``sds``; the reasons and the figures are in
docs/marginals.md.
"""

from __future__ import annotations

import numpy as np

__all__ = ["allocate_counts", "allocated_draw", "project_to_total"]


def project_to_total(noisy: np.ndarray, total: float) -> np.ndarray:
    """Euclidean projection of ``noisy`` onto {x >= 0, sum x = total} (least squares).

    It lowers every cell by one constant and clips at 0: cells whose noisy count is
    pure noise (values the data does not hold, which clipping alone would turn into
    about 0.4 noise sd of fabricated mass each) fall to 0, and real cells lose as much
    as the known total says they were inflated.
    """
    v = np.asarray(noisy, dtype=np.float64).ravel()
    if total <= 0 or v.size == 0:
        return np.zeros_like(v)
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - total
    ks = np.arange(1, v.size + 1)
    r = int(np.flatnonzero(u - css / ks > 0)[-1]) + 1
    return np.clip(v - css[r - 1] / r, 0.0, None)


def allocate_counts(p: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """How many of ``n`` records each value gets under the distribution ``p`` (weights,
    normalised here; all zero reads as uniform): the floor or the ceiling of ``n p_i``,
    ``n`` in all, each count's mean exactly ``n p_i``.

    The values left a record after the floors are chosen by systematic sampling on the
    fractional parts (one uniform offset on a grid of spacing 1). Independent draws
    would add a multinomial error of sd ``sqrt(n p_i (1 - p_i))`` to every count; this
    adds less than one record. Draws one number from ``rng``.
    """
    w = np.clip(np.nan_to_num(np.asarray(p, dtype=np.float64).ravel(), nan=0.0, posinf=0.0), 0.0, None)
    if w.size == 0:
        raise ValueError("a distribution needs at least one value")
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    n = int(n)
    s = w.sum()
    w = w / s if s > 0 else np.full(w.size, 1.0 / w.size)
    expected = n * w
    # 1e-9: an expected count that rounding left just below an integer takes that integer
    base = np.minimum(np.floor(expected + 1e-9), n).astype(np.int64)
    frac = np.clip(expected - base, 0.0, 1.0)
    extra = n - int(base.sum())
    u = rng.uniform()
    if extra < 0:  # only through the 1e-9: take the records back from values rounded up
        for i in np.argsort(expected - base, kind="stable")[:-extra]:
            base[i] -= 1
    if extra <= 0:
        return base
    if frac.sum() <= 0:  # not reachable in exact arithmetic; keeps the total under rounding
        frac = w
    cum = np.cumsum(frac / frac.sum() * extra)
    cum[-1] = extra
    picks = np.minimum(np.searchsorted(cum, u + np.arange(extra), side="right"), w.size - 1)
    return base + np.bincount(picks, minlength=w.size)


def allocated_draw(p: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` values (codes ``0 .. len(p) - 1``) with the counts of :func:`allocate_counts`,
    in a random order: a column drawn from ``p`` with less sampling error than ``n``
    independent draws, each record still a draw from ``p``."""
    counts = allocate_counts(p, n, rng)
    return rng.permutation(np.repeat(np.arange(counts.size), counts))
