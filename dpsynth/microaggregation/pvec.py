"""PVEC: a unit vector drawn with density proportional to exp(v^T A v) on the sphere.

This is the exponential mechanism behind the private projection of Boedihardjo,
Strohmer and Vershynin (Section 5.1, after Kapralov and Talwar). It is sampled exactly
by the angular-central-Gaussian rejection method of Kent, Ganeiber and Mardia (2018):
in the eigenbasis of A the target is the Bingham density exp(-sum B_i x_i^2) with
B_i = l_max - l_i >= 0; proposals are normalised Gaussians with precisions
Omega_i = 1 + 2 B_i / b, where b solves sum 1 / (b + 2 B_i) = 1; the acceptance
ratio is bounded by M with log M = -(q - b)/2 + (q/2) log(q / b).

``private_projection`` repeats PVEC t times with deflation (Algorithm 2): each new
vector is drawn on the sphere of the orthogonal complement of the previous ones.

Floating point: every accepted vector is one of the proposals, whose support does not
depend on A except through the eigenbasis rotation; the returned basis is snapped to a
grid of 2^-24 and re-orthonormalised (post-processing), so low-order float bits of the
eigen-decomposition do not reach the output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.linalg import null_space
from scipy.optimize import brentq

__all__ = ["AcgProposal", "acg_proposal", "pvec", "pvec_acceptance_rate", "private_projection", "SNAP"]

SNAP = 2.0**-24


@dataclass(frozen=True, kw_only=True)
class AcgProposal:
    """The angular-central-Gaussian envelope of the Bingham density exp(-sum B_i x_i^2)."""

    B: np.ndarray  # shifted eigenvalues, >= 0
    omega: np.ndarray  # proposal precisions
    log_m: float  # log of the envelope constant
    b: float


def acg_proposal(B: np.ndarray) -> AcgProposal:
    """The angular-central-Gaussian envelope for shifted eigenvalues B."""
    B = np.asarray(B, dtype=np.float64)
    if B.ndim != 1 or B.size == 0 or np.any(B < 0) or not np.all(np.isfinite(B)):
        raise ValueError("B must be a non-empty vector of finite numbers >= 0")
    q = B.size
    if np.all(B == 0):
        b = float(q)
    else:
        f = lambda x: float(np.sum(1.0 / (x + 2.0 * B)) - 1.0)  # noqa: E731  (decreasing in x)
        lo = 1e-300
        b = float(q) if f(float(q)) >= 0 else brentq(f, lo, float(q), xtol=1e-14, rtol=1e-14, maxiter=500)
    omega = 1.0 + 2.0 * B / b
    log_m = -(q - b) / 2.0 + (q / 2.0) * math.log(q / b)
    return AcgProposal(B=B, omega=omega, log_m=log_m, b=b)


def _rejection(prop: AcgProposal, rng: np.random.Generator, m: int = 1) -> tuple[np.ndarray, int]:
    """m accepted points in eigen-coordinates and the number of proposals they took."""
    q = prop.B.size
    scale = 1.0 / np.sqrt(prop.omega)
    out, got, tries = np.empty((m, q)), 0, 0
    while got < m:
        batch = max(64, int(1.5 * (m - got) / 0.3))
        z = rng.standard_normal((batch, q)) * scale
        x = z / np.linalg.norm(z, axis=1, keepdims=True)
        log_ratio = -(x * x) @ prop.B - prop.log_m + (q / 2.0) * np.log((x * x) @ prop.omega)
        ok = np.flatnonzero(np.log(rng.random(batch)) < log_ratio)
        take = ok[: m - got]
        out[got : got + take.size] = x[take]
        got += take.size
        tries += int(take[-1]) + 1 if got == m else batch
    return out, tries


def pvec(A: np.ndarray, rng: np.random.Generator, *, size: int | None = None, return_tries: bool = False):
    """Unit vector(s) with density proportional to exp(v^T A v) (A symmetric).

    One vector, or a (size, p) array of independent ones; with ``return_tries`` also
    the number of proposals the rejection sampler used.
    """
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or not np.allclose(A, A.T, atol=1e-9 * (1 + np.abs(A).max())):
        raise ValueError("A must be a symmetric square matrix")
    lam, U = np.linalg.eigh((A + A.T) / 2.0)
    prop = acg_proposal(np.maximum(lam.max() - lam, 0.0))
    x, tries = _rejection(prop, rng, 1 if size is None else int(size))
    v = x @ U.T
    v = v[0] if size is None else v
    return (v, tries) if return_tries else v


def pvec_acceptance_rate(A: np.ndarray, n_mc: int = 400_000, seed: int = 12345) -> float:
    """Theoretical acceptance rate |Omega|^(1/2) E_unif[exp(-x^T B x)] / M.

    The sphere average is a Monte Carlo integral with a fixed seed (independent of any
    sampler run); its relative error is about 1 / sqrt(n_mc) times the spread.
    """
    lam = np.linalg.eigvalsh(np.asarray(A, dtype=np.float64))
    prop = acg_proposal(lam.max() - lam)
    g = np.random.default_rng(seed).standard_normal((n_mc, lam.size))
    x2 = (g / np.linalg.norm(g, axis=1, keepdims=True)) ** 2
    avg = float(np.mean(np.exp(-x2 @ prop.B)))
    return math.exp(0.5 * float(np.sum(np.log(prop.omega))) - prop.log_m) * avg


def private_projection(A: np.ndarray, t: int, rng: np.random.Generator) -> np.ndarray:
    """PROJ(A, t): t orthonormal columns, each a PVEC draw on the complement of the others.

    A is the p x p positive semi-definite score matrix (already multiplied by the
    privacy temperature). Returns a p x t matrix with orthonormal columns.
    """
    A = np.asarray(A, dtype=np.float64)
    p = A.shape[0]
    if not 1 <= t <= p:
        raise ValueError(f"t must lie in [1, {p}], got {t}")
    Q = np.eye(p)
    vs = []
    for _ in range(t):
        u = pvec(Q.T @ A @ Q, rng)
        v = Q @ u
        vs.append(v)
        if len(vs) < t:
            Q = Q @ null_space(u[None, :])
    V = np.round(np.column_stack(vs) / SNAP) * SNAP
    Qr, R = np.linalg.qr(V)
    return Qr * np.sign(np.diag(R))[None, :]
