"""The Private-PGM estimator: one consistent model from noisy marginals.

Given noisy measurements ``y_m`` of marginals over column sets ``c_m``, each with
per-cell noise standard deviation ``sigma_m``, it finds clique marginals ``mu`` of a
graphical model on the junction tree of the measured sets that minimise

    L(mu) = sum_m || mu_{c_m} - y_m ||^2 / (2 sigma_m^2)

(McKenna, Sheldon, Miklau 2019). ``mu`` is ``total`` times a distribution; ``total``
is the inverse-variance mean of the measurements' sums unless given.

Optimisation is entropic mirror descent on the clique potentials: a gradient step on
the log potentials, then belief propagation gives the new marginals, with Nesterov
momentum and adaptive restart (about ten times fewer iterations than plain mirror
descent at the same loss on the NIST tables). The step size is found by backtracking
(Armijo on the mirror step) and grows by half after each accepted step. Iteration stops when
the loss has not improved by a relative ``tol`` over ``patience`` accepted steps, or
(with ``noise_tol``) once those steps together gained less than that share of the noise's
expected loss, or after ``iters`` steps. A warm start (potentials of an earlier fit on a subset of the
cliques) is accepted, which the adaptive selection of ``pgm`` uses round after round.
With ``precision="single"`` the descent runs in float32 (the loss and its gradient in float64).

With ``cell_steps``, a fit on a junction tree small enough (its cells plus ``clique_cells`` per
clique, a step's fixed cost per clique, times ``most_iters`` within ``cell_steps``) runs all
``most_iters`` steps in float64 without the noise stop (:func:`scaled_options`), so that small
models converge where their steps cost little; larger trees keep their own options.

:func:`fit_to_target` goes on past those stops while some measured marginal's TVD against its
noisy target (clipped at 0, normalised) is above a limit the caller gives per marginal, up to a
step bound: ``pgm`` gives its released model the gate's thresholds, which shrink with the row
count while a fixed step cap leaves the fitting error where it is (docs/pgm.md, "The released
fit follows the gate").
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Literal, Mapping, NamedTuple, Sequence

import numpy as np

from .. import progress
from ..evaluation.metrics import clipped_distributions
from .junction_tree import Domain, JunctionTree, build_junction_tree
from .model import GraphicalModel, _einsum, _sum_spec, belief_buffers, calibrate_probs, expand
from .blas import fixed_dot

__all__ = ["Observation", "EstimatorOptions", "FitReport", "FitTarget", "estimate", "fit_to_target", "estimate_total", "fit_loss", "scaled_options"]

_SHOWN_ITERS = 200  # fits of at least this many steps report them (shorter refits stay quiet)


def _show_step(step: int, iters: int) -> None:
    """A long fit's progress, every 25 steps (:mod:`dpsynth.progress`; silent by default)."""
    if iters >= _SHOWN_ITERS and step % 25 == 0:
        progress.count("fitting the model", step, iters, "steps (at most)")


@dataclass(frozen=True, kw_only=True)
class Observation:
    """A noisy marginal: counts over the cross-product of ``attrs`` (C order), noise sd.

    ``weights`` (None: all 1): per cell, its inverse variance relative to ``stddev``^-2
    (a cell summing k cells of noise sd ``stddev`` has weight 1/k)."""

    attrs: tuple[str, ...]
    counts: np.ndarray
    stddev: float
    weights: np.ndarray | None = None

    def __post_init__(self) -> None:
        if not self.attrs:
            raise ValueError("an observation needs at least one column")
        if not (np.isfinite(self.stddev) and self.stddev > 0):
            raise ValueError(f"observation {list(self.attrs)}: stddev must be > 0, got {self.stddev!r}")
        if not np.all(np.isfinite(self.counts)):
            raise ValueError(f"observation {list(self.attrs)}: counts must be finite")
        if self.weights is not None:
            w = np.asarray(self.weights, dtype=np.float64)
            if w.size != np.asarray(self.counts).size or not np.all(np.isfinite(w) & (w > 0)):
                raise ValueError(f"observation {list(self.attrs)}: weights must be > 0, one per cell")

    def variance(self) -> np.ndarray:
        """Each cell's noise variance, shaped like ``counts``."""
        w = 1.0 if self.weights is None else np.asarray(self.weights, dtype=np.float64).reshape(np.shape(self.counts))
        return np.broadcast_to(self.stddev**2 / w, np.shape(self.counts))


@dataclass(frozen=True, kw_only=True)
class EstimatorOptions:
    """Iteration budget and stopping rule of the mirror descent."""

    iters: int = 1000
    tol: float = 1e-5
    patience: int = 10
    #: Also stop when the last ``patience`` accepted steps together lowered the loss by less
    #: than ``noise_tol`` times the noise's own expected loss (half the measured cells; the
    #: loss of the true table): later steps only fit the noise closer. None: off.
    noise_tol: float | None = None
    max_cells: int = 10_000_000
    growth: float = 1.5
    accelerate: bool = True
    #: "double" (float64) or "single": float32 potentials and beliefs inside the descent
    #: (losses still summed in float64), about twice as fast; the fitted model is float64.
    precision: Literal["double", "single"] = "double"
    #: Steps by the model's size (None: off): a tree of size S with S x ``most_iters`` <=
    #: ``cell_steps`` runs ``most_iters`` float64 steps without the noise stop (:func:`scaled_options`).
    cell_steps: float | None = None
    most_iters: int = 1000
    #: A step's fixed cost per clique, in cells (the size S counts it once per clique).
    clique_cells: int = 100

    def __post_init__(self) -> None:
        if self.iters < 1:
            raise ValueError("iters must be >= 1")
        if self.most_iters < 1:
            raise ValueError("most_iters must be >= 1")
        if self.cell_steps is not None and not (self.cell_steps > 0):
            raise ValueError("cell_steps must be > 0 or None")
        if self.clique_cells < 0:
            raise ValueError("clique_cells must be >= 0")
        if not (self.growth >= 1.0):
            raise ValueError("growth must be >= 1")
        if self.noise_tol is not None and not (self.noise_tol >= 0.0):
            raise ValueError("noise_tol must be >= 0 or None")
        if self.precision not in ("double", "single"):
            raise ValueError(f"precision must be 'double' or 'single', got {self.precision!r}")


@dataclass(frozen=True)
class FitTarget:
    """Keep fitting past the stop rules while some measured marginal is too far from its target.

    ``limits``: per measured column set (any order), the largest TVD the model's marginal may
    have against that observation's noisy counts clipped at 0 and normalised; sets not named
    have none. ``most_steps``: the fit's step attempts in all, the stop rules' included (a
    bound, never a clock: the result is a function of the inputs)."""

    limits: Mapping[frozenset[str], float]
    most_steps: int
    #: Also stop once the best largest ratio to a limit has fallen by less than ``min_gain``
    #: (relative) over the last ``window`` accepted steps: the fit has reached what the noisy,
    #: mutually inconsistent marginals allow under the estimator's loss. The state of the best
    #: ratio is the one returned (that ratio is not monotone in the steps).
    window: int = 300
    min_gain: float = 0.01

    def __post_init__(self) -> None:
        if self.most_steps < 1:
            raise ValueError("most_steps must be >= 1")
        if self.window < 1 or not (0.0 <= self.min_gain < 1.0):
            raise ValueError("window must be >= 1 and min_gain in [0, 1)")
        bad = [sorted(k) for k, v in self.limits.items() if not (v >= 0.0)]
        if bad:
            raise ValueError(f"limits must be >= 0: {bad}")


@dataclass(frozen=True)
class FitReport:
    """What a fit to a :class:`FitTarget` did: step attempts in all, those past the stop rules,
    the largest ratio of a marginal's TVD to its limit before and after them, and the bound."""

    steps: int
    extra_steps: int
    ratio_at_stop: float
    ratio: float
    most_steps: int

    @property
    def met(self) -> bool:
        """Whether every limited marginal ended within its limit."""
        return self.ratio <= 1.0


@dataclass
class _Term:
    clique: int
    attrs: tuple[str, ...]  # domain order
    target: np.ndarray  # shaped by attrs, domain order
    weight: float | np.ndarray  # 1 / sigma^2 (per cell, shaped as target, for a weighted observation)
    axes: tuple[int, ...] = field(default=())
    # An earlier term of the same clique whose columns hold this one's (-1: none): this
    # term's marginal is summed from that smaller table, and its gradient folded into it.
    source: int = -1
    source_axes: tuple[int, ...] = field(default=())


@dataclass(frozen=True)
class _Layout:
    """The terms laid end to end in one flat vector, so that the loss, the marginals' error
    and the gradient are a few vector operations rather than several per term."""

    terms: tuple[_Term, ...]
    bounds: tuple[tuple[int, int], ...]
    target: np.ndarray  # flat, float64
    weight: np.ndarray  # flat: each cell's 1 / sigma^2
    # Per term, worked out once: (start, end, shape, the einsum spec of its sum or None, its
    # source term or -1, its clique) for the marginals; (start, end, shape broadcast on its
    # source or clique, source start, source end, source shape or None) for the gradient.
    sums: tuple[tuple, ...] = ()
    folds: tuple[tuple, ...] = ()

    @classmethod
    def of(cls, terms: list[_Term], tree: JunctionTree | None = None) -> "_Layout":
        ends = np.cumsum([t.target.size for t in terms]).tolist()
        bounds = tuple(zip([0] + ends[:-1], ends))
        target = np.concatenate([t.target.ravel() for t in terms]).astype(np.float64)
        weight = np.concatenate([np.broadcast_to(np.asarray(t.weight, dtype=np.float64), t.target.shape).ravel()
                                 for t in terms])
        sums, folds = [], []
        for (a, b), t in zip(bounds, terms):
            axes = t.source_axes if t.source >= 0 else t.axes
            ndim = len(terms[t.source].attrs) if t.source >= 0 else t.target.ndim + len(t.axes)
            sums.append((a, b, t.target.shape, _sum_spec(ndim, tuple(sorted(axes))) if axes else None, t.source, t.clique))
            if t.source >= 0:
                held = terms[t.source]
                sa, sb = bounds[t.source]
                folds.append((a, b, expand(t.target, t.attrs, held.attrs).shape, sa, sb, held.target.shape))
            elif tree is not None:
                folds.append((a, b, expand(t.target, t.attrs, tree.cliques[t.clique]).shape, 0, 0, None))
        return cls(tuple(terms), bounds, target, weight, tuple(sums), tuple(folds) if tree is not None else ())

    def view(self, flat: np.ndarray, k: int) -> np.ndarray:
        """Term k's slice of a flat vector, shaped as its table."""
        a, b = self.bounds[k]
        return flat[a:b].reshape(self.terms[k].target.shape)


def scaled_options(opts: EstimatorOptions, cells: int, cliques: int = 0) -> EstimatorOptions:
    """The options a fit on a junction tree of ``cells`` cells in ``cliques`` cliques runs with.

    Without ``cell_steps``: ``opts`` unchanged. Otherwise, with the tree's size
    S = ``cells`` + ``clique_cells`` x ``cliques`` and T = max(``iters``, ``most_iters``): a
    tree small enough for T steps within the budget (S x T <= ``cell_steps``) is fitted with
    T steps, in float64, without the noise stop (only the relative ``tol`` stop remains; its
    whole fit costs at most ``cell_steps`` cell-steps). Every larger tree keeps ``opts``
    exactly: its own cap, noise stop and precision. (Giving trees in between
    ``cell_steps / S`` steps and a noise stop scaled down by as much made AIM worse on the
    tuning half at epsilon 10 and on nist-tx2019 at every epsilon; docs/pgm.md.)"""
    if opts.cell_steps is None:
        return opts
    size = max(cells + opts.clique_cells * cliques, 1)
    top = max(opts.iters, opts.most_iters)
    if size * top <= opts.cell_steps:
        return replace(opts, iters=top, noise_tol=None, precision="double")
    return opts


def estimate_total(observations: Sequence[Observation]) -> float:
    """Inverse-variance weighted mean of the observations' sums (at least 1)."""
    sums = np.array([float(np.sum(o.counts)) for o in observations])
    var = np.array([o.counts.size * o.stddev**2 if o.weights is None else float(o.variance().sum())
                    for o in observations])
    return max(1.0, float(np.sum(sums / var) / np.sum(1.0 / var)))


def _terms(domain: Domain, tree: JunctionTree, observations: Sequence[Observation]) -> list[_Term]:
    terms = []
    for o in observations:
        canon = domain.canonical(o.attrs)
        if len(canon) != len(o.attrs):
            raise ValueError(f"observation {list(o.attrs)} repeats a column")
        counts = np.asarray(o.counts, dtype=np.float64)
        if counts.shape != domain.shape(o.attrs):
            counts = counts.reshape(domain.shape(o.attrs))
        perm = [o.attrs.index(a) for a in canon]
        target = np.transpose(counts, perm)
        weight = 1.0 / o.stddev**2 if o.weights is None else np.transpose(1.0 / o.variance().reshape(counts.shape), perm)
        i = tree.containing(canon)
        assert i is not None, "every measured set lies in a junction-tree clique"
        cl = tree.cliques[i]
        axes = tuple(k for k, a in enumerate(cl) if a not in set(canon))
        terms.append(_Term(clique=i, attrs=canon, target=target, weight=weight, axes=axes))
    terms.sort(key=lambda t: (t.clique, -t.target.size))
    sets, first = [frozenset(t.attrs) for t in terms], 0
    for k, t in enumerate(terms):
        if k and terms[k - 1].clique != t.clique:
            first = k  # a clique's terms are consecutive: only they can hold this one
        holders = [j for j in range(first, k) if sets[k] <= sets[j]]
        if holders:
            j = min(holders, key=lambda j: terms[j].target.size)
            t.source = j
            t.source_axes = tuple(x for x, a in enumerate(terms[j].attrs) if a not in set(t.attrs))
    return terms


def _evaluate(layout: _Layout, beliefs: list[np.ndarray], total: float) -> tuple[float, np.ndarray, np.ndarray]:
    """Loss, the terms' probability marginals and the loss gradient w.r.t. them (flat, as
    laid out by ``layout``), from the cliques' beliefs as probabilities."""
    probs = np.empty(layout.target.size, dtype=np.result_type(*beliefs))
    views: list[np.ndarray] = []
    for a, b, shape, spec, source, clique in layout.sums:  # sum_axes of the source, into the term's slice
        out = probs[a:b].reshape(shape)
        views.append(out)
        src = views[source] if source >= 0 else beliefs[clique]
        if spec is None:
            np.copyto(out, src)
        else:
            _einsum(spec, src, out=out)
    diff = np.multiply(probs, total, dtype=np.float64)
    diff -= layout.target
    grad = diff * layout.weight
    loss = 0.5 * fixed_dot(grad, diff)
    grad *= total
    return loss, probs, grad


def fit_loss(model: GraphicalModel, observations: Sequence[Observation]) -> float:
    """The estimator's objective at ``model`` (for tests and diagnostics)."""
    layout = _Layout.of(_terms(model.domain, model.tree, observations))
    return _evaluate(layout, list(model.beliefs), model.total)[0]


def estimate(
    domain: Domain,
    observations: Sequence[Observation],
    *,
    total: float | None = None,
    options: EstimatorOptions | None = None,
    extra_cliques: Iterable[Sequence[str]] = (),
    warm: GraphicalModel | None = None,
) -> GraphicalModel:
    """Fits a graphical model to ``observations`` (see the module docstring).

    ``extra_cliques`` are added to the junction tree without a measurement (so later
    queries on them are exact). Raises :class:`ModelTooLarge` before any work when the
    tree's largest clique exceeds ``options.max_cells``.
    """
    return _fit(domain, observations, total, options, extra_cliques, warm, None)[0]


def fit_to_target(
    domain: Domain,
    observations: Sequence[Observation],
    target: FitTarget,
    *,
    total: float | None = None,
    options: EstimatorOptions | None = None,
) -> tuple[GraphicalModel, FitReport]:
    """:func:`estimate`, then more steps while some marginal named in ``target`` has a TVD
    above its limit and the largest ratio to a limit still falls (at most
    ``target.most_steps`` attempts in all; stops early if the step size collapses). A fit already within every limit when the stop rules end it is the
    same model :func:`estimate` returns, bit for bit."""
    model, report = _fit(domain, observations, total, options, (), None, target)
    assert report is not None
    return model, report


def _fit(domain: Domain, observations: Sequence[Observation], total: float | None,
         options: EstimatorOptions | None, extra_cliques: Iterable[Sequence[str]],
         warm: GraphicalModel | None, target: FitTarget | None) -> tuple[GraphicalModel, FitReport | None]:
    opts = options or EstimatorOptions()
    if not observations:
        raise ValueError("the estimator needs at least one observation")
    cliques = [o.attrs for o in observations] + [tuple(c) for c in extra_cliques]
    tree = build_junction_tree(domain, cliques, max_cells=opts.max_cells)
    opts = scaled_options(opts, tree.total_cells(), len(tree.cliques))
    terms = _terms(domain, tree, observations)
    n = estimate_total(observations) if total is None else float(total)
    dtype = np.float32 if opts.precision == "single" else np.float64
    theta = [th.astype(dtype, copy=False) for th in _initial(tree, warm)]
    descent = _Descent(tree, _Layout.of(terms, tree), n, theta, opts)
    steps, collapsed, stale = _descend(descent, opts)
    report = None if target is None else _fit_further(descent, target, steps, collapsed, stale)
    model = GraphicalModel.from_potentials(tree, [th.astype(np.float64, copy=False) for th in descent.x.theta], n)
    return model, report


class _Misfit:
    """The largest ratio of a term's TVD (its model marginal against its clipped, normalised
    target) to its limit, in a few vector passes over the flat layout."""

    def __init__(self, layout: _Layout, limits: Mapping[frozenset[str], float]) -> None:
        sizes = np.array([t.target.size for t in layout.terms], dtype=np.int64)
        self.starts = np.array([a for a, _ in layout.bounds], dtype=np.int64)
        self.q = clipped_distributions(layout.target, self.starts, sizes)
        self.limit = np.array([limits.get(frozenset(t.attrs), np.inf) for t in layout.terms], dtype=np.float64)

    def ratio(self, probs: np.ndarray) -> float:
        """Largest TVD / limit over the limited terms (0 when none is limited)."""
        if not np.isfinite(self.limit).any():
            return 0.0
        tvd = 0.5 * np.add.reduceat(np.abs(probs.astype(np.float64) - self.q), self.starts)
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(self.limit > 0, tvd / self.limit, np.where(tvd > 0, np.inf, 0.0))
        return float(np.max(np.where(np.isfinite(self.limit), r, 0.0)))


def _fit_further(descent: "_Descent", target: FitTarget, steps: int, collapsed: bool, stale: bool) -> FitReport:
    """Steps past the stop rules until every limited term is within its limit, the best largest
    ratio stops falling (``target.window``, ``target.min_gain``), the step size collapses or
    ``target.most_steps`` attempts have been made in all; the state of the best ratio is kept."""
    misfit = _Misfit(descent.layout, target.limits)
    first = ratio = misfit.ratio(descent.x.probs)
    done = steps
    if ratio <= 1.0 or collapsed or done >= target.most_steps:
        return FitReport(steps=done, extra_steps=0, ratio_at_stop=first, ratio=ratio,
                         most_steps=target.most_steps)
    if stale:
        descent.extrapolate()
    best, kept = ratio, descent.x
    bests = [best]  # the best ratio so far, after each accepted step
    while done < target.most_steps:
        _show_step(done, target.most_steps)
        done += 1
        accepted = descent.attempt()
        if accepted is None:
            break
        if accepted:
            ratio = misfit.ratio(descent.x.probs)
            if ratio < best:  # states are never changed in place: keeping one costs nothing
                best, kept = ratio, descent.x
            bests.append(best)
            if best <= 1.0 or (len(bests) > target.window
                               and best > (1.0 - target.min_gain) * bests[-1 - target.window]):
                break
            descent.extrapolate()
    descent.x = kept  # the worst marginal's TVD is not monotone in the steps: the best state is released
    return FitReport(steps=done, extra_steps=done - steps, ratio_at_stop=first, ratio=best,
                     most_steps=target.most_steps)


class _State(NamedTuple):
    """A point of the descent: potentials, loss, the terms' probabilities, the loss gradient."""

    theta: list[np.ndarray]
    loss: float
    probs: np.ndarray
    grad: np.ndarray


def _idle_refs() -> int:
    """What :meth:`_Pool.take` reads as the reference count of an array nothing else holds
    (measured the same way, so it holds on any interpreter)."""
    held = [np.empty(0)]
    for arr in held:
        return sys.getrefcount(arr)
    raise AssertionError  # pragma: no cover


class _Pool:
    """New potentials' arrays, one list per clique, each reused once no state (nor any view of it)
    refers to it any more: a step's fresh arrays of the cliques' size cost as much in page faults
    as the arithmetic on them. The values written are the same; only where they live changes."""

    def __init__(self, tree: JunctionTree, dtype: np.dtype) -> None:
        self.shapes = [tree.domain.shape(c) for c in tree.cliques]
        self.dtype = dtype
        self.arrays: list[list[np.ndarray]] = [[] for _ in tree.cliques]
        self.idle = _idle_refs()

    def take(self, i: int) -> np.ndarray:
        """An array for clique ``i``'s potentials that nothing else refers to."""
        for arr in self.arrays[i]:
            if sys.getrefcount(arr) <= self.idle:
                return arr
        arr = np.empty(self.shapes[i], dtype=self.dtype)
        self.arrays[i].append(arr)
        return arr


class _Descent:
    """Accelerated mirror descent on the log potentials, one step attempt at a time.

    The gradient step is taken from an extrapolated point ``y = x + beta (x - x_prev)``
    (Nesterov momentum on the log potentials, beta = k / (k + 3)); a step is accepted
    when it satisfies the Armijo condition of the mirror step at ``y``; momentum restarts
    (k = 0) whenever an accepted step raises the loss above the previous iterate's.
    A state is a :class:`_State`; states are never changed in place.
    """

    def __init__(self, tree: JunctionTree, layout: _Layout, n: float, theta: list[np.ndarray],
                 opts: EstimatorOptions) -> None:
        self.tree, self.layout, self.n, self.opts = tree, layout, n, opts
        per_clique = np.zeros(len(tree.cliques))
        for t in layout.terms:
            per_clique[t.clique] += float(np.max(t.weight))
        # Relative smoothness of the loss against the entropy: n^2 * sum of weights per clique.
        self.alpha0 = 1.0 / (n * n * float(per_clique.max()))
        self.alpha = self.alpha0
        dtype = np.result_type(*theta)
        self.pool = _Pool(tree, dtype)
        self.beliefs = belief_buffers(tree, dtype)  # each state's beliefs, read before the next state's
        self.x = self.y = self.state(theta)
        self.prev_theta, self.k = self.x.theta, 0

    def state(self, th: list[np.ndarray]) -> _State:
        """The state at potentials ``th``."""
        prob, _ = calibrate_probs(self.tree, th, self.beliefs)
        return _State(th, *_evaluate(self.layout, prob, self.n))

    def _gradient_step(self, th: list[np.ndarray], grad: np.ndarray, alpha: float) -> list[np.ndarray]:
        terms, folds = self.layout.terms, self.layout.folds
        acc = grad.copy()
        order = range(len(terms) - 1, -1, -1)  # a term's source comes before it
        for k in order:  # every term's gradient folded into its source's, last first
            a, b, shape, sa, sb, held_shape = folds[k]
            if held_shape is not None:
                held = acc[sa:sb].reshape(held_shape)
                held += acc[a:b].reshape(shape)
        steps = (alpha * acc).astype(self.pool.dtype)  # each cell as alpha * g would be, term by term
        out, fresh = list(th), set()
        for k in order:
            a, b, shape, _, _, held_shape = folds[k]
            if held_shape is not None:
                continue
            c = terms[k].clique
            step = steps[a:b].reshape(shape)
            if c in fresh:
                out[c] -= step
            else:  # the first term of its clique writes a new array; untouched cliques are shared
                out[c] = np.subtract(th[c], step, out=self.pool.take(c))
                fresh.add(c)
        return out

    def attempt(self) -> bool | None:
        """One step from ``y``: True if accepted (``x`` moves), False if the step size was
        halved instead, None once the step size has collapsed (the descent is over)."""
        y = self.y
        new = self.state(self._gradient_step(y.theta, y.grad, self.alpha))
        decrease = fixed_dot(y.grad, y.probs - new.probs)
        if not (y.loss - new.loss >= 0.5 * decrease and decrease >= 0.0):
            self.alpha *= 0.5
            return None if self.alpha < 1e-12 * self.alpha0 else False
        self.alpha *= self.opts.growth
        if new.loss > self.x.loss:
            self.k, self.prev_theta = 0, new.theta  # restart: drop the momentum
        else:
            self.k, self.prev_theta = self.k + 1, self.x.theta
        self.x = new
        return True

    def extrapolate(self) -> None:
        """The next step's starting point ``y`` (after an accepted step)."""
        if self.opts.accelerate and self.k > 0:
            beta = self.k / (self.k + 3.0)
            self.y = self.y._replace(theta=None)  # the old y's arrays are free for the new one
            self.y = self.state([_extrapolate(a, b, beta, self.pool.take(i))
                                 for i, (a, b) in enumerate(zip(self.x.theta, self.prev_theta))])
        else:
            self.y = self.x


def _descend(descent: _Descent, opts: EstimatorOptions) -> tuple[int, bool, bool]:
    """The fit under the stop rules of the module docstring: (step attempts, whether the step
    size collapsed, whether ``y`` is stale: a stop right after an accepted step)."""
    best, stall = descent.x.loss, 0
    # The noise's expected loss: each measured cell contributes (noise / sigma)^2 / 2 = 1/2.
    floor = None if opts.noise_tol is None else opts.noise_tol * 0.5 * descent.layout.target.size
    history = [best]
    for step in range(opts.iters):
        _show_step(step, opts.iters)
        accepted = descent.attempt()
        if accepted is None:
            return step + 1, True, False
        if not accepted:
            continue
        x = descent.x
        if best - x.loss <= opts.tol * max(best, 1e-300):
            stall += 1
            if stall >= opts.patience:
                return step + 1, False, True
        else:
            stall = 0
        best = min(best, x.loss)
        history.append(best)
        if floor is not None and len(history) > opts.patience and history[-1 - opts.patience] - best < floor:
            return step + 1, False, True
        descent.extrapolate()
    return opts.iters, False, False


def _extrapolate(a: np.ndarray, b: np.ndarray, beta: float, out: np.ndarray | None = None) -> np.ndarray:
    """``a + beta (a - b)`` into one new array (or ``out``; no temporaries)."""
    out = np.subtract(a, b, out=out)
    out *= beta
    out += a
    return out


def _initial(tree: JunctionTree, warm: GraphicalModel | None) -> list[np.ndarray]:
    """Zero potentials, or a warm start folded into the new tree's cliques."""
    dom = tree.domain
    theta = [np.zeros(dom.shape(c)) for c in tree.cliques]
    if warm is None:
        return theta
    for c, th in zip(warm.tree.cliques, warm.theta):
        i = tree.containing(c)
        if i is None:
            return [np.zeros(dom.shape(c)) for c in tree.cliques]
        theta[i] = theta[i] + expand(th, c, tree.cliques[i])
    return theta


def options_from(mapping: dict[str, Any] | None) -> EstimatorOptions:
    """EstimatorOptions from a mapping of its field names (None or empty: the defaults);
    an unknown key raises TypeError."""
    return EstimatorOptions(**(mapping or {}))
