"""A graphical model on a junction tree: calibration, marginal queries, sampling.

The model is ``p(x) proportional to exp(sum_C theta_C(x_C))`` over the junction tree's
cliques, scaled to ``total`` records. :func:`calibrate` runs sum-product belief
propagation in log space (one pass up the tree, one down), giving every clique's
marginal; time and memory are linear in the cliques' cells, never in the full domain.

Queries: a marginal over columns inside one clique is a sum of that clique's belief;
other sets are answered exactly by variable elimination over the smallest subtree that
covers them (clique marginals over separator marginals, contracted with ``einsum``).

Sampling draws records forward from the root clique outwards; each clique's new
columns are drawn given its separator with its parent. Counts are allocated per
separator cell by systematic rounding (each cell gets the floor or the ceiling of its
expected count), which keeps sampling error far below multinomial sampling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .junction_tree import Clique, Domain, JunctionTree

__all__ = ["GraphicalModel", "calibrate", "expand", "log_marginal", "allocate"]


def expand(arr: np.ndarray, sub: Sequence[str], clique: Sequence[str]) -> np.ndarray:
    """Table over ``sub`` (an ordered subsequence of ``clique``) shaped to broadcast on it."""
    pos = {a: k for k, a in enumerate(sub)}
    return np.reshape(arr, [arr.shape[pos[a]] if a in pos else 1 for a in clique])


def _axes_out(clique: Sequence[str], keep: Sequence[str]) -> tuple[int, ...]:
    ks = set(keep)
    return tuple(k for k, a in enumerate(clique) if a not in ks)


def log_marginal(logt: np.ndarray, clique: Sequence[str], keep: Sequence[str]) -> np.ndarray:
    """log of the sum of exp(logt) over the columns of ``clique`` not in ``keep``."""
    axes = _axes_out(clique, keep)
    if not axes:
        return logt
    top = np.max(logt, axis=axes, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    out = np.log(np.sum(np.exp(logt - top), axis=axes, keepdims=True)) + top
    return np.squeeze(out, axis=axes)


def _logsumexp_all(logt: np.ndarray) -> float:
    top = float(np.max(logt))
    return top + math.log(float(np.sum(np.exp(logt - top))))


@dataclass(frozen=True)
class _Step:
    """Precomputed shapes of one clique's messages (built once per tree)."""

    clique: int
    parent: int
    up_axes: tuple[int, ...]  # axes of this clique summed out for the message to its parent
    up_shape: tuple[int, ...]  # the message broadcast on the parent's clique
    down_axes: tuple[int, ...]  # axes of the parent summed out for the message down
    down_shape: tuple[int, ...]  # the message broadcast on this clique


def _schedule(tree: JunctionTree) -> list[_Step]:
    cached = tree.__dict__.get("_schedule_cache")
    if cached is not None:
        return cached
    steps = []
    cl, dom = tree.cliques, tree.domain
    for i in tree.order:
        p = tree.parent[i]
        if p < 0:
            steps.append(_Step(i, -1, (), (), (), ()))
            continue
        sep = set(tree.separator(i, p))
        steps.append(_Step(
            clique=i, parent=p,
            up_axes=_axes_out(cl[i], sep),
            up_shape=tuple(dom.size(a) if a in sep else 1 for a in cl[p]),
            down_axes=_axes_out(cl[p], sep),
            down_shape=tuple(dom.size(a) if a in sep else 1 for a in cl[i]),
        ))
    tree.__dict__["_schedule_cache"] = steps  # a cache on a frozen dataclass
    return steps


def _lse(logt: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """log-sum-exp over ``axes``, keeping them as size-1 axes."""
    if not axes:
        return logt
    top = np.max(logt, axis=axes, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    shifted = np.subtract(logt, top)
    np.exp(shifted, out=shifted)  # in place: one temporary the size of the table, not two
    out = np.sum(shifted, axis=axes, keepdims=True)
    np.log(out, out=out)
    out += top
    return out


def calibrate(tree: JunctionTree, theta: Sequence[np.ndarray]) -> tuple[list[np.ndarray], float]:
    """Normalised log beliefs of every clique and the log partition function."""
    steps = _schedule(tree)
    acc = [np.array(t, dtype=np.float64, copy=True) for t in theta]
    up: dict[int, np.ndarray] = {}
    for st in reversed(steps):
        if st.parent >= 0:
            msg = _lse(acc[st.clique], st.up_axes).reshape(st.up_shape)
            up[st.clique] = msg
            acc[st.parent] += msg
    beliefs: list[np.ndarray] = [np.empty(0)] * len(acc)
    log_z = 0.0
    for st in steps:
        b = acc[st.clique]
        if st.parent >= 0:
            down = _lse(beliefs[st.parent], st.down_axes).reshape(st.down_shape)
            # The parent's belief is normalised and the separator's mass cancels
            # against the up message, so this belief already sums to one.
            b += down  # in place: acc holds copies of theta
            b -= up[st.clique].reshape(st.down_shape)
            beliefs[st.clique] = b
        else:
            z = _logsumexp_all(b)
            log_z += z
            beliefs[st.clique] = b - z
    return beliefs, log_z


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
        groups = np.repeat(np.arange(n.size), np.maximum(extra, 0))
        within = np.arange(groups.size) - np.repeat(np.cumsum(np.maximum(extra, 0)) - np.maximum(extra, 0), np.maximum(extra, 0))
        u = rng.random(n.size)
        points = starts[groups] + u[groups] + within
        idx = np.searchsorted(flat, points, side="right")
        # Keep every pick inside its own group (guards against float round-off).
        k = frac.shape[1]
        idx = np.clip(idx, groups * k, groups * k + k - 1)
        flat_counts = counts.ravel()
        np.add.at(flat_counts, idx, 1)
        counts = flat_counts.reshape(counts.shape)
    return counts


@dataclass(frozen=True, kw_only=True)
class GraphicalModel:
    """Log potentials on a junction tree, calibrated, scaled to ``total`` records."""

    tree: JunctionTree
    theta: tuple[np.ndarray, ...]
    total: float
    log_beliefs: tuple[np.ndarray, ...]

    @classmethod
    def from_potentials(cls, tree: JunctionTree, theta: Sequence[np.ndarray], total: float) -> "GraphicalModel":
        """The model with log potentials ``theta`` (one array per clique of ``tree``),
        calibrated by message passing and scaled to ``total`` records."""
        beliefs, _ = calibrate(tree, theta)
        return cls(tree=tree, theta=tuple(theta), total=float(total), log_beliefs=tuple(beliefs))

    @property
    def domain(self) -> Domain:
        """The domain of the model's junction tree."""
        return self.tree.domain

    def clique_marginal(self, i: int) -> np.ndarray:
        """Expected counts over clique ``i`` (``total`` times its belief), shaped by its
        columns' cardinalities in domain order."""
        return self.total * np.exp(self.log_beliefs[i])

    def project(self, attrs: Sequence[str]) -> np.ndarray:
        """Expected counts over ``attrs`` (in the order given), shaped by their cardinalities."""
        attrs = tuple(attrs)
        canon = self.domain.canonical(attrs)
        if len(canon) != len(attrs):
            raise ValueError(f"repeated column in {list(attrs)}")
        i = self.tree.containing(canon)
        if i is not None:
            cl = self.tree.cliques[i]
            table = np.sum(self.clique_marginal(i), axis=_axes_out(cl, canon))
        else:
            table = self.total * self._eliminate(canon)
        perm = [canon.index(a) for a in attrs]
        return np.transpose(table, perm)

    def _eliminate(self, query: Clique) -> np.ndarray:
        """Probability table over ``query`` (domain order) by variable elimination on the
        smallest subtree that covers it: each clique's conditional given its separator with
        its parent, summed leaf to root, keeping the query's columns in the messages."""
        tree, dom = self.tree, self.domain
        alive = _covering_subtree(tree, set(query))
        root = min(alive)
        parent, order = {root: -1}, [root]
        for i in order:
            for j in tree.neighbours(i):
                if j in alive and j not in parent:
                    parent[j] = i
                    order.append(j)
        want = set(query)
        carried: dict[int, tuple[Clique, np.ndarray]] = {}
        for i in reversed(order):
            cl = tree.cliques[i]
            table = np.exp(self.log_beliefs[i])
            if parent[i] >= 0:  # the clique given its separator (zero where the separator is)
                m = np.sum(table, axis=_axes_out(cl, tree.separator(i, parent[i])), keepdims=True)
                table = np.divide(table, m, out=np.zeros_like(table), where=m > 0)
            factors = [(cl, table)] + [carried.pop(j) for j in order if parent.get(j) == i]
            keep = set(tree.separator(i, parent[i])) if parent[i] >= 0 else set()
            carried[i] = _contract(dom, factors, keep | want)
        attrs, table = carried[root]
        return np.transpose(table, [attrs.index(a) for a in query])

    def sample(self, rows: int, rng: np.random.Generator) -> np.ndarray:
        """``rows`` records as an (rows, columns) int64 array of codes in domain order."""
        tree, dom = self.tree, self.domain
        out = np.full((rows, len(dom.names)), -1, dtype=np.int64)
        perm = rng.permutation(rows)
        for i in tree.order:
            cl = tree.cliques[i]
            p = tree.parent[i]
            sep = tree.separator(i, p) if p >= 0 else ()
            new = tuple(a for a in cl if a not in set(sep))
            if not new:
                continue
            prob = np.exp(self.log_beliefs[i])
            axes = [cl.index(a) for a in sep] + [cl.index(a) for a in new]
            cond = np.transpose(prob, axes).reshape(dom.cells(sep), dom.cells(new))
            rsum = cond.sum(axis=1, keepdims=True)
            uniform = np.full_like(cond, 1.0 / cond.shape[1])
            cond = np.where(rsum > 0, cond / np.where(rsum > 0, rsum, 1.0), uniform)
            if sep:
                cols = [dom.index(a) for a in sep]
                key = np.ravel_multi_index(tuple(out[:, c] for c in cols), dom.shape(sep))
            else:
                key = np.zeros(rows, dtype=np.int64)
            # Rows in random order, grouped by separator cell: each group gets its counts.
            order = perm[np.argsort(key[perm], kind="stable")]
            n = np.bincount(key, minlength=cond.shape[0])
            counts = allocate(n, cond, rng)
            values = np.repeat(np.tile(np.arange(cond.shape[1]), cond.shape[0]), counts.ravel())
            decoded = np.unravel_index(values, dom.shape(new))
            for a, v in zip(new, decoded):
                out[order, dom.index(a)] = v
            perm = rng.permutation(rows)
        return out


def _covering_subtree(tree: JunctionTree, want: set[str]) -> set[int]:
    """Cliques left after pruning, leaf by leaf, those whose own columns miss ``want``."""
    alive = set(range(len(tree.cliques)))
    changed = True
    while changed:
        changed = False
        for i in sorted(alive):
            nbrs = [j for j in tree.neighbours(i) if j in alive]
            if len(nbrs) > 1 or len(alive) == 1:
                continue
            covered = set().union(*(tree.cliques[j] for j in nbrs)) if nbrs else set()
            if not ((set(tree.cliques[i]) - covered) & want):
                alive.discard(i)
                changed = True
    return alive


def _contract(dom: Domain, factors: list[tuple[Clique, np.ndarray]], keep: set[str]) -> tuple[Clique, np.ndarray]:
    """Product of labelled tables summed to their columns in ``keep`` (domain order),
    contracted pairwise by einsum, so the full product is never built."""
    cols = dom.canonical(a for f in factors for a in f[0])
    letter = {a: chr(ord("a") + k) if k < 26 else chr(ord("A") + k - 26) for k, a in enumerate(cols)}
    out = tuple(a for a in cols if a in keep)
    spec = ",".join("".join(letter[a] for a in f[0]) for f in factors) + "->" + "".join(letter[a] for a in out)
    return out, np.einsum(spec, *(f[1] for f in factors), optimize="greedy")
