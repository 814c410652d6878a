"""Forward sampling of a calibrated junction-tree model (:meth:`GraphicalModel.sample`), and
the randomised rounding it allocates rows by (:func:`allocate`).

Records are drawn from the root clique outwards; each clique's new columns are drawn given
its separator with its parent: the rows are grouped by separator cell (a stable sort of the
rows, in a fresh random order per clique) and each group's rows are split among the new
columns' values by systematic rounding of their expected counts (each value gets the floor
or the ceiling of rows x probability), which keeps sampling error far below multinomial
sampling. The conditional tables depend on the model alone and are built once per model
(:func:`_sampling_steps`); the records are held column by column, each column contiguous.
A seeded draw's records are pinned by ``tests/test_sampler_pinned.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .. import progress

if TYPE_CHECKING:
    from .model import GraphicalModel

__all__ = ["allocate", "sample_columns"]


def allocate(n: np.ndarray, prob: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Integer counts (G, K) with row sums ``n`` and each cell the floor or ceiling of n*prob.

    Systematic sampling of the fractional parts: cell k of group g gets its ceiling
    with probability equal to its fractional part, so counts are unbiased.
    """
    expected = np.ascontiguousarray(n[:, None].astype(np.float64) * prob)
    base = np.floor(expected)
    frac = expected - base
    extra = n - base.sum(axis=1).astype(np.int64)
    counts = base.astype(np.int64)
    need = extra > 0
    if np.any(need):
        # Fractions of a group add up to its integer shortfall; rescale to be exact.
        fsum = frac.sum(axis=1)
        scale = np.where(fsum > 0, extra / np.where(fsum > 0, fsum, 1.0), 0.0)
        frac = frac * scale[:, None]
        flat = np.cumsum(frac.ravel())
        starts = np.concatenate([[0.0], flat.reshape(frac.shape)[:, -1][:-1]])
        take = np.maximum(extra, 0)  # each group's picks: its shortfall
        groups = np.repeat(np.arange(n.size), take)
        within = np.arange(groups.size) - np.repeat(np.cumsum(take) - take, take)
        u = rng.random(n.size)
        # (start + u) + within, the same sums as (start[g] + u[g]) + within per pick
        points = (starts + u)[groups] + within
        idx = np.searchsorted(flat, points, side="right")
        # Keep every pick inside its own group (guards against float round-off).
        k = frac.shape[1]
        lo = groups * k
        idx = np.clip(idx, lo, lo + (k - 1))
        counts = (counts.ravel() + np.bincount(idx, minlength=counts.size)).reshape(counts.shape)
    return counts


def _iid_counts(n: np.ndarray, prob: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Multinomial counts per group: rows drawn independently (the variance ``allocate`` avoids)."""
    p = np.clip(prob, 0.0, None)
    p = p / p.sum(axis=1, keepdims=True)
    return rng.multinomial(n.astype(np.int64), p).astype(np.int64)


def sample_columns(model: GraphicalModel, rows: int, rng: np.random.Generator, iid: bool = False,
                   dtype: np.dtype | type = np.int64) -> np.ndarray:
    """:meth:`GraphicalModel.sample`'s records column by column: a (columns, rows) array, each
    column's codes contiguous (its transpose is ``sample``'s array, drawn with the same ``rng``).

    The conditional tables and the codes of their cells depend on the model alone: they
    are built once per model, in the process that samples (:func:`_sampling_steps`)."""
    names = model.domain.names
    out = np.full((len(names), rows), -1, dtype=dtype)
    perm = rng.permutation(rows)
    sampled = 0
    for st in _sampling_steps(model):
        progress.count(f"sampling {rows:,} rows", sampled, len(names), "columns")
        if st.cond is None:
            continue
        # Rows in random order, grouped by separator cell: each group gets its counts.
        key = _cell_keys(out, st, rows)
        order = perm[np.argsort(key[perm], kind="stable")]
        n = np.bincount(key, minlength=st.cond.shape[0])
        counts = (_iid_counts(n, st.cond, rng) if iid else allocate(n, st.cond, rng)).ravel()
        for c, codes in zip(st.new, st.codes):
            out[c][order] = np.repeat(codes, counts)
        sampled += len(st.new)
        perm = rng.permutation(rows)
    progress.count(f"sampling {rows:,} rows", sampled, len(names), "columns")
    return out


@dataclass(frozen=True)
class _SampleStep:
    """One clique's part of forward sampling, from the model alone: its separator's and new
    columns (domain positions), the new columns' table given the separator cell (``cond``,
    ``(separator cells, new cells)``, each row summing to one, uniform where the separator
    has probability zero; None when the clique adds no column) and, per new column, its code
    in every cell of ``cond`` (row-major), the values :func:`allocate`'s counts repeat."""

    sep: tuple[int, ...]
    sep_shape: tuple[int, ...]
    new: tuple[int, ...]
    cond: np.ndarray | None
    codes: tuple[np.ndarray, ...]
    key_dtype: np.dtype


def _sampling_steps(model: GraphicalModel) -> list[_SampleStep]:
    """Every clique's :class:`_SampleStep` in sampling order, built on first use and kept on
    the model (a cache on the frozen dataclass, like its conditionals): a release draws many
    blocks from one model, and these tables do not depend on the block."""
    cached = model.__dict__.get("_sampling_steps")
    if cached is not None:
        return cached
    from .model import signed_code_dtype  # model.py imports this module

    tree, dom = model.tree, model.domain
    steps = []
    for i in tree.order:
        cl = tree.cliques[i]
        p = tree.parent[i]
        sep = tree.separator(i, p) if p >= 0 else ()
        new = tuple(a for a in cl if a not in set(sep))
        if not new:
            steps.append(_SampleStep((), (), (), None, (), np.dtype(np.intp)))
            continue
        axes = [cl.index(a) for a in sep] + [cl.index(a) for a in new]
        cond = np.transpose(model.beliefs[i], axes).reshape(dom.cells(sep), dom.cells(new))
        rsum = cond.sum(axis=1, keepdims=True)
        uniform = np.full_like(cond, 1.0 / cond.shape[1])
        cond = np.where(rsum > 0, cond / np.where(rsum > 0, rsum, 1.0), uniform)
        width = signed_code_dtype(dom.shape(new))
        cell_codes = np.unravel_index(np.arange(cond.shape[1]), dom.shape(new))
        codes = tuple(np.tile(v.astype(width), cond.shape[0]) for v in cell_codes)
        cells = cond.shape[0]
        key_dtype = np.dtype(np.uint8 if cells <= 1 << 8 else np.uint16 if cells <= 1 << 16 else np.intp)
        steps.append(_SampleStep(tuple(dom.index(a) for a in sep), dom.shape(sep), tuple(dom.index(a) for a in new),
                                 cond, codes, key_dtype))
    model.__dict__["_sampling_steps"] = steps
    return steps


def _cell_keys(out: np.ndarray, st: _SampleStep, rows: int) -> np.ndarray:
    """Each row's separator cell (row-major over the separator's columns), in the step's
    ``key_dtype``: numpy sorts keys of 16 bits or less by radix, and a stable sort's order is
    the same whatever its algorithm."""
    if not st.sep:
        return np.zeros(rows, dtype=st.key_dtype)
    key = out[st.sep[0]].astype(st.key_dtype)
    for c, size in zip(st.sep[1:], st.sep_shape[1:]):
        np.multiply(key, size, out=key, casting="unsafe")  # codes and cells are >= 0: no wrap
        np.add(key, out[c], out=key, casting="unsafe")
    return key
