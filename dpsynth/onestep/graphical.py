"""The two-way log-linear model on a junction tree, for tables too large to hold whole.

The paper's categorical model is hierarchical log-linear with every main effect and a set
of two-way interactions. Held as its full contingency table (:mod:`.loglinear`) it is
limited to small tables; here it is a graphical model on the junction tree of its
interaction graph (``dpsynth/inference``), so time and memory follow the tree's cliques.

* Which interactions: :func:`select_pairs`, from public domain sizes only. Every pair when
  the complete graph's tree (the full table) fits in ``max_cells``; otherwise pairs are
  added smallest table first (ties in column order) while the triangulated graph's
  junction tree stays within ``max_cells`` cells in all.
* theta (mean parametrisation) is the concatenation of the model's 1- and 2-way marginal
  probabilities; T of a sample is its empirical marginals.
* Fitting marginals (the DP estimate from noisy ones, and Proj) is the Private-PGM
  estimator (:func:`dpsynth.inference.estimate`): mirror descent on log potentials, which
  only ever adds terms over the measured sets, so the fit stays inside the two-way model.
  With equal weights it is the Euclidean projection of theta onto the model's marginals.
* G(theta, omega) samples records column by column (the Rosenblatt transform): each column
  by inverse CDF of its conditional given the columns drawn before it in its clique and
  separator, with its own column of uniforms in omega. A small change of theta moves few
  records, which one step needs (inverse CDF over the cells of one large table in C order
  does not: its cumulative sums drift over the cells, and every later record moves).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..inference import Domain, EstimatorOptions, GraphicalModel, Observation, estimate
from ..inference.junction_tree import triangulate

__all__ = ["model_cells", "select_pairs", "TreeLogLinear"]


def model_cells(domain: Domain, pairs: Sequence[tuple[str, str]]) -> int:
    """Cells of the junction tree of the model with main effects and ``pairs``."""
    return sum(domain.cells(c) for c in triangulate(domain, [(n,) for n in domain.names] + list(pairs)))


def select_pairs(domain: Domain, max_cells: int) -> list[tuple[str, str]]:
    """Two-way interactions of the model (see the module docstring); public sizes only."""
    names = domain.names
    every = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    if math.prod(domain.sizes) <= max_cells:
        return every
    chosen: list[tuple[str, str]] = []
    for pair in sorted(every, key=lambda p: (domain.cells(p), names.index(p[0]), names.index(p[1]))):
        if domain.cells(pair) <= max_cells and model_cells(domain, chosen + [pair]) <= max_cells:
            chosen.append(pair)
    return sorted(chosen, key=lambda p: (names.index(p[0]), names.index(p[1])))


@dataclass(frozen=True, kw_only=True)
class TreeLogLinear:
    """Two-way log-linear model over ``domain`` with interactions ``pairs``; an engine ``Model``.

    ``sets`` lists the 1-way then the 2-way column sets: theta concatenates their marginal
    probabilities. ``total`` scales the equal-weight fits of Proj (any positive number).
    """

    domain: Domain
    pairs: tuple[tuple[str, str], ...]
    options: EstimatorOptions = EstimatorOptions(iters=300, tol=1e-5, patience=10, max_cells=50_000_000)
    total: float = 1e4
    sets: tuple[tuple[str, ...], ...] = field(init=False)
    _models: dict[bytes, GraphicalModel] = field(init=False, default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sets", tuple((n,) for n in self.domain.names) + tuple(self.pairs))

    # --- theta <-> models ---------------------------------------------------------------
    def split(self, theta: np.ndarray) -> list[np.ndarray]:
        """theta cut into one marginal table per set of ``sets``."""
        sizes = [self.domain.cells(s) for s in self.sets]
        parts = np.split(np.asarray(theta, dtype=np.float64), np.cumsum(sizes)[:-1])
        return [p.reshape(self.domain.shape(s)) for p, s in zip(parts, self.sets)]

    def theta_of(self, model: GraphicalModel) -> np.ndarray:
        """The model's marginals (remembered, so that G(theta) reuses the model)."""
        theta = np.concatenate([model.project(s).ravel() / model.total for s in self.sets])
        self._models.clear()
        self._models[theta.tobytes()] = model
        return theta

    def fit(self, observations: Sequence[Observation], total: float,
            warm: GraphicalModel | None = None) -> GraphicalModel:
        """The model nearest to noisy marginals (weighted by their stddevs)."""
        return estimate(self.domain, list(observations), total=total, options=self.options,
                        extra_cliques=self.sets, warm=warm)

    def model(self, theta: np.ndarray) -> GraphicalModel:
        """The model with marginals theta: the remembered one, else the equal-weight fit."""
        known = self._models.get(np.asarray(theta, dtype=np.float64).tobytes())
        return known if known is not None else self._equal_weight_fit(theta)

    def _equal_weight_fit(self, theta: np.ndarray) -> GraphicalModel:
        obs = [Observation(attrs=s, counts=t * self.total, stddev=1.0) for s, t in zip(self.sets, self.split(theta))]
        warm = next(iter(self._models.values()), None)
        return self.fit(obs, self.total, warm=warm)

    # --- the engine's interface -------------------------------------------------------------
    def seed(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """omega: one uniform per record and column."""
        return rng.random((n, len(self.domain.names)))

    def sample(self, theta: np.ndarray, omega: np.ndarray) -> np.ndarray:
        """G(theta, omega): codes (records x columns in domain order)."""
        return sample_columns(self.model(theta), omega)

    def estimate(self, data: np.ndarray) -> np.ndarray:
        """T: the sample's empirical marginals over ``sets``."""
        data = np.asarray(data, dtype=np.int64)
        parts = []
        for s in self.sets:
            idx = [self.domain.index(a) for a in s]
            flat = np.ravel_multi_index(tuple(data[:, i] for i in idx), self.domain.shape(s))
            parts.append(np.bincount(flat, minlength=self.domain.cells(s)) / max(1, data.shape[0]))
        return np.concatenate(parts)

    def project(self, theta: np.ndarray) -> np.ndarray:
        """Nearest model marginals to theta (equal weights), from the current model."""
        return self.theta_of(self._equal_weight_fit(theta))


def _inverse_cdf(cond: np.ndarray, key: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Value of each record: row ``key`` of the conditional table ``cond`` at uniform ``u``."""
    rsum = cond.sum(axis=1, keepdims=True)
    cond = np.where(rsum > 0, cond / np.where(rsum > 0, rsum, 1.0), 1.0 / cond.shape[1])
    cdf = np.cumsum(cond, axis=1)
    out = np.empty(key.size, dtype=np.int64)
    step = max(1, 4_000_000 // cond.shape[1])
    for lo in range(0, key.size, step):
        rows = cdf[key[lo:lo + step]]
        out[lo:lo + step] = np.sum(rows < u[lo:lo + step, None], axis=1)
    return np.minimum(out, cond.shape[1] - 1)


def sample_columns(model: GraphicalModel, omega: np.ndarray) -> np.ndarray:
    """G(model, omega): codes (rows, columns in domain order), column by column from the root.

    Column ``a`` of a clique, given the columns before it (its separator with the parent
    clique, then its clique's earlier new columns), is drawn by inverse CDF at ``omega[:, a]``.
    """
    tree, dom = model.tree, model.domain
    rows = omega.shape[0]
    out = np.full((rows, len(dom.names)), -1, dtype=np.int64)
    for i in tree.order:
        cl = tree.cliques[i]
        p = tree.parent[i]
        given = list(tree.separator(i, p)) if p >= 0 else []
        belief = model.beliefs[i]
        for a in [c for c in cl if c not in set(given)]:
            keep = [c for c in cl if c in set(given) or c == a]
            table = np.sum(belief, axis=tuple(k for k, c in enumerate(cl) if c not in set(keep)))
            context = [c for c in keep if c != a]
            table = np.moveaxis(table, keep.index(a), -1).reshape(dom.cells(context), dom.size(a))
            if context:
                key = np.ravel_multi_index(tuple(out[:, dom.index(c)] for c in context), dom.shape(context))
            else:
                key = np.zeros(rows, dtype=np.int64)
            out[:, dom.index(a)] = _inverse_cdf(table, key, omega[:, dom.index(a)])
            given.append(a)
    return out
