"""The one parameter class of private sampling, and the checks its modules share.

:class:`PrivateSamplingParams` holds Algorithm 2's public parameters (Boedihardjo,
Strohmer and Vershynin) together with the release's own (``public_n``, ``compact``);
the algorithm, the bounds calculators and the release method all take it.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base import param

__all__ = ["PrivateSamplingParams"]


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


def _check_positive(name: str, value: Any) -> float:
    v = _check_real(name, value)
    if v <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return v


def _as_boolean_matrix(name: str, X: Any) -> np.ndarray:
    """Validates a 2-D 0/1 (or bool) matrix and returns it as uint8."""
    arr = np.asarray(X)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (rows x Boolean columns), got shape {arr.shape}")
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"{name} must have at least one row and one column, got shape {arr.shape}")
    if arr.dtype == np.bool_:
        return arr.astype(np.uint8)
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"{name} must be numeric 0/1 or bool, got dtype {arr.dtype}")
    if not np.all((arr == 0) | (arr == 1)):
        raise ValueError(f"{name} must contain only 0 and 1 (one-hot encode categorical columns first)")
    return arr.astype(np.uint8)


def _safe_exp(log_value: float) -> float:
    """exp that returns inf instead of raising on overflow."""
    return math.exp(log_value) if log_value < 709.0 else math.inf

# --------------------------------------------------------------------------- parameters


@dataclass(frozen=True, kw_only=True)
class PrivateSamplingParams:
    """Parameters of private sampling (Algorithm 2) and of its release.

    k: rows released (the release method takes --rows; required to sample). public_n: the
    record count, declared public by the data owner (required for a DP release). d: Walsh
    degree = largest dimension of the marginals matched. m: size of the reduced space
    (must be at least the number of Walsh functions of degree <= d). delta/Delta: density
    bounds of the theorem (h* in [delta/m, Delta/m]; the data density <= Delta/2^p; Delta
    defaults to m in heuristic mode). gamma: failure probability of the accuracy theorem.
    max_tries: reduced spaces drawn before giving up on conditioning. heuristic: run past
    Theorem 12.2's bound (the release is then NOT DP). compact: a two-value column is one
    bit instead of two one-hot bits (the encoding the papers use for yes/no columns).
    """

    k: int | None = param(None, "whole number >= 1 (the release takes it from --rows)")
    public_n: int | None = param(None, "the input's exact row count, declared public; required unless heuristic=true")
    d: int = param(2, "whole number >= 1")
    m: int = param(4096, "whole number >= the Walsh functions of degree <= d on the one-hot features "
                          "(1 + p + p(p-1)/2 for d = 2)")
    delta: float = param(0.05, "number in (0, 0.5]")
    Delta: float | None = param(None, "number >= 1 + delta; required unless heuristic=true")
    gamma: float = param(0.125, "number in (0, 1)")
    max_tries: int = param(10, "whole number >= 1")
    heuristic: bool = False
    compact: bool = False

    def __post_init__(self) -> None:
        _check_int("d", self.d, 1)
        _check_int("m", self.m, 1)
        if self.k is not None:
            _check_int("k", self.k, 1)
        if self.public_n is not None and (isinstance(self.public_n, bool) or int(self.public_n) < 1):
            raise ValueError(f"parameter 'public_n' must be a whole number >= 1, got {self.public_n!r}")
        _check_int("max_tries", self.max_tries, 1)
        delta = _check_positive("delta", self.delta)
        if delta > 0.5:
            raise ValueError(f"delta must be <= 1/2 (the shrinkage cube starts at 2*delta/m <= 1/m), got {delta}")
        Delta = _check_positive("Delta", self.density_bound)
        if Delta < 1.0 + delta:
            raise ValueError(
                f"Delta must be >= 1 + delta = {1.0 + delta} (the shrinkage cube ends at (Delta - delta)/m >= 1/m), "
                f"got {Delta}"
            )
        gamma = _check_real("gamma", self.gamma)
        if not 0.0 < gamma < 1.0:
            raise ValueError(f"gamma must be in (0, 1), got {gamma}")
        for name in ("heuristic", "compact"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")

    @property
    def density_bound(self) -> float:
        """Delta as used by the algorithm: the given bound, or m when none was given
        (heuristic mode: no upper box constraint on h*)."""
        return float(self.Delta if self.Delta is not None else self.m)

    @property
    def rows(self) -> int:
        """k, required once the algorithm samples."""
        if self.k is None:
            raise ValueError("private-sampling needs the number of rows to release: pass --rows K (or --param k=K)")
        return int(self.k)
