"""The registered method ``sds``: plan (budget split), measure (DP aggregates) and synthesize
(strict or complete sampler) behind the common method interface.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ...rows.encoding import EncodedTable, code_dtype
from ...inference import fit_measurement
from ...privacy.budget import Budget, Charge, Ledger
from ...rows.rowsource import RowSource
from ...privacy.noise import discrete_laplace_sd
from ...schema import Schema
from ..base import DP_ADD_REMOVE, Measurement, MethodBase, NoisyCount, PrivacyStatement, params_to_dict
from .aggregation import aggregate, aggregates_frame, tables_from_frame
from .budget import NoiseSplit, noise_split, plan_charges
from .chunked import ChunkedSampler, WholeTableSampler, chunk_count, chunk_rows_for, part_rng
from . import expand as _expand
from .expand import (LATENT_PART, PASS_PART, UPDATE_PART, ExpandedSampler, copies, expands, fit_pool, pass_pool,
                     pool_rows_for, scaled_measurement, update_pool)
from .latent import latent_pool
from .complete import _Model, _rake_to_one_way, _sample_complete, pooled_total, public_one_way
from .measured import one_way_marginals, tree_view, tuple_marginals
from .params import SdsParams
from .refit import honour_tables, table_checks
from .strict import _sample_strict
from .update import update_tables

#: How the complete sampler honours the measured tables: "reweight" a pool (refit.py), "update"
#: the records (update.py), or "finish": reweight, then update what is still off (the default;
#: docs/sds-generalisation.md, tenth round). A module setting for benchmarks, not a parameter:
#: it does not enter the release key.
REFIT_MODE = "finish"
#: The k of the tables a chunk's reweighting (honour_tables) fits; None: every k (its cost
#: grows about 15 times on int5's 364 triples). The finishing update fits every table of the
#: chunk's share (docs/sds-generalisation.md, sixteenth round, third part).
CHUNK_REWEIGHT_LENGTHS: tuple[int, ...] | None = (2,)
#: Whether a chunk's finish ends with an update on its 2-way tables alone (the pairs its
#: k >= 3 moves left off: int5 at epsilon 4, worst pair 1.71 without it).
CHUNK_PAIRS_AGAIN = True


class SdsMethod(MethodBase):
    """DP k-way marginals ("aggregates", k = 1 .. R) and aggregate-seeded synthesis."""

    name: ClassVar[str] = "sds"
    params_type: ClassVar[type] = SdsParams
    provides_marginals: ClassVar[bool] = True
    measures_counts: ClassVar[bool] = True
    guarantee: ClassVar[PrivacyStatement] = DP_ADD_REMOVE
    # The complete sampler, the pair refit's pool (up to 8x the rows) and the raking hold
    # several int64 copies of the table: 5.9 GB peak at 1M x 20 (benchmarks/scale.py). The
    # default parameters hold one chunk (chunked.py); strict, estimator="pgm" and
    # correct_marginals the whole table.
    synthesis_bytes_per_cell: ClassVar[int] = 320
    streams_synthesis: ClassVar[bool] = True
    #: What ``dpsynth methods`` tells a user about releases above the expansion switch (expand.py).
    large_releases: ClassVar[str] = (
        "above 8 chunks' worth of records (524,288 at 20 columns; more at fewer columns) the default "
        "parameters draw one pool of that many records, fit it to every measured table and write each pool "
        "record about rows / pool times: the release repeats records (about 19 copies each at 10,000,000 rows "
        "x 20 columns; docs/scale.md)")

    def __init__(self, params: SdsParams | None = None):
        self.params = params or SdsParams()

    # -- budget ---------------------------------------------------------------------------
    def split(self, schema: Schema, budget: Budget) -> NoiseSplit:
        """The budget split, from public information only."""
        return noise_split(self.params, schema, budget)

    def plan(self, schema: Schema, budget: Budget) -> tuple[Charge, ...]:
        """Every charge before any row is read: the record count, then per length k its
        percentile (report-noisy-max) and its discrete Gaussian counts."""
        return plan_charges(self.params, schema, budget)

    # -- DP aggregates --------------------------------------------------------------------
    def measure(self, codes: EncodedTable | RowSource, ledger: Ledger, rng: np.random.Generator) -> Measurement:
        """The DP aggregates of ``codes`` (a table or a chunked row source), spending exactly
        the plan through ``ledger``.

        ``measured`` holds every measured combination of columns (k = 1 .. R) with its
        noise scale; the ``aggregates`` table holds the reported, normalised tuple counts
        the samplers read.
        """
        schema = codes.schema
        split = self.split(schema, ledger.budget)
        charges: list[Charge] = []

        def spend(stage: str) -> None:
            charges.append(ledger.spend(stage))

        res = aggregate(codes if isinstance(codes, RowSource) else codes.codes, schema, self.params, split, rng,
                        spend=spend)
        frame = aggregates_frame(res.levels, schema)
        one_way = one_way_marginals(res, schema)
        measured = one_way + tuple_marginals(res, schema, one_way, self.params.empty_cells == "value")
        meta = {
            # the levels actually measured: 1 where auto_length found the 2-way tables noise
            "reporting_length": int(res.info.get("levels_measured", self.params.reporting_length)),
            "reporting_length_requested": self.params.reporting_length,
            "accounting": self.params.accounting,
            "epsilon": split.epsilon,
            "records_epsilon": split.records_epsilon,
            "marginals_rho": split.marginals_rho,
            "percentile_epsilon": split.percentile_epsilon,
            "sigmas": list(split.sigmas),
            "one_way": self.params.one_way,
            "empty_cells": self.params.empty_cells,
            "synthesis_choice": self.params.synthesis,
            "one_way_marginals": (
                "every code measured (the missing code too), no threshold" if res.one_way else
                "reported 1-counts; a missing code holds records - sum (post-processing)"),
            **res.info,
        }
        records = NoisyCount(value=res.records, stddev=discrete_laplace_sd(1.0 / split.records_epsilon),
                             mechanism="laplace")
        if res.one_way:  # 1-way tables of every code: their totals estimate the record count too
            records = self._pooled_records(records, one_way, meta)
        return Measurement(
            method=self.name, params=params_to_dict(self.params), charges=tuple(charges),
            measured=tuple(measured), records=records, tables={"aggregates": frame}, meta=meta,
        )

    @staticmethod
    def _pooled_records(count: NoisyCount, one_way: list, meta: dict) -> NoisyCount:
        """The record count the release states: the inverse-variance mean of the DP record
        count and the 1-way tables' totals (post-processing; the DP count alone sized tiny
        releases at 1 or 675 records for 300 true). The DP count stays in ``meta``."""
        sd1 = float(meta["noise_sd"][0]) if meta.get("noise_sd") else 0.0
        value, sd, share = pooled_total(count.value, count.stddev, [nm.counts for nm in one_way], sd1)
        meta["dp_record_count"] = count.to_dict()
        meta["records_estimate"] = ("inverse-variance mean of the DP record count and every column's "
                                    "1-way total" if share > 0 else "the DP record count")
        return NoisyCount(value=max(1, round(value)), stddev=sd,
                          mechanism="gaussian" if share >= 0.5 else "laplace")

    # -- synthesis ------------------------------------------------------------------------
    def synthesize(
        self, m: Measurement, schema: Schema, rows: int | None, rng: np.random.Generator
    ) -> EncodedTable:
        """``rows`` records (default: the DP record count) drawn from the aggregates alone
        (post-processing) by the strict or the complete sampler."""
        R = int(m.meta.get("reporting_length", self.params.reporting_length))
        levels = tables_from_frame(m.tables["aggregates"], schema, R)
        n = int(m.records.value) if rows is None else int(rows)
        if n < 0:
            raise ValueError(f"rows must be >= 0, got {n}")
        cards = schema.cardinalities
        mode = self.params.synthesis
        if self.params.estimator == "pgm":
            # a tree of pairs: every stated pair at once would make one clique of all columns
            raw = fit_measurement(dataclasses.replace(m, measured=tree_view(m.measured)), schema).sample(n, rng)
        elif mode == "strict":
            raw = _sample_strict(levels, cards, n, self.params, rng)
            for j, col in enumerate(schema.columns):
                empty = col.missing_code if col.missing_code is not None else col.fill_code
                raw[:, j] = np.where(raw[:, j] < 0, empty, raw[:, j])
        else:
            model, targets, total = self._complete_model(m, schema)
            raw = self._draw_complete(model, n, m, schema, targets, total, rng, chunk=False)
        codes = raw.astype(code_dtype(cards))
        return EncodedTable(schema=schema, codes=codes)

    def _complete_model(self, m: Measurement, schema: Schema) -> tuple[_Model, dict[int, np.ndarray], float]:
        """The complete sampler's model, the 1-way targets and the record total."""
        R = int(m.meta.get("reporting_length", self.params.reporting_length))
        levels = tables_from_frame(m.tables["aggregates"], schema, R)
        th = m.meta.get("thresholds") or [None]
        one_way, total = None, float(m.records.value)
        if m.meta.get("one_way") == "public":
            one_way, total = public_one_way(m, schema)
        model = _Model(levels, schema, int(round(total)), m.meta.get("noise_sd", [0.0] * R), th[0],
                       one_way=one_way, missing_measured=m.meta.get("empty_cells") == "value")
        targets = one_way or {j: m.marginals[(c.name,)] for j, c in enumerate(schema.columns)
                              if (c.name,) in m.marginals}
        return model, targets, total

    def _draw_complete(self, model: _Model, n: int, m: Measurement, schema: Schema,
                       targets: dict[int, np.ndarray], total: float, rng: np.random.Generator, *,
                       chunk: bool = False) -> np.ndarray:
        """``n`` records from the complete sampler, refitted to the measured k-way tables of
        ``m`` (k >= 2) and raked to ``targets``: a whole release, or with ``chunk`` one chunk
        with its share of the k-way and 1-way tables (``m``, ``targets`` and ``total`` are then
        :meth:`ChunkedSampler.shares`'s). A chunk's reweighting fits only
        :data:`CHUNK_REWEIGHT_LENGTHS`; its finishing update fits every k, then (with
        :data:`CHUNK_PAIRS_AGAIN`) the 2-way tables once more. The caller says which: the
        chunked sampler's draw passes ``chunk=True``, :meth:`synthesize` does not (the
        measurement's meta does not decide)."""
        raw = _sample_complete(model, n, self.params, rng)
        refit = None
        ones = targets if self.params.rake_one_way else {}
        mode = REFIT_MODE
        if self.params.fit_pairs and mode == "update":
            refit = update_tables(raw, m, schema, ones, total, rng)
            if refit is not None:  # the update matched the 1-way targets itself
                return refit[0]
        elif self.params.fit_pairs:
            only = {"lengths": CHUNK_REWEIGHT_LENGTHS} if chunk and CHUNK_REWEIGHT_LENGTHS else {}
            refit = honour_tables(raw, lambda k: _sample_complete(model, k, self.params, rng), m, schema,
                                  ones, total, rng, **only)
        if refit is not None:
            raw = refit[0]
        if self.params.rake_one_way and n > 0:  # after a refit too: its draw from the pool moves them
            raw = _rake_to_one_way(raw, targets, rng)
        if self.params.fit_pairs and mode == "finish" and n > 0:
            # what the reweighting left off (a combination its pool never held, a chunk's
            # leftover): updated record by record, starting from the reweighted records
            finished = update_tables(raw, m, schema, ones, total, rng)
            if finished is not None:
                raw = finished[0]
            if CHUNK_PAIRS_AGAIN and chunk:  # the pairs the k >= 3 moves left off
                again = update_tables(raw, m, schema, ones, total, rng, lengths=(2,))
                if again is not None:
                    raw = again[0]
        return raw

    def synthesis_chunk_rows(self, schema: Schema) -> int | None:
        """Records held at once by synthesis (one chunk), None when the whole table is."""
        return chunk_rows_for(len(schema.columns)) if self.chunks_synthesis else None

    def _expanded(self, model: _Model, n: int, m: Measurement, schema: Schema, targets: dict[int, np.ndarray],
                  total: float, key: list[int], rng: np.random.Generator) -> ExpandedSampler:
        """A pool of :func:`~dpsynth.methods.sds.expand.pool_rows_for` records drawn from
        the model (or from a latent-class mixture fitted to it where that fits the measured
        pairs with flatter weights, :mod:`.latent`), reweighted to the whole measurement
        scaled to its size, updated where a table is still far off (``update_pool``) or else
        given the last pass where the gate would read a table above its margin
        (``pass_pool``), each record then written about weight x ``n`` / pool times
        (:mod:`.expand`)."""
        size = pool_rows_for(len(schema.columns))
        share = size / max(float(total), 1.0)
        pool = _sample_complete(model, size, self.params, rng)
        ones = {j: np.asarray(t, dtype=np.float64) * share for j, t in targets.items()} if self.params.rake_one_way else {}
        scaled = scaled_measurement(m, share, n)
        chosen: dict = {}
        if self.params.fit_pairs:  # a latent-class pool where it fits the pairs with flatter weights (latent.py)
            pool, chosen = latent_pool(pool, table_checks(scaled, schema, lengths=(2,)), ones, schema.cardinalities,
                                       part_rng(key, LATENT_PART))
        fitted = fit_pool(pool, scaled, schema, ones, total * share, fit_tables=self.params.fit_pairs)
        weights, tables = fitted.weights, fitted.tables
        info = {"pool_rows": size, **chosen, **{f"tables_{k}": v for k, v in tables.items()}}
        updated = None
        if _expand.POOL_UPDATE and self.params.fit_pairs and tables["left"]:  # tables still off: move records (expand.update_pool)
            updated = update_pool(pool, weights, scaled, schema, ones, total * share, part_rng(key, UPDATE_PART),
                                  fitted=fitted)
            if updated is not None:
                pool, weights, info["pool_updated"] = updated, np.ones(updated.shape[0]), 1
        if self.params.fit_pairs and updated is None:  # the gate's view above the margin: the last pass
            passed = pass_pool(pool, weights, scaled, schema, part_rng(key, PASS_PART))
            if passed is not None:
                info.update(passed[1])
                if passed[0] is not None:
                    pool, weights = passed[0], np.ones(passed[0].shape[0])
        counts = copies(weights, n, rng)
        return ExpandedSampler(rows=n, pool=pool.astype(code_dtype(schema.cardinalities)), counts=counts, key=key,
                               weights=weights, info=info)

    @property
    def chunks_synthesis(self) -> bool:
        """Whether these parameters synthesize in bounded chunks (the complete sampler with
        the sds estimator, the default); the strict sampler and ``estimator="pgm"`` hold
        the whole table."""
        return self.params.synthesis == "complete" and self.params.estimator == "sds"

    def sampler(self, m: Measurement, schema: Schema, rows: int | None,
                rng: np.random.Generator) -> ChunkedSampler | WholeTableSampler | ExpandedSampler:
        """The release's records block by block. Up to one chunk of records
        (:func:`~dpsynth.methods.sds.chunked.chunk_rows_for`), and for the parameters that
        do not chunk, the whole table of :meth:`synthesize` (same bytes as before
        chunking); above, a :class:`ChunkedSampler` over the model learnt once; above
        :func:`~dpsynth.methods.sds.expand.expands`' switch, one fitted pool expanded."""
        n = int(m.records.value) if rows is None else int(rows)
        p = len(schema.columns)
        if not self.chunks_synthesis or n < 0 or chunk_count(n, p) == 1:
            return WholeTableSampler(self.synthesize(m, schema, rows, rng).codes)
        model, targets, total = self._complete_model(m, schema)
        key = [int(x) for x in rng.integers(0, 2**32, size=8, dtype=np.uint64)]
        if expands(n, p):
            return self._expanded(model, n, m, schema, targets, total, key, rng)

        def draw(k: int, mk: Measurement, ones: dict[int, np.ndarray], tk: float,
                 g: np.random.Generator) -> np.ndarray:  # one chunk, with its share: the chunk's refit
            return self._draw_complete(model, k, mk, schema, ones, tk, g,
                                       chunk=True).astype(code_dtype(schema.cardinalities))

        return ChunkedSampler(rows=n, columns=p, measurement=m, one_way=dict(targets), total=total, key=key,
                              draw_chunk=draw)
