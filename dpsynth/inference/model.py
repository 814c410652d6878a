"""A graphical model on a junction tree: calibration, marginal queries, sampling.

The model is ``p(x) proportional to exp(sum_C theta_C(x_C))`` over the junction tree's
cliques, scaled to ``total`` records. :func:`calibrate` runs sum-product belief
propagation (one pass up the tree, one down), giving every clique's marginal; time and
memory are linear in the cliques' cells, never in the full domain. :func:`calibrate_probs`
is the estimator's faster variant (probabilities only, one ``exp`` per cell).

Queries: a marginal over columns inside one clique is a sum of that clique's belief;
other sets are answered exactly by variable elimination over the smallest subtree that
covers them (clique marginals over separator marginals, contracted with ``einsum``);
:meth:`GraphicalModel.project_many` answers a batch of pairs by one tree walk per column.

Sampling draws records forward from the root clique outwards; each clique's new
columns are drawn given its separator with its parent. Counts are allocated per
separator cell by systematic rounding (each cell gets the floor or the ceiling of its
expected count), which keeps sampling error far below multinomial sampling
(:mod:`dpsynth.inference.sampling`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Sequence

import numpy as np

from .blas import one_blas_thread
from .junction_tree import Clique, Domain, JunctionTree
from .sampling import _iid_counts, allocate, sample_columns  # noqa: F401 (allocate, _iid_counts: re-exported)

__all__ = ["GraphicalModel", "calibrate", "calibrate_full", "calibrate_probs", "expand", "log_marginal", "allocate"]

try:  # einsum's C entry point: what np.einsum calls for one operand without ``optimize``, minus its dispatch
    from numpy._core.multiarray import c_einsum as _einsum
except ImportError:  # pragma: no cover - another numpy layout: the public function, same result
    _einsum = np.einsum


def expand(arr: np.ndarray, sub: Sequence[str], clique: Sequence[str]) -> np.ndarray:
    """Table over ``sub`` (an ordered subsequence of ``clique``) shaped to broadcast on it."""
    pos = {a: k for k, a in enumerate(sub)}
    return np.reshape(arr, [arr.shape[pos[a]] if a in pos else 1 for a in clique])


@lru_cache(maxsize=4096)
def _sum_spec(ndim: int, axes: tuple[int, ...]) -> str:
    """The one-operand einsum spec summing a table of ``ndim`` axes over ``axes``."""
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[:ndim]
    return letters + "->" + "".join(c for k, c in enumerate(letters) if k not in set(axes))


def sum_axes(table: np.ndarray, axes: tuple[int, ...], keepdims: bool = False,
             out: np.ndarray | None = None) -> np.ndarray:
    """``np.sum(table, axis=axes)``, as a one-operand einsum: numpy's reduction over several
    strided axes of a large table is up to five times slower than einsum's loop. With ``out``
    (no ``keepdims``), the sum is written there (no axes: ``table`` is copied there)."""
    if out is not None:
        if axes:
            _einsum(_sum_spec(table.ndim, tuple(sorted(axes))), table, out=out)
        else:
            np.copyto(out, table)
        return out
    if not axes:
        return table
    out = _einsum(_sum_spec(table.ndim, tuple(sorted(axes))), table)
    if keepdims:
        out = out.reshape([1 if k in set(axes) else n for k, n in enumerate(table.shape)])
    return out


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
    # sum_axes of those sums as einsum specs (None: no axis), and the up sum kept on this clique's shape
    up_spec: str | None = None
    up_kept: tuple[int, ...] = ()
    down_spec: str | None = None

    def up_sum(self, table: np.ndarray) -> np.ndarray:
        """``sum_axes(table, up_axes, keepdims=True)`` with the spec and shape worked out once."""
        return table if self.up_spec is None else _einsum(self.up_spec, table).reshape(self.up_kept)

    def down_sum(self, table: np.ndarray) -> np.ndarray:
        """``sum_axes(table, down_axes)`` shaped as ``down_shape`` (the parent's belief summed to the separator)."""
        return (table if self.down_spec is None else _einsum(self.down_spec, table)).reshape(self.down_shape)


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
        up, down = _axes_out(cl[i], sep), _axes_out(cl[p], sep)
        steps.append(_Step(
            clique=i, parent=p,
            up_axes=up,
            up_shape=tuple(dom.size(a) if a in sep else 1 for a in cl[p]),
            down_axes=down,
            down_shape=tuple(dom.size(a) if a in sep else 1 for a in cl[i]),
            up_spec=_sum_spec(len(cl[i]), up) if up else None,
            up_kept=tuple(1 if k in up else n for k, n in enumerate(dom.shape(cl[i]))),
            down_spec=_sum_spec(len(cl[p]), down) if down else None,
        ))
    tree.__dict__["_schedule_cache"] = steps  # a cache on a frozen dataclass
    return steps


def _lse(logt: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """log-sum-exp over ``axes``, keeping them as size-1 axes.

    Shifted by the table's single largest value (one fast pass) rather than by the largest
    value of each kept cell (a slow strided reduction); if a kept cell's sum underflows to
    zero, its values all lie 700+ below that maximum, and the table is redone with the
    per-cell shift, so the result is as exact as the per-cell shift always."""
    if not axes:
        return logt
    shifted, top = _shifted_exp(logt)
    out = sum_axes(shifted, axes, keepdims=True)
    if not np.all(out > 0.0):
        return _lse_per_cell(logt, axes)
    np.log(out, out=out)
    out += top
    return out


def _lse_per_cell(logt: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """log-sum-exp over ``axes`` shifted by each kept cell's own maximum: exact however far
    apart the kept cells lie (the slow path of :func:`_lse`)."""
    local = np.max(logt, axis=axes, keepdims=True)
    local = np.where(np.isfinite(local), local, 0.0)
    out = np.sum(np.exp(logt - local), axis=axes, keepdims=True)
    np.log(out, out=out)
    return out + local


def calibrate(tree: JunctionTree, theta: Sequence[np.ndarray]) -> tuple[list[np.ndarray], float]:
    """Normalised log beliefs of every clique and the log partition function."""
    log_b, _, log_z = calibrate_full(tree, theta)
    return log_b, log_z


def calibrate_full(tree: JunctionTree, theta: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray], float]:
    """Log beliefs, beliefs (probabilities) and the log partition function.

    Up the tree in log space (log-sum-exp per clique, stable for any potentials); down
    the tree each clique's belief is exponentiated once and its children's messages are
    plain sums of it, so a clique with many children costs one pass per child, not a
    log-sum-exp per child."""
    steps = _schedule(tree)
    acc = [np.array(t, dtype=np.float64, copy=True) for t in theta]
    up: dict[int, np.ndarray] = {}
    for st in reversed(steps):
        if st.parent >= 0:
            msg = _lse(acc[st.clique], st.up_axes).reshape(st.up_shape)
            up[st.clique] = msg
            acc[st.parent] += msg
    log_b: list[np.ndarray] = [np.empty(0)] * len(acc)
    prob: list[np.ndarray] = [np.empty(0)] * len(acc)
    log_z = 0.0
    for st in steps:
        b = acc[st.clique]
        if st.parent >= 0:
            down = sum_axes(prob[st.parent], st.down_axes).reshape(st.down_shape)
            if np.all(down > 0.0):
                np.log(down, out=down)
            else:  # a separator cell below 1e-308: its log from the parent's log belief
                down = _lse(log_b[st.parent], st.down_axes).reshape(st.down_shape)
            # The parent's belief is normalised and the separator's mass cancels
            # against the up message, so this belief already sums to one.
            b += down  # in place: acc holds copies of theta
            b -= up[st.clique].reshape(st.down_shape)
        else:
            z = _logsumexp_all(b)
            log_z += z
            b -= z
        log_b[st.clique] = b
        prob[st.clique] = np.exp(b)
    return log_b, prob, log_z


def _shifted_exp(a: np.ndarray, out: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """``exp(a - top)`` into one new array (or ``out``; no temporary) and ``top = max(a)``."""
    top = float(a.max())
    if not math.isfinite(top):
        top = 0.0
    out = np.subtract(a, top, out=out)
    np.exp(out, out=out)
    return out, top


def _scratch(tree: JunctionTree, dtype: np.dtype, kind: str = "acc") -> list[np.ndarray]:
    """Per-tree work arrays, one per clique, allocated once per dtype and ``kind`` (a cache on the frozen tree)."""
    caches = tree.__dict__.setdefault("_scratch_cache", {})
    key = np.dtype(dtype) if kind == "acc" else (np.dtype(dtype), kind)
    if key not in caches:
        caches[key] = [np.empty(tree.domain.shape(c), dtype=dtype) for c in tree.cliques]
    return caches[key]


def belief_buffers(tree: JunctionTree, dtype: np.dtype) -> list[np.ndarray]:
    """Arrays for :func:`calibrate_probs`'s beliefs (its ``out``), one per clique, kept on the tree:
    a caller that reads each calibration's beliefs before the next one needs no new arrays (the
    estimator: fresh arrays of this size cost about as much in page faults as the sums themselves)."""
    return _scratch(tree, dtype, "beliefs")


def calibrate_probs(tree: JunctionTree, theta: Sequence[np.ndarray],
                    out: Sequence[np.ndarray] | None = None) -> tuple[list[np.ndarray], float]:
    """Beliefs as probabilities and the log partition function, with one ``exp`` per cell:
    the estimator's inner loop, which needs no log beliefs.

    Up the tree each clique's table is exponentiated once (shifted by its maximum) and
    summed to its separator; down the tree a clique's belief is that same table times the
    parent's separator marginal over the up message's sum. A separator whose up sum
    underflows (below the smallest normal number) takes the exact log-space path for that
    clique. Runs in the potentials' dtype (float32 or float64). With ``out`` (one array per
    clique of that dtype, e.g. :func:`belief_buffers`) the beliefs are written there."""
    steps = _schedule(tree)
    dtype = np.result_type(*theta)
    theta = [t if t.dtype == dtype else t.astype(dtype) for t in theta]
    acc = _scratch(tree, dtype)  # theta plus incoming messages; reused between calls (never returned)
    pot = list(theta)  # each clique's theta plus the messages in so far: theta itself until the first
    tiny = np.finfo(dtype).tiny
    scaled: dict[int, np.ndarray] = {}  # exp(pot - max), kept for the way down
    sums: dict[int, np.ndarray] = {}  # its sum over the up axes, on the clique's shape
    logs: dict[int, np.ndarray] = {}  # the up message in log space, for the exact path
    for st in reversed(steps):
        p = st.parent
        if p < 0:
            continue
        a = pot[st.clique]
        e, top = _shifted_exp(a, None if out is None else out[st.clique])
        s = st.up_sum(e)
        # At least the smallest normal number, so down / s (down <= 1) cannot overflow.
        if s.min() >= tiny:
            scaled[st.clique], sums[st.clique] = e, s
            msg = np.log(s) + top
        else:  # the scalar shift underflowed: no need to try it again
            msg = _lse_per_cell(a, st.up_axes)
        logs[st.clique] = msg
        if pot[p] is theta[p]:  # the first message in: theta + msg written to the work array
            pot[p] = np.add(theta[p], msg.reshape(st.up_shape), out=acc[p])
        else:
            pot[p] += msg.reshape(st.up_shape)
    prob: list[np.ndarray] = [np.empty(0)] * len(pot)
    log_z = 0.0
    for st in steps:
        c = st.clique
        if st.parent < 0:
            e, top = _shifted_exp(pot[c], None if out is None else out[c])
            z = float(np.sum(e))
            log_z += math.log(z) + top
            prob[c] = np.multiply(e, 1.0 / z, out=e)
            continue
        down = st.down_sum(prob[st.parent])
        if c in scaled:
            ratio = np.divide(down, sums[c])
            prob[c] = np.multiply(scaled[c], ratio, out=scaled[c])
        else:
            with np.errstate(divide="ignore"):
                b = pot[c] + np.log(down) - logs[c].reshape(st.down_shape)
            prob[c] = np.exp(b, out=None if out is None else out[c])
    return prob, log_z


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
        calibrated by message passing (exact log beliefs; their probabilities kept for
        :attr:`beliefs`) and scaled to ``total`` records."""
        log_b, prob, _ = calibrate_full(tree, theta)
        model = cls(tree=tree, theta=tuple(theta), total=float(total), log_beliefs=tuple(log_b))
        model.__dict__["beliefs"] = tuple(prob)  # the cached_property, already computed
        return model

    @property
    def domain(self) -> Domain:
        """The domain of the model's junction tree."""
        return self.tree.domain

    @cached_property
    def beliefs(self) -> tuple[np.ndarray, ...]:
        """Every clique's belief as probabilities (``exp`` of ``log_beliefs``), computed once
        per model and shared by its queries and its sampler; treat as read-only."""
        return tuple(np.exp(b) for b in self.log_beliefs)

    def clique_marginal(self, i: int) -> np.ndarray:
        """Expected counts over clique ``i`` (``total`` times its belief), shaped by its
        columns' cardinalities in domain order."""
        return self.total * self.beliefs[i]

    def _conditional(self, i: int, parent: int) -> np.ndarray:
        """Clique ``i``'s belief given its separator with ``parent`` (zero where the
        separator has probability zero), cached per model: a round of AIM asks hundreds of
        queries of one model, and most share cliques."""
        cache = self.__dict__.setdefault("_conditionals", {})
        key = (i, parent)
        if key not in cache:
            cl, table = self.tree.cliques[i], self.beliefs[i]
            m = sum_axes(table, _axes_out(cl, self.tree.separator(i, parent)), keepdims=True)
            cache[key] = np.divide(table, m, out=np.zeros_like(table), where=m > 0)
        return cache[key]

    def project(self, attrs: Sequence[str]) -> np.ndarray:
        """Expected counts over ``attrs`` (in the order given), shaped by their cardinalities
        (products across cliques on one BLAS thread: :mod:`dpsynth.inference.blas`)."""
        with one_blas_thread():
            return self._project(attrs)

    def _project(self, attrs: Sequence[str]) -> np.ndarray:
        attrs = tuple(attrs)
        canon = self.domain.canonical(attrs)
        if len(canon) != len(attrs):
            raise ValueError(f"repeated column in {list(attrs)}")
        i = self.tree.containing(canon)
        if i is not None:
            cl = self.tree.cliques[i]
            table = sum_axes(self.clique_marginal(i), _axes_out(cl, canon))
        else:
            table = self.total * self._eliminate(canon)
        perm = [canon.index(a) for a in attrs]
        return np.transpose(table, perm)

    def project_many(self, queries: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """``project`` of every query, sharing the work of pairs whose two columns share no
        clique: those are answered by one walk over the tree per first column (on one BLAS
        thread: :mod:`dpsynth.inference.blas`)."""
        with one_blas_thread():
            return self._project_many(queries)

    def _project_many(self, queries: Sequence[Sequence[str]]) -> list[np.ndarray]:
        out: list[np.ndarray | None] = [None] * len(queries)
        across: dict[str, list[int]] = {}
        for k, q in enumerate(queries):
            if len(q) == 2 and q[0] != q[1] and self.tree.containing(q) is None:
                across.setdefault(q[0], []).append(k)
            else:
                out[k] = self._project(q)
        for a, ks in across.items():
            tables = self._pairs_with(a, {queries[k][1] for k in ks})
            for k in ks:
                out[k] = self.total * tables[queries[k][1]]
        return out  # type: ignore[return-value]

    def _pairs_with(self, a: str, wanted: set[str]) -> dict[str, np.ndarray]:
        """Probability tables (a, b) for every b in ``wanted``, walking the tree outwards from a
        clique holding ``a``: each clique receives P(a, separator with its parent), and its
        conditional given that separator, summed to the separator and one more column,
        gives that column's pair (and, summed to a child's separator, the child's message)."""
        tree, dom = self.tree, self.domain
        root = tree.containing((a,))
        parent, order = {root: -1}, [root]
        for i in order:
            for j in tree.neighbours(i):
                if j not in parent:
                    parent[j] = i
                    order.append(j)
        carried: dict[int, list[tuple[Clique, np.ndarray]]] = {root: []}
        found: dict[str, np.ndarray] = {}
        for i in order:
            base = carried.pop(i)
            sep = set(tree.separator(i, parent[i])) if parent[i] >= 0 else set()
            own = {a} & set(tree.cliques[i])
            for b in tree.cliques[i]:
                if b in wanted and b not in found:
                    cols, t = _contract(dom, base + [self._reduced(i, parent[i], sep | own | {b})], {a, b})
                    found[b] = np.transpose(t, [cols.index(a), cols.index(b)])
            if len(found) == len(wanted):
                break
            for j in tree.neighbours(i):
                if parent[j] == i:
                    keep = sep | own | set(tree.separator(i, j))
                    carried[j] = [_contract(dom, base + [self._reduced(i, parent[i], keep)], {a} | set(tree.separator(i, j)))]
        return found

    def _reduced(self, i: int, parent: int, keep: set[str]) -> tuple[Clique, np.ndarray]:
        """Clique ``i``'s conditional given its separator with ``parent`` (its belief for
        parent -1) summed to the columns in ``keep``, cached per model."""
        cache = self.__dict__.setdefault("_reductions", {})
        key = (i, parent, frozenset(keep))
        if key not in cache:
            cl = self.tree.cliques[i]
            table = self._conditional(i, parent) if parent >= 0 else self.beliefs[i]
            axes = _axes_out(cl, keep)
            cache[key] = (tuple(c for c in cl if c in keep), sum_axes(table, axes))
        return cache[key]

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
            table = self._conditional(i, parent[i]) if parent[i] >= 0 else self.beliefs[i]
            factors = [(cl, table)] + [carried.pop(j) for j in order if parent.get(j) == i]
            keep = set(tree.separator(i, parent[i])) if parent[i] >= 0 else set()
            carried[i] = _contract(dom, factors, keep | want)
        attrs, table = carried[root]
        return np.transpose(table, [attrs.index(a) for a in query])

    def sample(self, rows: int, rng: np.random.Generator, iid: bool = False,
               dtype: np.dtype | type = np.int64) -> np.ndarray:
        """``rows`` records as an (rows, columns) array of codes in domain order, of ``dtype``
        (a signed integer type holding every code; :func:`signed_code_dtype` is the smallest).

        Per clique in sampling order, the rows are grouped by their separator cell and each
        group's rows are split among the new columns' values by randomised rounding of their
        expected counts (:func:`allocate`: every count within one of rows x probability).
        ``iid``: every row drawn independently instead (for comparison only). Drawn column
        by column (:func:`~dpsynth.inference.sampling.sample_columns`), then transposed."""
        return np.ascontiguousarray(sample_columns(self, rows, rng, iid=iid, dtype=dtype).T)


def signed_code_dtype(cardinalities: Sequence[int]) -> np.dtype:
    """The smallest signed integer dtype holding codes ``-1 .. card-1`` of every column (the
    sample's fill value is -1): a small table's records take an eighth of int64's memory."""
    top = max(cardinalities, default=1)
    return next(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64) if top - 1 <= np.iinfo(t).max)


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
    """Product of labelled tables summed to their columns in ``keep`` (domain order): two
    tables by one batched matmul, more by einsum's pairwise path, so the full product is
    never built. A column that only one factor has and ``keep`` lacks is summed out of that
    factor first (one cheap pass)."""
    seen: dict[str, int] = {}
    for cl, _ in factors:
        for a in cl:
            seen[a] = seen.get(a, 0) + 1
    reduced = []
    for cl, t in factors:
        drop = tuple(k for k, a in enumerate(cl) if seen[a] == 1 and a not in keep)
        if drop:
            t = sum_axes(t, drop)
            cl = tuple(a for k, a in enumerate(cl) if k not in drop)
        reduced.append((cl, t))
    cols = dom.canonical(a for f in reduced for a in f[0])
    out = tuple(a for a in cols if a in keep)
    if len(reduced) == 2:
        (la, ta), (lb, tb) = reduced
        return out, _pair_product(la, ta, lb, tb, out)
    letter = {a: chr(ord("a") + k) if k < 26 else chr(ord("A") + k - 26) for k, a in enumerate(cols)}
    spec = ",".join("".join(letter[a] for a in f[0]) for f in reduced) + "->" + "".join(letter[a] for a in out)
    return out, np.einsum(spec, *(f[1] for f in reduced), optimize="greedy")


def _pair_product(la: Clique, ta: np.ndarray, lb: Clique, tb: np.ndarray, out: Clique) -> np.ndarray:
    """The product of two labelled tables summed to ``out`` (every column that only one of
    them has is in ``out``), as one batched matrix product: what einsum does for two
    operands, minus its per-call parsing, which dominated AIM's many small queries."""
    plan = _pair_plan(la, ta.shape, lb, tb.shape, out)
    a = np.transpose(ta, plan[0]).reshape(plan[1])
    b = np.transpose(tb, plan[2]).reshape(plan[3])
    return np.transpose(np.matmul(a, b).reshape(plan[4]), plan[5])


@lru_cache(maxsize=4096)
def _pair_plan(la: Clique, sa: tuple[int, ...], lb: Clique, sb: tuple[int, ...], out: Clique) -> tuple:
    """Axis orders and shapes for :func:`_pair_product`: A as (batch, own, summed), B as
    (batch, summed, own), their product back to ``out``'s order."""
    size = dict(zip(la, sa)) | dict(zip(lb, sb))
    batch = [c for c in la if c in lb and c in out]
    summed = [c for c in la if c in lb and c not in out]
    own_a = [c for c in la if c not in lb]
    own_b = [c for c in lb if c not in la]
    cells = lambda cs: math.prod(size[c] for c in cs)  # noqa: E731
    got = batch + own_a + own_b
    return (tuple(la.index(c) for c in batch + own_a + summed), (cells(batch), cells(own_a), cells(summed)),
            tuple(lb.index(c) for c in batch + summed + own_b), (cells(batch), cells(summed), cells(own_b)),
            tuple(size[c] for c in got), tuple(got.index(c) for c in out))
