"""The private sampling algorithm on the Boolean cube (Boedihardjo, Strohmer & Vershynin).

The mechanism releases ``k`` points drawn i.i.d. from a density ``h*`` that lives on a
*reduced space* ``S``: ``m`` points drawn uniformly at random from ``{0,1}^p``,
independently of the data. ``h*`` is built so that its Walsh (Fourier) coefficients of
degree ``<= d`` -- equivalently all its marginals of dimension ``<= d`` -- equal those of
the empirical density of the true data ``X``, after just enough shrinkage toward the
uniform density on ``S`` to keep every value of ``h*`` inside ``[delta/m, Delta/m]``.
No noise is added: privacy comes from ``h*`` having bounded sensitivity (Theorem 12.2 of
the paper), so that ``k`` draws from it are ``epsilon``-DP when ``k`` is small enough.

Steps (Algorithm 2 of the paper):

1. ``S``: ``m`` i.i.d. uniform points of the cube (:func:`draw_reduced_space`).
2. ``M``: the ``m x L`` Walsh matrix of degree ``<= d`` on ``S``, ``L = sum_{j<=d} C(p, j)``
   (:func:`walsh_matrix`). ``S`` is *well conditioned* when
   ``sigma_min(M) >= sqrt(m) / (2 e^d)``; otherwise ``S`` is redrawn, at most
   ``max_tries`` times (:func:`draw_well_conditioned_space`).
3. ``H``: functions on ``S`` with the same Walsh coefficients up to degree ``d`` as the
   empirical density ``f_n`` of ``X``.
4. Shrinkage: the least ``lambda in [0, 1]`` such that ``(1 - lambda) H + lambda u_m``
   meets the cube ``[2 delta/m, (Delta - delta)/m]^S`` (a linear program,
   :func:`build_shrinkage_lp` / :func:`solve_shrinkage_lp`).
5. Selection: ``h*`` is the point of ``(1 - lambda) H + lambda u_m`` inside
   ``[delta/m, Delta/m]^S`` closest to ``u_m`` in Euclidean norm (a quadratic program,
   :func:`solve_proximal_qp`).
6. Release ``k`` i.i.d. draws from ``h*`` (:func:`private_sample`).

Conventions. Points are 0/1 vectors; the parity (Walsh) function of a subset ``A`` of
coordinates is ``chi_A(x) = (-1)^{sum_{i in A} x_i}`` (``chi_{}`` = 1). The Walsh
coefficient of a density ``f`` is ``sum_x f(x) chi_A(x)``, i.e. the mean of ``chi_A``
under ``f``; for the data this is the row mean of the Walsh matrix of ``X``.

What may be published. Only :attr:`SampleResult.samples` is covered by the DP guarantee
(together with anything computed from public inputs: ``n``, ``p`` and the parameters).
``h*`` itself is *confidential* -- it is a deterministic function of the data and reveals
it -- so it never appears in :class:`SampleResult`; it exists only inside
:class:`PrivateDensity`, which is for in-process use and tests and must never be written
out. The shrinkage ``lambda``, the solver statuses/residuals and the solve times in
:class:`SampleDiagnostics` also depend on the data and are *not* covered by the
guarantee (log them privately, do not publish them). ``sigma_min`` depends only on ``S``,
which is drawn independently of the data.

Where the formulas come from. The privacy and accuracy calculators use Theorem 12.2
(privacy) and Theorem 12.4 (accuracy) of the paper as restated in Pierquin, Zimmermann &
Boussard, "Practical considerations on using private sampling for synthetic data"
(2023): their Theorems 4.1 / 4.2 and equation (2). ``Delta`` is the density bound of the
theorem: the data density must satisfy ``f <= Delta / 2^p`` (the practical paper takes
``Delta = 2^p ||f_n||_inf``). Computing ``Delta`` from the private rows leaks them; in a
real release ``Delta`` (like every parameter here) must be fixed without looking at the
data. :func:`empirical_sup_density` exists to reproduce the paper's tables.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any

import numpy as np

from ...extras import require
from .bounds import check_release, epsilon_for_k, n_walsh
from .params import PrivateSamplingParams, _as_boolean_matrix, _check_int

__all__ = [
    "SampleDiagnostics",
    "SampleResult",
    "PrivateDensity",
    "ConditioningError",
    "ReducedSpace",
    "ShrinkageLP",
    "LPSolution",
    "QPSolution",
    "walsh_subsets",
    "walsh_matrix",
    "walsh_means",
    "draw_reduced_space",
    "conditioning_threshold",
    "smallest_singular_value",
    "is_well_conditioned",
    "draw_well_conditioned_space",
    "build_shrinkage_lp",
    "solve_shrinkage_lp",
    "solve_proximal_qp",
    "fit_private_density",
    "private_sample",
]


# --------------------------------------------------------------------------- Walsh basis


def walsh_subsets(p: int, d: int) -> list[tuple[int, ...]]:
    """The subsets A (|A| <= d) indexing the columns of :func:`walsh_matrix`, in order:
    the empty set, then the singletons, then the pairs, ... (lexicographic within a degree)."""
    p = _check_int("p", p, 1)
    d = _check_int("d", d, 0)
    out: list[tuple[int, ...]] = [()]
    for j in range(1, min(d, p) + 1):
        out.extend(combinations(range(p), j))
    return out


def _subset_index_arrays(p: int, d: int) -> list[np.ndarray]:
    """For each degree j = 1..d an array (C(p, j) x j) of the subsets' coordinates."""
    return [
        np.fromiter((i for c in combinations(range(p), j) for i in c), dtype=np.intp).reshape(-1, j)
        for j in range(1, min(d, p) + 1)
    ]


def walsh_matrix(points: Any, d: int, dtype: Any = np.float64) -> np.ndarray:
    """Walsh matrix of degree <= d: rows = points, columns = chi_A for A in walsh_subsets.

    Built column block by column block: the +-1 "sign" matrix s = 1 - 2x is computed once
    and the degree-j block is the elementwise product of j gathered copies of it, so the
    only Python loops run over the degree and the subset size, never over points.
    """
    x = _as_boolean_matrix("points", points)
    d = _check_int("d", d, 0)
    signs = (1 - 2 * x.astype(np.int8)).astype(np.int8)  # 0 -> +1, 1 -> -1
    blocks = [np.ones((x.shape[0], 1), dtype=np.int8)]
    for idx in _subset_index_arrays(x.shape[1], d):
        block = signs[:, idx[:, 0]]
        for j in range(1, idx.shape[1]):
            block = block * signs[:, idx[:, j]]
        blocks.append(block)
    return np.hstack(blocks).astype(dtype, copy=False)


def walsh_means(X: Any, d: int, chunk_rows: int = 4096) -> np.ndarray:
    """Walsh coefficients of the empirical density of X: mean of each chi_A over the rows.

    Entry 0 (the empty set) is 1. Computed in row chunks to bound memory.
    """
    x = _as_boolean_matrix("X", X)
    chunk_rows = _check_int("chunk_rows", chunk_rows, 1)
    total = np.zeros(n_walsh(x.shape[1], d), dtype=np.int64)
    for start in range(0, x.shape[0], chunk_rows):
        total += walsh_matrix(x[start : start + chunk_rows], d, dtype=np.int8).sum(axis=0, dtype=np.int64)
    return total / x.shape[0]


# --------------------------------------------------------------------------- reduced space


def draw_reduced_space(p: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """m i.i.d. uniform points of {0,1}^p (independent bits; repetitions are possible).

    Never enumerates the 2^p codes, so p may be in the hundreds.
    """
    p = _check_int("p", p, 1)
    m = _check_int("m", m, 1)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    return rng.integers(0, 2, size=(m, p), dtype=np.uint8)


def conditioning_threshold(m: int, d: int) -> float:
    """sqrt(m) / (2 e^d): the smallest admissible singular value of the Walsh matrix."""
    return math.sqrt(m) / (2.0 * math.exp(d))


def smallest_singular_value(W: np.ndarray) -> float:
    """sigma_min of an (m x L) matrix; 0 when m < L (rank deficient by shape).

    Uses the eigenvalues of the L x L Gram matrix: the absolute error is about
    1e-16 * ||W||^2 <= 1e-16 m L, negligible against the threshold m / (4 e^{2d}).
    """
    W = np.asarray(W, dtype=np.float64)
    if W.ndim != 2:
        raise ValueError(f"W must be 2-D, got shape {W.shape}")
    m, L = W.shape
    if m < L:
        return 0.0
    gram = W.T @ W
    lam_min = float(np.linalg.eigvalsh(gram)[0])
    return math.sqrt(max(lam_min, 0.0))


def is_well_conditioned(W: np.ndarray, d: int) -> tuple[bool, float, float]:
    """(ok, sigma_min, threshold) for the Walsh matrix W of a reduced space."""
    sigma = smallest_singular_value(W)
    thr = conditioning_threshold(W.shape[0], d)
    return sigma >= thr, sigma, thr


class ConditioningError(RuntimeError):
    """No well-conditioned reduced space was found within max_tries draws."""


@dataclass(frozen=True, kw_only=True)
class ReducedSpace:
    """A well-conditioned reduced space (data independent, hence public)."""

    points: np.ndarray  # (m x p) uint8
    walsh: np.ndarray  # (m x L) float64
    sigma_min: float
    threshold: float
    tries: int


def draw_well_conditioned_space(p: int, d: int, m: int, rng: np.random.Generator, max_tries: int) -> ReducedSpace:
    """Draws reduced spaces until sigma_min(M) >= sqrt(m)/(2 e^d), at most max_tries times."""
    max_tries = _check_int("max_tries", max_tries, 1)
    L = n_walsh(p, d)
    best = 0.0
    for attempt in range(1, max_tries + 1):
        pts = draw_reduced_space(p, m, rng)
        W = walsh_matrix(pts, d)
        ok, sigma, thr = is_well_conditioned(W, d)
        best = max(best, sigma)
        if ok:
            for arr in (pts, W):
                arr.setflags(write=False)
            return ReducedSpace(points=pts, walsh=W, sigma_min=sigma, threshold=thr, tries=attempt)
    hint = (
        f"m = {m} is smaller than the number of Walsh functions L = C({p}, <={d}) = {L}, so sigma_min is 0; "
        f"take m >= {L} (much larger in practice)"
        if m < L
        else "increase m or max_tries"
    )
    raise ConditioningError(
        f"no well-conditioned reduced space in {max_tries} draws: the best sigma_min was {best:.4g} < "
        f"sqrt(m)/(2 e^d) = {conditioning_threshold(m, d):.4g}; {hint}"
    )


# --------------------------------------------------------------------------- shrinkage LP


@dataclass(frozen=True, kw_only=True)
class ShrinkageLP:
    """Step 4 in the paper's normalised form, variables z = (lambda, h_1, ..., h_m):

        minimise    lambda
        subject to  M^T h - lambda (c_S - c_X) = c_X        (L rows)
                    2 delta/m <= h_i <= (Delta - delta)/m,   0 <= lambda <= 1

    where c_X = (1/n) M_X^T 1_n are the Walsh coefficients of the data and
    c_S = (1/m) M^T 1_m those of the uniform density u_m on S. This is the practical
    paper's system (W_S B - (1/m) W_S A_m + (1/n) W_X A_n) z = (1/n) W_X 1_n. The row of
    the empty set is the sum-to-one constraint sum_i h_i = 1 (its lambda coefficient is
    c_S[0] - c_X[0] = 0).
    """

    A_eq: np.ndarray  # (L x (m+1))
    b_eq: np.ndarray  # (L,)
    lower: np.ndarray  # (m+1,)
    upper: np.ndarray  # (m+1,)
    cost: np.ndarray  # (m+1,) = e_0
    c_X: np.ndarray
    c_S: np.ndarray


def _walsh_inputs(W_S: Any, c_X: Any) -> tuple[np.ndarray, np.ndarray, int, int]:
    """The Walsh matrix of S and the data's coefficients as floats, with m and L; checks
    that they agree in L."""
    W_S = np.asarray(W_S, dtype=np.float64)
    c_X = np.asarray(c_X, dtype=np.float64)
    m, L = W_S.shape
    if c_X.shape != (L,):
        raise ValueError(f"c_X must have shape ({L},), got {c_X.shape}")
    return W_S, c_X, m, L


def build_shrinkage_lp(W_S: np.ndarray, c_X: np.ndarray, delta: float, Delta: float) -> ShrinkageLP:
    """Assembles the LP of step 4 (see :class:`ShrinkageLP`) from the Walsh matrix of S."""
    W_S, c_X, m, L = _walsh_inputs(W_S, c_X)
    if not np.allclose(W_S[:, 0], 1.0) or abs(c_X[0] - 1.0) > 1e-12:
        raise ValueError("the first Walsh column must be the constant function (empty subset)")
    c_S = W_S.mean(axis=0)
    A = np.empty((L, m + 1))
    A[:, 0] = -(c_S - c_X)
    A[:, 1:] = W_S.T
    lower = np.full(m + 1, 2.0 * delta / m)
    upper = np.full(m + 1, (Delta - delta) / m)
    lower[0], upper[0] = 0.0, 1.0
    cost = np.zeros(m + 1)
    cost[0] = 1.0
    return ShrinkageLP(A_eq=A, b_eq=c_X.copy(), lower=lower, upper=upper, cost=cost, c_X=c_X, c_S=c_S)


@dataclass(frozen=True, kw_only=True)
class LPSolution:
    """The shrinkage LP's result: lambda, solver status, seconds and residual (data-dependent: never published)."""

    lam: float
    status: str
    seconds: float
    residual: float  # max |A z - b| in the paper's units


def _solve_lp_scaled(lp: ShrinkageLP, solver: str | None) -> tuple[np.ndarray, str]:
    """Solves the LP with h = g/m (g ~ 1) so that the bounds delta/m are not lost below
    the solver's absolute tolerances when m is large and delta is small.

    With HiGHS the box is passed as column bounds, presolve is off (its dependent-equation
    search on the dense L x m matrix cost more than the solve) and the interior-point
    method runs without crossover: only lambda is used, and the IPM's time was the most
    predictable (about 25 iterations of O(m L^2); cold-start simplex times varied 10x
    between instances of the same size)."""
    cp = require("cvxpy")

    m = lp.A_eq.shape[1] - 1
    chosen = solver or ("HIGHS" if "HIGHS" in cp.installed_solvers() else "CLARABEL")
    lam = cp.Variable(bounds=[float(lp.lower[0]), float(lp.upper[0])])
    g = cp.Variable(m, bounds=[lp.lower[1:] * m, lp.upper[1:] * m])
    A_h = lp.A_eq[:, 1:] / m
    prob = cp.Problem(cp.Minimize(lam), [A_h @ g + lp.A_eq[:, 0] * lam == lp.b_eq])
    if chosen == "HIGHS":
        prob.solve(solver=chosen, highs_options={"presolve": "off", "solver": "ipm", "run_crossover": "off"})
    else:
        prob.solve(solver=chosen)
    if prob.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or lam.value is None:
        raise RuntimeError(f"shrinkage LP failed with status {prob.status!r} ({chosen})")
    z = np.concatenate([[float(lam.value)], np.asarray(g.value, dtype=np.float64) / m])
    return z, f"{prob.status} ({chosen})"


def solve_shrinkage_lp(lp: ShrinkageLP, solver: str | None = None) -> tuple[LPSolution, np.ndarray]:
    """Minimal lambda of step 4. Returns the solution summary and z = (lambda, h~).

    The LP is always feasible (lambda = 1, h = u_m satisfies it because
    2 delta <= 1 <= Delta - delta), so a non-optimal status is a solver failure.
    """
    t0 = time.perf_counter()
    z, status = _solve_lp_scaled(lp, solver)
    seconds = time.perf_counter() - t0
    # clip to [0, 1]; values below 1e-12 are solver noise around lambda = 0 (+ 0.0 drops -0.0)
    z[0] = (0.0 if z[0] < 1e-12 else min(z[0], 1.0)) + 0.0
    residual = float(np.max(np.abs(lp.A_eq @ z - lp.b_eq)))
    return LPSolution(lam=float(z[0]), status=status, seconds=seconds, residual=residual), z


# --------------------------------------------------------------------------- proximal QP


@dataclass(frozen=True, kw_only=True)
class QPSolution:
    """The proximal QP's result: status, seconds, residual and the range of m h (data-dependent: never published)."""

    status: str
    seconds: float
    residual: float  # max |M^T h - target|
    min_ratio: float  # min m h_i (>= delta up to tolerance)
    max_ratio: float  # max m h_i (<= Delta up to tolerance)


def solve_proximal_qp(
    W_S: np.ndarray, c_X: np.ndarray, lam: float, delta: float, Delta: float
) -> tuple[QPSolution, np.ndarray]:
    """Step 5: h* = argmin ||h - u_m||_2 over h on S with

        M^T h = (1 - lambda) c_X + lambda c_S     and     delta/m <= h_i <= Delta/m.

    Solved by CLARABEL in the scaled variable g = m h (objective ||g - 1||^2, which is
    m^2 ||h - u_m||^2 and has the same minimiser). Returns the summary and h* (confidential).
    """
    cp = require("cvxpy")

    W_S, c_X, m, L = _walsh_inputs(W_S, c_X)
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    c_S = W_S.mean(axis=0)
    target = (1.0 - lam) * c_X + lam * c_S
    t0 = time.perf_counter()
    g = cp.Variable(m)
    cons = [(W_S.T / m) @ g == target, g >= delta, g <= Delta]
    # ||g - 1||^2 = ||g||^2 - 2 sum(g) + m; written without the constant so that cvxpy
    # hands CLARABEL P = 2I on g itself instead of adding m auxiliary variables (2x faster)
    prob = cp.Problem(cp.Minimize(cp.sum_squares(g) - 2.0 * cp.sum(g)), cons)
    prob.solve(solver="CLARABEL")
    seconds = time.perf_counter() - t0
    if prob.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or g.value is None:
        raise RuntimeError(f"proximal QP failed with status {prob.status!r} (CLARABEL)")
    gv = np.asarray(g.value, dtype=np.float64)
    h = gv / m
    residual = float(np.max(np.abs(W_S.T @ h - target)))
    sol = QPSolution(
        status=f"{prob.status} (CLARABEL)",
        seconds=seconds,
        residual=residual,
        min_ratio=float(gv.min()),
        max_ratio=float(gv.max()),
    )
    return sol, h


# --------------------------------------------------------------------------- the mechanism


@dataclass(frozen=True, kw_only=True)
class SampleDiagnostics:
    """How the run went. Everything except sigma_min/threshold/tries/L and
    epsilon_theorem depends on the private data and is NOT covered by the DP guarantee:
    keep it in private logs, do not publish it."""

    lam: float
    sigma_min: float
    sigma_threshold: float
    conditioning_tries: int
    n_walsh: int
    lp_status: str
    qp_status: str
    lp_residual: float
    qp_residual: float
    walsh_seconds: float
    conditioning_seconds: float
    lp_seconds: float
    qp_seconds: float
    total_seconds: float
    epsilon_theorem: float  # epsilon Theorem 12.2 certifies for (n, p, params), public

    def to_dict(self) -> dict[str, Any]:
        """The diagnostics as plain values (private: log them, do not publish them)."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class SampleResult:
    """Output of :func:`private_sample`.

    samples: (k x p) uint8 -- the release covered by the DP guarantee.
    diagnostics: data-dependent run information, not publishable (see SampleDiagnostics).
    The private density h* is deliberately absent.
    """

    samples: np.ndarray
    diagnostics: SampleDiagnostics
    heuristic: bool


@dataclass(frozen=True, kw_only=True)
class PrivateDensity:
    """CONFIDENTIAL: h* and the reduced space it lives on.

    ``h_star_confidential`` is a deterministic function of the private data; it must never
    be published, logged or written to disk. Only draws from it (k of them, within the
    theorem's bound) are differentially private.
    """

    reduced_space: np.ndarray  # (m x p) uint8, public (data independent)
    h_star_confidential: np.ndarray = field(repr=False)  # (m,), sums to 1
    diagnostics: SampleDiagnostics


def fit_private_density(
    X: Any, params: PrivateSamplingParams, rng: np.random.Generator, *, lp_solver: str | None = None
) -> PrivateDensity:
    """Steps 1-5 of Algorithm 2: returns the CONFIDENTIAL density h* on a reduced space."""
    if not isinstance(params, PrivateSamplingParams):
        raise ValueError("params must be a PrivateSamplingParams")
    t_start = time.perf_counter()
    x = _as_boolean_matrix("X", X)
    n, p = x.shape
    t0 = time.perf_counter()
    c_X = walsh_means(x, params.d)
    walsh_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    space = draw_well_conditioned_space(p, params.d, params.m, rng, params.max_tries)
    conditioning_seconds = time.perf_counter() - t0
    lp = build_shrinkage_lp(space.walsh, c_X, params.delta, params.density_bound)
    lp_sol, _ = solve_shrinkage_lp(lp, solver=lp_solver)
    qp_sol, h = solve_proximal_qp(space.walsh, c_X, lp_sol.lam, params.delta, params.density_bound)
    # Solver noise may leave values a hair outside the box or the sum a hair off 1;
    # h >= delta/m > 0 holds up to tolerance, so clipping at 0 and renormalising only
    # removes that noise.
    h = np.clip(h, 0.0, None)
    h = h / h.sum()
    h.setflags(write=False)
    diag = SampleDiagnostics(
        lam=lp_sol.lam,
        sigma_min=space.sigma_min,
        sigma_threshold=space.threshold,
        conditioning_tries=space.tries,
        n_walsh=space.walsh.shape[1],
        lp_status=lp_sol.status,
        qp_status=qp_sol.status,
        lp_residual=lp_sol.residual,
        qp_residual=qp_sol.residual,
        walsh_seconds=walsh_seconds,
        conditioning_seconds=conditioning_seconds,
        lp_seconds=lp_sol.seconds,
        qp_seconds=qp_sol.seconds,
        total_seconds=time.perf_counter() - t_start,
        epsilon_theorem=epsilon_for_k(n, p, params.d, params.m, params.delta, params.density_bound, params.rows),
    )
    return PrivateDensity(reduced_space=space.points, h_star_confidential=h, diagnostics=diag)


def private_sample(
    X: Any,
    params: PrivateSamplingParams,
    rng: np.random.Generator,
    *,
    epsilon: float | None = None,
    lp_solver: str | None = None,
) -> SampleResult:
    """Algorithm 2: k i.i.d. draws from h* as a (k x p) 0/1 uint8 array.

    X is the private (n x p) 0/1 matrix. When ``epsilon`` is given, :func:`check_release`
    is applied first (raising if Theorem 12.2 does not cover k rows at that epsilon, unless
    params.heuristic). The result's ``samples`` are the releasable output; its diagnostics
    are not (see :class:`SampleDiagnostics`).
    """
    x = _as_boolean_matrix("X", X)
    if epsilon is not None:
        check_release(x.shape[0], x.shape[1], params, epsilon)
    t0 = time.perf_counter()
    dens = fit_private_density(x, params, rng, lp_solver=lp_solver)
    idx = rng.choice(dens.reduced_space.shape[0], size=params.rows, replace=True, p=dens.h_star_confidential)
    samples = dens.reduced_space[idx].copy()
    samples.setflags(write=False)
    diag = dens.diagnostics
    diag = SampleDiagnostics(**{**diag.to_dict(), "total_seconds": time.perf_counter() - t0})
    return SampleResult(samples=samples, diagnostics=diag, heuristic=params.heuristic)
