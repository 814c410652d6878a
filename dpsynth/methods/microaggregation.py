"""Method ``microaggregation``: (n/k)-anonymous PCA microaggregation. NOT differentially private.

Algorithm 1 / Theorems 4.1, 4.4 and 4.6 of Boedihardjo, Strohmer and Vershynin: records
embedded in the unit ball (:class:`dpsynth.microaggregation.Embedding`), projected on
their top-t principal subspace (exact PCA), partitioned by the nearest point of an
alpha-net of that subspace's ball, cut and merged into k = n // group_size blocks of
equal size (the last one takes the remainder), and replaced by the block means. The
published measurement is the table of k block means with their sizes; synthesis draws
blocks uniformly (bootstrap) and rounds each to a valid record.

Every published block mean averages at least ``group_size`` records: the release is
``group_size``-anonymous in the microaggregation sense, which protects far less than
differential privacy (block means of small groups can still reveal attributes, and
nothing bounds what two releases reveal together). It therefore needs the explicit
opt-in ``anonymous_only=true``. Its measurement carries the statement
``PrivacyStatement(kind="anonymous")``, so the files that state a guarantee say "NOT
differentially private": ``manifest.json``, ``measurement.json``, ``report.html`` (a red
box first), ``dpsynth verify`` and the CLI's last line. The data files
(``synthetic.csv``, ``synthetic.parquet``, the measurement tables) carry no statement of
their own: pass them on with the manifest or the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from ..rows.encoding import EncodedTable
from ..measurement import NoisyCount, PrivacyStatement
from ..microaggregation import (
    alpha_net,
    anonymous_net,
    block_means,
    check_net_size,
    divide_and_merge,
    nearest_point,
    top_eigvecs,
)
from ..privacy.budget import Budget, Charge, Ledger
from ..schema import Schema
from .base import Measurement, MethodBase, ParamError, param, params_to_dict
from .microaggregation_common import (
    BLOCKS, block_distribution, blocks_frame, check_numeric, embeddings, implied_measured, synthesize_blocks,
)

__all__ = ["MicroaggregationParams", "MicroaggregationMethod", "anonymous_statement"]

STAGE = "measure/microaggregation (anonymous, no DP budget)"


def anonymous_statement(group_size: int) -> PrivacyStatement:
    """The release's statement: group_size-anonymous, NOT differentially private."""
    return PrivacyStatement(kind="anonymous", detail=(
        f"{group_size}-anonymous microaggregation: every published block mean averages at least "
        f"{group_size} records; this release is NOT differentially private"))


@dataclass(frozen=True, kw_only=True)
class MicroaggregationParams:
    """anonymous_only: the explicit opt-in (the release is not DP). group_size: records
    per block (n/k). t, alpha: dimension and accuracy of the net (defaults from k, see
    :func:`dpsynth.microaggregation.anonymous_net`). numeric: "scaled" or "bins" (see
    :mod:`dpsynth.microaggregation.embedding`). pairs: also publish the 2-way marginals
    the blocks imply, for the gate. max_net_points: memory limit on the net."""

    anonymous_only: bool = param(False, "true or false; must be true (the explicit opt-in to a release that is NOT DP)")
    group_size: int = param(20, "whole number >= 2, at most the input's rows")
    t: int | None = param(None, "whole number >= 1, or none (default from the block count)")
    alpha: float | None = param(None, "number in (0, 4], or none (default from the block count)")
    numeric: Literal["hybrid", "scaled", "bins"] = "hybrid"
    pairs: bool = True
    max_net_points: float = param(2e6, "number >= 100")

    def __post_init__(self) -> None:
        if not isinstance(self.anonymous_only, bool):
            raise ParamError("parameter 'anonymous_only' must be true or false")
        if not isinstance(self.group_size, int) or self.group_size < 2:
            raise ParamError(f"parameter 'group_size' must be a whole number >= 2, got {self.group_size!r}")
        if self.t is not None and not (isinstance(self.t, int) and self.t >= 1):
            raise ParamError(f"parameter 't' must be a whole number >= 1, got {self.t!r}")
        if self.alpha is not None and not (0 < self.alpha <= 4):
            raise ParamError(f"parameter 'alpha' must lie in (0, 4], got {self.alpha!r}")
        check_numeric(self.numeric)
        if not self.max_net_points >= 100:
            raise ParamError(f"parameter 'max_net_points' must be >= 100, got {self.max_net_points!r}")


class MicroaggregationMethod(MethodBase):
    """Method ``microaggregation``: (n/k)-anonymous PCA microaggregation. NOT differentially private."""

    name: ClassVar[str] = "microaggregation"
    guarantee: ClassVar[PrivacyStatement] = PrivacyStatement(kind="anonymous", detail=(
        "every published block mean averages at least group_size records; refused unless "
        "anonymous_only=true; microaggregation-dp is the DP version"))
    provides_marginals: ClassVar[bool] = False  # implied by the blocks: nothing to correct towards
    params_type: ClassVar[type] = MicroaggregationParams

    def __init__(self, params: MicroaggregationParams | None = None):
        self.params = params or MicroaggregationParams()

    def plan(self, schema: Schema, budget: Budget) -> tuple[Charge, ...]:
        """Refuses unless ``anonymous_only=true`` and checks the net's size; states one zero-cost charge."""
        if not self.params.anonymous_only:
            raise ParamError(
                "method 'microaggregation' is (n/k)-anonymous and NOT differentially private: it spends no "
                "privacy budget and gives no DP guarantee. Pass --param anonymous_only=true to release it "
                "anyway, or use 'microaggregation-dp' for the differentially private version"
            )
        if self.params.t is not None and self.params.alpha is not None:
            try:
                check_net_size(self.params.t, self.params.alpha, self.params.max_net_points)
            except ValueError as exc:
                raise ParamError(str(exc)) from None
        return (Charge(stage=STAGE, mechanism="none",
                       detail={"guarantee": "anonymous, not DP", "group_size": self.params.group_size}),)

    def measure(self, codes: EncodedTable, ledger: Ledger, rng: np.random.Generator) -> Measurement:
        """The block means and sizes of the records' microaggregation (every block holds at
        least ``group_size`` records)."""
        p = self.params
        charge = ledger.spend(STAGE)
        geo, emb = embeddings(codes.schema, p.numeric)
        G = geo.embed_sparse(codes)
        n = G.shape[0]
        if n < p.group_size:
            raise ValueError(f"the input has fewer rows than parameter 'group_size' = {p.group_size}: "
                             "pass a smaller --param group_size (at least 2)")
        k = n // p.group_size
        t, alpha = anonymous_net(k, p.t, p.alpha)
        t = min(t, geo.dim)
        V = top_eigvecs(G, t)
        Yp = np.asarray(G @ V)
        del G
        cells = nearest_point(Yp, alpha_net(t, alpha, p.max_net_points))
        blocks = divide_and_merge(cells, Yp[:, 0], k)
        means, sizes = block_means(emb.group_sums(codes, blocks, k), blocks, k)
        df = blocks_frame(emb, sizes, means)
        w, Y = block_distribution(emb, df, n)
        return Measurement(
            method=self.name, params=params_to_dict(p), charges=(charge,),
            measured=implied_measured(emb, Y, w, float(n), (0.0, 0.0), "none", p.pairs),
            records=NoisyCount(value=float(n), stddev=0.0, mechanism="none"),
            statement=anonymous_statement(p.group_size),
            tables={BLOCKS: df},
            meta={"blocks": k, "min_block_size": int(sizes.min()), "t": t, "alpha": alpha,
                  "note": "measured marginals are those the published blocks imply (what synthesis reproduces)"},
        )

    def synthesize(self, m: Measurement, schema: Schema, rows: int | None, rng: np.random.Generator) -> EncodedTable:
        """Bootstraps blocks by their sizes and rounds each mean to a valid record."""
        total = float(m.records.value) if m.records is not None else float(m.tables[BLOCKS]["weight"].sum())
        n = int(round(total)) if rows is None else rows
        return synthesize_blocks(schema, str(m.params.get("numeric", "hybrid")), m.tables[BLOCKS], total, n, rng)
