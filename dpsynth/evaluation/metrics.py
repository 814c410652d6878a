"""Utility metrics of a synthetic release (see ``METRICS.md``).

Pure functions of integer code matrices, shared by validation, benchmarks and internal
reports:

* distances: :func:`tvd` (half the L1 distance of normalised tables), :func:`tvd_by_k`
  (mean and max over all k-subsets of columns, synthetic vs real) and
  :func:`tvd_vs_marginals` (synthetic vs DP noisy marginals; validation uses it, never
  raw data);
* :func:`independent_baseline`, :func:`fabricated_suppressed` and :func:`complete_share`.

The baseline and the raw-data comparisons read real rows: they are for benchmarks and
private internal reports only. Marginals are counted by :mod:`dpsynth.rows.counting`; the
NIST k-marginal score is :mod:`dpsynth.evaluation.nist_score`.
"""

from __future__ import annotations

import math
from typing import Hashable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from ..measurement import fold_table
from ..rows.table import EncodedTable, code_dtype

# The counting engine and the NIST score live in dpsynth.rows.counting and dpsynth.evaluation.nist_score;
# their names are re-exported here so that ``from dpsynth.evaluation.metrics import ...`` keeps working
# (the NIST names by ``__getattr__`` below, on first use: the model fit imports this module for
# ``clipped_distributions`` and never scores).
from ..rows.counting import (  # noqa: F401
    DEFAULT_CHUNK_ROWS,
    DEFAULT_MAX_CELLS,
    MAX_DENSE_CELLS,
    Block,
    CodesLike,
    Subset,
    _cards,
    _codes_array,
    column_major,
    iter_marginals,
    iter_marginals_many,
    k_subsets,
    marginal_counts,
    plan_blocks,
)

# Only this module's own names; the re-exported counting and NIST names are listed in
# dpsynth.rows.counting and dpsynth.evaluation.nist_score.
__all__ = [
    "tvd",
    "iter_tvds",
    "tvd_by_k",
    "summarize_by_k",
    "tvd_vs_marginals",
    "tvd_vs_counts",
    "clipped_distributions",
    "independent_baseline",
    "fabricated_suppressed",
    "complete_share",
]

_NIST_NAMES = frozenset({"NIST_DEMOGRAPHIC_FEATURES", "NIST_DENSITY_MAX", "NIST_PERCENTILE_FEATURES", "_density_edges",
                         "nist_encode", "nist_kmarginal_score", "nist_marginal_tvds"})


def __getattr__(name: str):
    """The NIST score's names, imported from :mod:`.nist_score` when first asked for here."""
    if name in _NIST_NAMES:
        from . import nist_score
        return getattr(nist_score, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- distances -----------------------------------------------------------------


def _normalised(x: np.ndarray, what: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64).ravel()
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{what} holds non-finite values")
    if x.size and x.min() < 0:
        raise ValueError(f"{what} holds negative values")
    total = x.sum()
    if not total > 0:
        raise ValueError(f"{what} sums to zero: its distribution is undefined")
    return x / total


def tvd(p: np.ndarray, q: np.ndarray) -> float:
    """Total variation distance of two tables of counts or probabilities over the same cells.

    Each is normalised to sum 1; the result is ``0.5 * sum |p - q|`` in [0, 1].
    """
    p_arr, q_arr = np.asarray(p), np.asarray(q)
    if p_arr.shape != q_arr.shape:
        raise ValueError(f"tables differ in shape: {p_arr.shape} vs {q_arr.shape}")
    d = 0.5 * float(np.abs(_normalised(p_arr, "first table") - _normalised(q_arr, "second table")).sum())
    return min(1.0, max(0.0, d))


def iter_tvds(
    real_codes: CodesLike,
    synth_codes: CodesLike,
    cardinalities: Sequence[int],
    subsets: Iterable[Sequence[int]],
    *,
    max_cells: int = DEFAULT_MAX_CELLS,
) -> Iterator[tuple[Subset, float]]:
    """TVD of each requested marginal, real vs synthetic: yields ``(subset, tvd)``."""
    pairs = iter_marginals_many([real_codes, synth_codes], cardinalities, subsets, max_cells=max_cells)
    for s, (r, q) in pairs:
        yield s, tvd(r, q)


def summarize_by_k(
    tvds: Mapping[tuple[Hashable, ...], float], ks: Iterable[int] | None = None
) -> dict[int, dict[str, float | int]]:
    """``{k: {"mean", "max", "count"}}`` of per-marginal TVDs keyed by column tuples.

    An order in ``ks`` with no marginal gets count 0 and NaN mean and max.
    """
    groups: dict[int, list[float]] = {}
    for key, value in tvds.items():
        groups.setdefault(len(key), []).append(float(value))
    orders = sorted(groups) if ks is None else sorted(set(int(k) for k in ks))
    out: dict[int, dict[str, float | int]] = {}
    for k in orders:
        vals = groups.get(k, [])
        out[k] = {
            "mean": float(np.mean(vals)) if vals else float("nan"),
            "max": float(np.max(vals)) if vals else float("nan"),
            "count": len(vals),
        }
    return out


def tvd_by_k(
    real_codes: CodesLike,
    synth_codes: CodesLike,
    cardinalities: Sequence[int],
    ks: Iterable[int] = (1, 2, 3),
    *,
    max_cells: int = DEFAULT_MAX_CELLS,
) -> dict[int, dict[str, float | int]]:
    """Mean and max TVD over all k-subsets of columns, per k: ``{k: {"mean","max","count"}}``.

    Both tables are normalised, so they may differ in row count. Reads real rows:
    benchmarks and private internal reports only.
    """
    ks = tuple(ks)
    p = _codes_array(real_codes).shape[1]
    values = dict(iter_tvds(real_codes, synth_codes, cardinalities, k_subsets(p, ks), max_cells=max_cells))
    return summarize_by_k(values, ks)


def clipped_distributions(flat: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Noisy count tables laid end to end in ``flat`` (table i at ``starts[i]``, ``sizes[i]``
    cells, none empty) as distributions: NaN, infinite and negative counts to 0, each table
    normalised to 1, a table left with no mass read as uniform."""
    q = np.clip(np.nan_to_num(flat, nan=0.0, posinf=0.0, neginf=0.0), 0.0, None)
    totals = np.add.reduceat(q, starts)
    q = q / np.repeat(np.where(totals > 0, totals, 1.0), sizes)
    empty = np.repeat(~(totals > 0), sizes)
    q[empty] = np.repeat(1.0 / sizes, sizes)[empty]
    return q


def _axis_maps(groups: Mapping[int | str, Sequence[int]], key: tuple[int | str, ...],
               order: tuple[int, ...], cards: Sequence[int]) -> list[np.ndarray | None]:
    """Per axis of marginal ``key``, its merged column's code -> cell map (None: not merged)."""
    maps: list[np.ndarray | None] = []
    for col, j in zip(key, order):
        g = groups.get(col)
        if g is not None:
            g = np.asarray(g, dtype=np.int64)
            if g.size != cards[j]:
                raise ValueError(f"marginal {key}: the groups of {col!r} map {g.size} codes, the column has {cards[j]}")
        maps.append(g)
    return maps


def tvd_vs_marginals(
    synth_codes: CodesLike,
    marginals: Mapping[tuple[int | str, ...], np.ndarray],
    cardinalities: Sequence[int] | None = None,
    names: Sequence[str] | None = None,
    groups: Mapping[tuple[int | str, ...], Mapping[int | str, Sequence[int]]] | None = None,
) -> dict[tuple[int | str, ...], float]:
    """TVD of the synthetic data's marginals against DP (noisy) marginals, per key.

    ``groups`` (``Measurement.groups``): for a marginal measured on merged values, each
    merged column's code -> cell map; the synthetic table is summed into those cells first.

    ``marginals`` maps a tuple of column indices or names (names need ``names``, or an
    :class:`EncodedTable` as ``synth_codes``) to noisy counts over the full
    cross-product of those columns' codes, axes in key order (C order if flat).
    Negative (or NaN) noisy counts are clipped to 0 before normalising; a table that is
    all zero after clipping carries no information and is read as uniform. Summarise with
    :func:`summarize_by_k`.
    """
    if isinstance(synth_codes, EncodedTable):
        cardinalities = synth_codes.cardinalities if cardinalities is None else cardinalities
        names = synth_codes.schema.names if names is None else names
    arr = _codes_array(synth_codes)
    if arr.shape[0] == 0:
        raise ValueError("synthetic table has no rows")
    if cardinalities is None:
        raise ValueError("cardinalities are needed (or pass an EncodedTable)")
    cards = _cards(cardinalities, arr.shape[1])
    keyed = _keyed(marginals, cards, names, groups)
    return _tvds(keyed, iter_marginals(arr, cards, list(keyed)), marginals)


def _keyed(marginals: Mapping[tuple[int | str, ...], np.ndarray], cards: Sequence[int],
           names: Sequence[str] | None, groups: Mapping | None) -> dict[Subset, list]:
    """The noisy tables grouped by sorted column-index subset, with each key's column order
    and its merged-value maps."""
    position = {n: i for i, n in enumerate(names)} if names is not None else {}

    def index_of(key: tuple[int | str, ...], col: int | str) -> int:
        if isinstance(col, str):
            if col not in position:
                raise ValueError(f"marginal {key}: unknown column {col!r}")
            return position[col]
        j = int(col)
        if not 0 <= j < len(cards):
            raise ValueError(f"marginal {key}: column index {j} outside 0..{len(cards) - 1}")
        return j

    keyed: dict[Subset, list] = {}
    for key, noisy in marginals.items():
        key_t = tuple(key) if isinstance(key, (tuple, list)) else (key,)
        order = tuple(index_of(key_t, c) for c in key_t)
        if len(set(order)) != len(order):
            raise ValueError(f"marginal {key_t} repeats a column")
        maps = _axis_maps((groups or {}).get(key) or {}, key_t, order, cards)
        dims = tuple(cards[j] if g is None else int(g.max()) + 1 for j, g in zip(order, maps))
        table = np.asarray(noisy, dtype=np.float64)
        if table.size != math.prod(dims):
            raise ValueError(
                f"marginal {key_t}: {table.size} cells, expected {math.prod(dims)} for shape {dims}"
            )
        keyed.setdefault(tuple(sorted(order)), []).append((key, order, table.reshape(dims), maps))
    return keyed


def _tvds(keyed, counted: Iterable[tuple[Subset, np.ndarray]], marginals: Mapping) -> dict:
    """TVD per key from the synthetic counts of each sorted subset (see :func:`tvd_vs_marginals`)."""
    keys, synths, targets = [], [], []
    for s, counts in counted:
        for key, order, table, maps in keyed[s]:
            keys.append(key)
            synth = counts.transpose([s.index(j) for j in order])
            synths.append(fold_table(synth, maps) if any(g is not None for g in maps) else synth)
            targets.append(table)
    # One pass over all tables (an sds release states a thousand): each synthetic table
    # and each clipped DP table normalised to 1 (a DP table empty after clipping: uniform).
    sizes = np.array([t.size for t in targets], dtype=np.int64)
    if sizes.size == 0:
        return {}
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    q = clipped_distributions(np.concatenate([np.asarray(t, dtype=np.float64).ravel() for t in targets]), starts, sizes)
    p = np.concatenate([c.ravel() for c in synths]).astype(np.float64)
    p = p / np.repeat(np.add.reduceat(p, starts), sizes)  # every table sums to the synthetic row count (> 0)
    dist = np.clip(0.5 * np.add.reduceat(np.abs(p - q), starts), 0.0, 1.0)
    out = dict(zip(keys, dist.tolist()))
    return {key: out[key] for key in marginals}


def tvd_vs_counts(counts, marginals: Mapping[tuple[int | str, ...], np.ndarray],
                  groups: Mapping | None = None) -> dict[tuple[int | str, ...], float]:
    """:func:`tvd_vs_marginals` from exact synthetic counts gathered chunk by chunk
    (a :class:`dpsynth.gate.scan.CodeCounts` holding every needed subset), keys by column name."""
    if counts.n == 0:
        raise ValueError("synthetic table has no rows")
    keyed = _keyed(marginals, counts.schema.cardinalities, counts.schema.names, groups)
    return _tvds(keyed, ((s, counts.counts[s]) for s in keyed), marginals)


# --- baselines and coverage ----------------------------------------------------


def independent_baseline(
    real_codes: CodesLike, cardinalities: Sequence[int], rows: int, rng: np.random.Generator
) -> np.ndarray:
    """``rows`` synthetic records, each column drawn from its true (real) 1-way marginal.

    Breaks every correlation: a method whose 2- and 3-way TVD is not below this has
    learned none. Reads real data without noise: benchmarks / internal reports only.
    """
    arr = _codes_array(real_codes)
    cards = _cards(cardinalities, arr.shape[1])
    if arr.shape[0] == 0:
        raise ValueError("real table has no rows")
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    cols = column_major(arr, cards)
    out = np.empty((int(rows), len(cards)), dtype=code_dtype(cards))
    for j, card in enumerate(cards):
        cdf = np.cumsum(np.bincount(cols[j], minlength=card)).astype(np.float64)
        cdf /= cdf[-1]
        draw = np.searchsorted(cdf, rng.random(int(rows)), side="right")
        out[:, j] = np.minimum(draw, card - 1)
    return out


def _domain_for(
    tables: Sequence[np.ndarray],
    missing_codes: Sequence[int | None],
    cardinalities: Sequence[int] | None,
) -> tuple[int, ...]:
    """The given cardinalities, else the smallest domain holding every code seen."""
    p = tables[0].shape[1]
    if cardinalities is not None:
        return _cards(cardinalities, p)
    top = np.zeros(p, dtype=np.int64)
    for t in tables:
        if t.shape[0]:
            top = np.maximum(top, t.max(axis=0).astype(np.int64) + 1)
    for j, m in enumerate(missing_codes):
        if m is not None:
            top[j] = max(top[j], int(m) + 1)
    return tuple(int(max(1, c)) for c in top)


def _missing_list(missing_codes: Sequence[int | None], p: int) -> list[int | None]:
    miss = [None if m is None else int(m) for m in missing_codes]
    if len(miss) != p:
        raise ValueError(f"{len(miss)} missing codes for {p} columns")
    return miss


def fabricated_suppressed(
    real_codes: CodesLike,
    synth_codes: CodesLike,
    k: int,
    missing_codes: Sequence[int | None],
    cardinalities: Sequence[int] | None = None,
) -> dict[str, int]:
    """Coverage of k-combinations of non-missing values, over all k-subsets of columns.

    Returns ``fabricated`` (combinations present in synthetic, absent in real),
    ``suppressed`` (present in real, absent in synthetic), and ``real`` / ``synthetic``
    (distinct combinations present in each). A combination involving a column's
    missing code (``missing_codes[j]``, None if the column has none) is not counted.
    Meant for k = 1, 2, 3. Reads real rows: benchmarks / internal reports only.
    """
    if int(k) < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    real, synth = _codes_array(real_codes), _codes_array(synth_codes)
    if real.shape[1] != synth.shape[1]:
        raise ValueError("real and synthetic tables have different columns")
    miss = _missing_list(missing_codes, real.shape[1])
    cards = _domain_for([real, synth], miss, cardinalities)
    result = {"fabricated": 0, "suppressed": 0, "real": 0, "synthetic": 0}
    for s, (r, q) in iter_marginals_many([real, synth], cards, k_subsets(real.shape[1], int(k))):
        valid = np.ones(r.shape, dtype=bool)
        for axis, j in enumerate(s):
            if miss[j] is not None:
                valid[(slice(None),) * axis + (miss[j],)] = False
        in_r, in_q = (r > 0) & valid, (q > 0) & valid
        result["fabricated"] += int(np.count_nonzero(in_q & ~in_r))
        result["suppressed"] += int(np.count_nonzero(in_r & ~in_q))
        result["real"] += int(np.count_nonzero(in_r))
        result["synthetic"] += int(np.count_nonzero(in_q))
    return result


def complete_share(codes: CodesLike, missing_codes: Sequence[int | None]) -> float:
    """Share of records in which no column holds its missing code."""
    arr = _codes_array(codes)
    if arr.shape[0] == 0:
        raise ValueError("table has no rows")
    miss = _missing_list(missing_codes, arr.shape[1])
    complete = np.ones(arr.shape[0], dtype=bool)
    for j, m in enumerate(miss):
        if m is not None:
            complete &= arr[:, j] != m
    return float(complete.mean())
