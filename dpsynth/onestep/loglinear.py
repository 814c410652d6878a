"""Hierarchical log-linear model with all main effects and all two-way interactions.

The model is held as its full contingency table ``p`` (so its size is capped; see
:func:`check_table_size`). Its parameter for the one-step engine is the mean
parametrisation: the 1- and 2-way marginal probabilities, concatenated (a bijection with
the log-linear coefficients on the interior of the marginal polytope). Then

* T (the MLE) of a sample is its empirical 1- and 2-way marginals;
* G(theta, omega) turns theta into the table by iterative proportional fitting (the
  maximum-entropy table with those marginals is the log-linear model's) and samples by
  inverse CDF over the cells in C order with the uniforms omega;
* Proj: each marginal is projected onto the probability simplex, then IPF; inside
  the marginal polytope this is the identity. ``exact_projection`` instead takes the
  least-squares fit of the marginals over the model's tables (L-BFGS on the log-linear
  coefficients) when IPF does not reproduce theta: exact, but far slower.
* The DP estimator from noisy marginals is IPF on the noisy marginals projected onto the simplex (the
  least-squares fit :func:`fit_marginals` is the exact alternative).

The method ``one-step`` holds its model on a junction tree instead
(:mod:`.graphical`); this full-table form serves the paper's Maine reproduction and tests.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from scipy import optimize

__all__ = [
    "TableTooLarge", "check_table_size", "to_simplex", "two_way_cliques", "marginals_of", "ipf", "fit_marginals",
    "LogLinear",
]


class TableTooLarge(ValueError):
    """The full contingency table would exceed the cell limit."""


def check_table_size(shape: Sequence[int], max_cells: int, names: Sequence[str] = ()) -> int:
    """Number of cells of a table of ``shape``; TableTooLarge if it is above ``max_cells``
    (``names``, the table's columns, only word the error)."""
    cells = math.prod(int(s) for s in shape)
    if cells > max_cells:
        who = f" of columns {list(names)}" if names else ""
        raise TableTooLarge(
            f"the log-linear model's full table{who} has {cells:,} cells, over the limit "
            f"max_cells={max_cells:,}; raise max_cells, or pass partition=true to model blocks of "
            "columns independently"
        )
    return cells


def two_way_cliques(d: int) -> list[tuple[int, ...]]:
    """All 1-way then all 2-way axis sets of a d-way table."""
    return [(i,) for i in range(d)] + list(itertools.combinations(range(d), 2))


def marginals_of(p: np.ndarray, cliques: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    """The marginal of table ``p`` over each clique (a tuple of axes), other axes summed out;
    each keeps its axes in increasing order."""
    d = p.ndim
    return [p.sum(axis=tuple(a for a in range(d) if a not in c)) for c in cliques]


def _expand(arr: np.ndarray, clique: tuple[int, ...], d: int) -> np.ndarray:
    shape = [1] * d
    for a, s in zip(clique, arr.shape):
        shape[a] = s
    return arr.reshape(shape)


def to_simplex(target: np.ndarray) -> np.ndarray:
    """Euclidean projection onto the probability simplex: max(t - tau, 0) summing to 1.

    Unlike clipping negatives to 0, it does not add mass to the many near-empty cells
    of a noisy sparse marginal.
    """
    t = np.asarray(target, dtype=np.float64)
    v = np.sort(t.ravel())[::-1]
    css = np.cumsum(v) - 1.0
    ks = np.arange(1, v.size + 1)
    r = int(np.flatnonzero(v - css / ks > 0)[-1])
    tau = css[r] / (r + 1)
    return np.maximum(t - tau, 0.0)


def ipf(shape: Sequence[int], cliques: Sequence[tuple[int, ...]], targets: Sequence[np.ndarray],
        *, max_sweeps: int = 500, tol: float = 1e-12) -> np.ndarray:
    """Maximum-entropy table with the given (consistent) marginal probabilities."""
    d = len(shape)
    p = np.full(tuple(shape), 1.0 / math.prod(shape))
    for _ in range(max_sweeps):
        worst = 0.0
        for c, t in zip(cliques, targets):
            cur = marginals_of(p, [c])[0]
            worst = max(worst, float(np.max(np.abs(cur - t))))
            ratio = np.divide(t, cur, out=np.zeros_like(cur), where=cur > 0)
            p = p * _expand(ratio, c, d)
        if worst <= tol:
            break
    return p / p.sum()


def fit_marginals(shape: Sequence[int], cliques: Sequence[tuple[int, ...]], targets: Sequence[np.ndarray],
                  weights: Sequence[float] | None = None, *, scale: float = 1e4,
                  max_iter: int = 1000) -> np.ndarray:
    """Table of the log-linear model minimising sum_m w_m |marginal_m(p) - target_m|^2.

    Minimised over the model's coefficients (one array per clique) with L-BFGS; the
    gradient is the marginal of p * (g - E_p g) where g is the residual spread over cells.
    """
    d = len(shape)
    w = np.ones(len(cliques)) if weights is None else np.asarray(weights, dtype=np.float64)
    sizes = [math.prod(shape[a] for a in c) for c in cliques]
    splits = np.cumsum(sizes)[:-1]
    tshape = [tuple(shape[a] for a in c) for c in cliques]

    def table(x: np.ndarray) -> np.ndarray:
        logp = np.zeros(tuple(shape))
        for c, part, ts in zip(cliques, np.split(x, splits), tshape):
            logp = logp + _expand(part.reshape(ts), c, d)
        logp -= logp.max()
        p = np.exp(logp)
        return p / p.sum()

    def f(x: np.ndarray) -> tuple[float, np.ndarray]:
        p = table(x)
        mus = marginals_of(p, cliques)
        g = np.zeros(tuple(shape))
        val = 0.0
        for c, mu, t, wm in zip(cliques, mus, targets, w):
            r = mu - t
            val += 0.5 * wm * float(np.sum(r * r))
            g = g + _expand(wm * r, c, d)
        pg = p * (g - float(np.sum(p * g)))
        grad = np.concatenate([m.ravel() for m in marginals_of(pg, cliques)])
        return scale * val, scale * grad

    res = optimize.minimize(f, np.zeros(sum(sizes)), jac=True, method="L-BFGS-B",
                            options={"maxiter": max_iter, "ftol": 1e-15, "gtol": 1e-12})
    return table(res.x)


@dataclass(frozen=True, kw_only=True)
class LogLinear:
    """All-two-way log-linear model over a table of ``shape`` (see the module docstring)."""

    shape: tuple[int, ...]
    max_cells: int = 2_000_000
    exact_projection: bool = False
    ipf_sweeps: int = 100
    cliques: tuple[tuple[int, ...], ...] = field(init=False)
    # tables already computed for a theta (theta_of, project): G need not refit them
    _tables: dict[bytes, np.ndarray] = field(init=False, default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_table_size(self.shape, self.max_cells)
        object.__setattr__(self, "cliques", tuple(two_way_cliques(len(self.shape))))

    # parameter <-> marginals
    def split(self, theta: np.ndarray) -> list[np.ndarray]:
        """The flat parameter ``theta`` cut into one array per clique, shaped by the clique's sizes."""
        sizes = [math.prod(self.shape[a] for a in c) for c in self.cliques]
        parts = np.split(np.asarray(theta, dtype=np.float64), np.cumsum(sizes)[:-1])
        return [p.reshape(tuple(self.shape[a] for a in c)) for p, c in zip(parts, self.cliques)]

    def theta_of(self, p: np.ndarray, *, in_model: bool = False) -> np.ndarray:
        """Marginals of a table; ``in_model`` says p is the model's own table (as IPF returns
        it), which is then remembered so that G(theta) reuses it instead of refitting."""
        theta = np.concatenate([m.ravel() for m in marginals_of(p, self.cliques)])
        if in_model:
            self._tables.clear()
            self._tables[theta.tobytes()] = p
        return theta

    def table(self, theta: np.ndarray) -> np.ndarray:
        """Probability table of ``shape`` for ``theta``: the remembered model table when ``theta``
        came from it, else IPF on the marginals ``theta`` holds."""
        theta = np.asarray(theta, dtype=np.float64)
        known = self._tables.get(theta.tobytes())
        if known is not None:
            return known
        return ipf(self.shape, self.cliques, self.split(theta), max_sweeps=self.ipf_sweeps, tol=1e-10)

    # the engine's interface
    def seed(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` uniforms on [0, 1), one per record."""
        return rng.random(n)

    def sample_table(self, p: np.ndarray, omega: np.ndarray) -> np.ndarray:
        """Flat cell indices: inverse CDF over the cells in C order."""
        cdf = np.cumsum(p.ravel())
        return np.minimum(np.searchsorted(cdf, omega * cdf[-1], side="right"), cdf.size - 1)

    def sample(self, theta: np.ndarray, omega: np.ndarray) -> np.ndarray:
        """Flat cell indices (C order) drawn from ``table(theta)`` by inverse CDF at ``omega``."""
        return self.sample_table(self.table(theta), omega)

    def estimate(self, data: np.ndarray) -> np.ndarray:
        """The 1- and 2-way marginal probabilities (flat ``theta``) of records given as flat
        cell indices."""
        counts = np.bincount(np.asarray(data, dtype=np.int64), minlength=math.prod(self.shape))
        return self.theta_of(counts.reshape(self.shape) / max(1, counts.sum()))

    def project(self, theta: np.ndarray) -> np.ndarray:
        """Realisable marginals near theta: simplex projection + IPF, or the exact L2 fit (see module doc)."""
        parts = self.split(theta)
        p = ipf(self.shape, self.cliques, [to_simplex(t) for t in parts], max_sweeps=self.ipf_sweeps, tol=1e-10)
        if self.exact_projection and np.max(np.abs(self.theta_of(p) - theta)) > 1e-9:
            p = fit_marginals(self.shape, self.cliques, parts)
        return self.theta_of(p, in_model=True)
