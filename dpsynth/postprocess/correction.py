"""Marginal correction by importance reweighting (Theorem 3.6 of Boedihardjo, Strohmer &
Vershynin, "Private sampling").

Given a sample ``Y`` (rows of Boolean or small-integer features) and target marginals,
find weights ``w`` on the rows of ``Y`` (``w >= 0``, ``sum w = 1``) whose weighted
marginals equal the targets, then resample rows of ``Y`` with those weights. Theorem 3.6
says that when ``Y`` is a large enough sample of a regular density, weights matching all
marginals of dimension ``<= d`` exist and stay within a constant factor of uniform; this
module computes such weights for whatever targets are supplied.

Privacy. This is post-processing: it reads only the sample and the targets. The output
is differentially private when *both* inputs are (e.g. a private-sampling release and the
noisy marginals of another DP method, with their budgets accounted for). Targets computed
from the private rows without noise make the output non-private.

Targets are a mapping ``{(j1, j2, ...): table}``: the key lists feature (column) indices,
the table has one axis per listed feature, axis ``i`` indexed by the value of feature
``j_i`` (``0 .. cardinality - 1``). Tables may hold counts or probabilities; each table is
normalised by its own sum. Boolean features are the case cardinality 2. Walsh (Fourier)
coefficients of Boolean features convert to such tables with :func:`walsh_to_tables`.

Programs (weights ``w = v / k``, ``v`` ~ 1 is the solver variable):

* ``method="lp"`` (exact): ``A w = b``, ``sum w = 1``, ``lo/k <= w <= hi/k``, minimising
  ``max_i |k w_i - 1|`` -- the smallest factor ``t`` with every weight in
  ``[(1 - t)/k, (1 + t)/k]``, the quantity Theorem 3.6 controls; HiGHS. Raises
  :class:`MarginalCorrectionError` when no exact solution exists (inconsistent or noisy
  targets, cells absent from the sample).
* ``method="qp"`` (closest): minimise ``||A w - b||_2^2 + ridge * mean((k w - 1)^2)``
  under the same bounds and ``sum w = 1``; CLARABEL. Always feasible; for consistent
  reachable targets it matches them up to a residual of order ``ridge``.

In both programs uniform weights are the unique optimum when the sample already matches
the targets, and such a sample comes back unchanged (see :func:`resample`).
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from ..extras import require
from .fitting import CodeMargin, proportional_fit

__all__ = [
    "MarginalCorrectionError",
    "CorrectionResult",
    "marginal_tables",
    "walsh_to_tables",
    "marginal_constraints",
    "reweight",
    "resample",
    "correct_marginals",
    "rake",
    "unpack_codes",
]

Targets = Mapping[tuple[int, ...], Any]


class MarginalCorrectionError(ValueError):
    """The requested exact correction is infeasible (or the solver failed)."""


# --------------------------------------------------------------------------- inputs


def unpack_codes(codes: Any, n_bits: int) -> np.ndarray:
    """Integer-coded rows -> (k x n_bits) 0/1 matrix; bit j of a code is feature j."""
    c = np.asarray(codes)
    if c.ndim != 1 or not np.issubdtype(c.dtype, np.integer):
        raise ValueError(f"codes must be a 1-D integer array, got dtype {c.dtype} and shape {c.shape}")
    if isinstance(n_bits, bool) or not isinstance(n_bits, numbers.Integral) or not 1 <= n_bits <= 63:
        raise ValueError(f"n_bits must be an integer in [1, 63], got {n_bits!r}")
    if c.size and (c.min() < 0 or c.max() >= (1 << int(n_bits))):
        raise ValueError(f"codes must lie in [0, 2^{n_bits})")
    shifts = np.arange(int(n_bits), dtype=np.int64)
    return ((c.astype(np.int64)[:, None] >> shifts) & 1).astype(np.uint8)


def _as_sample(sample: Any, n_bits: int | None) -> np.ndarray:
    arr = np.asarray(sample)
    if arr.ndim == 1:
        if n_bits is None:
            raise ValueError("a 1-D sample is read as integer-coded rows and needs n_bits")
        return unpack_codes(arr, n_bits).astype(np.int64)
    if n_bits is not None:
        raise ValueError("n_bits only applies to a 1-D sample of integer codes")
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"sample must be a non-empty (k x q) array, got shape {arr.shape}")
    if arr.dtype == np.bool_:
        return arr.astype(np.int64)
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise ValueError("sample must hold integer codes (0/1 for Boolean features)")
    elif not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"sample must be numeric integer codes, got dtype {arr.dtype}")
    out = arr.astype(np.int64)
    if out.min() < 0:
        raise ValueError("sample codes must be >= 0")
    return out


def _check_key(key: Any, q: int) -> tuple[int, ...]:
    if not isinstance(key, tuple) or not all(isinstance(j, numbers.Integral) and not isinstance(j, bool) for j in key):
        raise ValueError(f"target keys must be tuples of feature indices, got {key!r}")
    key = tuple(int(j) for j in key)
    if len(set(key)) != len(key):
        raise ValueError(f"target key {key} repeats a feature")
    if any(not 0 <= j < q for j in key):
        raise ValueError(f"target key {key} names a feature outside 0..{q - 1}")
    return key


def _normalised_tables(targets: Targets, q: int) -> dict[tuple[int, ...], np.ndarray]:
    if not isinstance(targets, Mapping) or not targets:
        raise ValueError("targets must be a non-empty mapping {feature tuple: table}")
    cards: dict[int, int] = {}
    out: dict[tuple[int, ...], np.ndarray] = {}
    for raw_key, raw_table in targets.items():
        key = _check_key(raw_key, q)
        if not key:
            continue  # the total is enforced by sum(w) = 1
        table = np.asarray(raw_table, dtype=np.float64)
        if table.ndim != len(key):
            raise ValueError(f"table for {key} must have {len(key)} axes, got shape {table.shape}")
        if not np.all(np.isfinite(table)):
            raise ValueError(f"table for {key} has non-finite entries")
        for j, size in zip(key, table.shape):
            if size < 1:
                raise ValueError(f"table for {key} has an empty axis")
            if cards.setdefault(j, size) != size:
                raise ValueError(f"feature {j} has cardinality {cards[j]} in one table and {size} in another")
        total = float(table.sum())
        if total <= 0:
            raise ValueError(f"table for {key} must have a positive sum, got {total}")
        out[key] = table / total
    if not out:
        raise ValueError("targets hold no marginal of dimension >= 1")
    return out


# --------------------------------------------------------------------------- targets


def marginal_tables(
    data: Any,
    subsets: Iterable[tuple[int, ...]],
    cardinalities: Mapping[int, int] | None = None,
    *,
    n_bits: int | None = None,
) -> dict[tuple[int, ...], np.ndarray]:
    """Probability tables of ``data`` (0/1 or integer codes) on the given feature subsets.

    Cardinalities default to max code + 1 per feature (at least 2 for a Boolean feature
    written as 0/1). Note: tables of private data are not private; add noise first.
    """
    x = _as_sample(data, n_bits)
    k, q = x.shape
    out: dict[tuple[int, ...], np.ndarray] = {}
    for raw_key in subsets:
        key = _check_key(raw_key, q)
        if not key:
            continue
        shape = tuple(
            int(cardinalities[j]) if cardinalities is not None and j in cardinalities else max(2, int(x[:, j].max()) + 1)
            for j in key
        )
        for j, size in zip(key, shape):
            if x[:, j].max() >= size:
                raise ValueError(f"feature {j} has code {x[:, j].max()} >= its cardinality {size}")
        flat = np.ravel_multi_index(tuple(x[:, j] for j in key), shape)
        out[key] = np.bincount(flat, minlength=math.prod(shape)).reshape(shape) / k
    return out


def walsh_to_tables(
    coefficients: Mapping[tuple[int, ...], float], subsets: Iterable[tuple[int, ...]] | None = None
) -> dict[tuple[int, ...], np.ndarray]:
    """Converts Walsh coefficients of Boolean features into marginal probability tables.

    ``coefficients[A]`` is the mean of chi_A(x) = (-1)^{sum_{i in A} x_i} (the empty set
    defaults to 1). For each subset A (default: every key of ``coefficients``), the table
    is P(x_A = a) = 2^{-|A|} sum_{B subset of A} c_B (-1)^{sum_{i in B} a_i}; every subset
    of A must be present.
    """
    coefs = {tuple(sorted(int(j) for j in key)): float(v) for key, v in coefficients.items()}
    coefs.setdefault((), 1.0)
    keys = [tuple(sorted(int(j) for j in s)) for s in (subsets if subsets is not None else coefs)]
    out: dict[tuple[int, ...], np.ndarray] = {}
    for key in keys:
        if not key:
            continue
        r = len(key)
        grid = np.array(np.unravel_index(np.arange(2**r), (2,) * r)).T  # rows a in {0,1}^r, C order
        table = np.zeros(2**r)
        for size in range(r + 1):
            for pos in combinations(range(r), size):
                sub = tuple(key[i] for i in pos)
                if sub not in coefs:
                    raise ValueError(f"walsh_to_tables: coefficient of {sub} (needed by {key}) is missing")
                parity = grid[:, list(pos)].sum(axis=1) if pos else np.zeros(2**r, dtype=np.int64)
                table += coefs[sub] * (1 - 2 * (parity % 2))
        out[key] = (table / 2**r).reshape((2,) * r)
    return out


def marginal_constraints(sample: np.ndarray, tables: Mapping[tuple[int, ...], np.ndarray]) -> tuple[sp.csr_matrix, np.ndarray]:
    """(A, b): row c of A is the indicator of the sample rows in cell c; b the target."""
    k = sample.shape[0]
    rows, blocks = [], []
    offset = 0
    for key, table in tables.items():
        codes = [sample[:, j] for j in key]
        for j, c, size in zip(key, codes, table.shape):
            if c.max() >= size:
                raise ValueError(f"sample feature {j} has code {c.max()} outside its table axis of size {size}")
        rows.append(offset + np.ravel_multi_index(tuple(codes), table.shape))
        blocks.append(table.ravel())
        offset += table.size
    row_idx = np.concatenate(rows)
    col_idx = np.tile(np.arange(k), len(rows))
    A = sp.csr_matrix((np.ones(row_idx.size), (row_idx, col_idx)), shape=(offset, k))
    return A, np.concatenate(blocks)


# --------------------------------------------------------------------------- solving


@dataclass(frozen=True, kw_only=True)
class CorrectionResult:
    """weights: (k,) nonnegative, sum 1, on the input sample's rows.
    samples: the resampled rows (same format as the input sample).
    max_abs_error / max_abs_error_before: largest |weighted marginal - target| over all
    target cells with the solved / uniform weights."""

    weights: np.ndarray
    samples: np.ndarray
    method: str
    status: str
    max_abs_error: float
    max_abs_error_before: float
    n_constraints: int
    seconds: float


def reweight(
    sample: Any,
    targets: Targets,
    *,
    method: Literal["lp", "qp"] = "lp",
    weight_bounds: tuple[float, float | None] = (0.0, None),
    ridge: float = 1e-6,
    n_bits: int | None = None,
    snap_tol: float = 1e-7,
) -> tuple[np.ndarray, str, float]:
    """Solves for the weights only: returns (weights, solver status, seconds).

    ``weight_bounds = (lo, hi)`` bounds each weight as a multiple of uniform:
    ``lo / k <= w_i <= hi / k`` (hi None = no upper bound). Weights within ``snap_tol``
    (relative) of uniform are returned exactly uniform.
    """
    cp = require("cvxpy")

    x = _as_sample(sample, n_bits)
    k = x.shape[0]
    tables = _normalised_tables(targets, x.shape[1])
    if method not in ("lp", "qp"):
        raise ValueError(f"method must be 'lp' or 'qp', got {method!r}")
    lo, hi = weight_bounds
    if not (isinstance(lo, numbers.Real) and 0.0 <= lo <= 1.0):
        raise ValueError(f"weight_bounds lower must be in [0, 1] (multiples of uniform), got {lo!r}")
    if hi is not None and not (isinstance(hi, numbers.Real) and hi >= 1.0):
        raise ValueError(f"weight_bounds upper must be >= 1 (multiples of uniform) or None, got {hi!r}")
    if not (isinstance(ridge, numbers.Real) and ridge > 0):
        raise ValueError(f"ridge must be > 0, got {ridge!r}")
    if method == "lp" and any(np.any(t < 0) for t in tables.values()):
        raise ValueError("method='lp' matches targets exactly and needs nonnegative tables; use method='qp'")
    A, b = marginal_constraints(x, tables)
    A_scaled = (A / k).tocsr()  # acts on v = k w
    v = cp.Variable(k)
    cons = [cp.sum(v) == k, v >= lo]
    if hi is not None:
        cons.append(v <= hi)
    t0 = time.perf_counter()
    if method == "lp":
        t = cp.Variable()
        cons += [A_scaled @ v == b, v - 1.0 <= t, 1.0 - v <= t]
        prob = cp.Problem(cp.Minimize(t), cons)
        solver = "HIGHS" if "HIGHS" in cp.installed_solvers() else "CLARABEL"
    else:
        prob = cp.Problem(cp.Minimize(cp.sum_squares(A_scaled @ v - b) + ridge * cp.sum_squares(v - 1.0) / k), cons)
        solver = "CLARABEL"
    prob.solve(solver=solver)
    seconds = time.perf_counter() - t0
    status = f"{prob.status} ({solver})"
    if prob.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        raise MarginalCorrectionError(
            "no weights match the targets exactly (inconsistent/noisy targets, or target cells absent from "
            "the sample); use method='qp' for the closest match"
        )
    if prob.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or v.value is None:
        raise MarginalCorrectionError(f"marginal correction solver failed: {status}")
    vv = np.clip(np.asarray(v.value, dtype=np.float64), 0.0, None)
    if np.max(np.abs(vv - 1.0)) <= snap_tol:
        vv = np.ones(k)
    w = vv / vv.sum()
    return w, status, seconds


def resample(
    sample: Any,
    weights: Any,
    n_out: int,
    rng: np.random.Generator,
    *,
    scheme: Literal["systematic", "multinomial"] = "systematic",
) -> np.ndarray:
    """Draws n_out rows of ``sample`` (any array, rows on axis 0) with probabilities ``weights``.

    "systematic": row i is kept floor(n_out w_i) times and the leftover rows are chosen by
    systematic sampling on the fractional parts; every row's expected count is n_out w_i and
    counts deviate from it by less than 1. With uniform weights and n_out = k the sample
    comes back unchanged (same rows, same order). Rows keep their input order.
    "multinomial": n_out i.i.d. draws.
    """
    arr = np.asarray(sample)
    w = np.asarray(weights, dtype=np.float64)
    k = arr.shape[0]
    if w.shape != (k,) or np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError("weights must be a nonnegative finite vector with one entry per sample row")
    if isinstance(n_out, bool) or not isinstance(n_out, numbers.Integral) or n_out < 1:
        raise ValueError(f"n_out must be a positive integer, got {n_out!r}")
    w = w / w.sum()
    if scheme == "multinomial":
        return arr[rng.choice(k, size=int(n_out), replace=True, p=w)]
    if scheme != "systematic":
        raise ValueError(f"scheme must be 'systematic' or 'multinomial', got {scheme!r}")
    expected = int(n_out) * w
    base = np.floor(expected + 1e-9).astype(np.int64)
    frac = np.clip(expected - base, 0.0, None)
    extra = int(n_out) - int(base.sum())
    counts = base
    if extra > 0:
        # fractional parts sum to `extra` (up to rounding); pick `extra` rows with
        # inclusion probabilities frac by one uniform offset on a grid of spacing 1
        cum = np.cumsum(frac / frac.sum() * extra)
        points = rng.uniform() + np.arange(extra)
        picks = np.minimum(np.searchsorted(cum, points, side="right"), k - 1)
        counts = counts + np.bincount(picks, minlength=k)
    elif extra < 0:  # only possible through rounding; drop from the largest counts
        for i in np.argsort(-expected)[: -extra]:
            counts[i] -= 1
    return np.repeat(arr, counts, axis=0)


def correct_marginals(
    sample: Any,
    targets: Targets,
    *,
    rng: np.random.Generator,
    method: Literal["lp", "qp"] = "lp",
    n_out: int | None = None,
    weight_bounds: tuple[float, float | None] = (0.0, None),
    ridge: float = 1e-6,
    n_bits: int | None = None,
    scheme: Literal["systematic", "multinomial"] = "systematic",
) -> CorrectionResult:
    """Reweights ``sample`` to the target marginals and resamples ``n_out`` rows (default:
    as many as the sample). ``sample`` is a (k x q) array of 0/1 or integer codes, or a 1-D
    array of integer-coded Boolean rows with ``n_bits`` (then the output is codes too).
    See the module docstring for the programs and :func:`resample` for the resampling."""
    t0 = time.perf_counter()
    x = _as_sample(sample, n_bits)
    tables = _normalised_tables(targets, x.shape[1])
    w, status, _ = reweight(x, tables, method=method, weight_bounds=weight_bounds, ridge=ridge)
    A, b = marginal_constraints(x, tables)
    k = x.shape[0]
    err = float(np.max(np.abs(A @ w - b)))
    err0 = float(np.max(np.abs(A @ np.full(k, 1.0 / k) - b)))
    original = np.asarray(sample)
    out = resample(original, w, k if n_out is None else n_out, rng, scheme=scheme)
    return CorrectionResult(
        weights=w,
        samples=out,
        method=method,
        status=status,
        max_abs_error=err,
        max_abs_error_before=err0,
        n_constraints=A.shape[0] + 1,
        seconds=time.perf_counter() - t0,
    )


def rake(codes: Any, targets: Mapping[int, Any], *, iters: int = 200, tol: float = 1e-10) -> np.ndarray:
    """Row weights whose 1-way marginals match ``targets`` (iterative proportional fitting).

    ``codes`` is a (k x q) integer matrix; ``targets`` maps a column index to a table of
    counts or probabilities over that column's codes (normalised here). Starting from
    uniform weights, each pass rescales the rows of every column's cells so that the
    column's weighted marginal equals its target; this converges to the weights closest
    to uniform in Kullback-Leibler divergence among those matching every target, when
    such weights exist (a target cell with no row in the sample stays unmatched). Cheap
    and vectorised: O(iters * k * len(targets)), for samples far beyond a QP's reach.
    """
    x = np.asarray(codes)
    if x.ndim != 2 or not np.issubdtype(x.dtype, np.integer):
        raise ValueError("codes must be a 2-D integer matrix")
    k = x.shape[0]
    margins = []
    for j, table in targets.items():
        t = np.clip(np.asarray(table, dtype=np.float64).ravel(), 0.0, None)
        if t.sum() <= 0 or x[:, j].max(initial=0) >= t.size:
            raise ValueError(f"target of column {j} must be a nonnegative table covering its codes")
        margins.append(CodeMargin(codes=x[:, j], target=t / t.sum()))
    w = proportional_fit(np.full(k, 1.0 / k), margins, rounds=iters, tol=tol)
    total = w.sum()
    if not total > 0:
        raise ValueError("raking removed every row: targets and sample do not overlap")
    return w / total
