"""Method ``microaggregation-dp``: noisy damped microaggregation (Section 5, Theorems 5.12-5.15).

Stages, each a pure-epsilon charge on the ledger (neighbours: add or remove one record):

1. ``records``: the record count with discrete Laplace noise (sensitivity 1). It sets
   the public n from which the defaults for t, alpha and b are computed;
2. ``projection``: a private t-dimensional subspace, PROJ(A, t) with
   A = (eps_P / t) sum_i x_i x_i^T (repeated PVEC with deflation). Adding or removing x
   changes A by (eps_P / t) x x^T, PSD with norm <= eps_P / t (||x|| <= 1), so each PVEC
   is (eps_P / t)-DP and the t of them eps_P-DP (Lemma 5.3; the paper's 6t in
   Theorem 5.12 is for replacing a record, which moves A in both directions);
3. ``weights``: the counts |F_j| of the cells of an alpha-net's nearest-point partition
   (fixed once the subspace is), with discrete Laplace noise of scale 1 / eps_w;
4. ``means``: the damped means sum_{F_j} x_i / max(|F_j|, b), l1 sensitivity 2 R / b
   (R = sqrt(C) the records' l1 radius, see
   :func:`dpsynth.microaggregation.mean_sensitivity_l1`), with Laplace noise on a grid.

The published measurement is the table of s noisy cell counts and noisy means (every
cell of the net, empty or not). For the gate, ``measured`` holds the 1-way and 2-way
marginals those blocks imply after projection (the expected synthetic counts) with a
delta-method per-cell stddev of their noise; it does not bound the microaggregation's
bias (see docs/microaggregation.md). Synthesis: weights projected onto the simplex,
means onto K, bootstrap, randomized rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from ..rows.encoding import EncodedTable
from ..measurement import DP_ADD_REMOVE, NoisyCount
from ..microaggregation import (
    Embedding,
    alpha_net,
    check_net_size,
    damped_means,
    mean_sensitivity_l1,
    nearest_point,
    noisy_counts,
    noisy_means,
    paper_design,
    private_projection,
    tuned_design,
)
from ..microaggregation.net import largest_feasible_t
from ..privacy.budget import Budget, Charge, Ledger
from ..privacy.noise import discrete_laplace
from ..schema import Schema
from .base import Measurement, MethodBase, ParamError, PrivacyStatement, param, params_to_dict
from .microaggregation_common import (
    BLOCKS, block_distribution, blocks_frame, check_numeric, embeddings, implied_measured, synthesize_blocks,
)

__all__ = ["MicroaggregationDPParams", "MicroaggregationDPMethod"]

STAGES = ("measure/microagg/records", "measure/microagg/projection", "measure/microagg/weights",
          "measure/microagg/means")
_CELL_BUDGET = 4e7  # floats in the s x p table of noisy means


@dataclass(frozen=True, kw_only=True)
class MicroaggregationDPParams:
    """split: relative budget shares of (projection, weights, means); default by preset:
    the paper's thirds (1, 1, 1), tuned (1, 1, 12). b_factor: multiplies the rule for b
    (default 1 for "paper", 8 for "tuned").
    records_share: fraction of epsilon for the noisy record count. preset: "paper"
    (Section 5.8's formulas) or "tuned" (net sized to n eps, see
    :mod:`dpsynth.microaggregation.defaults`). t, alpha, b override the preset.
    kappa: the paper's exponent (Remark 5.16: 1/3). numeric: "scaled" or "bins".
    pairs: also state implied 2-way marginals. max_net_points: memory limit on the net."""

    split: tuple[float, ...] | None = param(None, "three numbers > 0 (projection, weights, means), or none")
    b_factor: float | None = param(None, "number > 0, or none (1 for paper, 8 for tuned)")
    records_share: float = param(0.02, "number in (0, 0.5)")
    preset: Literal["paper", "tuned"] = "tuned"
    t: int | None = param(None, "whole number >= 1, or none (from the preset)")
    alpha: float | None = param(None, "number in (0, 4], or none (from the preset)")
    b: float | None = param(None, "number >= 1, or none (from the preset)")
    kappa: float = param(1 / 3, "number in (0, 1) (paper preset only)")
    numeric: Literal["hybrid", "scaled", "bins"] = "hybrid"
    pairs: bool = True
    max_net_points: float = param(2e6, "number >= 100")

    def __post_init__(self) -> None:
        if self.split is not None and (len(self.split) != 3 or not all(math.isfinite(x) and x > 0 for x in self.split)):
            raise ParamError(f"parameter 'split' must be three positive shares (projection, weights, means), got {self.split!r}")
        if not 0 < self.records_share < 0.5:
            raise ParamError(f"parameter 'records_share' must lie in (0, 0.5), got {self.records_share!r}")
        if self.preset not in ("paper", "tuned"):
            raise ParamError(f"parameter 'preset' must be 'paper' or 'tuned', got {self.preset!r}")
        if self.t is not None and not (isinstance(self.t, int) and self.t >= 1):
            raise ParamError(f"parameter 't' must be a whole number >= 1, got {self.t!r}")
        if self.alpha is not None and not (0 < self.alpha <= 4):
            raise ParamError(f"parameter 'alpha' must lie in (0, 4], got {self.alpha!r}")
        if self.b is not None and not (math.isfinite(self.b) and self.b >= 1):
            raise ParamError(f"parameter 'b' must be a number >= 1, got {self.b!r}")
        if self.b_factor is not None and not (math.isfinite(self.b_factor) and self.b_factor > 0):
            raise ParamError(f"parameter 'b_factor' must be a number > 0, got {self.b_factor!r}")
        if not 0 < self.kappa < 1:
            raise ParamError(f"parameter 'kappa' must lie in (0, 1), got {self.kappa!r}")
        check_numeric(self.numeric)
        if not self.max_net_points >= 100:
            raise ParamError(f"parameter 'max_net_points' must be >= 100, got {self.max_net_points!r}")

    def epsilons(self, epsilon: float) -> tuple[float, float, float, float]:
        """The epsilon of each stage (records, projection, weights, means) from the total."""
        e_n = epsilon * self.records_share
        rest = epsilon - e_n
        split = self.split or ((1.0, 1.0, 1.0) if self.preset == "paper" else (1.0, 1.0, 12.0))
        return (e_n,) + tuple(rest * s / sum(split) for s in split)  # type: ignore[return-value]


class MicroaggregationDPMethod(MethodBase):
    """Method ``microaggregation-dp``: records grouped by a private projection and a net;
    publishes noisy cell weights and damped noisy cell means (Section 5, Theorems 5.12-5.15).

    See the module docstring."""

    name: ClassVar[str] = "microaggregation-dp"
    guarantee: ClassVar[PrivacyStatement] = PrivacyStatement(
        kind="dp", neighbours=DP_ADD_REMOVE.neighbours,
        detail="pure epsilon-DP: Laplace noise on the count, the cell weights and the damped means; "
               "exponential-mechanism projection")
    pure_epsilon: ClassVar[bool] = True
    provides_marginals: ClassVar[bool] = False  # implied by the blocks: nothing to correct towards
    params_type: ClassVar[type] = MicroaggregationDPParams

    def __init__(self, params: MicroaggregationDPParams | None = None):
        self.params = params or MicroaggregationDPParams()

    def _net_limit(self, emb: Embedding) -> float:
        """Net points that fit: at most max_net_points, and s x p noisy means in the cell budget."""
        return min(self.params.max_net_points, _CELL_BUDGET / emb.dim)

    def plan(self, schema: Schema, budget: Budget) -> tuple[Charge, ...]:
        """Four pure-epsilon charges (records, projection, weights, means); checks a given net's size."""
        p = self.params
        _, emb = embeddings(schema, p.numeric)
        if p.t is not None:  # a default t is capped to what fits; a given one is checked here
            # the preset's alpha for a given t: 1/sqrt(t) (paper), at least 0.5 (tuned)
            alpha = p.alpha if p.alpha is not None else (1 / math.sqrt(p.t) if p.preset == "paper" else 0.5)
            try:
                check_net_size(p.t, alpha, self._net_limit(emb))
            except ValueError as exc:
                raise ParamError(f"{exc} (the table of noisy means has {emb.dim} coordinates per cell)") from None
        mech = ("laplace", "exponential", "laplace", "laplace")
        return tuple(Charge(stage=s, epsilon=e, mechanism=m)
                     for s, e, m in zip(STAGES, p.epsilons(float(budget.epsilon)), mech))

    def _design(self, n_pub: float, emb: Embedding, eps_y: float):
        p = self.params
        fn = paper_design if p.preset == "paper" else tuned_design
        kw: dict = {"kappa": p.kappa} if p.preset == "paper" else {}
        if p.b_factor is not None:
            kw["b_factor"] = p.b_factor
        d = fn(n_pub, emb.dim, emb.l1_radius, eps_y, t=p.t, alpha=p.alpha, b=p.b, **kw)
        if p.t is None:  # a default t never exceeds what fits in memory
            t_cap = max(1, largest_feasible_t(d.alpha, self._net_limit(emb)))
            if d.t > t_cap:
                d = fn(n_pub, emb.dim, emb.l1_radius, eps_y, t=t_cap, alpha=p.alpha, b=p.b, **kw)
        return d

    def measure(self, codes: EncodedTable, ledger: Ledger, rng: np.random.Generator) -> Measurement:
        """Noisy count, private projection, noisy cell weights and damped noisy means (each
        stage spends its charge)."""
        p = self.params
        geo, emb = embeddings(codes.schema, p.numeric)
        G = geo.embed_sparse(codes)  # the partition's geometry (||x|| <= 1)
        c_n, c_p, c_w, c_y = (ledger.spend(s) for s in STAGES)
        n_scale = 1.0 / c_n.epsilon
        n_pub = float(max(1, G.shape[0] + int(discrete_laplace(n_scale, 1, rng)[0])))
        d = self._design(n_pub, emb, c_y.epsilon)
        V = private_projection((c_p.epsilon / d.t) * (G.T @ G).toarray(), d.t, rng)
        net = alpha_net(d.t, d.alpha, self._net_limit(emb))
        cells = nearest_point(np.asarray(G @ V), net)
        del G
        counts, damped = damped_means(emb.group_sums(codes, cells, net.shape[0]), cells, d.b)
        noisy_c, c_scale = noisy_counts(counts, c_w.epsilon, rng)
        nm = noisy_means(damped, mean_sensitivity_l1(emb.l1_radius, d.b), c_y.epsilon, rng)
        df = blocks_frame(emb, noisy_c, nm.values)
        w, Y = block_distribution(emb, df, n_pub)
        # Delta-method noise of an implied count: means' noise weighted by w, counts' noise by P.
        mean_scale = nm.scale / emb.scale  # Laplace scale of a published share
        sd_means = n_pub * math.sqrt(2.0 * float(np.sum(w**2))) * mean_scale
        sd_counts = math.sqrt(2.0) * c_scale * math.sqrt(max(1.0, float(np.count_nonzero(w))) / emb.dim)
        sd1 = math.hypot(sd_means, sd_counts)
        measured = implied_measured(emb, Y, w, n_pub, (sd1, math.sqrt(2.0) * sd1), "laplace", p.pairs)
        meta = {"t": d.t, "alpha": d.alpha, "b": d.b, "cells": int(net.shape[0]), "preset": p.preset,
                "weights_scale": c_scale, "weights_mechanism": "discrete laplace on counts",
                "means_scale": mean_scale, "means_granularity": nm.granularity / emb.scale,
                "means_sensitivity_l1_scaled": nm.sensitivity_l1, "records_scale": n_scale,
                "note": ("measured marginals are those the noisy blocks imply after projection (what synthesis "
                         "reproduces), with a delta-method stddev; they carry the microaggregation's bias")}
        return Measurement(method=self.name, params=params_to_dict(p), charges=(c_n, c_p, c_w, c_y),
                           measured=measured, records=NoisyCount(value=n_pub, stddev=math.sqrt(2) * n_scale),
                           statement=DP_ADD_REMOVE, tables={BLOCKS: df}, meta=meta)

    def synthesize(self, m: Measurement, schema: Schema, rows: int | None, rng: np.random.Generator) -> EncodedTable:
        """Bootstraps blocks by their noisy weights and rounds each mean to a valid record."""
        total = float(m.records.value) if m.records is not None else 1.0
        n = int(round(total)) if rows is None else rows
        return synthesize_blocks(schema, str(m.params.get("numeric", "hybrid")), m.tables[BLOCKS], total, n, rng)
