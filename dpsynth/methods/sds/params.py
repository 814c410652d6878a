"""Parameters of ``sds`` and the rules derived from them alone (sigma proportions, thresholds).

Names, meanings and defaults follow pac-synth 0.0.8 except three defaults (see docs/sds.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

AccuracyMode = Literal["prioritize_long", "prioritize_short", "balanced"]
FabricationMode = Literal["uncontrolled", "progressive", "balanced", "minimize"]


@dataclass(frozen=True, kw_only=True)
class SdsParams:
    """Parameters of ``sds``; names and meanings as in pac-synth 0.0.8, three defaults changed.

    The domain is public, so ``one_way="public"`` measures every code at k=1 without the
    paper's tau_1, ``empty_cells="value"`` treats a missing code as an ordinary value, and
    ``accuracy_mode`` defaults to ``prioritize_short`` (pac-synth: ``"paper"``, ``"deficit"``,
    ``prioritize_long``; see docs/sds-generalisation.md).

    ``epsilon=None`` uses the release's whole budget. ``thresholds`` are per length
    k = 2 .. R (fixed values >= 0, or adaptive eta in (0, 1]); without them
    ``fabrication_mode`` picks pac-synth's presets (default ``uncontrolled``: eta = 1,
    threshold 0). ``sigma_proportions`` (p_1 .. p_R > 0) override ``accuracy_mode``
    (prioritize_long: p_k = 1/k; prioritize_short: 1/(R-k+1); balanced: 1).
    ``estimator="pgm"`` synthesizes from one graphical model fitted to the measured 1-way
    marginals and a maximum spanning tree of the 2-way ones (by their noisy mutual
    information; ``dpsynth.inference.fit_measurement``, post-processing) instead of the
    aggregate-seeded sampler; ``synthesis`` and ``rake_one_way`` then do not apply.
    ``auto_length`` (ours, complete synthesis with ``one_way="public"``): when the DP
    record count says the planned 2-way noise would swamp the 2-way tables
    (:func:`budget.pair_noise_ratio` >= :data:`budget.ONE_WAY_ONLY_RATIO`), only the 1-way
    level is measured, with every planned Gaussian share; the measurement's
    ``reporting_length`` then says 1 (``reporting_length_requested`` keeps R).
    """

    reporting_length: int = 3
    epsilon: float | None = None
    delta: float | None = None
    percentile_percentage: int = 99
    percentile_epsilon_proportion: float = 0.01
    number_of_records_epsilon_proportion: float = 0.005
    accuracy_mode: AccuracyMode = "prioritize_short"
    sigma_proportions: tuple[float, ...] | None = None
    threshold_type: Literal["fixed", "adaptive"] = "adaptive"
    thresholds: tuple[float, ...] | None = None
    fabrication_mode: FabricationMode | None = None
    accounting: Literal["zcdp", "paper"] = "zcdp"
    synthesis: Literal["complete", "strict"] = "complete"
    use_synthetic_counts: bool = False
    weight_selection_percentile: float = 95.0
    rake_one_way: bool = True
    one_way: Literal["public", "paper"] = "public"
    empty_cells: Literal["deficit", "value"] = "value"
    estimator: Literal["sds", "pgm"] = "sds"
    #: Measure only the 1-way level (with every Gaussian share) when the DP record count
    #: says that the 2-way tables would be noise (see :func:`budget.pair_noise_ratio`).
    auto_length: bool = True
    #: Complete synthesis: redraw the records from a reweighted pool when a measured k-way
    #: table (every k = 2 .. R; the name is from when only pairs were refitted) says,
    #: beyond its noise, that they are off (:mod:`.refit`), then update the records of
    #: the tables still off (:mod:`.update`); post-processing.
    fit_pairs: bool = True

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> None:
            raise ValueError(f"parameter {name!r} {why}, got {getattr(self, name)!r}")

        R = self.reporting_length
        if isinstance(R, bool) or not isinstance(R, int) or not 1 <= R <= 10:
            bad("reporting_length", "must be a whole number from 1 to 10")
        if self.epsilon is not None and not (
            isinstance(self.epsilon, (int, float)) and math.isfinite(self.epsilon) and self.epsilon > 0
        ):
            bad("epsilon", "must be a finite number > 0 (or None for the release budget)")
        if self.delta is not None and not (isinstance(self.delta, (int, float)) and 0 < self.delta < 1):
            bad("delta", "must lie in (0, 1) (or None for pac-synth's default)")
        q = self.percentile_percentage
        if isinstance(q, bool) or not isinstance(q, int) or not 1 <= q <= 100:
            bad("percentile_percentage", "must be a whole number from 1 to 100")
        for name in ("percentile_epsilon_proportion", "number_of_records_epsilon_proportion"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 < v < 1):
                bad(name, "must lie in (0, 1)")
        if self.accuracy_mode not in ("prioritize_long", "prioritize_short", "balanced"):
            bad("accuracy_mode", "must be prioritize_long, prioritize_short or balanced")
        if self.sigma_proportions is not None:
            sp = tuple(self.sigma_proportions)
            if len(sp) != R:
                bad("sigma_proportions", f"must hold reporting_length={R} values")
            if any(not (math.isfinite(float(x)) and float(x) > 0) for x in sp):
                bad("sigma_proportions", "must all be finite and > 0")
            object.__setattr__(self, "sigma_proportions", tuple(float(x) for x in sp))
        if self.threshold_type not in ("fixed", "adaptive"):
            bad("threshold_type", "must be fixed or adaptive")
        if self.fabrication_mode is not None:
            if self.fabrication_mode not in ("uncontrolled", "progressive", "balanced", "minimize"):
                bad("fabrication_mode", "must be uncontrolled, progressive, balanced or minimize")
            if self.thresholds is not None:
                bad("fabrication_mode", "cannot be combined with explicit thresholds")
            if self.threshold_type != "adaptive":
                bad("fabrication_mode", "presets are adaptive thresholds: leave threshold_type adaptive")
        if self.thresholds is not None:
            th = tuple(float(x) for x in self.thresholds)
            if len(th) != R - 1:
                bad("thresholds", f"must hold one value per length 2..{R} ({R - 1} values)")
            if self.threshold_type == "fixed" and any(not (math.isfinite(x) and x >= 0) for x in th):
                bad("thresholds", "fixed thresholds must be finite and >= 0")
            if self.threshold_type == "adaptive" and any(not (0 < x <= 1) for x in th):
                bad("thresholds", "adaptive thresholds (eta) must lie in (0, 1]")
            object.__setattr__(self, "thresholds", th)
        if self.accounting not in ("zcdp", "paper"):
            bad("accounting", "must be zcdp or paper")
        if self.one_way not in ("public", "paper"):
            bad("one_way", "must be public or paper")
        if self.synthesis not in ("complete", "strict"):
            bad("synthesis", "must be complete or strict")
        if self.estimator not in ("sds", "pgm"):
            bad("estimator", "must be sds or pgm")
        if not isinstance(self.fit_pairs, bool):
            bad("fit_pairs", "must be true or false")
        if not isinstance(self.auto_length, bool):
            bad("auto_length", "must be true or false")
        if not isinstance(self.use_synthetic_counts, bool):
            bad("use_synthetic_counts", "must be true or false")
        w = self.weight_selection_percentile
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w <= 100:
            bad("weight_selection_percentile", "must lie in [0, 100]")


def sigma_proportions(params: SdsParams) -> tuple[float, ...]:
    """p_1 .. p_R (sigma_k = p_k sigma): the explicit ones, else those of ``accuracy_mode``."""
    R = params.reporting_length
    if params.sigma_proportions is not None:
        return tuple(params.sigma_proportions)
    if params.accuracy_mode == "prioritize_long":
        return tuple(1.0 / k for k in range(1, R + 1))
    if params.accuracy_mode == "prioritize_short":
        return tuple(1.0 / (R - k + 1) for k in range(1, R + 1))
    return tuple(1.0 for _ in range(R))


def adaptive_etas(mode: str, R: int) -> tuple[float, ...]:
    """pac-synth's fabrication presets: eta_k for k = 2 .. R."""
    ks = range(2, R + 1)
    if mode == "uncontrolled":
        return tuple(1.0 for _ in ks)
    if mode == "minimize":
        return tuple(0.01 for _ in ks)
    if mode == "balanced":
        return tuple(0.55 if k == 2 else 1.0 for k in ks)
    if mode == "progressive":
        if R == 2:
            return (0.1,)
        return tuple(min(1.0, 0.1 + 0.9 * (k - 2) / (R - 2)) for k in ks)
    raise ValueError(f"unknown fabrication mode {mode!r}")


def _threshold_rule(params: SdsParams) -> tuple[str, tuple[float, ...]]:
    R = params.reporting_length
    if params.thresholds is not None:
        return params.threshold_type, params.thresholds
    if params.threshold_type == "fixed":
        return "fixed", tuple(0.0 for _ in range(2, R + 1))
    return "adaptive", adaptive_etas(params.fabrication_mode or "uncontrolled", R)
