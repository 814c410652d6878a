"""Method ``sds``: DP k-way marginals ("aggregates") and aggregate-seeded synthesis.

The Synthetic Data Showcase approach (shared/papers/sds-dp-marginals.txt) with pac-synth
0.0.8's parameters. Modules: ``params`` (parameters), ``budget`` (budget split and plan),
``aggregation`` (DP k-tuple counts), ``strict`` and ``complete`` (the two samplers),
``chunked`` (the release drawn in row chunks, bounded memory), ``expand`` (above 8 chunks'
worth, one fitted pool written as copies), ``latent`` (that pool drawn from a latent-class
mixture where it fits the pairs with flatter weights), ``guard`` (the refusal before
the budget is spent), ``method`` (the registered ``SdsMethod``). What it measures and costs: docs/sds.md.
"""

from __future__ import annotations

from ...privacy.mechanisms import dp_percentile, percentile_scores
from .aggregation import AggregateResult, aggregate, aggregates_frame, normalise, tables_from_frame
from .budget import MAX_TUPLE_CELLS, NoiseSplit, noise_split, paper_rho, plan_charges, split_budget, split_marginals_rho
from ...postprocess.histograms import project_to_total
from .complete import public_one_way
from .guard import SdsCannotPublish
from .method import SdsMethod
from .params import SdsParams, adaptive_etas, sigma_proportions
from .strict import percentile_r8

__all__ = [
    "SdsParams",
    "SdsMethod",
    "SdsCannotPublish",
    "NoiseSplit",
    "AggregateResult",
    "MAX_TUPLE_CELLS",
    "noise_split",
    "plan_charges",
    "paper_rho",
    "split_marginals_rho",
    "split_budget",
    "sigma_proportions",
    "adaptive_etas",
    "dp_percentile",
    "percentile_scores",
    "percentile_r8",
    "aggregate",
    "normalise",
    "aggregates_frame",
    "tables_from_frame",
    "project_to_total",
    "public_one_way",
]
