"""Experimental rules for compressing rare values under ``pgm select=aim`` (issue 27), read only
by ``benchmarks/compress_rules.py`` through ``pgm.COMPRESS_RULE``.

The product's readings (the counts, MST's; the posterior group bound, aim's default) live in
:mod:`dpsynth.inference.compression`. Here are the rules measured beside them: the count split
into two uncorrelated halves, the posterior's "both" and "empty" modes, a cost per value, runs of
neighbouring codes (sessions 35-36), and the schema-ordered rules of session 37. Each is an
:class:`Experiment`, a :data:`~dpsynth.inference.compression.ColumnRule`: one column's map from
its public noisy counts. docs/pgm.md has what each was for and every cell measured.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from dpsynth.inference.compression import (ColumnCounts, MergeBounds, empty_map, groups_map, merge_map, posterior_chosen,
                                           posterior_counts, posterior_empty, rare_run)

__all__ = ["Experiment", "merge_worth", "runs_map", "split_counts", "ordered_map"]


def split_counts(y: np.ndarray, sigma: float, a: float, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Two uncorrelated halves of the noisy counts ``y`` (noise sd ``sigma``): y + a e and y - e / a,
    e ~ N(0, sigma^2) from a generator seeded by the column's name and noisy counts alone (public
    values; the release's own generator is not drawn from). Post-processing: no privacy cost."""
    h = hashlib.sha256(name.encode() + b"\0" + np.ascontiguousarray(y, dtype=np.float64).tobytes()).digest()
    e = np.random.default_rng(int.from_bytes(h[:16], "little")).normal(0.0, sigma, size=y.shape)
    return y + a * e, y - e / a


def merge_worth(sizes: Mapping[str, int], name: str, cost: float, width: bool = True) -> float:
    """The largest posterior mean count, in noise sds of column ``name``, that ``cost`` lets merge.

    Merging a value takes the cells of its row out of every pair marginal its column joins; each
    carries noise of about the 1-way sd, an expected sqrt(2/pi) sigma in L1 per cell, over the
    other columns' mean size (``sizes``, per column its number of codes; ``width`` False: one
    cell). The merge misplaces at most twice the value's true count in L1 in each of those
    marginals. So a value is worth merging when 2 mu <= cost x sqrt(2/pi) sigma x mean size."""
    other = [int(s) for n, s in sizes.items() if n != name]
    w = float(np.mean(other)) if (width and other) else 1.0
    return cost * math.sqrt(2.0 / math.pi) * w / 2.0


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
    return groups_map(size, groups)


def ordered_map(size: int, chosen: np.ndarray, empty: np.ndarray, ordered: int, mode: str = "ordered") -> np.ndarray | None:
    """Session 37's rules on p5's ``chosen`` codes. Outside the column's first ``ordered`` codes
    (those its schema declares in order) the chosen values that look ``empty`` (a mask over the
    codes) pool into one value and the others are kept. Inside them, ``mode`` "ordered": the
    empty-looking ones join that pool and the others merge as runs of neighbouring codes;
    "ordered-runs": every chosen value merges as runs of neighbours and those left alone that look
    empty join the pool; "ordered-pool": only the empty-looking ones pool, no runs;
    "ordered-eruns": only the empty-looking ones merge, as runs of neighbours (no pool), the lone
    ones kept. None when nothing merges."""
    if mode == "ordered-eruns":  # select=aim's default since session 37 (oes0.05, with the group share 0.05)
        return empty_map(size, chosen, empty, ordered)
    chosen = np.sort(np.asarray(chosen, dtype=np.int64))
    inside, outside = chosen[chosen < ordered], chosen[chosen >= ordered]
    pool = [outside[empty[outside]]]
    if mode == "ordered-runs":
        run_codes = inside
    else:
        pool.append(inside[empty[inside]])
        run_codes = inside[~empty[inside]] if mode == "ordered" else np.zeros(0, np.int64)
    runs = np.split(run_codes, np.flatnonzero(np.diff(run_codes) > 1) + 1) if run_codes.size else []
    groups = [r for r in runs if r.size >= 2]
    if mode == "ordered-runs":
        lone = np.setdiff1d(inside, np.concatenate(groups) if groups else np.zeros(0, np.int64))
        pool.append(lone[empty[lone]])
    pooled = np.sort(np.concatenate(pool))
    if pooled.size >= 2:
        groups.append(pooled)
    return groups_map(size, groups)


@dataclass(frozen=True)
class Experiment:
    """An experimental rule (a ColumnRule). ``posterior``: "" reads the counts (with ``split`` a > 0
    and ``split_bias``: the count split into halves), "group" p5's posterior bound, "both" also
    the per-value bound on the posterior, "empty" over only the values that look empty.
    ``cost`` (``cost_width``, ``sizes``: per column its codes): only values whose posterior mean
    is at most :func:`merge_worth` sds. ``runs``: "adjacent" (:func:`runs_map`, ``runs_gap``,
    ``runs_max``), "adjacent+empty", "adjacent+alone", "cost" (one value or runs by the cost);
    "ordered", "ordered-runs", "ordered-pool" (:func:`ordered_map`: values that look empty pooled,
    real ones as runs only in the codes the schema orders). With "ordered*", a value looks empty
    when its posterior mean is at most ``empty_sds`` sds, or, ``empty_sds`` 0, when its posterior
    probability of looking empty (:func:`posterior_empty`) is at least ``empty_p``; ``cat_all``: outside
    the ordered codes every chosen value pools (as p5)."""

    posterior: str = "group"
    split: float = 0.0
    split_bias: float | None = None
    cost: float = 0.0
    cost_width: bool = True
    runs: str = ""
    runs_gap: int = 1
    runs_max: int = 0
    empty_sds: float = 0.0
    empty_p: float = 0.5
    cat_all: bool = False
    sizes: tuple[tuple[str, int], ...] = ()

    def __call__(self, col: ColumnCounts, b: MergeBounds) -> np.ndarray | None:
        """One column's map under this rule, or None."""
        if not self.posterior:
            return self._counts(col, b)
        if self.runs.startswith("ordered"):
            return self._ordered(col, b)
        return self._posterior(col, b)

    def _counts(self, col: ColumnCounts, b: MergeBounds) -> np.ndarray | None:
        """The counts' reading, with the split when ``split`` > 0 (sessions 35's c rules)."""
        y, sigma, z = col.y, col.sigma, b.margin
        small = y <= b.value_cap - z * sigma
        rare = rare_run(y, y, small, sigma, b.threshold, z, b.cap)
        unbiased = rare is None or (self.split_bias is not None and float(np.sum(y[rare])) + (
            self.split_bias * sigma * rare.size + z * sigma * math.sqrt(rare.size)) <= b.cap)
        if self.split > 0 and not unbiased:
            y1, y2 = split_counts(y, sigma, self.split, col.name)
            sigma2 = sigma * math.sqrt(1.0 + 1.0 / self.split**2)
            rare = rare_run(y1, y2, small, sigma, b.threshold, z, b.cap, sigma2)
        return None if rare is None else merge_map(y.size, rare)

    def _ordered(self, col: ColumnCounts, b: MergeBounds) -> np.ndarray | None:
        """Session 37's rule (:func:`ordered_map`) over p5's chosen values."""
        chosen = posterior_chosen(col, b)
        if chosen is None:
            return None
        if self.empty_sds > 0:
            empty = posterior_counts(col.y, col.sigma)[0] <= self.empty_sds * col.sigma
        else:
            empty = posterior_empty(col.y, col.sigma) >= self.empty_p
        if self.cat_all:  # outside the ordered codes every chosen value pools (p5's group)
            empty = empty | (np.arange(col.y.size) >= col.ordered)
        return ordered_map(col.y.size, chosen, empty, col.ordered, self.runs)

    def _posterior(self, col: ColumnCounts, b: MergeBounds) -> np.ndarray | None:
        """The posterior readings of sessions 35-36 (modes, a cost per value, runs)."""
        y, sigma = col.y, col.sigma
        cand = np.flatnonzero(y < b.threshold * sigma)
        if cand.size < 2:
            return None
        mean, var = posterior_counts(y, sigma)
        worth = merge_worth(dict(self.sizes), col.name, self.cost, self.cost_width) if self.cost > 0 else 0.0
        if self.posterior == "both":
            small = mean + b.margin * np.sqrt(var) <= b.value_cap
        else:
            small = y + b.margin * sigma <= b.value_cap
        if self.posterior == "empty":  # only values that more likely than not look empty
            small &= posterior_empty(y, sigma) >= 0.5
        if worth > 0 and self.runs != "cost":  # only values whose merge saves more noise than it may misplace
            small &= mean <= worth * sigma
        cand = cand[small[cand]]
        cand = cand[np.argsort(y[cand], kind="stable")]
        fits = np.flatnonzero(np.cumsum(mean[cand]) + b.posterior_margin * np.sqrt(np.cumsum(var[cand])) <= b.cap)
        if fits.size == 0 or fits[-1] + 1 < 2:
            return None
        chosen = cand[: fits[-1] + 1]
        if self.runs == "cost":  # one value if the cells it saves beyond the runs outweigh the mass it mixes
            g = runs_map(y.size, chosen, None, self.runs_gap, self.runs_max)
            extra = (y.size if g is None else int(g.max()) + 1) - (y.size - chosen.size + 1)
            return merge_map(y.size, chosen) if float(mean[chosen].sum()) <= worth * sigma * extra else g
        if self.runs:
            empty = {"adjacent+empty": lambda: posterior_empty(y, sigma) >= 0.5,
                     "adjacent+alone": lambda: np.ones(y.size, dtype=bool)}.get(self.runs, lambda: None)()
            return runs_map(y.size, chosen, empty, self.runs_gap, self.runs_max)
        return merge_map(y.size, chosen)
