"""Method ``sds``: DP k-way marginals ("aggregates") and aggregate-seeded synthesis.

This follows the Synthetic Data Showcase approach (shared/papers/sds-dp-marginals.txt,
"the paper" below) and keeps the meaning and defaults of every parameter of its
reference implementation, pac-synth 0.0.8, except three defaults that our public
domain allows and that generalise better (issue 9; measured with
benchmarks/sds_matrix.py, set on its tuning half, reported on its held-out half):

* ``one_way="public"``: at k = 1 every code of every column, the missing code too, is
  measured (each record holds exactly p of them) and no threshold tau_1 applies. tau_1
  hides values only the rows could reveal; with a public domain there are none, and it
  suppressed real values (tub=yes, 209 records, on asia at epsilon 1) whose records
  then became empty cells. ``one_way="paper"`` keeps the paper's rule.
* ``empty_cells="value"``: the missing code is a value like any other in every k-tuple,
  so Delta_k = C(p, k) for every record. The paper's empty cells belong to no tuple and
  the complete sampler had to infer them as deficits (a tuple's count minus the sum of
  its extensions): a sum of many clipped noisy counts, biased and far noisier than one
  measured count, which lost to independent columns on tables with structural
  missingness. ``empty_cells="deficit"`` keeps the paper's rule.
* ``accuracy_mode="prioritize_short"`` (pac-synth: prioritize_long, which gave k = 1
  one fourteenth of the Gaussian budget at R = 3). The complete sampler fits longer
  tables to the shorter ones, so the short ones carry the most weight.

The synthesis defaults to ``complete``: on every tuning table, including 1,000 rows at
epsilon 10 where the paper's strict sampler should do best, ``strict`` lost (1-way TVD
0.1-0.4, failing the gate), so no public rule picks it; the measurement states
``synthesis_choice``.

Aggregation (``measure``), for k = 1 .. R (R = ``reporting_length``):

1. A DP record count n_p = n + discrete Laplace(1 / eps_N), eps_N = N_p * eps.
2. Candidates: at k = 1 every code of every column (``one_way="paper"``: every
   non-missing code; either way the domain is public, so unlike pac-synth no candidate
   is taken from the rows); at k >= 2 every k-tuple (one
   value in each of k distinct columns) all of whose (k-1)-sub-tuples survived k - 1.
3. Each record's number of valid k-tuples (candidates it contains; with
   ``empty_cells="deficit"`` missing codes are empty cells and belong to no tuple). The allowed sensitivity Delta_k is their DP
   ``percentile_percentage``-th percentile (report-noisy-max with exponential noise of
   rate eps_Q / 2 over the public range 0 .. C(p, k); pac-synth's range ends at the
   data's maximum, which is not DP).
4. A record with more valid tuples than Delta_k keeps a uniformly random Delta_k of them.
5. Each candidate's count gets discrete Gaussian noise of scale sigma_k * sqrt(Delta_k)
   (L2 sensitivity sqrt(Delta_k) under adding or removing a record).
6. A candidate is reported when its noisy count is > tau_k and > 0; tau_1 = 0 with
   ``one_way="public"`` (all 1-way counts, negative too, are kept in the measurement's
   1-way marginals), else 1 + sigma_1 sqrt(Delta_1) Phi^-1((1 - delta/2)^(1/Delta_1)); for k >= 2 ``fixed`` thresholds are
   user values and ``adaptive`` ones are sigma_k sqrt(Delta_k) Phi^-1(1 - eta_k / 2).
   The paper writes sqrt(Delta_1) in the adaptive formula; we follow pac-synth's code
   (sqrt(Delta_k)), which makes eta_k the share of zero-count candidates let through.
7. Normalisation (post-processing): each k-tuple's count becomes at most the count of
   each of its (k-1)-sub-tuples (hence of every sub-tuple). Integer noise and the
   "> 0" rule mean no reported tuple ever loses a parent, so pac-synth's "add missing
   parents" step has nothing to do here.

Budget (``plan``): eps_N = N_p eps costs eps_N^2 / 2 (a pure-DP step in zCDP); the rest,
rho_M, is split as in the paper: R percentiles of eps_Q = sqrt(2 rho_M Q_p / R) each
(pac-synth's code; the paper's pseudo-code says eps_Q / k, which would not match its own
budget equation), and sigma_k = p_k sigma with sigma = sqrt(sum_k p_k^-2 / (2 rho_M (1 -
Q_p))), so that R eps_Q^2 / 2 + sum_k 1 / (2 sigma_k^2) = rho_M. With ``accounting="zcdp"``
(default) rho_M is what the release budget leaves after the record count, converted
with the tight zCDP -> (eps, delta) conversion the ledger uses. With ``accounting="paper"``
rho_M = (sqrt(eps_M + ln(2/delta)) - sqrt(ln(2/delta)))^2 with eps_M = eps - eps_N, as
pac-synth computes it (the paper's conversion spends delta/2 on the k=1 threshold, which
our public domain does not need); the ledger still checks it fits the release budget.
``delta=None`` keeps pac-synth's default 1 / (n_p ln n_p) for the threshold tau_1 (and for
the paper accounting it falls back to the release delta, which ``plan`` knows before any
row is read).

Synthesis (``synthesize``, post-processing only), ``synthesis=``:

* ``"strict"``: the paper's aggregate-seeded sampler. Records are built one attribute at
  a time; an attribute can be drawn only if its column is unused and its 1-count budget
  (its DP count) is not spent; its weight is the count of (record + attribute) while the
  record is at most R long, beyond that the ``weight_selection_percentile``-th
  percentile (R-8 interpolation, as pac-synth) of the counts of all sub-combinations
  containing it, and every such sub-combination must be reported: no combination absent
  from the aggregates is ever created. ``use_synthetic_counts`` subtracts what was
  already synthesised. A record ends when no attribute can be added: its other columns
  stay empty (missing code, or the schema's fill code for a column that cannot be
  empty). Vectorised by batches: records are built in groups of about N/64 that share
  one column order (a weighted random permutation, weights = the columns' DP 1-way
  totals, which is the paper's column choice when weights within columns are
  comparable); a column without a valid candidate is skipped, exactly as in the paper
  where such a column can never be chosen later. Budgets and synthetic counts are
  updated after each group, and all reset when every budget is spent (pac-synth's
  behaviour for a target count).
* ``"complete"`` (default): the same attribute-by-attribute sampling, but records are
  completed from the aggregates instead of stalling. This is the design choice that fixes
  pac-synth's empty cells: in pac-synth ~23% of cells stay empty because the strict rule
  stalls, and beyond R attributes its weight (the 95th percentile of sub-combination
  counts, nearly the attribute's 1-count) carries almost no dependence on the record.
  Here:

  - each column is drawn conditionally on R - 1 earlier attributes, its *parents*, with
    weight = the aggregate count of (parents + value), i.e. the paper's direct lookup at
    length R. Parents and the column order are chosen greedily to maximise the mutual
    information measured on the aggregates (a degree R-1 Bayesian network learnt from
    the DP aggregates; four orders, each starting from one of the most informative
    columns, share the rows);
  - an empty cell is a value like any other. With ``empty_cells="value"`` (default) its
    counts are measured; with ``"deficit"`` a count is the deficit of a tuple's count
    against the sum of its extensions (e.g. count(a, b) - sum_x count(a, b, x)), and a
    column whose DP 1-way total does not fall significantly short of the DP record
    count (beyond 3 noise sd plus what values suppressed by tau_1 can explain) never
    gets empty cells; values that tau_1 suppressed get back a share of their column's
    deficit (at most tau_1 each);
  - with ``one_way="public"`` the 1-way tables are post-processed first: one record
    count (inverse-variance mean of the DP count and every column's total), then each
    column's noisy counts projected (least squares) onto the non-negative tables with
    that total, which removes the mass that clipping would give the domain's empty
    values (a state's table holds a few of the 31 PUMAs);
  - a consistent projection of the noisy counts before sampling: top-down, each k-table
    is fitted (iterative proportional fitting) to its already fitted (k-1)-tables, which
    are less noisy, and shrunk towards the table those alone imply with a James-Stein
    weight (noise energy / deviation energy); each family's conditional is further
    shrunk towards what the shorter tuples predict, with a pseudo-count of 4 noise sd per
    slice, and refitted to its sub-tables. A slice that the noise dominates thus falls
    back smoothly to shorter tuples, and no value ever "stalls".

  A combination absent from the aggregates can thus appear (with the small weight that
  the shorter tuples give it): that is the price of complete records. The constants
  (4 orders, pseudo-count 4 sd, 5 fitting rounds) were set on the generated 30k x 15
  table, NIST national2019 and the demo table at epsilon 1 and 4.

The number of records is the DP record count unless ``rows`` is given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, ClassVar, Literal, Sequence

import numpy as np
import pandas as pd
from scipy.stats import norm

from ..counting import column_major, count_marginals, flat_index
from ..encoding import EncodedTable, code_dtype
from ..precheck import max_table_bytes
from ..privacy.budget import Budget, Charge, Ledger
from ..privacy.mechanisms import dp_percentile, percentile_scores  # noqa: F401 (re-exported)
from ..privacy.noise import discrete_gaussian, discrete_laplace, discrete_laplace_sd
from ..schema import Schema
from .base import DP_ADD_REMOVE, Measurement, MethodBase, NoisyCount, NoisyMarginal, PrivacyStatement, params_to_dict

__all__ = [
    "SdsParams",
    "SdsMethod",
    "NoiseSplit",
    "paper_rho",
    "split_marginals_rho",
    "split_budget",
    "sigma_proportions",
    "adaptive_etas",
    "dp_percentile",
    "percentile_r8",
    "aggregate",
    "normalise",
    "aggregates_frame",
    "tables_from_frame",
]

Combo = tuple[int, ...]
AccuracyMode = Literal["prioritize_long", "prioritize_short", "balanced"]
FabricationMode = Literal["uncontrolled", "progressive", "balanced", "minimize"]

#: Largest total number of dense cells over all k-tuples (k <= R) that ``plan`` accepts.
MAX_TUPLE_CELLS = 1 << 26
#: Peak bytes per dense tuple cell while measuring (exact counts, noisy copy, masks).
_BYTES_PER_TUPLE_CELL = 48
#: Elements (rows x combos, or rows x values x sub-combinations) per vectorised chunk.
_CHUNK = 1 << 22
#: Record groups of the strict sampler (each with its own column order).
_STRICT_GROUPS = 64
#: Column orders (each with its own first column) mixed by the complete sampler.
_COMPLETE_ORDERS = 4
#: Pseudo-count of a slice, in units of its noise level (sd_k * sqrt(values)).
_SHRINK = 4.0
#: Rounds of proportional fitting of each family table to its shorter sub-tables.
_IPF_ROUNDS = 5
#: Rounds per order when ``use_synthetic_counts`` steers the complete sampler.
_COMPLETE_ROUNDS = 8


# --- parameters ------------------------------------------------------------------------


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
        if not isinstance(self.use_synthetic_counts, bool):
            bad("use_synthetic_counts", "must be true or false")
        w = self.weight_selection_percentile
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w <= 100:
            bad("weight_selection_percentile", "must lie in [0, 100]")


def sigma_proportions(params: SdsParams) -> tuple[float, ...]:
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


# --- budget split (the paper's formulas) -------------------------------------------------


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
        return len(self.sigmas)

    @property
    def records_rho(self) -> float:
        return 0.5 * self.records_epsilon**2

    @property
    def percentile_rho(self) -> float:
        return 0.5 * self.percentile_epsilon**2

    def gaussian_rho(self, k: int) -> float:
        return 1.0 / (2.0 * self.sigmas[k - 1] ** 2)

    @property
    def total_rho(self) -> float:
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
    """The paper's split of (epsilon, delta): eps_N = N_p eps, eps_M = eps - eps_N, rho from eps_M."""
    R = int(reporting_length)
    props = tuple(proportions) if proportions is not None else tuple(1.0 / k for k in range(1, R + 1))
    eps_n = number_of_records_epsilon_proportion * epsilon
    rho = paper_rho(epsilon - eps_n, delta)
    eps_q, base, sigmas = split_marginals_rho(rho, R, percentile_epsilon_proportion, props)
    return NoiseSplit(float(epsilon), eps_n, rho, eps_q, base, sigmas)


# --- DP pieces ---------------------------------------------------------------------------


def percentile_r8(sorted_values: np.ndarray, counts: np.ndarray, q: float) -> np.ndarray:
    """Hyndman-Fan type 8 percentile along the last axis, per row with its own count.

    ``sorted_values[..., :counts]`` are the valid, ascending entries of each row (the
    rest is ignored). ``q`` in [0, 100]. Matches ``np.percentile(method="median_unbiased")``.
    """
    qq = q / 100.0
    n = np.asarray(counts, dtype=np.float64)
    h = n * qq + (qq + 1.0) / 3.0  # 1-based position
    lo = np.floor(h)
    frac = h - lo
    lo_i = np.clip(lo, 1, np.maximum(n, 1)).astype(np.int64) - 1
    hi_i = np.clip(lo + 1, 1, np.maximum(n, 1)).astype(np.int64) - 1
    frac = np.where(h >= n, 0.0, np.where(h < 1, 0.0, frac))
    a = np.take_along_axis(sorted_values, lo_i[..., None], axis=-1)[..., 0]
    b = np.take_along_axis(sorted_values, hi_i[..., None], axis=-1)[..., 0]
    return a + frac * (b - a)


def _threshold_k1(sigma1: float, delta1: int, delta: float) -> float:
    # (1 - delta/2)^(1/Delta) computed in logs: 1 - that is tiny.
    tail = -math.expm1(math.log1p(-delta / 2.0) / delta1)
    return 1.0 + sigma1 * math.sqrt(delta1) * float(norm.isf(tail))


def _threshold(k: int, rule: tuple[str, tuple[float, ...]], sigma_k: float, delta_k: int) -> float:
    kind, values = rule
    v = values[k - 2]
    if kind == "fixed":
        return float(v)
    return sigma_k * math.sqrt(delta_k) * float(norm.isf(min(v / 2.0, 0.5)))


# --- aggregation ---------------------------------------------------------------------------


def _shape(cards: Sequence[int], combo: Combo) -> tuple[int, ...]:
    return tuple(int(cards[j]) for j in combo)


def _bcast(arr: np.ndarray, combo: Combo, sub: Combo) -> np.ndarray:
    """View of a table over ``sub`` broadcastable against a table over ``combo``."""
    shape = [1] * len(combo)
    for j, s in zip(sub, arr.shape):
        shape[combo.index(j)] = s
    return arr.reshape(shape)


def _candidates(prev: dict[Combo, np.ndarray], cards: Sequence[int], k: int, p: int) -> dict[Combo, np.ndarray]:
    """k-tuples all of whose (k-1)-sub-tuples were reported (dense bool tables)."""
    out: dict[Combo, np.ndarray] = {}
    for combo in combinations(range(p), k):
        subs = list(combinations(combo, k - 1))
        if any(s not in prev for s in subs):
            continue
        cand = np.ones(_shape(cards, combo), dtype=bool)
        for s in subs:
            cand &= _bcast(prev[s] > 0, combo, s)
        if cand.any():
            out[combo] = cand
    return out


def _row_lookup_sum(cm: np.ndarray, cards, tables: dict[Combo, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """For each selected row, how many of the tables are True at its cell."""
    total = np.zeros(rows.size, dtype=np.int64)
    if rows.size == 0:
        return total
    buf = np.empty(rows.size, dtype=np.int64)
    for combo, tab in tables.items():
        idx = flat_index(cm, cards, combo, rows, out=buf)
        total += tab.ravel()[idx]
    return total


def _capped_counts(
    cm: np.ndarray,
    cards,
    cand: dict[Combo, np.ndarray],
    rows: np.ndarray,
    allowed: int,
    rng: np.random.Generator,
) -> dict[Combo, np.ndarray]:
    """Counts contributed by records that keep a random ``allowed`` of their valid tuples."""
    combos = list(cand)
    flat = [cand[c].ravel() for c in combos]
    out = {c: np.zeros(cand[c].size, dtype=np.int64) for c in combos}
    if rows.size == 0 or allowed <= 0 or not combos:
        return {c: v.reshape(cand[c].shape) for c, v in out.items()}
    step = max(1, _CHUNK // len(combos))
    for start in range(0, rows.size, step):
        r = rows[start : start + step]
        keys = np.empty((r.size, len(combos)), dtype=np.int64)
        valid = np.empty((r.size, len(combos)), dtype=bool)
        for t, c in enumerate(combos):
            keys[:, t] = flat_index(cm, cards, c, r)
            valid[:, t] = flat[t][keys[:, t]]
        u = rng.random(valid.shape)
        u[~valid] = 2.0  # invalid tuples sort last: never picked (rows here have > allowed valid)
        if allowed < len(combos):
            pick = np.argpartition(u, allowed - 1, axis=1)[:, :allowed]
            keep = np.zeros(valid.shape, dtype=bool)
            np.put_along_axis(keep, pick, True, axis=1)
            keep &= valid
        else:
            keep = valid
        for t, c in enumerate(combos):
            sel = keys[keep[:, t], t]
            if sel.size:
                out[c] += np.bincount(sel, minlength=out[c].size)
    return {c: v.reshape(cand[c].shape) for c, v in out.items()}


def normalise(levels: list[dict[Combo, np.ndarray]]) -> None:
    """In place: every k-tuple's count <= each of its (k-1)-sub-tuples' counts.

    Done in increasing k, so each bound is an already normalised count: the result is
    count(t) := min(count(t), min over all present proper sub-tuples).
    """
    for k in range(2, len(levels) + 1):
        prev = levels[k - 2]
        for combo, tab in levels[k - 1].items():
            present = tab > 0
            for sub in combinations(combo, k - 1):
                if sub in prev:
                    np.minimum(tab, _bcast(prev[sub], combo, sub), out=tab, where=present)


@dataclass
class AggregateResult:
    levels: list[dict[Combo, np.ndarray]]  # per k: combo -> int64 counts (0 = not reported)
    records: int
    info: dict[str, Any]
    #: ``one_way="public"``: each column's noisy 1-way counts over all its codes (missing too)
    one_way: dict[int, np.ndarray] = field(default_factory=dict)


def aggregate(
    codes: np.ndarray,
    schema: Schema,
    params: SdsParams,
    split: NoiseSplit,
    rng: np.random.Generator,
    *,
    spend: Any = None,
    _noise: bool = True,
    _allowed: Sequence[int] | None = None,
) -> AggregateResult:
    """The DP aggregates of ``codes`` (n, p).

    ``spend(stage)`` is called as each planned part of the budget is used. ``_noise=False``
    is a test-only path (exact counts, Delta_k = the maximum unless ``_allowed`` fixes it,
    no thresholds): it is not reachable from parameters or the command line and is never
    a release.
    """
    spend = spend or (lambda stage: None)
    n, p = codes.shape
    R = params.reporting_length
    cards = list(schema.cardinalities)
    miss = list(schema.missing_codes)
    cm = column_major(codes)
    eligible = []
    nonmissing = np.zeros(n, dtype=np.int64)
    as_value = params.empty_cells == "value"
    for j in range(p):
        e = np.ones(cards[j], dtype=bool)
        if miss[j] is not None and not as_value:
            e[miss[j]] = False
            nonmissing += cm[j] != miss[j]
        else:
            nonmissing += 1
        eligible.append(e)

    # 1. protected number of records
    spend(_stage_records())
    if _noise:
        n_p = max(1, n + int(discrete_laplace(1.0 / split.records_epsilon, 1, rng)[0]))
    else:
        n_p = n
    delta_t = params.delta if params.delta is not None else 1.0 / (max(n_p, 3) * math.log(max(n_p, 3)))
    rule = _threshold_rule(params)
    public = params.one_way == "public"
    one_way: dict[int, np.ndarray] = {}

    levels: list[dict[Combo, np.ndarray]] = []
    info: dict[str, Any] = {"allowed_sensitivity": [], "thresholds": [], "noise_sd": [], "candidates": [],
                            "reported": []}
    all_rows = np.arange(n)
    for k in range(1, R + 1):
        if k == 1 and public:
            # The domain is public: every code of every column, the missing code too, is
            # a candidate; each record holds exactly p of them.
            cand = {(j,): np.ones(cards[j], dtype=bool) for j in range(p)}
            valid = np.full(n, p, dtype=np.int64)
        elif k == 1:
            cand = {(j,): eligible[j].copy() for j in range(p) if eligible[j].any()}
            valid = nonmissing.copy()
        else:
            cand = _candidates(levels[-1], cards, k, p) if levels[-1] else {}
            # A record whose (k-1)-tuples all survived has C(m, k) valid k-tuples; only the
            # others ("dirty") need a per-tuple lookup.
            survived = _row_lookup_sum(cm, cards, {c: t > 0 for c, t in levels[-1].items()}, all_rows)
            m = nonmissing
            expected = np.array([math.comb(int(v), k - 1) for v in range(p + 1)], dtype=np.int64)[m]
            dirty = np.flatnonzero(survived != expected)
            valid = np.array([math.comb(int(v), k) for v in range(p + 1)], dtype=np.int64)[m]
            if dirty.size:
                valid[dirty] = _row_lookup_sum(cm, cards, cand, dirty)
        upper = math.comb(p, k)
        spend(_stage_percentile(k))
        if _noise:
            allowed = dp_percentile(valid, params.percentile_percentage, split.percentile_epsilon, upper, rng)
        elif _allowed is not None:
            allowed = int(_allowed[k - 1])
        else:
            allowed = int(valid.max()) if valid.size else 0
        capped = np.flatnonzero(valid > allowed)
        free = np.flatnonzero(valid <= allowed)
        counts: dict[Combo, np.ndarray] = {}
        if cand and allowed > 0:
            sub_cm = cm if capped.size == 0 else np.ascontiguousarray(cm[:, free])
            exact = count_marginals(sub_cm, cards, list(cand))
            extra = _capped_counts(cm, cards, cand, capped, allowed, rng)
            for c in cand:
                counts[c] = np.where(cand[c], exact[c] + extra[c], 0)
        spend(_stage_gaussian(k))
        sd = split.sigmas[k - 1] * math.sqrt(max(allowed, 0))
        level: dict[Combo, np.ndarray] = {}
        if counts:
            if _noise and k == 1:
                # tau_1 hides values that only the data could reveal: with a public domain
                # there are none, and suppressing a real value (tau_1 is several noise sd)
                # only moves its records into the column's deficit.
                tau = 0.0 if public else _threshold_k1(split.sigmas[0], allowed, delta_t)
            elif _noise:
                tau = _threshold(k, rule, split.sigmas[k - 1], allowed)
            else:
                tau = 0.0
            for c, cnt in counts.items():
                noisy = cnt.copy()
                mask = cand[c]
                if _noise:
                    noisy[mask] += discrete_gaussian(sd, int(mask.sum()), rng)
                if k == 1 and public:
                    one_way[c[0]] = noisy.copy()
                    mask = mask & eligible[c[0]]  # empty cells belong to no tuple from here on
                keep = mask & (noisy > tau) & (noisy > 0)
                if keep.any():
                    level[c] = np.where(keep, noisy, 0).astype(np.int64)
        else:
            tau = float("nan")
        levels.append(level)
        info["allowed_sensitivity"].append(int(allowed))
        info["thresholds"].append(float(tau))
        info["noise_sd"].append(float(sd))
        info["candidates"].append(int(sum(int(t.sum()) for t in cand.values())))
        info["reported"].append(int(sum(int(np.count_nonzero(t)) for t in level.values())))
    normalise(levels)
    info["threshold_delta"] = float(delta_t)
    return AggregateResult(levels=levels, records=int(n_p), info=info, one_way=one_way)


# --- publishable table ---------------------------------------------------------------------

_LEN, _COUNT = "length", "count"


def _attr_col(name: str) -> str:
    return f"col:{name}"


def aggregates_frame(levels: list[dict[Combo, np.ndarray]], schema: Schema) -> pd.DataFrame:
    """One row per reported tuple: its length, one code column per schema column
    (``col:<name>``, -1 when the column is not in the tuple) and its count."""
    p = len(schema.columns)
    parts_codes, parts_len, parts_cnt = [], [], []
    for k, level in enumerate(levels, start=1):
        for combo, tab in level.items():
            idx = np.nonzero(tab)
            if not idx[0].size:
                continue
            block = np.full((idx[0].size, p), -1, dtype=np.int32)
            for axis, j in enumerate(combo):
                block[:, j] = idx[axis]
            parts_codes.append(block)
            parts_len.append(np.full(idx[0].size, k, dtype=np.int8))
            parts_cnt.append(tab[idx].astype(np.int64))
    codes = np.concatenate(parts_codes) if parts_codes else np.empty((0, p), dtype=np.int32)
    data: dict[str, Any] = {_LEN: np.concatenate(parts_len) if parts_len else np.empty(0, dtype=np.int8)}
    for j, c in enumerate(schema.columns):
        data[_attr_col(c.name)] = codes[:, j]
    data[_COUNT] = np.concatenate(parts_cnt) if parts_cnt else np.empty(0, dtype=np.int64)
    return pd.DataFrame(data)


def tables_from_frame(df: pd.DataFrame, schema: Schema, reporting_length: int) -> list[dict[Combo, np.ndarray]]:
    """Dense tables (full cardinalities, 0 = not reported) back from :func:`aggregates_frame`."""
    cards = schema.cardinalities
    p = len(cards)
    codes = np.stack([df[_attr_col(c.name)].to_numpy(dtype=np.int64) for c in schema.columns], axis=1) \
        if len(df) else np.empty((0, p), dtype=np.int64)
    counts = df[_COUNT].to_numpy(dtype=np.int64) if len(df) else np.empty(0, dtype=np.int64)
    present = codes >= 0
    levels: list[dict[Combo, np.ndarray]] = [dict() for _ in range(reporting_length)]
    if not len(df):
        return levels
    keys, inverse = np.unique(present, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    for g, key in enumerate(keys):
        combo = tuple(int(j) for j in np.flatnonzero(key))
        rows = np.flatnonzero(inverse == g)
        tab = np.zeros(_shape(cards, combo), dtype=np.int64)
        tab[tuple(codes[rows, j] for j in combo)] = counts[rows]
        levels[len(combo) - 1][combo] = tab
    return levels


def project_to_total(noisy: np.ndarray, total: float) -> np.ndarray:
    """Euclidean projection of ``noisy`` onto {x >= 0, sum x = total} (least squares).

    It lowers every cell by one constant and clips at 0: cells whose noisy count is
    pure noise (values the data does not hold, which clipping alone would turn into
    about 0.4 noise sd of fabricated mass each) fall to 0, and real cells lose as much
    as the known total says they were inflated.
    """
    v = np.asarray(noisy, dtype=np.float64).ravel()
    if total <= 0 or v.size == 0:
        return np.zeros_like(v)
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - total
    ks = np.arange(1, v.size + 1)
    r = int(np.flatnonzero(u - css / ks > 0)[-1]) + 1
    return np.clip(v - css[r - 1] / r, 0.0, None)


def public_one_way(m: Measurement, schema: Schema) -> tuple[dict[int, np.ndarray], float]:
    """Consistent 1-way tables from a ``one_way="public"`` measurement (post-processing).

    The record count is the inverse-variance mean of the DP record count (discrete
    Laplace, with the stddev the measurement states) and of every column's total (each a sum of
    ``cardinality`` noisy counts of sd ``noise_sd[0]``); each column's table is then
    projected onto the non-negative tables with that total.
    """
    sd1 = float(m.meta["noise_sd"][0])
    rec_sd = float(m.records.stddev) if m.records is not None else 0.0
    est, wts = [float(m.records.value)], [1.0 / rec_sd**2 if rec_sd > 0 else 0.0]
    tables = {j: np.asarray(m.marginals[(c.name,)], dtype=np.float64) for j, c in enumerate(schema.columns)}
    for j, t in tables.items():
        if sd1 > 0:
            est.append(float(t.sum()))
            wts.append(1.0 / (t.size * sd1**2))
    w = np.asarray(wts)
    total = float(np.dot(est, w) / w.sum()) if w.sum() > 0 else est[0]
    total = max(1.0, total)
    return {j: project_to_total(t, total) for j, t in tables.items()}, total


def _rake_to_one_way(raw: np.ndarray, targets: dict[int, np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """Complete mode's last step: reweight the records so that each column matches the
    published DP 1-way marginal (raking), resample as many, and shuffle.

    The complete sampler reconciles the 1-way counts with the noisier 2- and 3-way
    tables and gives suppressed values a share of their column's deficit, so its 1-way
    marginals drift from the 1-way statistic the release publishes (by up to ~0.02 TVD
    on NIST national2019), which the validation gate rightly flags. The 1-way counts are
    the least noisy statistic relative to their size; matching them exactly makes the
    synthetic table agree with its own published measurement and lowered the mean 1-, 2-
    and 3-way TVD against the real data in our benchmarks. Post-processing only.
    """
    from ..postprocess import rake, resample

    # A column whose DP 1-way counts were all suppressed (small inputs), or whose target
    # puts no mass on any code the sample holds, has no usable target: it is left as
    # sampled. The outcome depends on the data only through DP output, and never raises
    # (a crash that depends on the rows would leak them).
    targets = {
        j: t for j, t in targets.items()
        if raw.shape[0] and raw[:, j].max(initial=0) < np.size(t)
        and float(np.clip(np.asarray(t, dtype=np.float64), 0, None)[np.unique(raw[:, j])].sum()) > 0
    }
    if not targets or raw.shape[0] == 0:
        return raw
    try:
        weights = rake(raw.astype(np.int64), targets)
    except ValueError:  # targets the sample cannot reach at all: keep the sample as drawn
        return raw
    out = resample(raw, weights, raw.shape[0], rng)
    return out[rng.permutation(out.shape[0])]


# --- synthesis: strict (the paper's sampler, batched) --------------------------------------


def _draw(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One index per row, proportional to the row's (>= 0) weights; -1 for an all-zero row."""
    w = np.asarray(weights, dtype=np.float64)
    cdf = np.cumsum(w, axis=1)
    total = cdf[:, -1]
    u = rng.random(w.shape[0]) * total
    pick = (cdf <= u[:, None]).sum(axis=1)
    pick = np.minimum(pick, w.shape[1] - 1)
    return np.where(total > 0, pick, -1)


def _lookup(tab: np.ndarray, combo: Combo, j: int, fixed: dict[int, np.ndarray]) -> np.ndarray:
    """Rows of ``tab`` (over ``combo``) at each record's values of ``fixed`` columns, all values of j."""
    moved = np.moveaxis(tab, combo.index(j), -1)
    index = tuple(fixed[c] for c in combo if c != j)
    return moved[index]


def _weighted_order(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random permutation drawing columns proportionally to their weights (zero weights last)."""
    w = np.asarray(weights, dtype=np.float64)
    u = rng.random(w.size)
    keys = np.where(w > 0, np.log(np.maximum(u, 1e-300)) / np.where(w > 0, w, 1.0), -np.inf)
    return np.argsort(-keys, kind="stable")


class _Counts:
    """Table lookups minus synthesised counts (when ``use_synthetic_counts``)."""

    def __init__(self, levels, cards, use_synth: bool):
        self.tab = {c: t for level in levels for c, t in level.items()}
        self.cards = cards
        self.synth = {c: np.zeros_like(t) for c, t in self.tab.items()} if use_synth else None

    def weight(self, combo: Combo, j: int, fixed: dict[int, np.ndarray]) -> np.ndarray:
        """Weight of every value of j with the fixed attributes; <= 0 means not allowed."""
        if combo not in self.tab:
            return np.zeros((len(next(iter(fixed.values()))) if fixed else 1, self.cards[j]), dtype=np.int64)
        w = _lookup(self.tab[combo], combo, j, fixed)
        if self.synth is not None:
            present = w > 0
            w = np.where(present, w - _lookup(self.synth[combo], combo, j, fixed), 0)
        return w

    def add(self, records: np.ndarray, R: int) -> None:
        if self.synth is None or records.shape[0] == 0:
            return
        # Empty cells (-1) get an extra code that no tuple holds.
        ext = np.where(records < 0, np.asarray(self.cards)[None, :], records)
        cm = column_major(ext)
        cards_ext = [c + 1 for c in self.cards]
        got = count_marginals(cm, cards_ext, list(self.synth))
        for c, t in got.items():
            self.synth[c] += t[tuple(slice(0, self.cards[j]) for j in c)]

    def reset(self) -> None:
        if self.synth is not None:
            for t in self.synth.values():
                t[...] = 0


def _sample_strict(
    levels: list[dict[Combo, np.ndarray]],
    cards: Sequence[int],
    rows: int,
    params: SdsParams,
    rng: np.random.Generator,
) -> np.ndarray:
    """The paper's aggregate-seeded sampler, in groups; -1 marks an empty cell."""
    p, R, q = len(cards), params.reporting_length, float(params.weight_selection_percentile)
    ones = levels[0]
    c1 = [ones.get((j,), np.zeros(cards[j], dtype=np.int64)) for j in range(p)]
    budgets = [t.copy() for t in c1]
    counts = _Counts(levels, list(cards), params.use_synthetic_counts)
    out = np.full((rows, p), -1, dtype=np.int64)
    size = max(64, math.ceil(rows / _STRICT_GROUPS))
    for start in range(0, rows, size):
        if all((b <= 0).all() for b in budgets):
            budgets = [t.copy() for t in c1]
            counts.reset()
        rec = out[start : start + size]
        g = rec.shape[0]
        col_w = np.array([np.clip(b, 0, None).sum() for b in budgets], dtype=np.float64)
        order = _weighted_order(col_w, rng)
        for t, j in enumerate(order):
            j = int(j)
            avail = budgets[j] > 0
            if not avail.any():
                continue
            prefix = [int(c) for c in order[:t]]
            assigned = rec[:, prefix] >= 0 if prefix else np.zeros((g, 0), dtype=bool)
            m = assigned.sum(axis=1)
            weight = np.zeros((g, cards[j]), dtype=np.float64)
            ok = np.zeros((g, cards[j]), dtype=bool)
            direct = np.flatnonzero(m + 1 <= R)
            if direct.size:
                pats, inv = np.unique(assigned[direct], axis=0, return_inverse=True)
                inv = inv.ravel()
                for pi, pat in enumerate(pats):
                    rr = direct[inv == pi]
                    cols = [prefix[i] for i in np.flatnonzero(pat)]
                    combo = tuple(sorted(cols + [j]))
                    fixed = {c: rec[rr, c] for c in cols}
                    w = counts.weight(combo, j, fixed) if cols else np.broadcast_to(
                        counts.weight((j,), j, {}), (rr.size, cards[j]))
                    weight[rr] = w
                    ok[rr] = w > 0
            deep = np.flatnonzero(m + 1 > R)
            if deep.size:
                subsets = [s for size_s in range(0, R) for s in combinations(range(len(prefix)), size_s)]
                chunk = max(1, _CHUNK // max(1, cards[j] * len(subsets)))
                for c0 in range(0, deep.size, chunk):
                    rr = deep[c0 : c0 + chunk]
                    vals = np.full((rr.size, cards[j], len(subsets)), np.nan)
                    allowed = np.ones((rr.size, cards[j]), dtype=bool)
                    for si, s in enumerate(subsets):
                        cols = [prefix[i] for i in s]
                        has = assigned[rr][:, list(s)].all(axis=1) if s else np.ones(rr.size, dtype=bool)
                        sel = np.flatnonzero(has)
                        if not sel.size:
                            continue
                        combo = tuple(sorted(cols + [j]))
                        fixed = {c: rec[rr[sel], c] for c in cols}
                        w = counts.weight(combo, j, fixed) if cols else np.broadcast_to(
                            counts.weight((j,), j, {}), (sel.size, cards[j]))
                        vals[sel, :, si] = w
                        allowed[sel] &= w > 0
                    n_valid = np.sum(~np.isnan(vals[:, 0, :]), axis=1)
                    srt = np.sort(vals, axis=2)
                    pct = np.rint(percentile_r8(srt, np.broadcast_to(n_valid[:, None], allowed.shape), q))
                    weight[rr] = np.where(allowed, pct, 0.0)
                    ok[rr] = allowed & (pct > 0)
            ok &= avail[None, :]
            pick = _draw(np.where(ok, weight, 0.0), rng)
            rec[:, j] = pick
        used = rec >= 0
        for j in range(p):
            if used[:, j].any():
                budgets[j] -= np.bincount(rec[used[:, j], j], minlength=cards[j])
        counts.add(rec, R)
    return out


# --- synthesis: complete (aggregate-seeded with completion) ---------------------------------


class _Model:
    """Full tables (missing code as a value) and smoothed conditionals from the aggregates."""

    def __init__(self, levels, schema: Schema, records: int, noise_sd: Sequence[float],
                 threshold1: float | None = None, one_way: dict[int, np.ndarray] | None = None,
                 missing_measured: bool = False):
        self.cards = list(schema.cardinalities)
        self.miss = list(schema.missing_codes)
        self.p = len(self.cards)
        self.R = len(levels)
        self.n = float(max(records, 1))
        self.sd = [float(s) if math.isfinite(s) else 0.0 for s in noise_sd]
        self.counts = {c: np.clip(t, 0, None).astype(np.float64) for lv in levels for c, t in lv.items()}
        tau = threshold1 if threshold1 is not None and math.isfinite(threshold1) else 0.0
        if tau <= 0 and levels and levels[0]:  # no recorded threshold: the smallest reported 1-count
            tau = float(min((v[v > 0].min() for v in levels[0].values() if (v > 0).any()), default=0.0))
        self.tau1 = max(0.0, tau)
        self.full: dict[Combo, np.ndarray] = {(): np.array(self.n)}
        self.missing_measured = missing_measured
        if one_way is not None:
            # Measured directly (missing code included): nothing to infer from deficits.
            for j, t in one_way.items():
                self.full[(j,)] = np.clip(t, 0.0, None)
            self.has_missing = [m is not None and bool(self.full[(j,)][m] > 0) for j, m in enumerate(self.miss)]
        else:
            self.has_missing = self._detect_missing(levels)
        self._cond_cache: dict[tuple[Combo, int], np.ndarray] = {}
        self._mi_cache: dict[tuple[Combo, int], float] = {}

    def _detect_missing(self, levels) -> list[bool]:
        """A nullable column holds empty cells when its DP 1-way total falls short of n_p
        by more than noise (3 sd) plus what suppressed rare values can explain."""
        out = []
        sd1 = self.sd[0] if self.sd else 0.0
        for j in range(self.p):
            if self.miss[j] is None:
                out.append(False)
                continue
            t = self.counts.get((j,), np.zeros(self.cards[j]))
            regular = self.cards[j] - 1
            deficit = self.n - float(t.sum())
            suppressed = regular - int(np.count_nonzero(t))
            # values below tau_1 were suppressed: they hold about tau_1 / 2 records each
            slack = 3.0 * sd1 * math.sqrt(max(regular, 1)) + suppressed * self.tau1 / 2.0
            out.append(deficit > slack)
        return out

    def _fill_suppressed(self, j: int, F: np.ndarray) -> np.ndarray:
        """1-way counts of values suppressed at k = 1 (noisy count <= tau_1): they share the
        deficit of the column's total, at most tau_1 (tau_1 / 2 when empty cells compete)."""
        regular = np.ones(self.cards[j], dtype=bool)
        if self.miss[j] is not None:
            regular[self.miss[j]] = False
        supp = regular & (F <= 0)
        ns = int(supp.sum())
        deficit = max(0.0, self.n - float(F[regular].sum()))
        if ns and deficit > 0 and self.tau1 > 0:
            share = min(self.tau1 / 2.0, deficit / (ns + 1)) if self.has_missing[j] else min(self.tau1, deficit / ns)
            F = F.copy()
            F[supp] = share
        return F

    def table(self, combo: Combo) -> np.ndarray:
        """Counts over the full codes of ``combo`` (empty cells from deficits), clipped >= 0."""
        if combo in self.full:
            return self.full[combo]
        shape = _shape(self.cards, combo)
        base = self.counts.get(combo)
        F = np.zeros(shape) if base is None else base.copy()
        if len(combo) == 1:
            F = self._fill_suppressed(combo[0], F)
        for i, j in enumerate(combo):
            if not self.has_missing[j] or self.missing_measured:
                continue
            # (sub-tuple count) - (sum of its extensions over j's non-missing values)
            rest = tuple(c for c in combo if c != j)
            parent = self.table(rest)
            mj = self.miss[j]
            idx = [slice(None)] * len(combo)
            idx[i] = mj
            known = F.sum(axis=i) - np.take(F, mj, axis=i)
            F[tuple(idx)] = np.clip(parent - known, 0.0, None)
        if len(combo) >= 2 and _IPF_ROUNDS:
            F = self._rake(combo, F)
        self.full[combo] = F
        return F

    def _rake(self, combo: Combo, F: np.ndarray) -> np.ndarray:
        """Top-down consistency: fit a k-table to its (already consistent) (k-1)-tables.

        Shorter tuples carry less noise (fewer cells share the record's contribution and
        their sums average many noisy cells), so they set the margins; the k-table keeps
        its interaction. Possible cells that were not reported get a half count first,
        so that every margin can be reached.
        """
        possible = np.ones(F.shape, dtype=bool)
        for axis, j in enumerate(combo):
            ok = self.table((j,)) > 0
            shape = [1] * len(combo)
            shape[axis] = self.cards[j]
            possible &= ok.reshape(shape)
        fitted = self._ipf(combo, np.where(possible, np.maximum(F, 0.5), 0.0))
        # James-Stein-like shrinkage towards the table the (k-1)-tables alone imply (no
        # k-way interaction): the share of the deviation that the noise can explain.
        plain = self._ipf(combo, possible.astype(np.float64))
        k = len(combo)
        sd = self.sd[k - 1] if k - 1 < len(self.sd) else 0.0
        dev = float(np.sum((F - plain)[possible] ** 2))
        noise = sd * sd * float(np.count_nonzero(possible))
        lam = 1.0 if dev <= 0 else min(1.0, noise / dev)
        return self._ipf(combo, (1.0 - lam) * fitted + lam * plain)

    def _ipf(self, combo: Combo, F: np.ndarray) -> np.ndarray:
        for _ in range(_IPF_ROUNDS):
            for d in range(len(combo)):
                sub = combo[:d] + combo[d + 1 :]
                target = self.table(sub)
                cur = F.sum(axis=d)
                ratio = np.where(cur > 0, target / np.maximum(cur, 1e-300), 0.0)
                F = F * np.expand_dims(ratio, d)
        return F

    def marginal(self, j: int) -> np.ndarray:
        t = self.table((j,))
        if t.sum() <= 0:
            t = np.ones(self.cards[j])
            if self.miss[j] is not None and not self.has_missing[j]:
                t[self.miss[j]] = 0.0
        return t

    def conditional(self, parents: Combo, j: int) -> np.ndarray:
        """P(j | parents) as an array (parents' cards..., card_j), rows summing to 1."""
        key = (parents, j)
        if key in self._cond_cache:
            return self._cond_cache[key]
        mj = self.marginal(j)
        if not parents:
            cond = mj / mj.sum()
            self._cond_cache[key] = cond
            return cond
        combo = tuple(sorted(parents + (j,)))
        joint = np.moveaxis(self.table(combo), combo.index(j), -1)  # parents sorted, j last
        k = len(combo)
        if len(parents) == 1:
            prior = np.broadcast_to(mj / mj.sum(), joint.shape)
        else:
            # What the (k-1)-tuples predict: product of single-parent-drop conditionals
            # divided by the marginal (a naive-Bayes combination), normalised per row.
            logp = np.zeros(joint.shape)
            for drop in range(len(parents)):
                sub = parents[:drop] + parents[drop + 1 :]
                c = self.conditional(sub, j)
                shape = [1] * len(parents) + [self.cards[j]]
                for a, par in enumerate(parents):
                    if par in sub:
                        shape[a] = self.cards[par]
                logp = logp + np.log(np.maximum(c.reshape(shape), 1e-12))
            logp -= (len(parents) - 1) * np.log(np.maximum(mj / mj.sum(), 1e-12))
            logp -= logp.max(axis=-1, keepdims=True)
            prior = np.exp(logp)
            prior *= (mj > 0)
            prior /= np.maximum(prior.sum(axis=-1, keepdims=True), 1e-300)
        # Pseudo-count: the slice's noise level, so noise-dominated slices follow the prior.
        support = max(1, int(np.count_nonzero(mj)))
        alpha = max(1.0, _SHRINK * self.sd[k - 1] * math.sqrt(support)) if k - 1 < len(self.sd) else 1.0
        w = joint + alpha * prior
        cond = w / np.maximum(w.sum(axis=-1, keepdims=True), 1e-300)
        if _IPF_ROUNDS:
            cond = self._fit_margins(parents, j, cond)
        self._cond_cache[key] = cond
        return cond

    def _fit_margins(self, parents: Combo, j: int, cond: np.ndarray) -> np.ndarray:
        """Iterative proportional fitting of the family's joint to its (k-1)-sub-tables.

        The joint (parents..., j) = count(parents) x cond is rescaled so that summing out
        any one column gives that shorter tuple table (less noisy than the k-tuple table):
        a consistent projection of the noisy counts, which keeps their interaction.
        """
        cols = parents + (j,)
        ptab = self.table(parents) if len(parents) > 1 else self.marginal(parents[0])
        J = np.clip(ptab, 0, None)[..., None] * cond
        for _ in range(_IPF_ROUNDS):
            for d in range(len(cols)):
                sub = cols[:d] + cols[d + 1 :]
                target = self._aligned(sub) if len(sub) > 1 else (
                    self.marginal(sub[0]) if sub else None)
                if target is None:
                    continue
                cur = J.sum(axis=d)
                ratio = np.where(cur > 0, target / np.maximum(cur, 1e-300), 0.0)
                J = J * np.expand_dims(ratio, d)
        rows = J.sum(axis=-1, keepdims=True)
        fitted = J / np.maximum(rows, 1e-300)
        return np.where(rows > 0, fitted, cond)

    def _aligned(self, cols: Combo) -> np.ndarray:
        """Full table of ``cols`` with axes in the given (not necessarily sorted) order."""
        srt = tuple(sorted(cols))
        tab = np.clip(self.table(srt), 0, None)
        return np.transpose(tab, [srt.index(c) for c in cols])

    def mutual_information(self, parents: Combo, j: int) -> float:
        key = (parents, j)
        if key in self._mi_cache:
            return self._mi_cache[key]
        cond = self.conditional(parents, j)
        ptab = self.table(parents) if len(parents) > 1 else self.marginal(parents[0])
        pp = np.clip(ptab, 0, None)
        pp = pp / max(pp.sum(), 1e-300)
        joint = pp[..., None] * cond
        px = joint.reshape(-1, joint.shape[-1]).sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = joint / (pp[..., None] * px)
            mi = float(np.nansum(np.where(joint > 0, joint * np.log(ratio), 0.0)))
        self._mi_cache[key] = mi
        return mi

    def order(self, first: int) -> list[tuple[int, Combo]]:
        """Greedy order from ``first``: next the (column, parents) with the highest MI."""
        placed = [first]
        steps: list[tuple[int, Combo]] = [(first, ())]
        todo = [j for j in range(self.p) if j != first]
        width = self.R - 1
        while todo:
            best = (-1.0, todo[0], ())
            size = min(width, len(placed))
            for j in todo:
                for par in combinations(sorted(placed), size):
                    mi = self.mutual_information(par, j) if par else 0.0
                    if mi > best[0]:
                        best = (mi, j, par)
            _, j, par = best
            steps.append((j, par))
            placed.append(j)
            todo.remove(j)
        return steps


def _sample_complete(model: _Model, rows: int, params: SdsParams, rng: np.random.Generator) -> np.ndarray:
    p = model.p
    out = np.zeros((rows, p), dtype=np.int64)
    n_orders = max(1, min(_COMPLETE_ORDERS, p, rows))
    # First columns: the most informative ones (highest total MI with a single partner).
    score = np.zeros(p)
    if model.R >= 2 and p > 1:
        for a in range(p):
            score[a] = sum(model.mutual_information((a,), b) for b in range(p) if b != a)
    firsts = list(np.argsort(-score, kind="stable")[:n_orders])
    bounds = np.linspace(0, rows, n_orders + 1).astype(int)
    perm = rng.permutation(rows)
    for g, first in enumerate(firsts):
        idx = perm[bounds[g] : bounds[g + 1]]
        if not idx.size:
            continue
        steps = model.order(int(first))
        rec = np.zeros((idx.size, p), dtype=np.int64)
        rounds = _COMPLETE_ROUNDS if params.use_synthetic_counts else 1
        edges = np.linspace(0, idx.size, rounds + 1).astype(int)
        synth: dict[tuple[Combo, int], np.ndarray] = {}
        for r in range(rounds):
            sl = slice(edges[r], edges[r + 1])
            nr = edges[r + 1] - edges[r]
            if nr == 0:
                continue
            for j, par in steps:
                cond = model.conditional(par, j)
                flat = cond.reshape(-1, cond.shape[-1])
                if par:
                    pidx = np.zeros(nr, dtype=np.int64)
                    for c in par:
                        pidx = pidx * model.cards[c] + rec[sl, c]
                else:
                    pidx = np.zeros(nr, dtype=np.int64)
                probs = flat[pidx]
                if params.use_synthetic_counts and r > 0:
                    # Remaining = what the group should hold so far minus what it holds.
                    done = synth[(par, j)]
                    target = flat * np.bincount(pidx, minlength=flat.shape[0])[:, None]
                    target = target + flat * done.sum(axis=1, keepdims=True)
                    rem = np.clip(target - done, 0.0, None)
                    rs = rem.sum(axis=1, keepdims=True)
                    adj = np.where(rs > 0, rem / np.maximum(rs, 1e-300), flat)
                    probs = adj[pidx]
                pick = _draw(probs, rng)
                rec[sl, j] = np.where(pick >= 0, pick, 0)
                if params.use_synthetic_counts:
                    key = (par, j)
                    add = np.zeros(flat.shape)
                    np.add.at(add, (pidx, rec[sl, j]), 1.0)
                    synth[key] = synth.get(key, 0) + add
        out[idx] = rec
    return out


# --- the method ---------------------------------------------------------------------------------


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


class SdsMethod(MethodBase):
    name: ClassVar[str] = "sds"
    params_type: ClassVar[type] = SdsParams
    provides_marginals: ClassVar[bool] = True
    guarantee: ClassVar[PrivacyStatement] = DP_ADD_REMOVE

    def __init__(self, params: SdsParams | None = None):
        self.params = params or SdsParams()

    # -- budget ---------------------------------------------------------------------------
    def split(self, schema: Schema, budget: Budget) -> NoiseSplit:
        """The budget split, from public information only."""
        pr = self.params
        R = pr.reporting_length
        p = len(schema.columns)
        if R > p:
            raise ValueError(f"parameter 'reporting_length' must be <= the number of columns ({p}), got {R}")
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
                    "parameter 'number_of_records_epsilon_proportion' leaves no budget for the marginals"
                )
        eps_q, base, sigmas = split_marginals_rho(rho_m, R, pr.percentile_epsilon_proportion, props)
        return NoiseSplit(eps, eps_n, rho_m, eps_q, base, sigmas)

    def plan(self, schema: Schema, budget: Budget) -> tuple[Charge, ...]:
        s = self.split(schema, budget)
        R = self.params.reporting_length
        p = len(schema.columns)
        charges = [Charge(stage=_stage_records(), rho=s.records_rho, mechanism="discrete_laplace",
                          detail={"epsilon": s.records_epsilon, "sensitivity_l1": 1})]
        for k in range(1, R + 1):
            charges.append(Charge(
                stage=_stage_percentile(k), rho=s.percentile_rho, mechanism="report_noisy_max",
                detail={"epsilon": s.percentile_epsilon, "percentile": self.params.percentile_percentage,
                        "candidates": f"0..{math.comb(p, k)}", "score_sensitivity": 1}))
            charges.append(Charge(
                stage=_stage_gaussian(k), rho=s.gaussian_rho(k), mechanism="discrete_gaussian",
                detail={"sigma_k": s.sigmas[k - 1], "noise_sd": "sigma_k * sqrt(Delta_k)",
                        "sensitivity_l2": "sqrt(Delta_k)"}))
        return tuple(charges)

    # -- DP aggregates --------------------------------------------------------------------
    def measure(self, codes: EncodedTable, ledger: Ledger, rng: np.random.Generator) -> Measurement:
        schema = codes.schema
        split = self.split(schema, ledger.budget)
        charges: list[Charge] = []

        def spend(stage: str) -> None:
            charges.append(ledger.spend(stage))

        res = aggregate(codes.codes, schema, self.params, split, rng, spend=spend)
        frame = aggregates_frame(res.levels, schema)
        sd1 = float(res.info["noise_sd"][0]) if res.info["noise_sd"] else 0.0
        # 1-counts at or below max(tau_1, 0) were suppressed (see aggregate).
        tau1 = max(0.0, res.info["thresholds"][0]) if math.isfinite(res.info["thresholds"][0]) else 0.0
        measured = []
        for j, col in enumerate(schema.columns):
            if j in res.one_way:  # measured directly, every code, no threshold: a plain marginal
                measured.append(NoisyMarginal(attrs=(col.name,), counts=res.one_way[j].astype(np.float64),
                                              stddev=sd1 if math.isfinite(sd1) else 0.0))
                continue
            t = res.levels[0].get((j,), np.zeros(col.cardinality, dtype=np.int64)).astype(np.float64)
            if col.missing_code is not None:
                t[col.missing_code] = max(0.0, res.records - float(t.sum()))
            measured.append(NoisyMarginal(
                attrs=(col.name,), counts=t, stddev=sd1 if math.isfinite(sd1) else 0.0, threshold=tau1,
                derived=() if col.missing_code is None else (col.missing_code,)))
        meta = {
            "reporting_length": self.params.reporting_length,
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
        return Measurement(
            method=self.name, params=params_to_dict(self.params), charges=tuple(charges),
            measured=tuple(measured), records=records, tables={"aggregates": frame}, meta=meta,
        )

    # -- synthesis ------------------------------------------------------------------------
    def synthesize(
        self, m: Measurement, schema: Schema, rows: int | None, rng: np.random.Generator
    ) -> EncodedTable:
        R = int(m.meta.get("reporting_length", self.params.reporting_length))
        levels = tables_from_frame(m.tables["aggregates"], schema, R)
        n = int(m.records.value) if rows is None else int(rows)
        if n < 0:
            raise ValueError(f"rows must be >= 0, got {n}")
        cards = schema.cardinalities
        mode = self.params.synthesis
        if mode == "strict":
            raw = _sample_strict(levels, cards, n, self.params, rng)
            for j, col in enumerate(schema.columns):
                empty = col.missing_code if col.missing_code is not None else col.fill_code
                raw[:, j] = np.where(raw[:, j] < 0, empty, raw[:, j])
        else:
            th = m.meta.get("thresholds") or [None]
            one_way, total = None, float(m.records.value)
            if m.meta.get("one_way") == "public":
                one_way, total = public_one_way(m, schema)
            model = _Model(levels, schema, int(round(total)), m.meta.get("noise_sd", [0.0] * R), th[0],
                           one_way=one_way, missing_measured=m.meta.get("empty_cells") == "value")
            raw = _sample_complete(model, n, self.params, rng)
            if self.params.rake_one_way and n > 0:
                targets = one_way or {j: m.marginals[(c.name,)] for j, c in enumerate(schema.columns)
                                      if (c.name,) in m.marginals}
                raw = _rake_to_one_way(raw, targets, rng)
        codes = raw.astype(code_dtype(cards))
        return EncodedTable(schema=schema, codes=codes)
