"""DP aggregation of ``sds``: noisy k-tuple counts for k = 1 .. R under per-record caps, their
normalisation, and the publishable aggregates table (one row per reported tuple).

The steps, thresholds and sensitivities are described in docs/sds.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy.special import ndtri  # the normal quantile; scipy.stats would cost 0.4 s of import

from ...rows.encoding import EncodedTable
from ...privacy.mechanisms import dp_percentile_hist
from ...rows.rowsource import RowSource, as_source
from .tuple_counts import LevelSpec, records_over, tuple_counts, valid_histogram
from ...privacy.noise import discrete_gaussian, discrete_laplace, sampled_sigma
from ...schema import Schema
from .budget import NoiseSplit, _stage_gaussian, _stage_percentile, _stage_records, one_way_only, pair_noise_ratio
from .guard import refuse_if_unpublishable
from .params import SdsParams, _threshold_rule

Combo = tuple[int, ...]
#: Elements (rows x combos, or rows x values x sub-combinations) per vectorised chunk.
_CHUNK = 1 << 22


def _threshold_k1(sigma1: float, delta1: int, delta: float) -> float:
    # (1 - delta/2)^(1/Delta) computed in logs: 1 - that is tiny.
    tail = -math.expm1(math.log1p(-delta / 2.0) / delta1)
    return 1.0 + sigma1 * math.sqrt(delta1) * float(0.0 - ndtri(tail))


def _threshold(k: int, rule: tuple[str, tuple[float, ...]], sigma_k: float, delta_k: int) -> float:
    kind, values = rule
    v = values[k - 2]
    if kind == "fixed":
        return float(v)
    return sigma_k * math.sqrt(delta_k) * float(0.0 - ndtri(min(v / 2.0, 0.5)))  # 0.0 - : a zero stays +0.0



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
    """The DP aggregates: per length k the reported tuples' counts, the DP record count,
    the per-length statistics (``info``) and, with ``one_way="public"``, every column's
    noisy 1-way counts over all its codes (the missing code too)."""

    levels: list[dict[Combo, np.ndarray]]  # per k: combo -> int64 counts (0 = not reported)
    records: int
    info: dict[str, Any]
    #: ``one_way="public"``: each column's noisy 1-way counts over all its codes (missing too)
    one_way: dict[int, np.ndarray] = field(default_factory=dict)
    #: every measured k-tuple table (k >= 2, before normalisation): noisy counts, 0 where
    #: not above the threshold or not a candidate
    measured: dict[Combo, np.ndarray] = field(default_factory=dict)


def _eligibility(cards: Sequence[int], miss: Sequence[int | None], as_value: bool
                 ) -> tuple[list[np.ndarray], tuple[int | None, ...]]:
    """Per column, the codes a tuple may hold, and the code a tuple may not (missing,
    unless empty cells are a value) that each record's cells are checked against."""
    excluded = tuple(None if (m is None or as_value) else int(m) for m in miss)
    eligible = []
    for j, card in enumerate(cards):
        e = np.ones(card, dtype=bool)
        if excluded[j] is not None:
            e[excluded[j]] = False
        eligible.append(e)
    return eligible, excluded


def _level_spec(k: int, prev: dict[Combo, np.ndarray], cards: Sequence[int], eligible: list[np.ndarray],
                excluded: tuple[int | None, ...], public: bool) -> LevelSpec:
    """The candidate k-tuples (dense bool tables) and what a partition needs to count them."""
    p = len(cards)
    if k == 1 and public:
        # The domain is public: every code of every column, the missing code too, is
        # a candidate; each record holds exactly p of them.
        cand = {(j,): np.ones(cards[j], dtype=bool) for j in range(p)}
        return LevelSpec(k=1, cand=cand, excluded=excluded, public=True)
    if k == 1:
        cand = {(j,): eligible[j].copy() for j in range(p) if eligible[j].any()}
        return LevelSpec(k=1, cand=cand, excluded=excluded)
    cand = _candidates(prev, cards, k, p) if prev else {}
    return LevelSpec(k=k, cand=cand, prev={c: t > 0 for c, t in prev.items()}, excluded=excluded)


def _report_level(
    k: int, counts: dict[Combo, np.ndarray], cand: dict[Combo, np.ndarray], eligible: list[np.ndarray],
    sd: float, tau: float, public: bool, one_way: dict[int, np.ndarray], measured: dict[Combo, np.ndarray],
    rng: np.random.Generator,
) -> dict[Combo, np.ndarray]:
    """Noisy counts of the candidates; those > tau and > 0 are reported (others become 0).

    With ``one_way="public"`` the 1-way noisy counts are also kept whole in ``one_way``;
    at k >= 2 a copy of every table (reported or not) goes to ``measured``.
    """
    level: dict[Combo, np.ndarray] = {}
    for c, cnt in counts.items():
        noisy = cnt.copy()
        mask = cand[c]
        noisy[mask] += discrete_gaussian(sd, int(mask.sum()), rng)
        if k == 1 and public:
            one_way[c[0]] = noisy.copy()
            mask = mask & eligible[c[0]]  # empty cells belong to no tuple from here on
        keep = mask & (noisy > tau) & (noisy > 0)
        kept = np.where(keep, noisy, 0).astype(np.int64)
        if k >= 2:
            measured[c] = kept.copy()  # normalise() later lowers the reported copy in place
        if keep.any():
            level[c] = kept
    return level


def _allowed_sensitivity(k: int, public: bool, columns: int, hist: np.ndarray, params: SdsParams,
                         split: NoiseSplit, rng: np.random.Generator) -> int:
    """Delta_k: the DP percentile of the records' valid k-tuples, except at k = 1 when every
    code of every column is measured (``one_way="public"``): a record holds at most one
    code per column, so p (``columns``) is a public bound. The percentile, charged
    as planned and not drawn there, chose 0 or 2 of 5 on a 300-row table at epsilon 1,
    which kept only that many of each record's codes: the 1-way tables lost 60-100% of
    their records."""
    if k == 1 and public:
        return columns
    return dp_percentile_hist(hist, params.percentile_percentage, split.percentile_epsilon, rng)


def _one_way_only_or_refuse(params: SdsParams, schema: Schema, split: NoiseSplit, records: int) -> bool:
    """Whether only the 1-way level is measured (``auto_length``). Otherwise, where the DP
    record count says the gate would refuse the release, :class:`~.guard.SdsCannotPublish`
    now, with the record count alone spent (:func:`~.guard.refuse_if_unpublishable`)."""
    only = one_way_only(params, schema.cardinalities, split, records)
    if not only:
        refuse_if_unpublishable(params, schema, split, records)
    return only


def aggregate(
    codes: np.ndarray | RowSource,
    schema: Schema,
    params: SdsParams,
    split: NoiseSplit,
    rng: np.random.Generator,
    *,
    spend: Any = None,
) -> AggregateResult:
    """The DP aggregates of ``codes``, steps 1-7 of docs/sds.md: an (n, p) array, or a
    :class:`RowSource` read partition by partition in bounded memory (on any runner; the
    result is the same).

    ``spend(stage)`` is called as each planned part of the budget is used (before it is).
    """
    spend = spend or (lambda stage: None)
    source = codes if isinstance(codes, RowSource) else as_source(EncodedTable(schema=schema, codes=codes))
    p = len(schema.columns)
    R = params.reporting_length
    cards = list(schema.cardinalities)
    public = params.one_way == "public"
    eligible, excluded = _eligibility(cards, list(schema.missing_codes), params.empty_cells == "value")
    spec = _level_spec(1, {}, cards, eligible, excluded, public)
    hists = valid_histogram(source, spec)  # k = 1: also counts the records
    n = int(sum(int(h.sum()) for h in hists))

    # 1. protected number of records
    spend(_stage_records())
    n_p = max(1, n + int(discrete_laplace(1.0 / split.records_epsilon, 1, rng)[0]))
    delta_t = params.delta if params.delta is not None else 1.0 / (max(n_p, 3) * math.log(max(n_p, 3)))
    rule = _threshold_rule(params)
    one_way: dict[int, np.ndarray] = {}
    measured: dict[Combo, np.ndarray] = {}

    levels: list[dict[Combo, np.ndarray]] = []
    info: dict[str, Any] = {"allowed_sensitivity": [], "thresholds": [], "noise_sd": [], "candidates": [],
                            "reported": [], "pair_noise_ratio": pair_noise_ratio(cards, split, n_p)}
    # Where the DP record count says the 2-way tables would be noise, every Gaussian share
    # goes to the 1-way counts (one draw at the pooled rho; the unused percentiles are
    # charged as planned) and no longer tuple is measured.
    only_one = _one_way_only_or_refuse(params, schema, split, n_p)
    sigmas = list(split.sigmas)
    if only_one:
        for k in range(2, R + 1):
            spend(_stage_percentile(k))
            spend(_stage_gaussian(k))
        sigmas[0] = 1.0 / math.sqrt(2.0 * sum(split.gaussian_rho(k) for k in range(1, R + 1)))
    info["levels_measured"] = 1 if only_one else R
    info["sigmas"] = sigmas[: info["levels_measured"]]
    for k in range(1, info["levels_measured"] + 1):
        if k > 1:
            spec = _level_spec(k, levels[-1], cards, eligible, excluded, public)
            hists = valid_histogram(source, spec)
        cand, hist = spec.cand, np.sum(hists, axis=0)
        spend(_stage_percentile(k))
        allowed = _allowed_sensitivity(k, public, p, hist, params, split, rng)
        counts = tuple_counts(source, spec, allowed, records_over(hists, allowed), rng)
        spend(_stage_gaussian(k))
        sd = sampled_sigma(sigmas[k - 1] * math.sqrt(max(allowed, 0)))  # the sd drawn and stated
        level: dict[Combo, np.ndarray] = {}
        if counts:
            if k == 1:
                # tau_1 hides values that only the data could reveal: with a public domain
                # there are none, and suppressing a real value (tau_1 is several noise sd)
                # only moves its records into the column's deficit.
                tau = 0.0 if public else _threshold_k1(sigmas[0], allowed, delta_t)
            else:
                tau = _threshold(k, rule, split.sigmas[k - 1], allowed)
            level = _report_level(k, counts, cand, eligible, sd, tau, public, one_way, measured, rng)
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
    return AggregateResult(levels=levels, records=int(n_p), info=info, one_way=one_way, measured=measured)


# --- the publishable table ------------------------------------------------------------------

_LEN, _COUNT = "length", "count"


def _attr_col(name: str) -> str:
    return f"col:{name}"


def aggregates_frame(levels: list[dict[Combo, np.ndarray]], schema: Schema) -> pd.DataFrame:
    """One row per reported tuple: its length, one code column per schema column
    (``col:<name>``, -1 when the column is not in the tuple) and its count.

    The code columns are written straight into the one int32 block the frame keeps (no
    per-tuple pieces joined, no copy into the frame): a 10M-row release reports about 2M
    tuples, whose pieces, their join and the frame's copy of it were three 158 MB arrays."""
    p = len(schema.columns)
    total = sum(int(np.count_nonzero(tab)) for level in levels for tab in level.values())
    codes = np.full((p, total), -1, dtype=np.int32)  # the frame's block: one row per column
    length = np.empty(total, dtype=np.int8)
    count = np.empty(total, dtype=np.int64)
    at = 0
    for k, level in enumerate(levels, start=1):
        for combo, tab in level.items():
            idx = np.nonzero(tab)
            n = idx[0].size
            if not n:
                continue
            for axis, j in enumerate(combo):
                codes[j, at : at + n] = idx[axis]
            length[at : at + n] = k
            count[at : at + n] = tab[idx]
            at += n
    frame = pd.DataFrame(codes.T, columns=[_attr_col(c.name) for c in schema.columns], copy=False)
    frame.insert(0, _LEN, length)
    frame[_COUNT] = count
    return frame


def _int_column(series: pd.Series) -> np.ndarray:
    """A code column as a numpy integer array (as it is when it is one: no copy)."""
    values = series.to_numpy()
    return values if values.dtype.kind in "iu" else series.to_numpy(dtype=np.int64)


def tables_from_frame(df: pd.DataFrame, schema: Schema, reporting_length: int) -> list[dict[Combo, np.ndarray]]:
    """Dense tables (full cardinalities, 0 = not reported) back from :func:`aggregates_frame`.

    Reads the frame column by column: what it holds beyond the tables is a few int64 per
    frame row (the group key, its order), never a copy of the frame's code columns (a 10M-row
    release's frame has about 2M rows: an int64 copy of its 20 code columns was 316 MB)."""
    cards = schema.cardinalities
    p = len(cards)
    levels: list[dict[Combo, np.ndarray]] = [dict() for _ in range(reporting_length)]
    if not len(df):
        return levels
    columns = [_int_column(df[_attr_col(c.name)]) for c in schema.columns]
    counts = df[_COUNT].to_numpy(dtype=np.int64)
    # Group the rows by which columns they hold: one integer key per row (sorting the
    # rows of the boolean matrix, as np.unique(axis=0) does, took seconds on wide tables).
    key = np.zeros(len(df), dtype=object if p > 62 else np.int64)
    for col in columns:
        key = key * 2 + (col >= 0)
    order = np.argsort(key, kind="stable")
    bounds = np.flatnonzero(np.diff(key[order]) != 0) + 1
    del key
    for rows in np.split(order, bounds):
        first = int(rows[0])
        combo = tuple(j for j in range(p) if columns[j][first] >= 0)
        tab = np.zeros(_shape(cards, combo), dtype=np.int64)
        tab[tuple(columns[j][rows].astype(np.int64) for j in combo)] = counts[rows]
        levels[len(combo) - 1][combo] = tab
    return levels
