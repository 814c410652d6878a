"""Private sampling (Boedihardjo, Strohmer and Vershynin): noiseless DP sampling on the Boolean cube.

* :mod:`.params` -- :class:`PrivateSamplingParams`, the one parameter class;
* :mod:`.algorithm` -- Algorithm 2: Walsh basis, reduced space, shrinkage LP, proximal QP, sampling;
* :mod:`.bounds` -- Theorem 12.2 (privacy) and 12.4 (accuracy) calculators, ``dpsynth bounds``;
* :mod:`.method` -- the release method ``private-sampling`` (one-hot view of the codes, the
  public-n declaration, the refusal past the theorem's k).

What it measures, costs and guarantees, and when to choose it: ``docs/private-sampling.md``.
"""

from __future__ import annotations

from .algorithm import (
    ConditioningError,
    LPSolution,
    PrivateDensity,
    QPSolution,
    ReducedSpace,
    SampleDiagnostics,
    SampleResult,
    ShrinkageLP,
    build_shrinkage_lp,
    conditioning_threshold,
    draw_reduced_space,
    draw_well_conditioned_space,
    fit_private_density,
    is_well_conditioned,
    private_sample,
    smallest_singular_value,
    solve_proximal_qp,
    solve_shrinkage_lp,
    walsh_matrix,
    walsh_means,
    walsh_subsets,
)
from .bounds import (
    AccuracyConditions,
    accuracy_conditions,
    bounds_report,
    check_release,
    empirical_sup_density,
    epsilon_for_k,
    max_k,
    n_walsh,
    privacy_k_bound,
)
from .method import N_PUBLIC, NOT_DP, REPLACE_ONE, PrivateSamplingMethod, bits_to_codes
from .params import PrivateSamplingParams

__all__ = [
    "AccuracyConditions",
    "ConditioningError",
    "LPSolution",
    "N_PUBLIC",
    "NOT_DP",
    "PrivateDensity",
    "PrivateSamplingMethod",
    "PrivateSamplingParams",
    "QPSolution",
    "REPLACE_ONE",
    "ReducedSpace",
    "SampleDiagnostics",
    "SampleResult",
    "ShrinkageLP",
    "accuracy_conditions",
    "bits_to_codes",
    "bounds_report",
    "build_shrinkage_lp",
    "check_release",
    "conditioning_threshold",
    "draw_reduced_space",
    "draw_well_conditioned_space",
    "empirical_sup_density",
    "epsilon_for_k",
    "fit_private_density",
    "is_well_conditioned",
    "max_k",
    "n_walsh",
    "privacy_k_bound",
    "private_sample",
    "smallest_singular_value",
    "solve_proximal_qp",
    "solve_shrinkage_lp",
    "walsh_matrix",
    "walsh_means",
    "walsh_subsets",
]
