"""The strict sampler of ``sds``: the paper's aggregate-seeded synthesis, batched.

No combination absent from the aggregates is ever created; records stall (empty cells)
when no attribute can be added. See docs/sds.md.
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import Sequence

import numpy as np

from ...rows.counting import column_major, count_marginals
from .aggregation import _CHUNK, Combo
from .params import SdsParams

#: Record groups of the strict sampler (each with its own column order).
_STRICT_GROUPS = 64


def percentile_r8(sorted_values: np.ndarray, counts: np.ndarray, q: float) -> np.ndarray:
    """Hyndman-Fan type 8 percentile along the last axis, per row with its own count.

    ``sorted_values[..., :counts]`` are the valid, ascending entries of each row (the
    rest is ignored). ``q`` in [0, 100]. Matches ``np.percentile(method="median_unbiased")``.
    """
    qq = q / 100.0
    n = np.asarray(counts, dtype=np.float64)
    h = n * qq + (qq + 1.0) / 3.0  # 1-based position
    lo = np.floor(h)
    frac = h - lo
    lo_i = np.clip(lo, 1, np.maximum(n, 1)).astype(np.int64) - 1
    hi_i = np.clip(lo + 1, 1, np.maximum(n, 1)).astype(np.int64) - 1
    frac = np.where(h >= n, 0.0, np.where(h < 1, 0.0, frac))
    a = np.take_along_axis(sorted_values, lo_i[..., None], axis=-1)[..., 0]
    b = np.take_along_axis(sorted_values, hi_i[..., None], axis=-1)[..., 0]
    return a + frac * (b - a)


def _draw(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One index per row, proportional to the row's (>= 0) weights; -1 for an all-zero row."""
    w = np.asarray(weights, dtype=np.float64)
    cdf = np.cumsum(w, axis=1)
    total = cdf[:, -1]
    u = rng.random(w.shape[0]) * total
    pick = (cdf <= u[:, None]).sum(axis=1)
    pick = np.minimum(pick, w.shape[1] - 1)
    return np.where(total > 0, pick, -1)


def _lookup(tab: np.ndarray, combo: Combo, j: int, fixed: dict[int, np.ndarray]) -> np.ndarray:
    """Rows of ``tab`` (over ``combo``) at each record's values of ``fixed`` columns, all values of j."""
    moved = np.moveaxis(tab, combo.index(j), -1)
    index = tuple(fixed[c] for c in combo if c != j)
    return moved[index]


def _weighted_order(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random permutation drawing columns proportionally to their weights (zero weights last)."""
    w = np.asarray(weights, dtype=np.float64)
    u = rng.random(w.size)
    keys = np.where(w > 0, np.log(np.maximum(u, 1e-300)) / np.where(w > 0, w, 1.0), -np.inf)
    return np.argsort(-keys, kind="stable")


class _Counts:
    """Table lookups minus synthesised counts (when ``use_synthetic_counts``)."""

    def __init__(self, levels, cards, use_synth: bool):
        self.tab = {c: t for level in levels for c, t in level.items()}
        self.cards = cards
        self.synth = {c: np.zeros_like(t) for c, t in self.tab.items()} if use_synth else None

    def weight(self, combo: Combo, j: int, fixed: dict[int, np.ndarray]) -> np.ndarray:
        """Weight of every value of j with the fixed attributes; <= 0 means not allowed."""
        if combo not in self.tab:
            return np.zeros((len(next(iter(fixed.values()))) if fixed else 1, self.cards[j]), dtype=np.int64)
        w = _lookup(self.tab[combo], combo, j, fixed)
        if self.synth is not None:
            present = w > 0
            w = np.where(present, w - _lookup(self.synth[combo], combo, j, fixed), 0)
        return w

    def add(self, records: np.ndarray, R: int) -> None:
        """Count synthesised ``records`` (-1 = empty cell) into every reported tuple."""
        if self.synth is None or records.shape[0] == 0:
            return
        # Empty cells (-1) get an extra code that no tuple holds.
        ext = np.where(records < 0, np.asarray(self.cards)[None, :], records)
        cm = column_major(ext)
        cards_ext = [c + 1 for c in self.cards]
        got = count_marginals(cm, cards_ext, list(self.synth))
        for c, t in got.items():
            self.synth[c] += t[tuple(slice(0, self.cards[j]) for j in c)]

    def reset(self) -> None:
        """Forget what was synthesised (every 1-count budget spent: start over)."""
        if self.synth is not None:
            for t in self.synth.values():
                t[...] = 0



def _direct_weights(counts: _Counts, rec: np.ndarray, assigned: np.ndarray, rows: np.ndarray,
                    prefix: list[int], j: int, card: int, weight: np.ndarray, ok: np.ndarray) -> None:
    """Records at most R long with j: weight = the count of (record + value), in place."""
    pats, inv = np.unique(assigned[rows], axis=0, return_inverse=True)
    inv = inv.ravel()
    for pi, pat in enumerate(pats):
        rr = rows[inv == pi]
        cols = [prefix[i] for i in np.flatnonzero(pat)]
        combo = tuple(sorted(cols + [j]))
        fixed = {c: rec[rr, c] for c in cols}
        w = counts.weight(combo, j, fixed) if cols else np.broadcast_to(
            counts.weight((j,), j, {}), (rr.size, card))
        weight[rr] = w
        ok[rr] = w > 0


def _deep_weights(counts: _Counts, rec: np.ndarray, assigned: np.ndarray, rows: np.ndarray,
                  prefix: list[int], j: int, card: int, R: int, q: float,
                  weight: np.ndarray, ok: np.ndarray) -> None:
    """Records longer than R with j: weight = the q-th percentile of the counts of every
    sub-combination (at most R long) holding j, each of which must be reported; in place."""
    subsets = [s for size_s in range(0, R) for s in combinations(range(len(prefix)), size_s)]
    chunk = max(1, _CHUNK // max(1, card * len(subsets)))
    for c0 in range(0, rows.size, chunk):
        rr = rows[c0 : c0 + chunk]
        vals = np.full((rr.size, card, len(subsets)), np.nan)
        allowed = np.ones((rr.size, card), dtype=bool)
        for si, s in enumerate(subsets):
            cols = [prefix[i] for i in s]
            has = assigned[rr][:, list(s)].all(axis=1) if s else np.ones(rr.size, dtype=bool)
            sel = np.flatnonzero(has)
            if not sel.size:
                continue
            combo = tuple(sorted(cols + [j]))
            fixed = {c: rec[rr[sel], c] for c in cols}
            w = counts.weight(combo, j, fixed) if cols else np.broadcast_to(
                counts.weight((j,), j, {}), (sel.size, card))
            vals[sel, :, si] = w
            allowed[sel] &= w > 0
        n_valid = np.sum(~np.isnan(vals[:, 0, :]), axis=1)
        srt = np.sort(vals, axis=2)
        pct = np.rint(percentile_r8(srt, np.broadcast_to(n_valid[:, None], allowed.shape), q))
        weight[rr] = np.where(allowed, pct, 0.0)
        ok[rr] = allowed & (pct > 0)


def _sample_strict(
    levels: list[dict[Combo, np.ndarray]],
    cards: Sequence[int],
    rows: int,
    params: SdsParams,
    rng: np.random.Generator,
) -> np.ndarray:
    """The paper's aggregate-seeded sampler, in groups; -1 marks an empty cell."""
    p, R, q = len(cards), params.reporting_length, float(params.weight_selection_percentile)
    ones = levels[0]
    c1 = [ones.get((j,), np.zeros(cards[j], dtype=np.int64)) for j in range(p)]
    budgets = [t.copy() for t in c1]
    counts = _Counts(levels, list(cards), params.use_synthetic_counts)
    out = np.full((rows, p), -1, dtype=np.int64)
    size = max(64, math.ceil(rows / _STRICT_GROUPS))
    for start in range(0, rows, size):
        if all((b <= 0).all() for b in budgets):
            budgets = [t.copy() for t in c1]
            counts.reset()
        rec = out[start : start + size]
        g = rec.shape[0]
        col_w = np.array([np.clip(b, 0, None).sum() for b in budgets], dtype=np.float64)
        order = _weighted_order(col_w, rng)
        for t, j in enumerate(order):
            j = int(j)
            avail = budgets[j] > 0
            if not avail.any():
                continue
            prefix = [int(c) for c in order[:t]]
            assigned = rec[:, prefix] >= 0 if prefix else np.zeros((g, 0), dtype=bool)
            m = assigned.sum(axis=1)
            weight = np.zeros((g, cards[j]), dtype=np.float64)
            ok = np.zeros((g, cards[j]), dtype=bool)
            direct = np.flatnonzero(m + 1 <= R)
            if direct.size:
                _direct_weights(counts, rec, assigned, direct, prefix, j, cards[j], weight, ok)
            deep = np.flatnonzero(m + 1 > R)
            if deep.size:
                _deep_weights(counts, rec, assigned, deep, prefix, j, cards[j], R, q, weight, ok)
            ok &= avail[None, :]
            pick = _draw(np.where(ok, weight, 0.0), rng)
            rec[:, j] = pick
        used = rec >= 0
        for j in range(p):
            if used[:, j].any():
                budgets[j] -= np.bincount(rec[used[:, j], j], minlength=cards[j])
        counts.add(rec, R)
    return out
