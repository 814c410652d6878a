"""The budget of ``sds``: the paper's split of (epsilon, delta) or of a zCDP budget into the
record count, R percentiles and R Gaussian lengths, and the plan's charges.

Everything here reads public information only (schema, budget, parameters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...precheck import max_table_bytes
from ...privacy.budget import Budget, Charge
from ...schema import Schema
from .params import SdsParams, sigma_proportions

#: Largest total number of dense cells over all k-tuples (k <= R) that ``plan`` accepts.
MAX_TUPLE_CELLS = 1 << 26
#: Peak bytes per dense tuple cell while measuring (exact counts, noisy copy, masks).
_BYTES_PER_TUPLE_CELL = 48


@dataclass(frozen=True)
class NoiseSplit:
    """How a budget is divided: record count, R percentiles, R Gaussian lengths."""

    epsilon: float
    records_epsilon: float  # eps_N
    marginals_rho: float  # rho_M, zCDP spent on percentiles + Gaussians
    percentile_epsilon: float  # eps_Q, each length's percentile
    sigma: float  # base sigma
    sigmas: tuple[float, ...]  # sigma_k = p_k sigma

    @property
    def reporting_length(self) -> int:
        """R, the longest tuple measured."""
        return len(self.sigmas)

    @property
    def records_rho(self) -> float:
        """zCDP cost of the record count (eps_N^2 / 2)."""
        return 0.5 * self.records_epsilon**2

    @property
    def percentile_rho(self) -> float:
        """zCDP cost of one length's percentile (eps_Q^2 / 2)."""
        return 0.5 * self.percentile_epsilon**2

    def gaussian_rho(self, k: int) -> float:
        """zCDP cost of length k's Gaussian counts (1 / (2 sigma_k^2))."""
        return 1.0 / (2.0 * self.sigmas[k - 1] ** 2)

    @property
    def total_rho(self) -> float:
        """zCDP cost of the whole split."""
        R = self.reporting_length
        return self.records_rho + R * self.percentile_rho + sum(self.gaussian_rho(k) for k in range(1, R + 1))


def paper_rho(marginals_epsilon: float, delta: float) -> float:
    """rho = (sqrt(eps_M + ln(2/delta)) - sqrt(ln(2/delta)))^2 (the paper's EQ1 right side)."""
    if not marginals_epsilon > 0:
        raise ValueError(f"marginals epsilon must be > 0, got {marginals_epsilon!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    L = math.log(2.0 / delta)
    return (math.sqrt(marginals_epsilon + L) - math.sqrt(L)) ** 2


def split_marginals_rho(
    rho: float, reporting_length: int, percentile_epsilon_proportion: float, proportions: Sequence[float]
) -> tuple[float, float, tuple[float, ...]]:
    """(eps_Q, sigma, sigma_k) with R eps_Q^2 / 2 = rho Q_p and sum 1/(2 sigma_k^2) = rho (1 - Q_p)."""
    R, Qp = int(reporting_length), float(percentile_epsilon_proportion)
    if len(proportions) != R:
        raise ValueError(f"{len(proportions)} sigma proportions for reporting length {R}")
    if not rho > 0:
        raise ValueError(f"rho must be > 0, got {rho!r}")
    eps_q = math.sqrt(2.0 * rho * Qp / R)
    base = math.sqrt(sum(1.0 / (p * p) for p in proportions) / (2.0 * rho * (1.0 - Qp)))
    return eps_q, base, tuple(p * base for p in proportions)


def split_budget(
    epsilon: float,
    delta: float,
    reporting_length: int,
    percentile_epsilon_proportion: float = 0.01,
    number_of_records_epsilon_proportion: float = 0.005,
    proportions: Sequence[float] | None = None,
) -> NoiseSplit:
    """The paper's split of (epsilon, delta) without a schema: eps_N = N_p eps, eps_M = eps -
    eps_N, rho from eps_M (``accounting="paper"``; ``proportions`` default 1/k)."""
    params = SdsParams(
        reporting_length=int(reporting_length), epsilon=float(epsilon), delta=float(delta), accounting="paper",
        percentile_epsilon_proportion=percentile_epsilon_proportion, accuracy_mode="prioritize_long",
        number_of_records_epsilon_proportion=number_of_records_epsilon_proportion,
        sigma_proportions=tuple(proportions) if proportions is not None else None,
    )
    return _split(params, Budget(epsilon=float(epsilon), delta=float(delta)))


#: The complete sampler measures only the 1-way level when the expected noise TVD of the
#: 2-way tables (:func:`pair_noise_ratio`, uncapped) reaches this: the 2-way tables are
#: then noise, and their Gaussian shares buy more on the 1-way counts. Set on the tuning
#: half of benchmarks/sds_matrix.py: the one tuning cell where the 1-way level alone won
#: (3,000 x 24 at epsilon 1) had a ratio of 2.27; every cell where measuring all levels
#: won had at most 0.64 (the same table at epsilon 4). 1.2 is about the geometric middle.
ONE_WAY_ONLY_RATIO = 1.2


def pair_noise_ratio(cardinalities: Sequence[int], split: NoiseSplit, records: float) -> float:
    """Mean over column pairs of the TVD that the planned 2-way noise alone would add to a
    2-way table of ``records`` records, ``cells * sd_2 / (records sqrt(2 pi))`` with
    sd_2 = sigma_2 sqrt(C(p, 2)) (the largest Delta_2), not capped at 1.

    Public information only: the schema, the budget split and the DP record count.
    """
    c = np.asarray(cardinalities, dtype=np.float64)
    p = c.size
    if p < 2 or split.reporting_length < 2:
        return 0.0
    mean_cells = float((c.sum() ** 2 - (c * c).sum()) / 2.0) / math.comb(p, 2)
    sd2 = split.sigmas[1] * math.sqrt(math.comb(p, 2))
    return mean_cells * sd2 / (max(float(records), 1.0) * math.sqrt(2.0 * math.pi))


def one_way_only(params: SdsParams, cardinalities: Sequence[int], split: NoiseSplit, records: float) -> bool:
    """Whether ``sds`` measures only the 1-way level (``auto_length``, complete synthesis)."""
    return (params.auto_length and params.synthesis == "complete" and params.one_way == "public"
            and split.reporting_length >= 2
            and pair_noise_ratio(cardinalities, split, records) >= ONE_WAY_ONLY_RATIO)


def _stage_records() -> str:
    return "measure/sds/records"


def _stage_percentile(k: int) -> str:
    return f"measure/sds/percentile/k={k}"


def _stage_gaussian(k: int) -> str:
    return f"measure/sds/gaussian/k={k}"


def _elementary_symmetric(values: Sequence[int], k: int) -> int:
    e = [1] + [0] * k
    for v in values:
        for i in range(k, 0, -1):
            e[i] += e[i - 1] * int(v)
    return e[k]


def _check_domain(params: SdsParams, schema: Schema) -> None:
    """Refuse a reporting length or domain too large to measure, before any row is read."""
    R = params.reporting_length
    p = len(schema.columns)
    if R > p:
        raise ValueError(f"parameter 'reporting_length' must be <= the number of columns ({p}), got {R}; "
                         f"pass --param reporting_length={p} or less")
    cells = sum(_elementary_symmetric(schema.cardinalities, k) for k in range(1, R + 1))
    if cells > MAX_TUPLE_CELLS:
        big = sorted(schema.columns, key=lambda c: -c.cardinality)[:3]
        raise ValueError(
            f"domain too large for sds with reporting_length={R}: {cells} tuple cells exceed "
            f"{MAX_TUPLE_CELLS}; coarsen columns {[c.name for c in big]} or lower reporting_length"
        )
    need, limit = cells * _BYTES_PER_TUPLE_CELL, max_table_bytes()
    if need > limit:
        raise ValueError(
            f"parameter 'reporting_length' = {R} needs about {need / (1 << 30):.3g} GiB to hold {cells} tuple "
            f"cells while measuring, over the limit of {limit / (1 << 30):.3g} GiB (DPSYNTH_MAX_TABLE_BYTES); "
            "lower reporting_length or coarsen the widest columns"
        )


def noise_split(params: SdsParams, schema: Schema, budget: Budget) -> NoiseSplit:
    """The budget split of ``sds`` for a release budget, from public information only
    (refuses a domain too large to measure)."""
    _check_domain(params, schema)
    return _split(params, budget)


def _split(pr: SdsParams, budget: Budget) -> NoiseSplit:
    """The one place of the split: eps_N = N_p eps, rho_M from the rest, then eps_Q and sigma_k."""
    R = pr.reporting_length
    eps = float(pr.epsilon) if pr.epsilon is not None else float(budget.epsilon)
    props = sigma_proportions(pr)
    eps_n = pr.number_of_records_epsilon_proportion * eps
    if pr.accounting == "paper":
        delta = float(pr.delta) if pr.delta is not None else float(budget.delta)
        rho_m = paper_rho(eps - eps_n, delta)
    else:
        total = budget.rho if pr.epsilon is None else Budget(epsilon=eps, delta=budget.delta).rho
        rho_m = total - 0.5 * eps_n**2
        if rho_m <= 0:
            raise ValueError(
                "parameter 'number_of_records_epsilon_proportion' leaves no budget for the marginals; "
                "lower it (default 0.005)"
            )
    eps_q, base, sigmas = split_marginals_rho(rho_m, R, pr.percentile_epsilon_proportion, props)
    return NoiseSplit(eps, eps_n, rho_m, eps_q, base, sigmas)


def plan_charges(params: SdsParams, schema: Schema, budget: Budget) -> tuple[Charge, ...]:
    """Every charge of ``sds`` (record count, then per length its percentile and its Gaussian)."""
    s = noise_split(params, schema, budget)
    R = params.reporting_length
    p = len(schema.columns)
    charges = [Charge(stage=_stage_records(), rho=s.records_rho, mechanism="discrete_laplace",
                      detail={"epsilon": s.records_epsilon, "sensitivity_l1": 1})]
    for k in range(1, R + 1):
        charges.append(Charge(
            stage=_stage_percentile(k), rho=s.percentile_rho, mechanism="report_noisy_max",
            detail={"epsilon": s.percentile_epsilon, "percentile": params.percentile_percentage,
                    "candidates": f"0..{math.comb(p, k)}", "score_sensitivity": 1}))
        charges.append(Charge(
            stage=_stage_gaussian(k), rho=s.gaussian_rho(k), mechanism="discrete_gaussian",
            detail={"sigma_k": s.sigmas[k - 1], "noise_sd": "sigma_k * sqrt(Delta_k)",
                    "sensitivity_l2": "sqrt(Delta_k)"}))
    return tuple(charges)
