"""A latent-class pool for ``sds``'s expanded releases: records closer to the measured tables.

The expanded release (expand.py) reweights one pool drawn from the complete sampler; where
that sampler misses a factor the columns share, the weights that fit the measured pairs are
extreme and worth few distinct records. Here a mixture of ``classes`` latent classes, each
with independent columns, is fitted by weighted EM to the pool reweighted to the measured
2-way and 1-way tables (a short proportional fit, :func:`pair_weights`), and a pool drawn from
it replaces the sampler's where the same short fit is worth more distinct records on it
(:func:`latent_pool`). Post-processing of the DP tables only. Design and figures:
docs/sds-generalisation.md, thirteenth round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ...postprocess.fitting import CodeMargin, proportional_fit
from .refit import TableCheck, effective_size

__all__ = ["CLASSES", "EM_ITERATIONS", "PAIR_ROUNDS", "LatentClasses", "pair_weights",
           "fit_latent", "latent_pool"]

#: Latent classes of the mixture.
CLASSES = 8
#: EM iterations (weighted log-likelihood per record changes by < 1e-3 after ~20 on the tuning tables).
EM_ITERATIONS = 30
#: Rounds of the short proportional fit to the pairs before EM.
PAIR_ROUNDS = 20


@dataclass(frozen=True)
class LatentClasses:
    """A latent-class model: class shares ``shares`` (K) and per column a (K, cardinality)
    table of value probabilities given the class."""

    shares: np.ndarray
    probs: tuple[np.ndarray, ...]

    def sample(self, rows: int, rng: np.random.Generator, dtype: np.dtype = np.dtype(np.int64)) -> np.ndarray:
        """``rows`` records: a class each, then every column from its class's table."""
        z = rng.choice(self.shares.size, size=int(rows), p=self.shares / self.shares.sum())
        out = np.empty((int(rows), len(self.probs)), dtype=dtype)
        for j, t in enumerate(self.probs):
            cdf = np.cumsum(t, axis=1)
            cdf[:, -1] = 1.0
            u = rng.random(int(rows))
            out[:, j] = np.minimum((u[:, None] >= cdf[z]).sum(axis=1), t.shape[1] - 1)
        return out


def pair_weights(pool: np.ndarray, checks: Sequence[TableCheck], one_way: Mapping[int, np.ndarray],
                 rounds: int = PAIR_ROUNDS) -> np.ndarray:
    """Weights of ``pool``'s records after ``rounds`` of proportional fitting to the measured
    2-way tables of ``checks`` (noisy counts clipped at 0; a suppressed cell: the pool's own
    count, at most the threshold) and to ``one_way``. Cell indices are computed one table at
    a time (uint16 where they fit)."""
    margins = []
    for c in checks:
        if len(c.cols) != 2:
            continue
        c = c.on(pool)
        held = np.bincount(c.cells, minlength=c.noisy.size).astype(np.float64)  # the tables are at the pool's scale
        target = np.where(c.suppressed, np.minimum(held, c.threshold), np.clip(c.noisy, 0.0, None))
        margins.append(CodeMargin(codes=c.compact_cells(), target=target))
    ones = [CodeMargin(codes=pool[:, j].astype(np.int64), target=np.asarray(t, dtype=np.float64))
            for j, t in one_way.items()]
    if not margins:
        return np.ones(pool.shape[0])
    w = proportional_fit(np.ones(pool.shape[0]), [*margins, *ones], rounds=rounds)
    return w if np.isfinite(w).all() and w.sum() > 0 else np.ones(pool.shape[0])


def fit_latent(pool: np.ndarray, weights: np.ndarray, cards: Sequence[int], rng: np.random.Generator,
               classes: int = CLASSES, iterations: int = EM_ITERATIONS) -> LatentClasses:
    """A latent-class mixture fitted by EM to ``pool``'s records weighted by ``weights``
    (random soft start from ``rng``; a floor of 1e-9 on every probability)."""
    n, p = pool.shape
    w = np.clip(np.asarray(weights, dtype=np.float64), 0.0, None)
    w = w / max(float(w.sum()), 1e-300)
    resp = rng.dirichlet(np.ones(classes), size=n)
    shares, probs = np.full(classes, 1.0 / classes), ()
    for _ in range(max(1, int(iterations))):
        rw = resp * w[:, None]
        mass = rw.sum(axis=0)
        shares = np.maximum(mass, 1e-300)
        by_class = np.ascontiguousarray(rw.T)  # each class's weights contiguous, for bincount
        probs = tuple(_class_table(pool[:, j], by_class, mass, int(cards[j])) / shares[:, None] for j in range(p))
        log = np.log(shares)[None, :] + _log_likelihood(pool, probs)
        resp = np.exp(log - log.max(axis=1, keepdims=True))
        resp /= resp.sum(axis=1, keepdims=True)
    probs = tuple(t / t.sum(axis=1, keepdims=True) for t in probs)
    return LatentClasses(shares=shares / shares.sum(), probs=probs)


def _log_likelihood(pool: np.ndarray, probs: Sequence[np.ndarray]) -> np.ndarray:
    """(n, K), row-major: each record's log-probability in each class, the columns' logs added
    in order (each table's logs taken once, then read per record and class: the same values as
    the log of each record's probability, without a logarithm per record and class). Row-major
    as the sum of the columns' gathered logs was: the EM's reductions over the classes then add
    in the same order (the same bits)."""
    out = np.empty((probs[0].shape[0], pool.shape[0]))
    for j, t in enumerate(probs):
        codes = np.asarray(pool[:, j], dtype=np.intp)
        for k, logs in enumerate(np.log(t)):
            if j == 0:
                logs.take(codes, out=out[k])
            else:
                out[k] += logs.take(codes)
    return np.ascontiguousarray(out.T)


def _class_table(codes: np.ndarray, by_class: np.ndarray, mass: np.ndarray, card: int) -> np.ndarray:
    """(K, card) weighted counts of ``codes`` per class (``by_class``: (K, n), each class's
    weights; ``mass``: each class's total), each cell at least 1e-9 of its class. The codes
    are cast to indices once for the K counts (the same sums, in the same order, as counting
    each class from the codes)."""
    codes = np.asarray(codes, dtype=np.intp)
    t = np.stack([np.bincount(codes, weights=by_class[k], minlength=card) for k in range(by_class.shape[0])])
    return t + 1e-9 * mass[:, None]


def latent_pool(pool: np.ndarray, checks: Sequence[TableCheck], one_way: Mapping[int, np.ndarray],
                cards: Sequence[int], rng: np.random.Generator) -> tuple[np.ndarray, dict[str, float]]:
    """A pool of ``pool``'s shape and dtype drawn from a latent-class mixture fitted to ``pool``
    reweighted to the measured pairs (:func:`pair_weights`), when the pairs' short fit is
    worth more distinct records on it (effective size) than on ``pool``; else ``pool``
    itself. Also the two effective sizes. Reads only the pool and the DP tables."""
    if pool.shape[0] == 0 or pool.shape[1] < 2 or not any(len(c.cols) == 2 for c in checks):
        return pool, {}
    w = pair_weights(pool, checks, one_way)
    model = fit_latent(pool, w, cards, rng)
    drawn = np.asfortranarray(model.sample(pool.shape[0], rng, pool.dtype))
    mine = effective_size(pair_weights(drawn, checks, one_way))
    info = {"ess_sampler": round(effective_size(w)), "ess_latent": round(mine)}
    return (drawn if mine > info["ess_sampler"] else pool), info
