"""Baseline method ``marginals``: DP 1-way histograms, columns sampled independently.

Neighbouring tables differ by adding or removing one record, which moves one cell of
each column's histogram by one: L2 sensitivity 1 per histogram. The budget is split
evenly over the columns; each histogram gets discrete Gaussian noise with
``sigma = 1 / sqrt(2 rho_column)``. Under a pure epsilon-DP budget (delta 0) each
histogram instead gets discrete Laplace noise of scale ``columns / epsilon`` (L1
sensitivity 1), charged as pure epsilon.

Synthesis (post-processing): the record count is the inverse-variance mean of the
histograms' totals; each histogram is projected onto the non-negative tables with that
total (one constant subtracted, then clipped at 0), and each column's values are
allocated to a block's records by their expected counts (floor or ceiling), then shuffled
(:mod:`dpsynth.postprocess.histograms`; figures in docs/marginals.md).

It learns no correlation at all: it is the floor every other method must beat.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..rows.encoding import EncodedTable, code_dtype
from ..privacy.budget import Budget, Charge, Ledger
from ..privacy.mechanisms import gaussian_counts, laplace_charge, laplace_counts
from ..postprocess.histograms import allocated_draw, project_to_total
from ..rows.rowsource import RowSource, as_source, count_marginals
from ..schema import Schema
from .base import DP_ADD_REMOVE, Measurement, MethodBase, NoisyMarginal, PrivacyStatement, params_to_dict

__all__ = ["IndependentSampler", "MarginalsParams", "MarginalsMethod", "estimate_rows", "one_way_distributions",
           "sample_independent"]


@dataclass(frozen=True, kw_only=True)
class MarginalsParams:
    """No tuning: the whole budget goes to the 1-way histograms."""


def _stage(column: str) -> str:
    return f"measure/1-way/{column}"


def estimate_rows(m: Measurement) -> int:
    """Post-processed record count: inverse-variance mean of each histogram's total."""
    est = m.estimated_records()
    if est is None:
        raise ValueError("the measurement has no 1-way marginal to estimate the row count from")
    return est


def one_way_distributions(m: Measurement, schema: Schema) -> dict[str, np.ndarray]:
    """Each column's noisy histogram as a distribution: projected onto the non-negative
    tables whose total is :func:`estimate_rows` (:func:`project_to_total`), then normalised.

    Clipping negatives alone would leave every value the data does not hold about 0.4
    noise sd of made-up records, and each column its own total; the projection takes one
    constant off every cell of a column, so those values fall back to 0 and every column
    sums to the same record count. Post-processing only.
    """
    total = float(estimate_rows(m))
    out = {}
    for col in schema.columns:
        x = project_to_total(np.asarray(m.marginals[(col.name,)], dtype=np.float64), total)
        out[col.name] = x / x.sum()
    return out


def sample_independent(
    schema: Schema, marginals: dict[str, np.ndarray], rows: int, rng: np.random.Generator
) -> EncodedTable:
    """Each column drawn from its own distribution (weights: normalised here): every value
    gets the floor or the ceiling of its expected count, in a random order
    (:func:`~dpsynth.postprocess.histograms.allocated_draw`), the columns independently."""
    codes = np.empty((rows, len(schema.columns)), dtype=code_dtype(schema.cardinalities))
    for j, col in enumerate(schema.columns):
        codes[:, j] = allocated_draw(np.asarray(marginals[col.name], dtype=np.float64), rows, rng)
    return EncodedTable(schema=schema, codes=codes)


class MarginalsMethod(MethodBase):
    """The baseline: one DP 1-way histogram per column, columns sampled independently."""

    name: ClassVar[str] = "marginals"
    pure_epsilon: ClassVar[bool] = True  # delta 0: discrete Laplace histograms
    params_type: ClassVar[type] = MarginalsParams
    provides_marginals: ClassVar[bool] = True
    measures_counts: ClassVar[bool] = True
    streams_synthesis: ClassVar[bool] = True
    guarantee: ClassVar[PrivacyStatement] = DP_ADD_REMOVE

    def plan(self, schema: Schema, budget: Budget) -> tuple[Charge, ...]:
        """An equal zCDP share of the budget per column's histogram (L2 sensitivity 1), or
        under a pure budget (delta 0) an equal epsilon share (Laplace, L1 sensitivity 1)."""
        if budget.pure:
            eps = float(budget.epsilon) / len(schema.columns)
            return tuple(laplace_charge(_stage(c.name), eps) for c in schema.columns)
        share = budget.rho / len(schema.columns)
        return tuple(
            Charge(stage=_stage(c.name), rho=share, detail={"sensitivity_l2": 1.0})
            for c in schema.columns
        )

    def measure(self, codes: EncodedTable | RowSource, ledger: Ledger, rng: np.random.Generator) -> Measurement:
        """Spends each column's share on its histogram plus discrete Gaussian noise (discrete
        Laplace for a pure-epsilon charge)."""
        source = as_source(codes)
        hists = count_marginals(source, [(j,) for j in range(len(source.schema.columns))])
        measured, charges = [], []
        for j, col in enumerate(source.schema.columns):
            charge = ledger.spend(_stage(col.name))
            hist = hists[(j,)]
            noise = laplace_counts if charge.epsilon else gaussian_counts
            noised = noise(hist, charge, rng, sensitivity=1.0)
            measured.append(NoisyMarginal(attrs=(col.name,), counts=noised.values, stddev=noised.stddev,
                                          mechanism=noised.mechanism))
            charges.append(charge)
        return Measurement(
            method=self.name,
            params=params_to_dict(self.params),
            charges=tuple(charges),
            measured=tuple(measured),
        )

    def sampler(self, m: Measurement, schema: Schema, rows: int | None, rng: np.random.Generator) -> "IndependentSampler":
        """Draws ``rows`` records block by block (None: the DP estimate); draws nothing from ``rng``."""
        n = estimate_rows(m) if rows is None else rows
        return IndependentSampler(schema=schema, marginals=one_way_distributions(m, schema), rows=int(n))

    def synthesize(
        self, m: Measurement, schema: Schema, rows: int | None, rng: np.random.Generator
    ) -> EncodedTable:
        """Each column drawn from its projected noisy histogram; rows default to the DP estimate."""
        s = self.sampler(m, schema, rows, rng)
        return EncodedTable(schema=schema, codes=s.sample(s.rows, rng))


@dataclass(frozen=True)
class IndependentSampler:
    """Columns drawn independently from their distributions (:func:`one_way_distributions`),
    any number of records at a time: each block gets its values by allocation, so a block's
    1-way counts are within one record of its expected counts."""

    schema: Schema
    marginals: dict[str, np.ndarray]
    rows: int

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` records of codes (:func:`sample_independent`)."""
        return sample_independent(self.schema, self.marginals, n, rng).codes
