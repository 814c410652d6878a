"""alpha-nets of the unit ball in R^t from the A_t* lattice, and the nearest-point partition.

The A_t* lattice (the dual of A_t = {z in Z^(t+1): sum z = 0}) has covering radius
R_t = sqrt(t (t + 2) / (12 (t + 1))) at unit scale. Scaled by alpha / R_t, every point
of R^t lies within alpha of a lattice point; the points of norm at most 1 + alpha,
pulled radially onto the ball, are an alpha-net of the unit ball (radial projection onto
a convex set never moves a point away from the ball's points).

Sizes grow like (1/alpha)^t, so the size is estimated from volumes first and a net that
would not fit in memory is refused before anything is enumerated (and before any row
is read), naming the largest feasible alpha or t.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.spatial import cKDTree

__all__ = [
    "NetTooLarge",
    "covering_radius",
    "estimate_net_size",
    "largest_feasible_t",
    "smallest_feasible_alpha",
    "alpha_for_size",
    "check_net_size",
    "alpha_net",
    "nearest_point",
]


class NetTooLarge(ValueError):
    """The requested (t, alpha) net would not fit in memory."""


def covering_radius(t: int) -> float:
    """Covering radius of the A_t* lattice at unit scale."""
    return math.sqrt(t * (t + 2) / (12.0 * (t + 1)))


def estimate_net_size(t: int, alpha: float) -> float:
    """Lattice points in the ball of radius 1 + alpha: volume / cell volume, plus boundary slack."""
    if t < 1 or not alpha > 0:
        raise ValueError("t must be >= 1 and alpha > 0")
    f = alpha / covering_radius(t)  # lattice scale
    ball = math.pi ** (t / 2) / math.gamma(t / 2 + 1) * (1.0 + alpha) ** t
    cell = f**t / math.sqrt(t + 1)  # det(A_t*) = 1/sqrt(t+1) at unit scale
    return ball / cell


def _fits(t: int, alpha: float, max_points: float) -> bool:
    return 1.3 * estimate_net_size(t, alpha) + 64 <= max_points


def smallest_feasible_alpha(t: int, max_points: float) -> float:
    """The smallest alpha (to 3 digits) whose t-dimensional net fits in ``max_points``."""
    lo, hi = 1e-4, 4.0
    if not _fits(t, hi, max_points):
        return math.inf
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if _fits(t, mid, max_points) else (mid, hi)
    return math.ceil(hi * 1000) / 1000


def alpha_for_size(t: int, target: float) -> float:
    """The smallest alpha (to 3 digits, at most 4) whose estimated net size is <= target."""
    lo, hi = 1e-4, 4.0
    if estimate_net_size(t, hi) > target:
        return hi
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if estimate_net_size(t, mid) <= target else (mid, hi)
    return math.ceil(hi * 1000) / 1000


def largest_feasible_t(alpha: float, max_points: float, t_max: int = 64) -> int:
    """The largest t whose alpha-net fits in ``max_points`` (0 if none)."""
    best = 0
    for t in range(1, t_max + 1):
        if _fits(t, alpha, max_points):
            best = t
    return best


def check_net_size(t: int, alpha: float, max_points: float) -> None:
    """Raises NetTooLarge naming the largest feasible alpha and t (public inputs only)."""
    if _fits(t, alpha, max_points):
        return
    a = smallest_feasible_alpha(t, max_points)
    tt = largest_feasible_t(alpha, max_points)
    raise NetTooLarge(
        f"an alpha-net with t={t}, alpha={alpha:g} would hold about {estimate_net_size(t, alpha):.3g} points, "
        f"over the limit of {max_points:.3g} (parameter 'max_net_points'); the smallest feasible alpha for "
        f"t={t} is {a:g}" + (f", the largest feasible t for alpha={alpha:g} is {tt}" if tt else "")
        + ": pass one of those (--param alpha=... or t=...), leave t and alpha unset for the defaults, "
        "or raise max_net_points"
    )


def _coset_points(t: int, glue: np.ndarray, r2: float) -> np.ndarray:
    """Points z + glue (z in Z^(t+1), sum z = 0) with squared norm <= r2."""
    d = t + 1
    prefix = np.zeros((1, 0), dtype=np.int64)
    partial = np.zeros(1)
    for k in range(d - 1):
        r = math.sqrt(r2)
        vals = np.arange(math.floor(-r - glue[k]) - 1, math.ceil(r - glue[k]) + 2, dtype=np.int64)
        add = (vals + glue[k]) ** 2
        new = partial[:, None] + add[None, :]
        keep = new <= r2 + 1e-12
        i, j = np.nonzero(keep)
        prefix = np.column_stack([prefix[i], vals[j]])
        partial = new[i, j]
    last = -prefix.sum(axis=1)
    total = partial + (last + glue[-1]) ** 2
    ok = total <= r2 + 1e-12
    pts = np.column_stack([prefix[ok], last[ok]]).astype(np.float64)
    return pts + glue[None, :]


def alpha_net(t: int, alpha: float, max_points: float = 2e6) -> np.ndarray:
    """An alpha-net of the unit ball of R^t (rows), from the scaled A_t* lattice."""
    check_net_size(t, alpha, max_points)
    d = t + 1
    f = alpha / covering_radius(t)
    radius = (1.0 + alpha) / f  # in unit-lattice coordinates
    # Orthonormal basis of the hyperplane sum = 0 in R^(t+1).
    basis = np.linalg.qr(np.eye(d) - 1.0 / d)[0][:, :t]
    chunks = []
    for i in range(d):  # the t+1 cosets [i] + A_t of A_t* in A_t
        glue = np.array([i / d] * (d - i) + [-(d - i) / d] * i)
        pts = _coset_points(t, glue, radius * radius)
        chunks.append((pts @ basis) * f)
    net = np.concatenate(chunks)
    norms = np.linalg.norm(net, axis=1)
    net = net[norms <= 1.0 + alpha + 1e-12]
    norms = np.linalg.norm(net, axis=1, keepdims=True)
    net = np.where(norms > 1.0, net / np.maximum(norms, 1e-300), net)
    net = np.unique(np.round(net, 12), axis=0)
    return net


def nearest_point(points: np.ndarray, net: np.ndarray) -> np.ndarray:
    """Index of the nearest net point of each row (a per-row function: ties by lowest index)."""
    tree = cKDTree(net)
    _, idx = tree.query(np.asarray(points, dtype=np.float64), k=1)
    return np.asarray(idx, dtype=np.int64)
