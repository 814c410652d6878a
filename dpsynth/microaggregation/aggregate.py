"""Partitions, block means and their noisy, damped versions (Sections 3.6, 4 and 5).

* ``divide_and_merge``: from a nearest-point partition to k blocks of equal size n // k
  (the last block takes the n mod k extra rows): cut every cell into full chunks,
  pool the residuals at the end, cut the pool (Section 3.6 / Theorem 4.1);
* ``block_means``: conditional expectation on a partition (exact microaggregation);
* ``damped_means``: counts per net cell and sums, divided by max(|F_j|, b) (Section 5.4);
* ``noisy_counts`` / ``noisy_means``: the Laplace mechanism on both (Theorem 5.12,
  neighbours by adding or removing one record), counts with discrete Laplace noise,
  means with Laplace noise on a grid;
* ``project_weights``: an l1 metric projection onto the simplex (Section 5.5);
* ``bootstrap``: m indices drawn with the block weights (Sections 4.2 and 5.9).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..privacy.noise import discrete_laplace, grid_sensitivity, laplace_on_grid

__all__ = [
    "divide_and_merge",
    "block_means",
    "damped_means",
    "group_sums",
    "mean_sensitivity_l1",
    "NoisyMeans",
    "noisy_counts",
    "noisy_means",
    "project_weights",
    "bootstrap",
    "top_eigvecs",
]


def top_eigvecs(X: np.ndarray, t: int) -> np.ndarray:
    """The t leading eigenvectors of S = X^T X / n (exact PCA, not private)."""
    S = X.T @ X / max(1, X.shape[0])
    S = S.toarray() if sp.issparse(S) else S
    lam, U = np.linalg.eigh(S)
    return U[:, np.argsort(lam)[::-1][:t]]


def divide_and_merge(cells: np.ndarray, order_key: np.ndarray, k: int) -> np.ndarray:
    """Block id of every row: k blocks of n // k rows, the last one holding the rest."""
    n = cells.size
    if not 1 <= k <= n:
        raise ValueError(f"k must lie in [1, n={n}], got {k}")
    m = n // k
    order = np.lexsort((order_key, cells))
    sorted_cells = cells[order]
    starts = np.flatnonzero(np.r_[True, sorted_cells[1:] != sorted_cells[:-1]])
    sizes = np.diff(np.r_[starts, n])
    pos = np.arange(n) - np.repeat(starts, sizes)  # rank of each row inside its cell
    full = pos < np.repeat((sizes // m) * m, sizes)
    seq = np.concatenate([order[full], order[~full]])  # full chunks first, residual pool last
    block = np.empty(n, dtype=np.int64)
    block[seq] = np.minimum(np.arange(n) // m, k - 1)
    return block


def _indicator(groups: np.ndarray, s: int) -> sp.csr_matrix:
    n = groups.size
    return sp.csr_matrix((np.ones(n), (groups, np.arange(n))), shape=(s, n))


def block_means(sums: np.ndarray, blocks: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Means of the blocks from their sums (k x p) and the block sizes (all blocks non-empty)."""
    sizes = np.bincount(blocks, minlength=k)
    if np.any(sizes == 0):
        raise ValueError("every block must hold at least one row")
    return sums / sizes[:, None], sizes


def damped_means(sums: np.ndarray, cells: np.ndarray, b: float) -> tuple[np.ndarray, np.ndarray]:
    """Cell counts |F_j| and damped means sum_{F_j} x_i / max(|F_j|, b) (Section 5.4)."""
    counts = np.bincount(cells, minlength=sums.shape[0])
    return counts, sums / np.maximum(counts, b)[:, None]


def group_sums(X: np.ndarray, groups: np.ndarray, s: int) -> np.ndarray:
    """Row sums of a dense X per group (s x p)."""
    n = groups.size
    return np.asarray(sp.csr_matrix((np.ones(n), (groups, np.arange(n))), shape=(s, n)) @ X)


def mean_sensitivity_l1(l1_radius: float, b: float) -> float:
    """l1 change of the tuple of damped means when one record is added or removed.

    Only the record's cell changes. With |I| >= b + 1 the change is at most
    diam_1 / |I| <= 2 R / (b + 1); with |I| <= b it is x / b (norm <= R / b); in between
    at most R / b + R (|I| - b) / b <= 2 R / b. Hence 2 R / b (Lemma 5.10).
    """
    if not b >= 1:
        raise ValueError(f"parameter 'b' must be >= 1, got {b!r}")
    return 2.0 * l1_radius / b


def noisy_counts(counts: np.ndarray, epsilon: float, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """Counts plus discrete Laplace noise of scale 1 / epsilon (l1 sensitivity 1)."""
    scale = 1.0 / epsilon
    return counts.astype(np.int64) + discrete_laplace(scale, counts.shape, rng), scale


@dataclass(frozen=True, kw_only=True)
class NoisyMeans:
    """Block means with Laplace noise, with the noise's scale, granularity and L1 sensitivity."""

    values: np.ndarray
    scale: float  # Laplace scale per coordinate
    granularity: float
    sensitivity_l1: float


def noisy_means(
    means: np.ndarray, sensitivity_l1: float, epsilon: float, rng: np.random.Generator
) -> NoisyMeans:
    """Laplace noise on a grid; the grid's rounding is added to the sensitivity (one block moves).

    The grid step is a power of two at most sensitivity / (1000 p), so rounding the p
    coordinates of the changed block adds at most 0.1% to the sensitivity.
    """
    g = 2.0 ** math.floor(math.log2(sensitivity_l1 / (1000.0 * max(1, means.shape[1]))))
    sens = grid_sensitivity(sensitivity_l1, g, dims=means.shape[1], norm="l1")
    scale = sens / epsilon
    return NoisyMeans(values=laplace_on_grid(means, scale, rng, granularity=g), scale=scale,
                      granularity=g, sensitivity_l1=sens)


def project_weights(v: np.ndarray) -> np.ndarray:
    """An l1-nearest point of the simplex (Section 5.5).

    When the positive part has mass >= 1, the Euclidean projection max(v - tau, 0) is
    one of the l1-nearest points (it is zero on the negative entries and below the
    positive ones) and it also shrinks noise on empty cells; otherwise the negative
    entries are set to 0 and the rest normalised (the paper's choice).
    """
    v = np.asarray(v, dtype=np.float64)
    pos = np.clip(v, 0.0, None)
    if pos.sum() <= 0:
        return np.full(v.size, 1.0 / v.size)
    if pos.sum() < 1.0:
        return pos / pos.sum()
    from .embedding import project_simplex_rows

    w = project_simplex_rows(v[None, :])[0]
    return w / w.sum()


def bootstrap(weights: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """m block indices drawn independently with probabilities ``weights``."""
    w = np.asarray(weights, dtype=np.float64)
    return rng.choice(w.size, size=m, p=w / w.sum())
