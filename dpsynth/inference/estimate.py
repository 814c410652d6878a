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
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Literal, Sequence

import numpy as np

from .. import progress
from .junction_tree import Domain, JunctionTree, build_junction_tree
from .model import GraphicalModel, calibrate_probs, expand, sum_axes

__all__ = ["Observation", "EstimatorOptions", "estimate", "estimate_total", "fit_loss", "scaled_options"]

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

    @classmethod
    def of(cls, terms: list[_Term]) -> "_Layout":
        ends = np.cumsum([t.target.size for t in terms]).tolist()
        bounds = tuple(zip([0] + ends[:-1], ends))
        target = np.concatenate([t.target.ravel() for t in terms]).astype(np.float64)
        weight = np.concatenate([np.broadcast_to(np.asarray(t.weight, dtype=np.float64), t.target.shape).ravel()
                                 for t in terms])
        return cls(tuple(terms), bounds, target, weight)

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
    for k, t in enumerate(terms):
        holders = [j for j in range(k) if terms[j].clique == t.clique and set(t.attrs) <= set(terms[j].attrs)]
        if holders:
            j = min(holders, key=lambda j: terms[j].target.size)
            t.source = j
            t.source_axes = tuple(x for x, a in enumerate(terms[j].attrs) if a not in set(t.attrs))
    return terms


def _evaluate(layout: _Layout, beliefs: list[np.ndarray], total: float) -> tuple[float, np.ndarray, np.ndarray]:
    """Loss, the terms' probability marginals and the loss gradient w.r.t. them (flat, as
    laid out by ``layout``), from the cliques' beliefs as probabilities."""
    probs = np.empty(layout.target.size, dtype=np.result_type(*beliefs))
    for k, t in enumerate(layout.terms):
        src, axes = (layout.view(probs, t.source), t.source_axes) if t.source >= 0 else (beliefs[t.clique], t.axes)
        sum_axes(src, axes, out=layout.view(probs, k))
    diff = np.multiply(probs, total, dtype=np.float64)
    diff -= layout.target
    grad = diff * layout.weight
    loss = 0.5 * float(np.dot(grad, diff))
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
    fitted = _descend(tree, _Layout.of(terms), n, theta, opts)
    return GraphicalModel.from_potentials(tree, [th.astype(np.float64, copy=False) for th in fitted], n)


def _descend(
    tree: JunctionTree, layout: _Layout, n: float, theta: list[np.ndarray], opts: EstimatorOptions
) -> list[np.ndarray]:
    """The fitted log potentials, by accelerated mirror descent with backtracking and
    adaptive restart.

    The gradient step is taken from an extrapolated point ``y = x + beta (x - x_prev)``
    (Nesterov momentum on the log potentials, beta = k / (k + 3)); a step is accepted
    when it satisfies the Armijo condition of the mirror step at ``y``; momentum restarts
    (k = 0) whenever an accepted step raises the loss above the previous iterate's.
    """
    terms = layout.terms

    def state(th: list[np.ndarray]):
        prob, _ = calibrate_probs(tree, th)
        return (th, prob) + _evaluate(layout, prob, n)

    def gradient_step(th: list[np.ndarray], grad: np.ndarray, alpha: float) -> list[np.ndarray]:
        acc = grad.copy()
        out, fresh = list(th), set()
        for k in reversed(range(len(terms))):  # a term's source comes before it
            t = terms[k]
            g = layout.view(acc, k)
            if t.source >= 0:
                held = layout.view(acc, t.source)
                held += expand(g, t.attrs, terms[t.source].attrs)
                continue
            step = expand((alpha * g).astype(th[t.clique].dtype), t.attrs, tree.cliques[t.clique])
            if t.clique in fresh:
                out[t.clique] -= step
            else:  # the first term of its clique writes a new array; untouched cliques are shared
                out[t.clique] = th[t.clique] - step
                fresh.add(t.clique)
        return out

    per_clique = np.zeros(len(tree.cliques))
    for t in terms:
        per_clique[t.clique] += float(np.max(t.weight))
    # Relative smoothness of the loss against the entropy: n^2 * sum of weights per clique.
    alpha0 = 1.0 / (n * n * float(per_clique.max()))
    alpha = alpha0
    x = state(theta)
    prev_theta, k = x[0], 0
    best, stall = x[2], 0
    # The noise's expected loss: each measured cell contributes (noise / sigma)^2 / 2 = 1/2.
    floor = None if opts.noise_tol is None else opts.noise_tol * 0.5 * layout.target.size
    history = [best]
    y = x
    for step in range(opts.iters):
        _show_step(step, opts.iters)
        new = state(gradient_step(y[0], y[4], alpha))
        decrease = float(np.dot(y[4], y[3] - new[3]))
        if not (y[2] - new[2] >= 0.5 * decrease and decrease >= 0.0):
            alpha *= 0.5
            if alpha < 1e-12 * alpha0:
                break
            continue
        alpha *= opts.growth
        if new[2] > x[2]:
            k, prev_theta = 0, new[0]  # restart: drop the momentum
        else:
            k, prev_theta = k + 1, x[0]
        x = new
        if best - x[2] <= opts.tol * max(best, 1e-300):
            stall += 1
            if stall >= opts.patience:
                break
        else:
            stall = 0
        best = min(best, x[2])
        history.append(best)
        if floor is not None and len(history) > opts.patience and history[-1 - opts.patience] - best < floor:
            break
        if opts.accelerate and k > 0:
            beta = k / (k + 3.0)
            y = state([_extrapolate(a, b, beta) for a, b in zip(x[0], prev_theta)])
        else:
            y = x
    return list(x[0])


def _extrapolate(a: np.ndarray, b: np.ndarray, beta: float) -> np.ndarray:
    """``a + beta (a - b)`` into one new array (no temporaries)."""
    out = np.subtract(a, b)
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
