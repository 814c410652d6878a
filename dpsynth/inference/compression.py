"""Compression of rare values: merge a column's values whose noisy 1-way count is small.

MST's domain compression (McKenna, Miklau, Sheldon 2021), as post-processing of noisy
1-way counts: in each column, the values whose noisy count is below ``threshold`` are
merged into one value for the model, so marginals of several columns are measured and
fitted on fewer cells (a partition of a column's values: a count table on merged values
still moves by one in one cell when a record is added or removed). Synthetic records on
merged values are spread back over their members by the members' noisy 1-way counts
(clipped at 0; uniformly when those are all 0), with the same randomised rounding as the
sampler, so each member gets its expected share of the rows within one.

A map is an int array over a column's codes: code -> merged code, the kept values first
in code order, the merged value last. Everything here reads only public (DP) values.
"""

from __future__ import annotations

import hashlib
import math
from typing import Mapping, Sequence

import numpy as np

from ..measurement import fold_table
from .estimate import Observation
from .junction_tree import Domain
from .model import allocate

__all__ = ["compression_maps", "merge_worth", "runs_map", "posterior_counts", "posterior_empty", "split_counts", "records_estimate", "compressed_domain", "fold_observation", "expand_codes"]


def records_estimate(one_way: Mapping[str, np.ndarray], sigmas: Mapping[str, float]) -> float:
    """The inverse-variance mean of the columns' noisy totals (a column of k values has
    total variance k sigma^2): the record count the 1-way measurements state."""
    w = np.array([1.0 / (np.size(y) * float(sigmas[n]) ** 2) for n, y in one_way.items()])
    t = np.array([float(np.sum(y)) for y in one_way.values()])
    return float((w * t).sum() / w.sum()) if w.size else 0.0


def compression_maps(
    one_way: Mapping[str, np.ndarray], sigmas: Mapping[str, float], threshold: float, share: float = math.inf,
    margin: float | None = None, value_share: float = math.inf, split: float = 0.0,
    split_bias: float | None = None, posterior: str = "", posterior_margin: float | None = None,
    cost: float = 0.0, cost_width: bool = True, runs: str = "", runs_gap: int = 1,
    runs_max: int = 0,
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

    ``split`` a > 0 (0: off): each noisy count y is split by post-processing into two
    uncorrelated halves (:func:`split_counts`), y1 = y + a e and y2 = y - e / a; the candidates
    (y1 below ``threshold`` sigma) and their order are read on y1 and the group bound on y2
    (margin sds of y2, sigma sqrt(1 + 1/a^2)), so the bound reads a sum the selection did not
    bias; the per-value bound still reads y. ``split_bias`` b (with ``split``): a column keeps
    the merge read on y whenever that group passes the group bound with b sigma per member
    added to its noisy sum (the selection's bias could not carry it past the bound), and
    takes the split's merge only otherwise.

    ``posterior`` (empty: off) reads the bounds on each value's posterior given the column's noisy
    counts (:func:`posterior_counts`, a prior on [0, inf) fitted to the column), which conditions
    on the very counts that selected the candidates, so the selection does not bias it: "group",
    the group bound on the sum of the merged values' posterior means + ``margin`` sds of that sum
    (the posterior sd, sqrt of the summed posterior variances); "both", also the per-value bound on
    the posterior (mean + ``margin`` posterior sds <= ``value_share`` x records); "empty", the
    group bound as "group" over only the candidates that look empty more likely than not
    (:func:`posterior_empty` >= 0.5).
    ``posterior_margin``: the sds of the posterior sum in the group bound (None: ``margin``).

    ``cost`` c > 0 (with ``posterior``; 0: off): a candidate is merged only if its posterior mean
    is at most :func:`merge_worth` sds (the noise its cells carry over the other columns' mean
    size, or one cell with ``cost_width`` False, times c, against twice the mass it may misplace).

    ``runs`` (with ``posterior``; empty: one merged value per column): "adjacent" merges the chosen
    values as runs of neighbouring codes, each run of two or more its own merged value, a value
    with no chosen neighbour kept (:func:`runs_map`): neighbouring codes of an ordered column
    relate alike to the other columns, so a run's members share their merged value's relations,
    where one group of a column's both tails would give each the other's; "adjacent+empty" also
    merges the values left alone that look empty (:func:`posterior_empty` >= 0.5) into one value
    of their own (an empty value has no relation to misplace); "adjacent+alone" merges every value
    left alone into that one more value; "cost" merges the chosen values
    into one value when the cells that saves beyond the runs' map, each worth :func:`merge_worth`
    sds (``cost``), outweigh the chosen values' posterior mass (mixed by one value, not by runs),
    and as runs otherwise: with a small budget the noise saved wins, with a large one the
    relations kept. ``runs_gap``: chosen codes at most
    this far apart belong to one run (1: only next neighbours; the values between stay kept).
    ``runs_max`` L > 0: a longer run is cut into consecutive pieces of at most L codes."""
    maps: dict[str, np.ndarray] = {}
    n = records_estimate(one_way, sigmas) if math.isfinite(share) or math.isfinite(value_share) else math.inf
    cap = share * n if math.isfinite(share) else math.inf
    value_cap = value_share * n if math.isfinite(value_share) else math.inf
    z = threshold if margin is None else margin
    for name, counts in one_way.items():
        y = np.asarray(counts, dtype=np.float64).ravel()
        sigma = float(sigmas[name])
        if posterior:
            zp = z if posterior_margin is None else posterior_margin
            worth = merge_worth(one_way, name, cost, cost_width) if cost > 0 else 0.0
            maps.update(_posterior_map(name, y, sigma, threshold, (z, zp), cap, value_cap, posterior, worth, (runs, runs_gap, runs_max)))
            continue
        rare = _rare_run(y, y, y <= value_cap - z * sigma, sigma, threshold, z, cap)
        unbiased = rare is None or (split_bias is not None and float(np.sum(y[rare])) + (
            split_bias * sigma * rare.size + z * sigma * math.sqrt(rare.size)) <= cap)
        if split > 0 and not unbiased:
            y1, y2 = split_counts(y, sigma, split, name)
            sigma2 = sigma * math.sqrt(1.0 + 1.0 / split**2)
            rare = _rare_run(y1, y2, y <= value_cap - z * sigma, sigma, threshold, z, cap, sigma2)
        if rare is not None:
            maps[name] = _merge_map(y.size, rare)
    return maps


def _merge_map(size: int, rare: np.ndarray) -> np.ndarray:
    """The map of a column of ``size`` codes whose codes ``rare`` merge into one last value."""
    g = np.empty(size, dtype=np.int64)
    mask = np.zeros(size, dtype=bool)
    mask[rare] = True
    g[~mask] = np.arange(size - rare.size)
    g[mask] = size - rare.size
    return g


def merge_worth(one_way: Mapping[str, np.ndarray], name: str, cost: float, width: bool = True) -> float:
    """The largest posterior mean count, in noise sds of column ``name``, that ``cost`` lets merge.

    Merging a value takes the cells of its row out of every pair marginal its column joins; each
    carries noise of about the 1-way sd (AIM's first pair measurements have the 1-ways' sd), an
    expected sqrt(2/pi) sigma in L1 per cell, over the other columns' mean size (``width``; else
    one cell). The merge misplaces at most twice the value's true count in L1 in each of those
    marginals (its row replaced by the group's). So a value is worth merging when 2 mu <=
    cost x sqrt(2/pi) sigma x mean size: mu / sigma <= this. ``cost`` stands for the share of that
    noise the fitted model would keep and how many of the pairs AIM measures (set on a tuning half)."""
    sizes = [int(np.size(y)) for n, y in one_way.items() if n != name]
    w = float(np.mean(sizes)) if (width and sizes) else 1.0
    return cost * math.sqrt(2.0 / math.pi) * w / 2.0


def _posterior_map(name: str, y: np.ndarray, sigma: float, threshold: float, z: tuple[float, float], cap: float,
                   value_cap: float, mode: str, worth: float = 0.0, runs: tuple[str, int, int] = ("", 1, 0)) -> dict[str, np.ndarray]:
    """compression_maps' ``posterior`` reading for one column: {name: map} or {} (``z``: the
    margins of the per-value and of the group bound; ``worth`` > 0: merge only values whose
    posterior mean is at most ``worth`` sigma, :func:`merge_worth`)."""
    z, zp = z
    cand = np.flatnonzero(y < threshold * sigma)
    if cand.size < 2:
        return {}
    mean, var = posterior_counts(y, sigma)
    small = mean + z * np.sqrt(var) <= value_cap if mode == "both" else y + z * sigma <= value_cap
    if mode == "empty":  # only values that more likely than not look empty
        small &= posterior_empty(y, sigma) >= 0.5
    if worth > 0 and runs[0] != "cost":  # only values whose merge saves more noise than it may misplace
        small &= mean <= worth * sigma
    cand = cand[small[cand]]
    cand = cand[np.argsort(y[cand], kind="stable")]
    fits = np.flatnonzero(np.cumsum(mean[cand]) + zp * np.sqrt(np.cumsum(var[cand])) <= cap)
    if fits.size == 0 or fits[-1] + 1 < 2:
        return {}
    chosen = cand[: fits[-1] + 1]
    if runs[0] == "cost":  # one value if the cells it saves beyond the runs outweigh the mass it mixes
        g = runs_map(y.size, chosen, None, runs[1], runs[2])
        extra = (y.size if g is None else int(g.max()) + 1) - (y.size - chosen.size + 1)
        if float(mean[chosen].sum()) <= worth * sigma * extra:
            return {name: _merge_map(y.size, chosen)}
        return {} if g is None else {name: g}
    if runs[0]:
        empty = {"adjacent+empty": lambda: posterior_empty(y, sigma) >= 0.5,
                 "adjacent+alone": lambda: np.ones(y.size, dtype=bool)}.get(runs[0], lambda: None)()
        g = runs_map(y.size, chosen, empty, runs[1], runs[2])
        return {} if g is None else {name: g}
    return {name: _merge_map(y.size, cand[: fits[-1] + 1])}


def runs_map(size: int, chosen: np.ndarray, empty: np.ndarray | None = None, gap: int = 1,
             longest: int = 0) -> np.ndarray | None:
    """The map merging each run of two or more neighbouring codes of ``chosen`` (at most ``gap``
    apart; ``longest`` > 0: cut into pieces of at most that many codes) into a value of its own
    (kept values first in code order, then the runs in code order); with ``empty`` (a
    mask over the codes), the chosen codes in no run that are ``empty`` merge into one more value
    when there are two or more. None when nothing merges."""
    chosen = np.sort(np.asarray(chosen, dtype=np.int64))
    groups = np.split(chosen, np.flatnonzero(np.diff(chosen) > gap) + 1)
    if longest > 0:
        groups = [p for r in groups for p in np.split(r, np.arange(longest, r.size, longest))]
    groups = [r for r in groups if r.size >= 2]
    if empty is not None:
        alone = np.setdiff1d(chosen, np.concatenate(groups) if groups else np.zeros(0, np.int64))
        alone = alone[empty[alone]]
        if alone.size >= 2:
            groups.append(alone)
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


def _rare_run(y1: np.ndarray, y2: np.ndarray, small: np.ndarray, sigma: float, threshold: float, z: float,
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


def split_counts(y: np.ndarray, sigma: float, a: float, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Two uncorrelated halves of the noisy counts ``y`` (noise sd ``sigma``): y + a e and y - e / a,
    e ~ N(0, sigma^2) from a generator seeded by the column's name and noisy counts alone (public
    values; the release's own generator is not drawn from). Post-processing: no privacy cost."""
    h = hashlib.sha256(name.encode() + b"\0" + np.ascontiguousarray(y, dtype=np.float64).tobytes()).digest()
    e = np.random.default_rng(int.from_bytes(h[:16], "little")).normal(0.0, sigma, size=y.shape)
    return y + a * e, y - e / a


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
) -> np.ndarray:
    """Records on merged codes -> records on the columns' own codes (a new array).

    A kept value maps back to its code; the rows holding a merged value are shuffled and
    split among its members by randomised rounding of rows x share (``allocate``)."""
    out = np.array(codes, dtype=np.int64, copy=True)
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
