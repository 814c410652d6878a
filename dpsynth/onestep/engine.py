"""The one-step procedure (Awan and Cai, Algorithm 1) over any parametric model.

A model here is a seeded sampler ``G(theta, omega)`` that turns the same seed ``omega``
(uniforms drawn once) into a sample for every ``theta``, an estimator ``T`` and a
projection onto the parameter space. One step:

    Z = G(theta_hat, omega);  theta* = Proj(2 theta_hat - T(Z));  Y = G(theta*, omega)

``Y`` keeps ``T(Y)`` close to ``theta_hat`` (up to o(1/sqrt n) under the paper's regularity
conditions), where the parametric bootstrap ``Z`` inflates the estimator's variance.
:func:`iterate` repeats the update (the paper's Remark 9) and reports how far ``T(Y)``
still is from ``theta_hat`` after each step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

__all__ = ["Model", "OneStep", "Iteration", "one_step", "iterate", "bootstrap"]


class Model(Protocol):
    """What the engine needs of a parametric family."""

    def seed(self, n: int, rng: np.random.Generator) -> Any:
        """The seed omega for a sample of ``n`` records (uniforms, drawn once)."""

    def sample(self, theta: np.ndarray, omega: Any) -> Any:
        """G(theta, omega): a deterministic function of theta and the seed."""

    def estimate(self, data: Any) -> np.ndarray:
        """T: the (efficient) estimator applied to a sample."""

    def project(self, theta: np.ndarray) -> np.ndarray:
        """Nearest point of the parameter space."""


@dataclass(frozen=True, kw_only=True)
class OneStep:
    """Result of one step: the plug-in parameter, the bootstrap and one-step samples."""

    theta_hat: np.ndarray
    theta_z: np.ndarray      # T(Z), Z = G(theta_hat, omega)
    theta_star: np.ndarray   # Proj(2 theta_hat - T(Z))
    bootstrap: Any           # Z
    sample: Any              # Y = G(theta_star, omega)


@dataclass(frozen=True, kw_only=True)
class Iteration:
    """Result of :func:`iterate`: the last parameter and sample, and the convergence report."""

    theta: np.ndarray
    sample: Any
    steps: int
    converged: bool
    gaps: tuple[float, ...]  # max |T(Y_k) - theta_hat| after each step k = 0 (bootstrap), 1, ...


def bootstrap(model: Model, theta_hat: np.ndarray, omega: Any) -> Any:
    """The parametric bootstrap sample G(theta_hat, omega)."""
    return model.sample(np.asarray(theta_hat, dtype=np.float64), omega)


def one_step(model: Model, theta_hat: np.ndarray, omega: Any) -> OneStep:
    """Algorithm 1 with the seed fixed: the same omega feeds both calls of G."""
    theta_hat = np.asarray(theta_hat, dtype=np.float64)
    z = model.sample(theta_hat, omega)
    theta_z = np.asarray(model.estimate(z), dtype=np.float64)
    theta_star = np.asarray(model.project(2.0 * theta_hat - theta_z), dtype=np.float64)
    return OneStep(theta_hat=theta_hat, theta_z=theta_z, theta_star=theta_star,
                   bootstrap=z, sample=model.sample(theta_star, omega))


def iterate(
    model: Model, theta_hat: np.ndarray, omega: Any, *, max_steps: int = 50, tol: float = 1e-10
) -> Iteration:
    """Repeats theta <- Proj(theta + theta_hat - T(G(theta, omega))) from theta_hat.

    The first update is exactly the one-step plug-in. Stops when the largest gap
    ``|T(G(theta, omega)) - theta_hat|`` is at most ``tol`` (relative to ``1 + |theta_hat|``)
    or after ``max_steps`` updates; ``converged`` says which.
    """
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    theta_hat = np.asarray(theta_hat, dtype=np.float64)
    scale = 1.0 + np.abs(theta_hat)
    theta = theta_hat
    y = model.sample(theta, omega)
    est = np.asarray(model.estimate(y), dtype=np.float64)
    gaps = [float(np.max(np.abs(est - theta_hat) / scale))]
    steps = 0
    while gaps[-1] > tol and steps < max_steps:
        theta = np.asarray(model.project(theta + theta_hat - est), dtype=np.float64)
        y = model.sample(theta, omega)
        est = np.asarray(model.estimate(y), dtype=np.float64)
        gaps.append(float(np.max(np.abs(est - theta_hat) / scale)))
        steps += 1
    return Iteration(theta=theta, sample=y, steps=steps, converged=gaps[-1] <= tol, gaps=tuple(gaps))
