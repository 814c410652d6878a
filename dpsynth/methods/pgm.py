"""Method ``pgm``: select marginals, measure them, fit one consistent graphical model.

Select-measure-generate (McKenna, Miklau, Sheldon 2021) with the Private-PGM
estimator of :mod:`dpsynth.inference`. Neighbouring tables differ by adding or removing
one record: a marginal's count table then moves by one in one cell (L2 and L1
sensitivity 1). Two selection strategies (``select``):

* ``mst`` (MST): rho in thirds. (1) every 1-way marginal with discrete Gaussian noise,
  ``rho/3`` split evenly; (2) a maximum spanning tree of column pairs, one edge per
  round, each edge drawn by the exponential mechanism among pairs joining two components,
  score = L1 gap between the pair's true counts and the model fitted to the 1-way
  measurements (sensitivity 1), ``epsilon = sqrt(8 (rho/3) / r)`` for r rounds;
  (3) the chosen pairs with discrete Gaussian noise, ``rho/3`` split evenly.
* ``aim`` (AIM): all 1-way marginals first, then rounds of (exponential mechanism over
  the 1..``degree``-way candidates whose model stays under the size limit, AIM's score
  ``w_r (L1 gap - sqrt(2/pi) sigma n_r)``; Gaussian measurement; refit), with AIM's
  annealing (per-round budget x4 when the refit barely moved the chosen marginal).

Accounting: the exponential mechanism with parameter epsilon is charged as
``epsilon^2/8``-zCDP (bounded range, as MST and AIM do), mechanism ``exponential``,
its epsilon and score sensitivity in the charge detail. AIM's adaptive budget is planned
as ``units`` equal shares (AIM's 16 d rounds), each a select/measure pair of stages in
the 0.1/0.9 ratio of AIM; a round spends one unit, four after one annealing, sixteen
after two, and the last round spends every unit left, so ``measure`` spends exactly
the plan. The data-dependent choice of how many units a round takes is the fully
adaptive composition AIM relies on (zCDP privacy filters).

Compression (``compress``, MST's): after the 1-way measurements, each column's values
whose noisy count is below ``compress_threshold`` noise sds are merged into one value
(with ``select=aim``, only the smallest of them whose merged mass is at most
``compress_share`` of the records, so a noisy budget never merges a column whole, and
each of which holds at most ``compress_value_share`` of them on its own; the group bound read
on the values' posteriors given the counts, ``compress_bound``; of those, only the values that
look empty merge: as runs of neighbours in the codes the schema orders, one value elsewhere);
every later marginal is selected, measured and fitted on the merged values (a partition
of values: sensitivity 1 still), and published with its map (``NoisyMarginal.groups``).

Synthesis is post-processing: the graphical model fitted to the noisy marginals (on the
merged values), seeded forward sampling on the junction tree with every value's rows
allocated by randomised rounding of their expected count (``sampling``), then merged
values spread back over their members (:mod:`dpsynth.inference.compression`).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from itertools import combinations
from typing import Callable, ClassVar

import numpy as np

from .. import progress
from ..rows.table import EncodedTable, code_dtype
from ..evaluation.predicted import allowed_tvds
from ..inference import EstimatorOptions, FitReport, FitTarget, GraphicalModel, Observation, estimate, fit_to_target
from ..inference.junction_tree import UnionFind, interaction_graph, triangulate
from ..inference.compression import ColumnRule, compressed_domain, compression_maps, expand_codes, fold_observation
from ..inference.junction_tree import Domain
from ..inference.model import signed_code_dtype
from ..inference.measurement import domain_of, merge_observations, observations_of
from ..privacy.accounting import gaussian_sigma
from ..privacy.budget import Budget, Charge, Ledger
from ..privacy.mechanisms import exponential_charge, exponential_epsilon_for_rho, exponential_mechanism
from ..privacy.noise import discrete_gaussian
from ..rows.rowsource import RowSource, as_source, count_marginals
from ..schema import Schema
from ..measurement import DP_ADD_REMOVE, NoisyMarginal, fold_table
from .base import Measurement, MethodBase, ParamError, PrivacyStatement, params_to_dict
from .pgm_params import COMPRESS_EMPTY_SHARE, COMPRESS_SHARE, COMPRESS_VALUE_SHARE, PgmParams

__all__ = ["ModelSampler", "PgmParams", "PgmMethod"]


def _debug(msg: str, *args: object) -> None:
    """``logging``'s debug record of this module, when ``logging`` has been imported: a process
    that never imported it has configured no handler, so the record would go nowhere (its last
    resort handler takes warnings only); not importing it keeps about 0.4 MB out of the process."""
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.getLogger(__name__).debug(msg, *args)


AIM_SELECT_SHARE = 0.1  # AIM: share of each round's budget spent on selection
#: Small models get more estimator steps (EstimatorOptions.cell_steps): every fit gets
#: FIT_CELL_STEPS / units cell-steps (``units``: AIM's budget units, 16 per column by default;
#: MST counts 16 per column too); a junction tree of size S (cells + 100 per clique) with
#: 1000 x S within that runs 1000 steps in float64 without the noise stop, larger trees keep
#: the fit's own cap (dpsynth.inference.scaled_options). Over a whole AIM run the refits spend
#: at most FIT_CELL_STEPS cell-steps beyond their caps. Set on the tuning half of
#: benchmarks/aim_head_to_head.py (docs/pgm.md, "Steps scaled by the model's size").
FIT_CELL_STEPS = 128_000_000


#: The released model is fitted on past its stop rules while some measured marginal's model TVD
#: against its noisy target is above this share of the threshold the gate will give it
#: (dpsynth.evaluation.predicted.allowed_tvds at the synthetic row count): the gate's thresholds
#: shrink as 1/sqrt(rows) while a fixed step cap leaves the fitting error where it is. Set on
#: the tuning half of docs/pgm.md, "The released fit follows the gate".
GATE_FIT_SHARE = 0.25
#: Its step bound: the fit may take up to ``iters`` x rows / GATE_FIT_ROWS step attempts in all
#: (at most GATE_FIT_MOST_ITERS): the steps it needs grow with the rows (thresholds ~ 1/sqrt(rows)
#: while the error falls about as 1/sqrt(steps)), and so does the rest of a release's work. Below
#: GATE_FIT_ROWS rows the bound is under the cap, so a release of that size is fitted as before.
GATE_FIT_ROWS = 2_000_000
GATE_FIT_MOST_ITERS = 100_000
#: And it stops once the best worst ratio fell by less than GATE_FIT_MIN_GAIN over the last
#: GATE_FIT_WINDOW accepted steps (measured on the 20-column scale table at 20M rows: the worst
#: marginal's model TVD falls from 0.51 to a floor of 0.31 of its threshold in 300 steps on the
#: tuning half; on the benchmark's own draw it stalls near 0.6 for about 100 steps before going
#: on to 0.25, which a window of 100 cut short; docs/pgm.md).
GATE_FIT_WINDOW = 300
GATE_FIT_MIN_GAIN = 0.01


def gate_fit_steps(iters: int, rows: int) -> int:
    """The released fit's step bound for ``rows`` synthetic rows (see :data:`GATE_FIT_ROWS`)."""
    return int(max(1, min(GATE_FIT_MOST_ITERS, math.ceil(iters * rows / GATE_FIT_ROWS))))


def _fit_record(report: FitReport) -> dict:
    """The released fit's record for the release (JSON-ready): the rule and what it did."""
    return {"gate_share": GATE_FIT_SHARE, "most_steps": report.most_steps, "window": GATE_FIT_WINDOW,
            "min_gain": GATE_FIT_MIN_GAIN, "steps": report.steps,
            "extra_steps": report.extra_steps, "ratio_at_stop": round(report.ratio_at_stop, 6),
            "ratio": round(report.ratio, 6), "met": report.met}


#: compress_bound="posterior" (select=aim's default, issue 27): the sds of the posterior sum the
#: group bound reads (p5; set on the tuning half, held out in docs/pgm.md, "A bound the selection
#: cannot bias").
COMPRESS_POSTERIOR_MARGIN = 5.0
#: An experimental merge rule (compression_maps' ``rule``) that benchmarks/compress_rules.py sets
#: for select=aim from benchmarks/compress_experiments.py, the rules of issue 27 measured and not
#: adopted (docs/pgm.md). Not a parameter: None in the product, so releases keep their bytes.
COMPRESS_RULE: ColumnRule | None = None


def _stage_1way(col: str) -> str:
    return f"measure/1-way/{col}"


def _stage_select(k: int) -> str:
    return f"select/mst/round-{k:03d}"


def _stage_pair(k: int) -> str:
    return f"measure/2-way/round-{k:03d}"


def _stage_unit(i: int, part: str) -> str:
    return f"aim/unit-{i:04d}/{part}"


def _em_charge(stage: str, rho: float, **detail) -> Charge:
    base = exponential_charge(stage, exponential_epsilon_for_rho(rho))
    return dataclasses.replace(base, rho=rho, detail={**base.detail, "score": "L1 gap to the current model", **detail})


def _components(d: int, edges: list[tuple[int, int]]) -> int:
    sets = UnionFind(d)
    for a, b in edges:
        sets.union(a, b)
    return sets.components()


def _noisy(counts: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    return (counts + discrete_gaussian(sigma, counts.shape, rng)).astype(np.float64)


class PgmMethod(MethodBase):
    """Method ``pgm``: marginals selected by MST or AIM, measured with discrete Gaussian
    noise, fitted by one graphical model and sampled from it.

    See the module docstring."""

    name: ClassVar[str] = "pgm"
    guarantee: ClassVar[PrivacyStatement] = PrivacyStatement(
        kind="dp", neighbours=DP_ADD_REMOVE.neighbours,
        detail="zCDP: discrete Gaussian measurements, exponential-mechanism selection charged as epsilon^2/8")
    params_type: ClassVar[type] = PgmParams
    provides_marginals: ClassVar[bool] = True
    measures_counts: ClassVar[bool] = True
    streams_synthesis: ClassVar[bool] = True

    # --- planning (public information only) --------------------------------------
    def _check_domain(self, schema: Schema) -> None:
        for c in schema.columns:
            if c.cardinality > self.params.max_clique_cells:
                raise ParamError(
                    f"column {c.name!r} has {c.cardinality:,} codes, above max_clique_cells="
                    f"{self.params.max_clique_cells:,}: pass --param max_clique_cells={c.cardinality} or more, "
                    f"or give {c.name!r} fewer bins or categories in the schema")

    def _mst_pairs(self, schema: Schema) -> list[tuple[int, int]]:
        cards = schema.cardinalities
        return [(a, b) for a, b in combinations(range(len(cards)), 2)
                if cards[a] * cards[b] <= self.params.max_clique_cells]

    def _aim_candidates(self, schema: Schema) -> list[tuple[int, ...]]:
        cards = schema.cardinalities
        d = len(cards)
        return [r for k in range(1, min(self.params.degree, d) + 1) for r in combinations(range(d), k)
                if math.prod(cards[j] for j in r) <= self.params.max_clique_cells]

    def _units(self, schema: Schema) -> int:
        return self.params.units or 16 * len(schema.columns)

    def plan(self, schema: Schema, budget: Budget) -> tuple[Charge, ...]:
        """The stages of ``select``: for MST, rho in thirds (1-way marginals, pair selections, pair
        measurements), or all on the 1-way marginals when no pair fits ``max_clique_cells``;
        for AIM, ``units`` equal select/measure shares. ParamError for a column over the limit."""
        self._check_domain(schema)
        d = len(schema.columns)
        if self.params.select == "aim":
            return self._plan_aim(schema, budget)
        rounds = d - _components(d, self._mst_pairs(schema))
        if rounds == 0:
            share = budget.rho / d
            return tuple(Charge(stage=_stage_1way(c.name), rho=share, detail={"sensitivity_l2": 1.0})
                         for c in schema.columns)
        third = budget.rho / 3.0
        charges = [Charge(stage=_stage_1way(c.name), rho=third / d, detail={"sensitivity_l2": 1.0})
                   for c in schema.columns]
        for k in range(1, rounds + 1):
            charges.append(_em_charge(_stage_select(k), third / rounds, sensitivity=1.0,
                                      candidates="column pairs joining two components of the tree"))
        for k in range(1, rounds + 1):
            charges.append(Charge(stage=_stage_pair(k), rho=third / rounds, detail={"sensitivity_l2": 1.0}))
        return tuple(charges)

    def _plan_aim(self, schema: Schema, budget: Budget) -> tuple[Charge, ...]:
        d, units = len(schema.columns), self._units(schema)
        measure_share = 1.0 - AIM_SELECT_SHARE
        unit = budget.rho / (units + measure_share * d)
        sens = self._aim_sensitivity(schema)
        charges = [Charge(stage=_stage_1way(c.name), rho=measure_share * unit, detail={"sensitivity_l2": 1.0})
                   for c in schema.columns]
        for i in range(1, units + 1):
            charges.append(_em_charge(_stage_unit(i, "select"), AIM_SELECT_SHARE * unit, sensitivity=sens,
                                      candidates=f"1..{self.params.degree}-way marginals under the model size limit"))
            charges.append(Charge(stage=_stage_unit(i, "measure"), rho=measure_share * unit,
                                  detail={"sensitivity_l2": 1.0}))
        return tuple(charges)

    def _aim_weights(self, schema: Schema, cands: list[tuple[int, ...]]) -> np.ndarray:
        """AIM's weight of candidate r against the workload of every ``degree``-way marginal:
        sum over workload sets s of |r & s| = |r| * C(d-1, degree-1)."""
        d = len(schema.columns)
        m = min(self.params.degree, d)
        return np.array([len(r) * math.comb(d - 1, m - 1) for r in cands], dtype=np.float64)

    def _aim_sensitivity(self, schema: Schema) -> float:
        return float(self._aim_weights(schema, self._aim_candidates(schema)).max())

    # --- measurement (the DP boundary) ---------------------------------------------
    def measure(self, codes: EncodedTable | RowSource, ledger: Ledger, rng: np.random.Generator) -> Measurement:
        """Counts every marginal it may select in one pass over the rows (a source's
        partitions, in bounded memory), then selects and measures from those counts."""
        source = as_source(codes)
        schema = source.schema
        self._check_domain(schema)
        names = schema.names
        charges: list[Charge] = []

        def spend(stage: str) -> Charge:
            c = ledger.spend(stage)
            charges.append(c)
            return c

        d = len(names)
        wanted = self._mst_pairs(schema) if self.params.select == "mst" else self._aim_candidates(schema)
        truth = count_marginals(source, [(j,) for j in range(d)] + wanted)
        obs: list[Observation] = []
        for j, name in enumerate(names):
            sigma = gaussian_sigma(1.0, spend(_stage_1way(name)).rho)
            obs.append(Observation(attrs=(name,), counts=_noisy(truth[(j,)], sigma, rng), stddev=sigma))
        maps = (compression_maps({o.attrs[0]: o.counts for o in obs}, {o.attrs[0]: o.stddev for o in obs},
                                 self.params.compress_threshold, self._compress_share(), **self._compress_options(schema))
                if self.params.compress else {})
        self._maps, self._domain = maps, domain_of(schema)
        # Every larger marginal is counted on the merged values (1-way ones stay on the codes).
        truth = {r: (fold_table(t, [maps.get(names[j]) for j in r]) if len(r) > 1 and any(names[j] in maps for j in r)
                     else t) for r, t in truth.items()}
        if self.params.select == "mst":
            obs += self._measure_mst(truth, schema, obs, spend, rng)
        else:
            obs += self._measure_aim(truth, schema, obs, spend, ledger, rng)
        merged = merge_observations(obs)
        return Measurement(
            method=self.name,
            params=params_to_dict(self.params),
            charges=tuple(charges),
            measured=tuple(NoisyMarginal(attrs=o.attrs, counts=o.counts, stddev=o.stddev, mechanism="gaussian",
                                         groups={a: tuple(maps[a].tolist()) for a in o.attrs
                                                 if a in maps and len(o.attrs) > 1})
                           for o in merged),
            statement=DP_ADD_REMOVE,
            meta={"selected": [list(o.attrs) for o in obs if len(o.attrs) > 1],
                  **({"compression": {a: g.tolist() for a, g in maps.items()}} if maps else {}),
                  **({"units": self._units(schema)} if self.params.select == "aim" else {})},
        )

    def _compress_share(self) -> float:
        """The bound on a merged group's share of the records (``compress_share``; its default per select)."""
        if self.params.compress_share is not None:
            return float(self.params.compress_share)
        if self.params.select != "aim":
            return math.inf
        return COMPRESS_EMPTY_SHARE if self._compress_bound() == "posterior" else COMPRESS_SHARE

    def _compress_bound(self) -> str:
        """What the group bound reads (``compress_bound``; none: aim the posterior, mst the counts)."""
        return self.params.compress_bound or ("posterior" if self.params.select == "aim" else "counts")

    def _compress_value_share(self) -> float:
        """The bound on one merged value's share of the records (``compress_value_share``; its default per select)."""
        if self.params.compress_value_share is not None:
            return float(self.params.compress_value_share)
        return COMPRESS_VALUE_SHARE if self.params.select == "aim" else math.inf

    def _compress_options(self, schema: Schema) -> dict:
        """compression_maps' keywords beside the group share: the per-value share, what the bounds
        read (``compress_bound``; aim's posterior reading merges only values that look empty), the
        columns' ordered codes (numeric and datetime bins) and, for aim, the experimental rule (None
        in the product)."""
        kw: dict = {"value_share": self._compress_value_share(),
                    "ordered": {c.name: c.n_regular for c in schema.columns if c.type != "categorical"}}
        if self._compress_bound() == "posterior":
            kw.update(posterior=True, posterior_margin=COMPRESS_POSTERIOR_MARGIN, empty_only=self.params.select == "aim")
        if self.params.select == "aim" and COMPRESS_RULE is not None:
            kw["rule"] = COMPRESS_RULE
        return kw

    def _model_domain(self) -> Domain:
        return compressed_domain(self._domain, self._maps)

    def _fit(self, schema: Schema, obs: list[Observation], iters: int, warm=None):
        # Per-clique refusal only: AIM's selection keeps the whole tree within max_model_cells,
        # MST's cliques are pairs within max_clique_cells. The model lives on the merged values.
        opts = self._options(iters, schema, max_cells=max(self.params.max_model_cells, self.params.max_clique_cells))
        folded = [fold_observation(o, self._maps, self._domain) for o in merge_observations(obs)]
        return estimate(self._model_domain(), folded, options=opts, warm=warm)

    def _options(self, iters: int, schema: Schema, **extra) -> EstimatorOptions:
        """Every fit's estimator options: at most ``iters`` steps (1000 for a small model, see
        :data:`FIT_CELL_STEPS`), the same noise stop and precision."""
        units = self.params.units if self.params.select == "aim" and self.params.units else 16 * len(schema.columns)
        return EstimatorOptions(iters=iters, noise_tol=self.params.noise_tol or None, precision=self.params.precision,
                                cell_steps=None if FIT_CELL_STEPS is None else FIT_CELL_STEPS / units, **extra)

    def _measure_mst(self, truth, schema: Schema, obs, spend: Callable[[str], Charge], rng) -> list[Observation]:
        names, d = schema.names, len(schema.columns)
        pairs = self._mst_pairs(schema)
        rounds = d - _components(d, pairs)
        if rounds == 0:
            return []
        model = self._fit(schema, obs, iters=500)
        gap = np.array([np.abs(truth[p] - model.project((names[p[0]], names[p[1]]))).sum() for p in pairs])
        sets = UnionFind(d)
        chosen: list[tuple[int, int]] = []
        for k in range(1, rounds + 1):
            charge = spend(_stage_select(k))
            eps = exponential_epsilon_for_rho(charge.rho)
            joins = lambda t: sets.find(pairs[t][0]) != sets.find(pairs[t][1])  # noqa: E731
            i = exponential_mechanism(gap, eps, 1.0, rng, allowed=joins)
            a, b = pairs[i]
            sets.union(a, b)
            chosen.append((a, b))
        out = []
        for k, (a, b) in enumerate(chosen, start=1):
            sigma = gaussian_sigma(1.0, spend(_stage_pair(k)).rho)
            out.append(Observation(attrs=(names[a], names[b]), counts=_noisy(truth[(a, b)], sigma, rng), stddev=sigma))
        return out

    def _measure_aim(self, truth, schema: Schema, obs, spend, ledger: Ledger, rng) -> list[Observation]:
        names = schema.names
        dom = self._model_domain()
        cards = dom.sizes
        units = self._units(schema)
        cands = self._aim_candidates(schema)
        weights = self._aim_weights(schema, cands)
        sens = float(weights.max())
        sizes = np.array([math.prod(cards[j] for j in r) for r in cands], dtype=np.float64)
        model = self._fit(schema, obs, iters=300)
        out: list[Observation] = []
        next_unit, per_round, limit = 1, 1, self.params.max_model_cells
        while next_unit <= units:
            left = units - next_unit + 1
            take = left if left < 2 * per_round else per_round
            sel_rho = meas_rho = 0.0
            for i in range(next_unit, next_unit + take):
                sel_rho += spend(_stage_unit(i, "select")).rho
                meas_rho += spend(_stage_unit(i, "measure")).rho
            used = ledger.rho_spent / ledger.budget.rho
            next_unit += take
            progress.count("measure: AIM rounds", next_unit - 1, units, "budget units spent")
            sigma = gaussian_sigma(1.0, meas_rho)
            eps = exponential_epsilon_for_rho(sel_rho)
            t0 = time.perf_counter()
            measured = [o.attrs for o in merge_observations(obs + out)]
            size_ok = _size_check(dom, measured, cands, names, used * limit)
            est = model.project_many([tuple(names[j] for j in r) for r in cands])
            gap = np.array([np.abs(self._on_model(truth[r], r, names) - e).sum() for r, e in zip(cands, est)])
            score = weights * (gap - math.sqrt(2.0 / math.pi) * sigma * sizes)
            t1 = time.perf_counter()
            i = exponential_mechanism(score, eps, sens, rng, allowed=size_ok)
            t2 = time.perf_counter()
            r = cands[i]
            attrs = tuple(names[j] for j in r)
            # A 1-way marginal is measured on the column's codes (and merged with the first).
            out.append(Observation(attrs=attrs, counts=_noisy(truth[r], sigma, rng), stddev=sigma))
            before = est[i]
            model = self._fit(schema, obs + out, iters=self.params.refit_iters, warm=model)
            moved = float(np.abs(model.project(attrs) - before).sum())
            _debug("aim round: units %d/%d, chose %s, score %.1fs, select %.1fs, fit %.1fs, model %d cells",
                   next_unit - 1, units, attrs, t1 - t0, t2 - t1, time.perf_counter() - t2,
                   model.tree.total_cells())
            if moved <= math.sqrt(2.0 / math.pi) * sigma * sizes[i]:
                per_round *= 4
        return out

    def _on_model(self, table: np.ndarray, r: tuple[int, ...], names) -> np.ndarray:
        """A 1-way table over a merged column's codes, summed into its merged values."""
        a = names[r[0]]
        return fold_table(table, [self._maps[a]]) if len(r) == 1 and a in self._maps else table

    # --- synthesis (post-processing) -------------------------------------------------
    def sampler(self, m: Measurement, schema: Schema, rows: int | None, rng: np.random.Generator) -> "ModelSampler":
        """Fits the graphical model to the noisy marginals (``iters`` steps, then on to the gate's
        thresholds: :meth:`released_fit`; on the merged values when the measurement merged some);
        the sampler draws ``rows`` records block by block (None: the measurement's record
        estimate, else the model's total), merged values spread back per block. The fit draws
        nothing from ``rng``."""
        maps = {a: np.asarray(g, dtype=np.int64) for a, g in (m.meta.get("compression") or {}).items()}
        wanted = m.estimated_records() if rows is None else int(rows)
        if wanted is not None and wanted < 0:
            raise ValueError(f"rows must be >= 0, got {wanted}")
        model, report = self.released_fit(m, schema, wanted)
        n = (wanted if wanted is not None else max(1, int(round(model.total))))
        return ModelSampler(model=model, rows=n, dtype=code_dtype(schema.cardinalities), iid=self.params.sampling == "iid",
                            names=tuple(schema.names), maps=maps,
                            counts={a: m.marginal((a,)).counts for a in maps},
                            fit={} if report is None else _fit_record(report))

    def released_fit(self, m: Measurement, schema: Schema, rows: int | None) -> tuple[GraphicalModel, FitReport | None]:
        """The released model: the fit of ``iters`` steps under the usual stops, then more steps
        while some measured marginal's model TVD against its noisy target is above
        :data:`GATE_FIT_SHARE` of the threshold the gate will give it for ``rows`` synthetic
        rows and that ratio still falls (:data:`GATE_FIT_WINDOW`), at most :func:`gate_fit_steps`
        attempts in all (no target when ``rows`` is None or 0). The report says what the extra steps did (None: no target)."""
        maps = {a: np.asarray(g, dtype=np.int64) for a, g in (m.meta.get("compression") or {}).items()}
        full = domain_of(schema)
        obs = [fold_observation(o, maps, full) for o in observations_of(m)] if maps else observations_of(m)
        dom = compressed_domain(full, maps) if maps else full
        opts = self._options(self.params.iters, schema)
        if not rows:
            return estimate(dom, obs, options=opts), None
        allowed = allowed_tvds(m, rows)
        target = FitTarget(limits={frozenset(a): GATE_FIT_SHARE * t for a, t in allowed.items()},
                           most_steps=gate_fit_steps(self.params.iters, rows), window=GATE_FIT_WINDOW,
                           min_gain=GATE_FIT_MIN_GAIN)
        return fit_to_target(dom, obs, target, options=opts)

    def synthesize(self, m: Measurement, schema: Schema, rows: int | None, rng: np.random.Generator) -> EncodedTable:
        """The whole table at once: :meth:`sampler`'s records in one block drawn with ``rng``."""
        s = self.sampler(m, schema, rows, rng)
        return EncodedTable(schema=schema, codes=s.sample(s.rows, rng))


@dataclass(frozen=True)
class ModelSampler:
    """A fitted graphical model drawing ``rows`` records, any number at a time (merged
    values, when the measurement compressed some, spread back in each draw)."""

    model: GraphicalModel
    rows: int
    dtype: np.dtype
    iid: bool = False
    names: tuple[str, ...] = ()
    maps: dict = dataclasses.field(default_factory=dict)
    counts: dict = dataclasses.field(default_factory=dict)
    #: What the released fit did past its stop rules (:func:`_fit_record`; empty: nothing asked).
    fit: dict = dataclasses.field(default_factory=dict)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` records of codes (forward sampling on the junction tree, with ``rng``): the
        records of ``model.sample``, each column contiguous (an ``(n, columns)`` array in Fortran
        order: the writer reads the codes column by column)."""
        from ..inference.sampling import sample_columns

        # the smallest signed type holding the model's codes, not int64: on a small table the
        # records, not the model, are the sampler's memory (asia: 20,000 x 8 codes, 1.3 MB as int64)
        codes = sample_columns(self.model, n, rng, iid=self.iid, dtype=signed_code_dtype(self.model.domain.sizes)).T
        if self.maps:
            codes = expand_codes(codes, list(self.names), self.maps, self.counts, rng, dtype=self.dtype)
        return codes.astype(self.dtype, copy=False)


def _size_check(dom, measured, cands, names, cap: float) -> Callable[[int], bool]:
    """Whether adding candidate i keeps the junction tree's total cells within ``cap``.

    It triangulates exactly what the next fit builds its tree from (the measured sets plus
    the candidate), so a candidate it accepts never makes that fit refuse the model; a
    candidate inside a measured set adds no edge and leaves the tree as it is."""
    cache: dict[int, bool] = {}
    graph = interaction_graph(dom, measured)  # built once a round; each candidate adds its edges
    held = [frozenset(c) for c in measured]

    def ok(i: int) -> bool:
        if i not in cache:
            attrs = tuple(names[j] for j in cands[i])
            want = frozenset(attrs)
            if any(want <= c for c in held):
                cache[i] = True
            else:
                tri = triangulate(dom, [attrs], graph=graph)
                cache[i] = sum(dom.cells(c) for c in tri) <= cap
        return cache[i]

    return ok
