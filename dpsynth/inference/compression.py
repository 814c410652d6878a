"""Compression of rare values: merge a column's values whose noisy 1-way count is small.

MST's domain compression (McKenna, Miklau, Sheldon 2021), as post-processing of noisy
1-way counts: in each column, the values whose noisy count is below ``threshold`` are
merged into one value for the model, so marginals of several columns are measured and
fitted on fewer cells (a partition of a column's values: a count table on merged values
still moves by one in one cell when a record is added or removed). Synthetic records on
merged values are spread back over their members by the members' noisy 1-way counts
(clipped at 0; uniformly when those are all 0), with the same randomised rounding as the
sampler, so each member gets its expected share of the rows within one.

select=aim reads the bounds on each value's posterior and merges only the values that look
empty: as runs of neighbours where the schema orders the codes, one value elsewhere.

A map is an int array over a column's codes: code -> merged code, the kept values first
in code order, the merged values last. Everything here reads only public (DP) values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from ..measurement import fold_table
from .estimate import Observation
from .junction_tree import Domain
from .model import allocate

__all__ = [
    "ColumnCounts", "ColumnRule", "MergeBounds", "compression_maps", "empty_map", "groups_map", "merge_map",
    "posterior_chosen", "posterior_counts", "posterior_empty", "rare_run", "records_estimate", "compressed_domain", "fold_observation", "expand_codes",
]


def records_estimate(one_way: Mapping[str, np.ndarray], sigmas: Mapping[str, float]) -> float:
    """The inverse-variance mean of the columns' noisy totals (a column of k values has
    total variance k sigma^2): the record count the 1-way measurements state."""
    w = np.array([1.0 / (np.size(y) * float(sigmas[n]) ** 2) for n, y in one_way.items()])
    t = np.array([float(np.sum(y)) for y in one_way.values()])
    return float((w * t).sum() / w.sum()) if w.size else 0.0


@dataclass(frozen=True)
class ColumnCounts:
    """One column's public inputs to a merge rule: its noisy 1-way counts ``y``, their noise sd,
    and ``ordered``, how many of its first codes the schema declares in order (the bins of a
    numeric or datetime column; 0 for a categorical one)."""

    name: str
    y: np.ndarray
    sigma: float
    ordered: int = 0


@dataclass(frozen=True)
class MergeBounds:
    """The bounds every rule reads: candidates below ``threshold`` sds; ``margin`` sds of a count
    (or of a posterior sum, ``posterior_margin``) above it; a group's mass at most ``cap`` records
    and one value's at most ``value_cap``."""

    threshold: float
    margin: float
    posterior_margin: float
    cap: float
    value_cap: float


#: An experimental rule (benchmarks/compress_experiments.py): one column's map, or None.
ColumnRule = Callable[[ColumnCounts, MergeBounds], "np.ndarray | None"]


def compression_maps(
    one_way: Mapping[str, np.ndarray], sigmas: Mapping[str, float], threshold: float, share: float = math.inf,
    margin: float | None = None, value_share: float = math.inf, posterior: bool = False,
    posterior_margin: float | None = None, empty_only: bool = False, ordered: Mapping[str, int] | None = None,
    rule: ColumnRule | None = None,
) -> dict[str, np.ndarray]:
    """Per column, the map merging its rare values into one (columns with nothing to merge: no entry).

    A value is a candidate when its noisy count is below ``threshold`` times the column's
    noise sd. The candidates, smallest noisy count first, are merged as the longest run of
    k >= 2 of them whose mass is, even ``threshold`` sds above its noisy sum
    (sum + margin sigma sqrt(k); ``margin`` None: ``threshold``), at most ``share`` of the
    record count (:func:`records_estimate`): merging then loses at most that share of the
    column's records, however noisy the budget. ``value_share``: a candidate must also hold at
    most this share of the records on its own, the same margin above its noisy count
    (y + margin sigma <= value_share x records), so a value that may hold a real share of the
    column is never merged. ``share`` and ``value_share`` infinite: every candidate (MST's rule).

    ``posterior``: the group bound reads each value's posterior given the column's noisy counts
    (:func:`posterior_counts`, a prior on [0, inf) fitted to the column), which conditions on the
    very counts that selected the candidates, so the selection does not bias it: the sum of the
    merged values' posterior means + ``posterior_margin`` (None: ``margin``) sds of that sum.
    ``empty_only`` (with ``posterior``; select=aim's default): of those values only the ones that
    look empty more likely than not (:func:`posterior_empty` >= 0.5) merge, by :func:`empty_map`:
    as runs of neighbouring codes among the codes the schema orders (``ordered``: per column, its
    ordered leading codes), pooled into one value elsewhere; every other value is kept.

    ``rule`` (None: the reading above): an experimental rule that makes each column's map from
    its :class:`ColumnCounts` (``ordered``: per column, its ordered leading codes) and the bounds
    (the rules measured and not adopted live in benchmarks/compress_experiments.py)."""
    maps: dict[str, np.ndarray] = {}
    n = records_estimate(one_way, sigmas) if math.isfinite(share) or math.isfinite(value_share) else math.inf
    z = threshold if margin is None else margin
    bounds = MergeBounds(threshold=threshold, margin=z, posterior_margin=z if posterior_margin is None else posterior_margin,
                         cap=share * n if math.isfinite(share) else math.inf,
                         value_cap=value_share * n if math.isfinite(value_share) else math.inf)
    for name, counts in one_way.items():
        col = ColumnCounts(name=name, y=np.asarray(counts, dtype=np.float64).ravel(), sigma=float(sigmas[name]),
                           ordered=int((ordered or {}).get(name, 0)))
        if rule is not None:
            g = rule(col, bounds)
        else:
            chosen = posterior_chosen(col, bounds) if posterior else rare_run(
                col.y, col.y, col.y <= bounds.value_cap - z * col.sigma, col.sigma, threshold, z, bounds.cap)
            if chosen is not None and posterior and empty_only:
                g = empty_map(col.y.size, chosen, posterior_empty(col.y, col.sigma) >= 0.5, col.ordered)
            else:
                g = None if chosen is None else merge_map(col.y.size, chosen)
        if g is not None:
            maps[name] = g
    return maps


def merge_map(size: int, rare: np.ndarray) -> np.ndarray:
    """The map of a column of ``size`` codes whose codes ``rare`` merge into one last value."""
    g = np.empty(size, dtype=np.int64)
    mask = np.zeros(size, dtype=bool)
    mask[rare] = True
    g[~mask] = np.arange(size - rare.size)
    g[mask] = size - rare.size
    return g


def empty_map(size: int, chosen: np.ndarray, empty: np.ndarray, ordered: int) -> np.ndarray | None:
    """The map of the ``chosen`` codes that look ``empty`` (a mask over the codes): among the first
    ``ordered`` codes (those the schema declares in order) each run of two or more neighbours
    merges into a value of its own, and the others that look empty pool into one more value (when
    two or more); every other code is kept. None when nothing merges. A truly empty value has no
    relation to misplace; a run of neighbours of an ordered column relates alike to the others,
    where one value of both tails of a bell would give each tail the other's relations."""
    chosen = np.sort(np.asarray(chosen, dtype=np.int64))
    look = chosen[empty[chosen]]
    inside, outside = look[look < ordered], look[look >= ordered]
    runs = np.split(inside, np.flatnonzero(np.diff(inside) > 1) + 1) if inside.size else []
    groups = [r for r in runs if r.size >= 2]
    if outside.size >= 2:
        groups.append(outside)
    return groups_map(size, groups)


def groups_map(size: int, groups: list[np.ndarray]) -> np.ndarray | None:
    """The map of disjoint ``groups`` of codes (each of two or more) into values of their own,
    after the kept values in code order; None when there is no group."""
    if not groups:
        return None
    g = np.empty(size, dtype=np.int64)
    merged = np.zeros(size, dtype=bool)
    for r in groups:
        merged[r] = True
    g[~merged] = np.arange(size - int(merged.sum()))
    for i, r in enumerate(groups):
        g[r] = size - int(merged.sum()) + i
    return g


def posterior_chosen(col: ColumnCounts, b: MergeBounds, small: np.ndarray | None = None) -> np.ndarray | None:
    """compression_maps' ``posterior`` reading of one column: the codes merged (>= 2), or None.
    The candidates below ``threshold`` sds whose count is ``margin`` sds below the per-value cap
    (and ``small``, a mask over the codes, when given), smallest count first, as many as keep the
    sum of their posterior means + ``posterior_margin`` sds of that sum within the group cap."""
    y, sigma = col.y, col.sigma
    cand = np.flatnonzero(y < b.threshold * sigma)
    if cand.size < 2:
        return None
    mean, var = posterior_counts(y, sigma)
    keep = y + b.margin * sigma <= b.value_cap
    if small is not None:
        keep &= small
    cand = cand[keep[cand]]
    cand = cand[np.argsort(y[cand], kind="stable")]
    fits = np.flatnonzero(np.cumsum(mean[cand]) + b.posterior_margin * np.sqrt(np.cumsum(var[cand])) <= b.cap)
    if fits.size == 0 or fits[-1] + 1 < 2:
        return None
    return cand[: fits[-1] + 1]


def posterior_counts(y: np.ndarray, sigma: float, iters: int = 300) -> tuple[np.ndarray, np.ndarray]:
    """Per value of a column, the posterior mean and variance of its true count given the
    column's noisy counts ``y`` (Gaussian noise of sd ``sigma``), under a prior fitted to ``y``
    itself: a discrete distribution on the grid 0, sigma / 4, ..., 12 sigma, its weights the
    maximum-likelihood ones (EM, ``iters`` steps from uniform) for the counts below 12 sigma.
    A count of 12 sigma or more (never a candidate) gets its own count and sigma^2.
    Deterministic; reads only ``y`` and ``sigma`` (post-processing)."""
    y = np.asarray(y, dtype=np.float64).ravel()
    mean, var = y.copy(), np.full(y.size, float(sigma) ** 2)
    grid, post, low = _posterior(y, sigma, iters)
    if post.size:
        mean[low] = post @ grid
        var[low] = np.maximum(post @ grid**2 - mean[low] ** 2, 0.0)
    return mean, var


def posterior_empty(y: np.ndarray, sigma: float, iters: int = 300) -> np.ndarray:
    """Per value, the posterior probability (as in :func:`posterior_counts`) that its true count
    is at most sigma / 4: that it looks empty. 0 for a count of 12 sigma or more."""
    y = np.asarray(y, dtype=np.float64).ravel()
    out = np.zeros(y.size)
    grid, post, low = _posterior(y, sigma, iters)
    if post.size:
        out[low] = post[:, grid <= sigma / 4.0 * (1 + 1e-9)].sum(axis=1)
    return out


def _posterior(y: np.ndarray, sigma: float, iters: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(grid, posterior weights per count below 12 sigma over the grid, the mask of those counts)."""
    low = y < 12.0 * sigma
    grid = np.arange(49) * (sigma / 4.0)
    if not low.any():
        return grid, np.zeros((0, grid.size)), low
    like = np.exp(-0.5 * ((y[low, None] - grid[None, :]) / sigma) ** 2) + 1e-300
    w = np.full(grid.size, 1.0 / grid.size)
    for _ in range(iters):
        w = w * (like.T @ (1.0 / (like @ w))) / like.shape[0]
    post = like * w
    return grid, post / post.sum(axis=1, keepdims=True), low


def rare_run(y1: np.ndarray, y2: np.ndarray, small: np.ndarray, sigma: float, threshold: float, z: float,
              cap: float, sigma2: float | None = None) -> np.ndarray | None:
    """The codes merged (>= 2 of them), or None: the candidates (``y1`` below ``threshold`` sigma
    and ``small``), smallest ``y1`` first, as the longest run whose ``y2`` sum, ``z`` sds of ``y2``
    (``sigma2``, None: ``sigma``) x sqrt(k) above, is at most ``cap``."""
    cand = np.flatnonzero((y1 < threshold * sigma) & small)
    cand = cand[np.argsort(y1[cand], kind="stable")]
    k = np.arange(1, cand.size + 1)
    fits = np.flatnonzero(np.cumsum(y2[cand]) + z * (sigma if sigma2 is None else sigma2) * np.sqrt(k) <= cap)
    if fits.size == 0 or fits[-1] + 1 < 2:
        return None
    return cand[: fits[-1] + 1]


def compressed_domain(domain: Domain, maps: Mapping[str, np.ndarray]) -> Domain:
    """The domain with each merged column's size its number of merged codes."""
    sizes = tuple(int(maps[n].max()) + 1 if n in maps else s for n, s in zip(domain.names, domain.sizes))
    return Domain(names=domain.names, sizes=sizes)


def fold_observation(o: Observation, maps: Mapping[str, np.ndarray], domain: Domain) -> Observation:
    """``o`` on the merged codes: every axis still over a merged column's original codes is
    summed into its merged cells, each cell's weight the inverse of its summed variance."""
    shape = tuple(np.shape(o.counts))
    counts = np.asarray(o.counts, dtype=np.float64).reshape(domain.shape(o.attrs)) if len(shape) != len(o.attrs) \
        else np.asarray(o.counts, dtype=np.float64)
    axes = [maps[a] if a in maps and counts.shape[i] == maps[a].size else None for i, a in enumerate(o.attrs)]
    if all(g is None for g in axes):
        return o
    var = fold_table(np.asarray(o.variance(), dtype=np.float64).reshape(counts.shape), axes)
    folded = fold_table(counts, axes)
    return Observation(attrs=o.attrs, counts=folded, stddev=o.stddev, weights=o.stddev**2 / var)


def _member_shares(g: np.ndarray, one_way: np.ndarray, merged: int) -> tuple[np.ndarray, np.ndarray]:
    """The members of merged code ``merged`` and their shares (clipped noisy counts, or uniform)."""
    members = np.flatnonzero(g == merged)
    w = np.clip(np.asarray(one_way, dtype=np.float64).ravel()[members], 0.0, None)
    total = w.sum()
    return members, (w / total if total > 0 else np.full(members.size, 1.0 / members.size))


def expand_codes(
    codes: np.ndarray,
    names: Sequence[str],
    maps: Mapping[str, np.ndarray],
    one_way: Mapping[str, np.ndarray],
    rng: np.random.Generator,
    dtype: np.dtype | type = np.int64,
) -> np.ndarray:
    """Records on merged codes -> records on the columns' own codes (a new array of ``dtype``,
    an integer type holding every column's own codes).

    A kept value maps back to its code; the rows holding a merged value are shuffled and
    split among its members by randomised rounding of rows x share (``allocate``)."""
    out = np.array(codes, dtype=dtype, copy=True)
    for j, name in enumerate(names):
        g = maps.get(name)
        if g is None:
            continue
        col = codes[:, j].astype(np.int64)
        kept = np.flatnonzero(np.bincount(g) == 1)  # merged codes with one member: a kept value
        inverse = np.full(int(g.max()) + 1, -1, dtype=np.int64)
        inverse[g[np.isin(g, kept)]] = np.flatnonzero(np.isin(g, kept))
        out[:, j] = inverse[col]
        for merged in np.flatnonzero(np.bincount(g) > 1):
            rows = np.flatnonzero(col == merged)
            if rows.size == 0:
                continue
            members, share = _member_shares(g, one_way[name], int(merged))
            counts = allocate(np.array([rows.size]), share[None, :], rng)[0]
            out[rng.permutation(rows), j] = np.repeat(members, counts)
    return out
