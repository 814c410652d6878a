"""Privacy and accuracy bounds of private sampling (calculators, no data but n and p).

Theorem 12.2 (privacy: the largest k that is epsilon-DP, or the epsilon k rows cost) and
Theorem 12.4 (accuracy) of Boedihardjo, Strohmer and Vershynin, as restated by Pierquin,
Zimmermann and Boussard (2023, Theorems 4.1/4.2 and equation (2)); :func:`check_release`
refuses a release the theorem does not cover; ``dpsynth bounds`` prints
:func:`bounds_report`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .params import PrivateSamplingParams, _as_boolean_matrix, _check_int, _check_positive, _check_real, _safe_exp

__all__ = [
    "AccuracyConditions",
    "n_walsh",
    "privacy_k_bound",
    "max_k",
    "epsilon_for_k",
    "accuracy_conditions",
    "bounds_report",
    "check_release",
    "empirical_sup_density",
]


def n_walsh(p: int, d: int) -> int:
    """L = C(p, <= d) = number of parity functions of degree at most d on p bits."""
    p = _check_int("p", p, 1)
    d = _check_int("d", d, 0)
    return sum(math.comb(p, j) for j in range(min(d, p) + 1))


# --------------------------------------------------------------------------- calculators


def _check_common(n: Any, p: Any, d: Any, m: Any, delta: Any, Delta: Any) -> tuple[int, int, int, int, float, float]:
    return (
        _check_int("n", n, 1),
        _check_int("p", p, 1),
        _check_int("d", d, 1),
        _check_int("m", m, 1),
        _check_positive("delta", delta),
        _check_positive("Delta", Delta),
    )


def _log_k_bound(n: int, p: int, d: int, m: int, delta: float, Delta: float, epsilon: float) -> float:
    n, p, d, m, delta, Delta = _check_common(n, p, d, m, delta, Delta)
    epsilon = _check_positive("epsilon", epsilon)
    return (
        math.log(epsilon)
        - math.log(4.0 * math.sqrt(2.0))
        + 1.5 * (math.log(delta) - math.log(Delta))
        - d / 2.0
        - 0.25 * math.log(n_walsh(p, d))
        + 0.5 * math.log(n)
        - 0.75 * math.log(m)
    )


def privacy_k_bound(n: int, p: int, d: int, m: int, delta: float, Delta: float, epsilon: float) -> float:
    """Right-hand side of Theorem 12.2 (practical paper, Theorem 4.1):

        k <= 1/(4 sqrt 2) * epsilon * (delta/Delta)^{3/2} * e^{-d/2} * L^{-1/4} * sqrt(n) / m^{3/4}

    with L = C(p, <= d). Computed in logs (p, n and Delta may be huge)."""
    return _safe_exp(_log_k_bound(n, p, d, m, delta, Delta, epsilon))


def max_k(n: int, p: int, d: int, m: int, delta: float, Delta: float, epsilon: float) -> int:
    """Largest k for which Algorithm 2 is epsilon-DP by Theorem 12.2 (0 = no release)."""
    bound = privacy_k_bound(n, p, d, m, delta, Delta, epsilon)
    if not math.isfinite(bound):
        raise ValueError("the Theorem 12.2 bound on k overflows a float; check n, m and epsilon")
    return int(math.floor(bound * (1.0 + 1e-12)))


def epsilon_for_k(n: int, p: int, d: int, m: int, delta: float, Delta: float, k: int) -> float:
    """Smallest epsilon for which Theorem 12.2 certifies releasing k rows (linear in k;
    inf when it overflows a float)."""
    k = _check_int("k", k, 1)
    return _safe_exp(math.log(k) - _log_k_bound(n, p, d, m, delta, Delta, 1.0))


@dataclass(frozen=True, kw_only=True)
class AccuracyConditions:
    """Sufficient conditions of Theorem 12.4 (practical paper, Theorem 4.2 and eq. (2)):

        n >= n_min = 16 delta^-2 gamma^-1 e^{2d} L
        m_min = 16 delta^-2 gamma^-1 Delta^2 e^{2d} L  <=  m  <=  m_max = 2^{p/4}
        k >= k_min = 4 delta^-2 (log(2/gamma) + log L)
        data density <= Delta / 2^p

    Under them, with probability >= 1 - 4 gamma - 2^{-p/2}, the algorithm succeeds and
    every marginal of dimension <= d of the k synthetic rows is within 4 delta of the
    data's."""

    n_walsh: int
    n_min: float
    m_min: float
    m_max: float
    k_min: float
    accuracy: float  # 4 delta
    success_probability: float  # 1 - 4 gamma - 2^{-p/2} (may be <= 0: vacuous)
    m_range_nonempty: bool
    n_ok: bool
    m_ok: bool
    k_ok: bool | None  # None when k was not given
    all_ok: bool

    def to_dict(self) -> dict[str, Any]:
        """The conditions as plain values."""
        return asdict(self)


def accuracy_conditions(
    n: int, p: int, d: int, m: int, delta: float, Delta: float, gamma: float, k: int | None = None
) -> AccuracyConditions:
    """Evaluates the conditions of Theorem 12.4 (see :class:`AccuracyConditions`)."""
    n, p, d, m, delta, Delta = _check_common(n, p, d, m, delta, Delta)
    gamma = _check_real("gamma", gamma)
    if not 0.0 < gamma < 1.0:
        raise ValueError(f"gamma must be in (0, 1), got {gamma}")
    if k is not None:
        k = _check_int("k", k, 1)
    L = n_walsh(p, d)
    log_base = math.log(16.0) - 2.0 * math.log(delta) - math.log(gamma) + 2.0 * d + math.log(L)
    n_min = _safe_exp(log_base)
    m_min = _safe_exp(log_base + 2.0 * math.log(Delta))
    m_max = _safe_exp(p / 4.0 * math.log(2.0))
    k_min = 4.0 / delta**2 * (math.log(2.0 / gamma) + math.log(L))
    n_ok = n >= n_min
    m_ok = m_min <= m <= m_max
    k_ok = None if k is None else k >= k_min
    return AccuracyConditions(
        n_walsh=L,
        n_min=n_min,
        m_min=m_min,
        m_max=m_max,
        k_min=k_min,
        accuracy=4.0 * delta,
        success_probability=1.0 - 4.0 * gamma - _safe_exp(-p / 2.0 * math.log(2.0)),
        m_range_nonempty=m_min <= m_max,
        n_ok=n_ok,
        m_ok=m_ok,
        k_ok=k_ok,
        all_ok=n_ok and m_ok and (k_ok is not False),
    )


def _json_number(x: float) -> float | str:
    """Infinity is not JSON: report it as a string."""
    return x if math.isfinite(x) else "inf"


def bounds_report(
    *,
    n: int,
    p: int,
    d: int,
    m: int,
    delta: float,
    Delta: float,
    gamma: float,
    epsilon: float,
    k: int | None = None,
) -> dict[str, Any]:
    """JSON-ready summary of what Theorems 12.2 and 12.4 say for these numbers
    (for ``dpsynth bounds``). Everything is computed from public quantities."""
    k_bound = privacy_k_bound(n, p, d, m, delta, Delta, epsilon)
    acc = accuracy_conditions(n, p, d, m, delta, Delta, gamma, k)
    privacy: dict[str, Any] = {
        "theorem": "12.2",
        "k_bound": _json_number(k_bound),
        "max_k": max_k(n, p, d, m, delta, Delta, epsilon) if math.isfinite(k_bound) else "inf",
        "epsilon_per_row": _json_number(epsilon_for_k(n, p, d, m, delta, Delta, 1)),
    }
    if k is not None:
        privacy["k"] = k
        privacy["epsilon_for_k"] = _json_number(epsilon_for_k(n, p, d, m, delta, Delta, k))
        privacy["holds"] = k <= k_bound * (1.0 + 1e-12)
    accuracy = {key: (_json_number(v) if isinstance(v, float) else v) for key, v in acc.to_dict().items()}
    accuracy["theorem"] = "12.4"
    notes = []
    if not (2.0 * delta <= 1.0 <= Delta - delta):
        notes.append("the algorithm needs 2*delta <= 1 <= Delta - delta; these delta/Delta cannot be run")
    if not acc.m_range_nonempty:
        notes.append("m_min > m_max: no m satisfies the accuracy theorem for these p, delta, Delta, gamma")
    if acc.success_probability <= 0:
        notes.append("1 - 4*gamma - 2^(-p/2) <= 0: the accuracy guarantee is vacuous")
    if m < acc.n_walsh:
        notes.append(f"m < L = {acc.n_walsh}: the reduced space can never be well conditioned")
    return {
        "inputs": {
            "n": n,
            "p": p,
            "d": d,
            "m": m,
            "delta": delta,
            "Delta": Delta,
            "gamma": gamma,
            "epsilon": epsilon,
            "k": k,
        },
        "n_walsh": acc.n_walsh,
        # the headline numbers, also at the top level for scripts
        "max_k": privacy["max_k"],
        "m_min": accuracy["m_min"],
        "m_max": accuracy["m_max"],
        "n_min": accuracy["n_min"],
        "k_min": accuracy["k_min"],
        **({"holds": privacy["holds"]} if k is not None else {}),
        "privacy": privacy,
        "accuracy": accuracy,
        "notes": notes,
    }


def check_release(n: int, p: int, params: PrivateSamplingParams, epsilon: float) -> float:
    """Checks that Theorem 12.2 certifies releasing params.rows rows from n rows of p bits at
    ``epsilon``. Raises ValueError (stating the largest k allowed) when it does not, unless
    params.heuristic is True. Returns the epsilon the theorem certifies for params.rows
    (which exceeds ``epsilon`` in heuristic mode when the check would have failed)."""
    if not isinstance(params, PrivateSamplingParams):
        raise ValueError("params must be a PrivateSamplingParams")
    eps_k = epsilon_for_k(n, p, params.d, params.m, params.delta, params.density_bound, params.rows)
    allowed = max_k(n, p, params.d, params.m, params.delta, params.density_bound, epsilon)
    if params.rows > allowed and not params.heuristic:
        bound = privacy_k_bound(n, p, params.d, params.m, params.delta, params.density_bound, epsilon)
        raise ValueError(
            f"k = {params.rows} rows are not covered at epsilon = {epsilon:g}: Theorem 12.2 allows at most "
            f"k = {allowed} (bound {bound:.3g}) for n = {n}, p = {p}, d = {params.d}, m = {params.m}, "
            f"delta = {params.delta:g}, Delta = {params.density_bound:g}; releasing k = {params.rows} rows needs "
            f"epsilon >= {eps_k:.4g}. Lower k (--rows), raise epsilon, or set heuristic=true (NOT DP); for a DP synthetic table use --method pgm or sds."
        )
    return eps_k


def empirical_sup_density(X: Any) -> float:
    """||f_n||_inf: the largest fraction of rows equal to one point of the cube.

    This reads the private rows; use it to reproduce published tables, not to set Delta
    for a release (Delta = 2^p ||f_n||_inf computed this way is not private)."""
    x = _as_boolean_matrix("X", X)
    _, counts = np.unique(x, axis=0, return_counts=True)
    return float(counts.max()) / x.shape[0]
