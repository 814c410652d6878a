"""Microaggregation synthetic data (Boedihardjo, Strohmer and Vershynin, "Covariance's
loss is privacy's gain"): the unit-ball embedding of records, PCA and its private
version (PVEC), alpha-nets, equal-size and damped noisy microaggregation, projections,
bootstrap and randomized rounding. Plain library: the release methods live in
:mod:`dpsynth.methods.microaggregation` and :mod:`dpsynth.methods.microaggregation_dp`."""

from .aggregate import (
    NoisyMeans,
    block_means,
    bootstrap,
    damped_means,
    divide_and_merge,
    group_sums,
    mean_sensitivity_l1,
    noisy_counts,
    noisy_means,
    project_weights,
    top_eigvecs,
)
from .defaults import Design, anonymous_net, paper_design, tuned_design
from .embedding import Embedding, project_simplex_rows, split_numeric_mode
from .net import NetTooLarge, alpha_net, check_net_size, covering_radius, estimate_net_size, nearest_point
from .pvec import private_projection, pvec, pvec_acceptance_rate

__all__ = [
    "Design", "Embedding", "NetTooLarge", "NoisyMeans", "alpha_net", "anonymous_net", "block_means",
    "bootstrap", "check_net_size", "covering_radius", "damped_means", "divide_and_merge", "group_sums",
    "estimate_net_size", "mean_sensitivity_l1", "nearest_point", "noisy_counts", "noisy_means",
    "paper_design", "private_projection", "project_simplex_rows", "project_weights", "pvec",
    "pvec_acceptance_rate", "split_numeric_mode", "top_eigvecs", "tuned_design",
]
