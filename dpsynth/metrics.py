"""Utility metrics of a synthetic release (see ``METRICS.md``).

Everything here is a pure function of integer code matrices (or, for the NIST score,
of raw-value DataFrames), so validation, benchmarks and internal reports share it.

Counting engine
    A k-way marginal is the contingency table of k columns over the full cross-product
    of their codes (missing is a code of its own). :func:`iter_marginals` counts many of
    them in few passes over the rows: the requested column subsets are covered by
    *blocks* of columns whose joint domain stays small (``max_cells``); each block is
    counted once (codes combined into one flat index with strides, one ``bincount``)
    and every requested subset inside it is obtained by summing the block's table
    over the other axes. One pass over a block of five columns yields ten 3-way, ten
    2-way and five 1-way marginals. Blocks are produced lazily: at most one block's
    table lives in memory, plus one index buffer of ``chunk_rows`` entries.

Distances
    :func:`tvd` (half the L1 distance of normalised tables), :func:`tvd_by_k` (mean and
    max over all k-subsets of columns, synthetic vs real) and :func:`tvd_vs_marginals`
    (synthetic vs DP noisy marginals; validation uses it, never raw data).

NIST SDNist k-marginal score
    :func:`nist_kmarginal_score` on DataFrames of raw values, with SDNist v2.3.0's
    binning (percentile-rank bins of the target data, log-spaced DENSITY bins).

Also :func:`independent_baseline`, :func:`fabricated_suppressed` and
:func:`complete_share`. The baseline and the raw-data comparisons read real rows:
they are for benchmarks and private internal reports only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Hashable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from .encoding import EncodedTable

__all__ = [
    "Subset",
    "Block",
    "DEFAULT_MAX_CELLS",
    "DEFAULT_CHUNK_ROWS",
    "k_subsets",
    "plan_blocks",
    "marginal_counts",
    "iter_marginals",
    "iter_marginals_many",
    "tvd",
    "iter_tvds",
    "tvd_by_k",
    "summarize_by_k",
    "tvd_vs_marginals",
    "independent_baseline",
    "fabricated_suppressed",
    "complete_share",
    "NIST_PERCENTILE_FEATURES",
    "NIST_DEMOGRAPHIC_FEATURES",
    "NIST_DENSITY_MAX",
    "nist_encode",
    "nist_marginal_tvds",
    "nist_kmarginal_score",
]

Subset = tuple[int, ...]
CodesLike = np.ndarray | EncodedTable

#: Largest joint domain (cells) of a block counted in one bincount. 2**16 cells keep
#: the index in uint16 and the int64 counts (512 KiB) in a core's L2 cache; see
#: benchmarks/marginal_counting.py for the measurements behind the choice.
DEFAULT_MAX_CELLS = 1 << 16
#: Rows indexed per bincount call: bounds the index buffer whatever the table size.
DEFAULT_CHUNK_ROWS = 1 << 20
#: A single requested marginal larger than this is refused (a dense int64 table of
#: 2**27 cells takes 1 GiB); :func:`tvd` of such tables goes through a sparse path.
MAX_DENSE_CELLS = 1 << 27
_MAX_BLOCK_WIDTH = 8


# --- inputs --------------------------------------------------------------------


def _codes_array(codes: CodesLike) -> np.ndarray:
    arr = codes.codes if isinstance(codes, EncodedTable) else np.asarray(codes)
    if arr.ndim != 2:
        raise ValueError(f"codes must be a 2-D (rows, columns) array, got {arr.ndim} dimension(s)")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"codes must hold integers, got dtype {arr.dtype}")
    return arr


def _cards(cardinalities: Sequence[int], p: int) -> tuple[int, ...]:
    cards = tuple(int(c) for c in cardinalities)
    if len(cards) != p:
        raise ValueError(f"{len(cards)} cardinalities for {p} columns")
    if any(c < 1 for c in cards):
        raise ValueError("every cardinality must be at least 1")
    return cards


def _small_uint(top: int) -> np.dtype:
    for dt in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(dt).max + 1:
            return np.dtype(dt)
    return np.dtype(np.int64)


def _columns(codes: CodesLike, cards: tuple[int, ...]) -> np.ndarray:
    """Column-major copy of the codes in the smallest unsigned type, range-checked.

    A code outside ``0..card-1`` would silently alias into a neighbouring cell of the
    flat index, so it is refused here (it is a bug upstream, never a row oddity).
    """
    arr = _codes_array(codes)
    if arr.shape[0]:
        lo, hi = arr.min(axis=0), arr.max(axis=0)
        bad = np.flatnonzero((lo < 0) | (hi >= np.asarray(cards)))
        if bad.size:
            raise ValueError(f"codes outside 0..cardinality-1 in column(s) {bad.tolist()}")
    return np.ascontiguousarray(arr.T, dtype=_small_uint(max(cards, default=1)))


def _resolve_subsets(subsets: Iterable[Sequence[int]], p: int) -> list[Subset]:
    out: list[Subset] = []
    seen: set[Subset] = set()
    for s in subsets:
        t = tuple(sorted(int(j) for j in s))
        if not t:
            raise ValueError("a marginal needs at least one column")
        if len(set(t)) != len(t):
            raise ValueError(f"subset {tuple(s)} repeats a column")
        if t[0] < 0 or t[-1] >= p:
            raise ValueError(f"subset {tuple(s)} names a column outside 0..{p - 1}")
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def k_subsets(p: int, ks: int | Iterable[int]) -> list[Subset]:
    """All k-subsets of ``range(p)`` for each k in ``ks`` (k > p gives none), sorted."""
    ks = (ks,) if isinstance(ks, (int, np.integer)) else tuple(ks)
    if any(int(k) < 1 for k in ks):
        raise ValueError(f"marginal orders must be >= 1, got {ks}")
    return [s for k in sorted(set(int(k) for k in ks)) for s in combinations(range(p), k)]


# --- planning ------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """Columns counted together in one pass, and the requested subsets read off them."""

    columns: Subset
    subsets: tuple[Subset, ...]


def _domain(cols: Iterable[int], cards: Sequence[int]) -> int:
    return math.prod(cards[j] for j in cols)


def plan_blocks(
    subsets: Iterable[Sequence[int]],
    cardinalities: Sequence[int],
    *,
    max_cells: int = DEFAULT_MAX_CELLS,
    max_width: int = _MAX_BLOCK_WIDTH,
) -> tuple[Block, ...]:
    """Greedy cover of the requested subsets by blocks of joint domain <= ``max_cells``.

    Each block starts from the first uncovered subset (largest first, then
    lexicographic) and grows by the column that completes the most uncovered
    subsets, preferring small cardinalities, while the domain allows. Every requested
    subset is assigned to exactly one block. A subset whose own domain exceeds
    ``max_cells`` becomes a block on its own. Deterministic for given inputs.
    """
    cards = tuple(int(c) for c in cardinalities)
    p = len(cards)
    targets = sorted(_resolve_subsets(subsets, p), key=lambda s: (-len(s), s))
    uncovered = set(targets)
    sizes = sorted({len(t) for t in targets})
    blocks: list[Block] = []
    cursor = 0
    while uncovered:
        while targets[cursor] not in uncovered:
            cursor += 1
        block = list(targets[cursor])
        dom = _domain(block, cards)
        while len(block) < max_width:
            best: tuple[int, int, int] | None = None
            members = set(block)
            for c in range(p):
                if c in members or dom * cards[c] > max_cells:
                    continue
                gain = 0
                for size in sizes:
                    for rest in combinations(block, size - 1):
                        if tuple(sorted(rest + (c,))) in uncovered:
                            gain += 1
                key = (gain, -cards[c], -c)
                if gain and (best is None or key > best):
                    best = key
            if best is None:
                break
            c = -best[2]
            block.append(c)
            dom *= cards[c]
        cols = tuple(sorted(block))
        mine = tuple(
            s for size in reversed(sizes) for s in combinations(cols, size) if s in uncovered
        )
        uncovered.difference_update(mine)
        blocks.append(Block(columns=cols, subsets=mine))
    return tuple(blocks)


# --- counting ------------------------------------------------------------------


def marginal_counts(codes: CodesLike, cardinalities: Sequence[int], subset: Sequence[int]) -> np.ndarray:
    """Counts of one marginal, shaped by the subset's cardinalities (axes in subset order).

    The plain per-subset reference: ``ravel_multi_index`` then ``bincount``.
    """
    arr = _codes_array(codes)
    cards = _cards(cardinalities, arr.shape[1])
    subset = tuple(int(j) for j in subset)
    dims = tuple(cards[j] for j in subset)
    size = math.prod(dims)
    if size > MAX_DENSE_CELLS:
        raise ValueError(f"marginal {subset} has {size} cells, more than {MAX_DENSE_CELLS}")
    if arr.shape[0] == 0:
        return np.zeros(dims, dtype=np.int64)
    flat = np.ravel_multi_index(tuple(arr[:, j] for j in subset), dims)
    return np.bincount(flat, minlength=size).astype(np.int64, copy=False).reshape(dims)


def _block_counts(cols: np.ndarray, block: Subset, cards: Sequence[int], chunk_rows: int) -> np.ndarray:
    """Joint counts of the block's columns (C order), by Horner-combined flat indices."""
    dims = tuple(cards[j] for j in block)
    size = math.prod(dims)
    n = cols.shape[1]
    counts = np.zeros(size, dtype=np.int64)
    if n == 0:
        return counts.reshape(dims)
    idx_type = _small_uint(size)
    if idx_type == np.uint8:
        idx_type = np.dtype(np.uint16)  # bincount converts anyway; uint8 saves nothing
    step = max(1, min(chunk_rows, n))
    buf = np.empty(step, dtype=idx_type)
    for start in range(0, n, step):
        stop = min(n, start + step)
        idx = buf[: stop - start]
        np.copyto(idx, cols[block[0], start:stop], casting="unsafe")
        for j in block[1:]:
            np.multiply(idx, cards[j], out=idx)
            np.add(idx, cols[j, start:stop], out=idx, dtype=idx_type)
        part = np.bincount(idx, minlength=size)
        if start == 0 and stop == n:
            counts = part.astype(np.int64, copy=False)
        else:
            counts += part
    return counts.reshape(dims)


def _read_off(
    table: np.ndarray, block: Subset, subsets: Sequence[Subset], cards: Sequence[int]
) -> list[np.ndarray]:
    """Each subset's table, summed from the smallest already-computed superset."""
    cache: dict[Subset, np.ndarray] = {block: table}
    out = []
    for s in subsets:  # largest subsets first (plan order), so smaller ones reuse them
        src = min((c for c in cache if set(s) <= set(c)), key=lambda c: _domain(c, cards))
        if src == s:
            out.append(cache[s])
            continue
        axes = tuple(i for i, j in enumerate(src) if j not in s)
        res = cache[src].sum(axis=axes)
        cache[s] = res
        out.append(res)
    return out


def iter_marginals_many(
    tables: Sequence[CodesLike],
    cardinalities: Sequence[int],
    subsets: Iterable[Sequence[int]],
    *,
    max_cells: int = DEFAULT_MAX_CELLS,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> Iterator[tuple[Subset, list[np.ndarray]]]:
    """Like :func:`iter_marginals` for several tables over the same columns at once.

    Yields ``(subset, [counts in table 0, counts in table 1, ...])``; one plan serves
    all tables, so real and synthetic marginals arrive side by side.
    """
    if not tables:
        raise ValueError("no tables given")
    p = _codes_array(tables[0]).shape[1]
    cards = _cards(cardinalities, p)
    cols = []
    for t in tables:
        if _codes_array(t).shape[1] != p:
            raise ValueError("all tables must have the same columns")
        cols.append(_columns(t, cards))
    plan = plan_blocks(subsets, cards, max_cells=max_cells)
    for block in plan:
        if block.columns in block.subsets and _domain(block.columns, cards) > MAX_DENSE_CELLS:
            raise ValueError(
                f"marginal {block.columns} has {_domain(block.columns, cards)} cells, "
                f"more than {MAX_DENSE_CELLS}"
            )
    for block in plan:
        per_table = [
            _read_off(_block_counts(c, block.columns, cards, chunk_rows), block.columns, block.subsets, cards)
            for c in cols
        ]
        for i, s in enumerate(block.subsets):
            yield s, [tab[i] for tab in per_table]


def iter_marginals(
    codes: CodesLike,
    cardinalities: Sequence[int],
    subsets: Iterable[Sequence[int]],
    *,
    max_cells: int = DEFAULT_MAX_CELLS,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> Iterator[tuple[Subset, np.ndarray]]:
    """Counts of every requested marginal, lazily: yields ``(subset, counts)``.

    ``subset`` is the sorted tuple of column indices, ``counts`` an int64 array shaped
    by their cardinalities (axis i = column subset[i]). Each distinct subset is yielded
    exactly once, in the order of the block plan (not the order given).
    """
    many = iter_marginals_many([codes], cardinalities, subsets, max_cells=max_cells, chunk_rows=chunk_rows)
    for s, (counts,) in many:
        yield s, counts


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


def tvd_vs_marginals(
    synth_codes: CodesLike,
    marginals: Mapping[tuple[int | str, ...], np.ndarray],
    cardinalities: Sequence[int] | None = None,
    names: Sequence[str] | None = None,
) -> dict[tuple[int | str, ...], float]:
    """TVD of the synthetic data's marginals against DP (noisy) marginals, per key.

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

    keyed: dict[Subset, list[tuple[tuple[int | str, ...], Subset, np.ndarray]]] = {}
    for key, noisy in marginals.items():
        key_t = tuple(key) if isinstance(key, (tuple, list)) else (key,)
        order = tuple(index_of(key_t, c) for c in key_t)
        if len(set(order)) != len(order):
            raise ValueError(f"marginal {key_t} repeats a column")
        dims = tuple(cards[j] for j in order)
        table = np.asarray(noisy, dtype=np.float64)
        if table.size != math.prod(dims):
            raise ValueError(
                f"marginal {key_t}: {table.size} cells, expected {math.prod(dims)} for shape {dims}"
            )
        keyed.setdefault(tuple(sorted(order)), []).append((key, order, table.reshape(dims)))

    out: dict[tuple[int | str, ...], float] = {}
    for s, counts in iter_marginals(arr, cards, list(keyed)):
        for key, order, table in keyed[s]:
            synth = counts.transpose([s.index(j) for j in order])
            target = np.clip(np.nan_to_num(table, nan=0.0, posinf=0.0, neginf=0.0), 0.0, None)
            if not target.sum() > 0:
                target = np.ones_like(target)
            out[key] = tvd(synth, target)
    return {key: out[key] for key in marginals}


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
    cols = _columns(arr, cards)
    out = np.empty((int(rows), len(cards)), dtype=_small_uint(max(cards, default=1)))
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


# --- NIST SDNist k-marginal score (v2.3.0 semantics) ---------------------------

#: Features put in 20 percentile-rank bins of the target data.
NIST_PERCENTILE_FEATURES = ("AGEP", "POVPIP", "PINCP", "PWGTP", "WGTP")
#: SDNist's "demographic" feature set (no PUMA: 2-way marginals).
NIST_DEMOGRAPHIC_FEATURES = (
    "AGEP", "SEX", "MSP", "RAC1P", "HOUSING_TYPE", "OWN_RENT", "EDU", "PINCP_DECILE", "DVET", "DEYE",
)
#: DENSITY maximum from the excerpts' public data_dictionary.json; SDNist's log bins end 500 above it.
NIST_DENSITY_MAX = 52864.7
_NIST_MISSING = "N"
_NIST_POVERTY_TOP = 501  # POVPIP "income above 5 x poverty line": a bin of its own in SDNist
_PERCENTILE_BINS = 20


def _text(series: pd.Series) -> np.ndarray:
    """Cells as stripped text; nulls become the missing token."""
    s = series.astype("string").fillna(_NIST_MISSING).str.strip()
    return s.to_numpy(dtype=object)


def _whole_numbers(text: np.ndarray) -> np.ndarray:
    """Numbers truncated towards zero, as SDNist's ``astype(int)`` does; NaN if not a number."""
    x = pd.to_numeric(pd.Series(text, dtype=object), errors="coerce").to_numpy(dtype=np.float64)
    return np.trunc(x)


def _percentile_codes(
    name: str, target: np.ndarray, synthetic: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """Percentile-rank bins of the target, and the same value ranges applied to synthetic.

    Codes 0..19 are the bins, 20 is POVPIP's 501 bucket, 21 (or 20) the missing token.
    Target: among its non-missing values, pct = average rank / count, bin =
    floor(20 pct) (19 when pct is 1). Synthetic: a value goes to the first target bin
    whose largest target value it does not exceed (the last bin takes everything
    above). An unparsable cell counts as missing.
    """
    top_code = _PERCENTILE_BINS if name == "POVPIP" else None
    missing_code = _PERCENTILE_BINS + (1 if top_code is not None else 0)
    card = missing_code + 1

    t_num = _whole_numbers(target)
    t_code = np.full(target.shape[0], missing_code, dtype=np.int64)
    special = (target == str(_NIST_POVERTY_TOP)) if top_code is not None else np.zeros(target.shape[0], bool)
    regular = ~np.isnan(t_num) & (target != _NIST_MISSING) & ~special
    if top_code is not None:
        t_code[special] = top_code
    vals = t_num[regular]
    bin_max: list[tuple[int, float]] = []
    if vals.size:
        pct = pd.Series(vals).rank(method="average", pct=True).to_numpy()
        bins = np.where(pct < 1, np.floor(_PERCENTILE_BINS * pct), _PERCENTILE_BINS - 1).astype(np.int64)
        t_code[regular] = bins
        for b in np.unique(bins):
            bin_max.append((int(b), float(vals[bins == b].max())))
    if special.any():
        bin_max.append((top_code, float(_NIST_POVERTY_TOP)))

    s_num = _whole_numbers(synthetic)
    s_code = np.full(synthetic.shape[0], missing_code, dtype=np.int64)
    numeric = ~np.isnan(s_num) & (synthetic != _NIST_MISSING)
    if bin_max:
        labels = np.array([b for b, _ in bin_max], dtype=np.int64)
        upper = np.array([m for _, m in bin_max], dtype=np.float64)
        s_code[numeric] = labels[np.searchsorted(upper[:-1], s_num[numeric], side="left")]
    return t_code, s_code, card


def _density_edges(density_max: float) -> np.ndarray:
    # SDNist: 21 log-spaced edges from 10 to max + 500, the first 8 dropped and
    # [0, 150] put in front (bottom-codes sparse PUMAs): 14 right-closed bins.
    n_max = density_max + 500.0
    logs = np.logspace(1.0, math.log10(n_max), num=_PERCENTILE_BINS + 1)
    return np.concatenate([[0.0, 150.0], logs[8:]])


def _density_codes(text: np.ndarray, density_max: float) -> tuple[np.ndarray, int]:
    """Log-spaced DENSITY bins; code ``len(bins)`` marks rows SDNist leaves out.

    Values are truncated to whole numbers, negatives raised to 0, values above
    max + 500 lowered to max + 400. Bins are right-closed, so 0 falls in none: SDNist
    (pandas ``cut`` then ``groupby``) drops such rows from the marginal while still
    dividing by the full row count; so do we. Unparsable cells are dropped alike.
    """
    edges = _density_edges(density_max)
    n_bins = edges.size - 1
    x = _whole_numbers(text)
    n_max = density_max + 500.0
    x = np.where(x < 0, 0.0, x)
    x = np.where(x > n_max, n_max - 100.0, x)
    code = np.searchsorted(edges, x, side="left") - 1
    dropped = np.isnan(x) | (code < 0) | (code >= n_bins)
    return np.where(dropped, n_bins, code).astype(np.int64), n_bins + 1


def _canonical(text: np.ndarray) -> np.ndarray:
    """Categorical cells as written, except that whole numbers lose a trailing ``.0``."""
    uniques, inverse = np.unique(text.astype(str), return_inverse=True)
    num = pd.to_numeric(pd.Series(uniques, dtype=object), errors="coerce").to_numpy(dtype=np.float64)
    canon = np.array(
        [
            str(int(v)) if math.isfinite(v) and float(v).is_integer() and u.strip() != "" else u
            for u, v in zip(uniques, num)
        ],
        dtype=object,
    )
    return canon[inverse]


def nist_encode(
    target: pd.DataFrame,
    synthetic: pd.DataFrame,
    features: Sequence[str],
    *,
    density_max: float = NIST_DENSITY_MAX,
) -> tuple[np.ndarray, np.ndarray, tuple[int, ...], tuple[int | None, ...]]:
    """SDNist's binning of raw values into integer codes shared by both tables.

    Returns (target codes, synthetic codes, cardinalities, dropped code per column);
    a row holding a column's dropped code (only DENSITY has one) is left out of every
    marginal with that column but still counted in the normaliser, as in SDNist.
    """
    features = list(features)
    for frame, label in ((target, "target"), (synthetic, "synthetic")):
        absent = [f for f in features if f not in frame.columns]
        if absent:
            raise ValueError(f"{label} data lacks feature(s) {absent}")
    n_t, n_s = len(target), len(synthetic)
    t_codes = np.empty((n_t, len(features)), dtype=np.int64)
    s_codes = np.empty((n_s, len(features)), dtype=np.int64)
    cards: list[int] = []
    dropped: list[int | None] = []
    for j, f in enumerate(features):
        t_text, s_text = _text(target[f]), _text(synthetic[f])
        if f in NIST_PERCENTILE_FEATURES:
            tc, sc, card = _percentile_codes(f, t_text, s_text)
            drop = None
        elif f == "DENSITY":
            both, card = _density_codes(np.concatenate([t_text, s_text]), density_max)
            tc, sc = both[:n_t], both[n_t:]
            drop = card - 1
        else:
            both_text = _canonical(np.concatenate([t_text, s_text]))
            cats, both = np.unique(both_text.astype(str), return_inverse=True)
            tc, sc, card = both[:n_t], both[n_t:], max(1, cats.size)
            drop = None
        t_codes[:, j], s_codes[:, j] = tc, sc
        cards.append(int(card))
        dropped.append(drop)
    return t_codes, s_codes, tuple(cards), tuple(dropped)


def _nist_marginals(
    features: Sequence[str], group: str | None, exclude: Sequence[str], seed: int,
    all_pairs_below: int, random_pairs: int,
) -> list[tuple[str, ...]]:
    cols = sorted(f for f in dict.fromkeys(features) if f != group and f not in set(exclude))
    if not cols:
        raise ValueError("no feature left to score")
    if len(cols) == 1:
        pairs: list[tuple[str, ...]] = [(cols[0],)]
    elif len(cols) < all_pairs_below:
        pairs = list(combinations(cols, 2))
    else:
        rng = np.random.default_rng(seed)
        draws = [rng.choice(len(cols), size=2, replace=False) for _ in range(random_pairs)]
        pairs = [(cols[i], cols[j]) for i, j in draws]
    with_group = group is not None and group in features
    return [((group,) + pr) if with_group else pr for pr in pairs]


def nist_marginal_tvds(
    target: pd.DataFrame,
    synthetic: pd.DataFrame,
    features: Sequence[str] | None = None,
    *,
    group: str | None = "PUMA",
    exclude: Sequence[str] = (),
    seed: int = 0,
    all_pairs_below: int = 30,
    random_pairs: int = 200,
    density_max: float = NIST_DENSITY_MAX,
) -> list[tuple[tuple[str, ...], float]]:
    """TVD of each marginal the NIST k-marginal score averages, as ``(features, tvd)``.

    Marginals: every pair of the features other than ``group`` (when there are fewer
    than ``all_pairs_below``; otherwise ``random_pairs`` random pairs of two distinct
    features drawn with ``seed``), each taken together with ``group`` when ``group`` is
    among the features (3-way). Densities are counts / row count, as in SDNist. The
    same marginal drawn twice counts twice.
    """
    features = list(target.columns) if features is None else list(features)
    marginals = _nist_marginals(features, group, exclude, seed, all_pairs_below, random_pairs)
    used = list(dict.fromkeys(f for m in marginals for f in m))
    t_codes, s_codes, cards, dropped = nist_encode(target, synthetic, used, density_max=density_max)
    if t_codes.shape[0] == 0 or s_codes.shape[0] == 0:
        raise ValueError("target and synthetic data need at least one row each")
    position = {f: j for j, f in enumerate(used)}
    subsets = [tuple(sorted(position[f] for f in m)) for m in marginals]
    found: dict[Subset, float] = {}
    for s, (t, q) in iter_marginals_many([t_codes, s_codes], cards, subsets):
        t = t.astype(np.float64)
        q = q.astype(np.float64)
        for axis, j in enumerate(s):
            if dropped[j] is not None:
                cut = (slice(None),) * axis + (dropped[j],)
                t[cut] = 0.0
                q[cut] = 0.0
        found[s] = 0.5 * float(np.abs(t / t_codes.shape[0] - q / s_codes.shape[0]).sum())
    return [(m, found[s]) for m, s in zip(marginals, subsets)]


def nist_kmarginal_score(
    target: pd.DataFrame,
    synthetic: pd.DataFrame,
    features: Sequence[str] | None = None,
    **options: Any,
) -> float:
    """NIST SDNist k-marginal score: ``1000 * (1 - mean TVD)`` over the SDNist marginals.

    ``target`` and ``synthetic`` hold raw values (read the excerpts with ``dtype=str,
    keep_default_na=False``; the missing token is ``N``). ``features`` defaults to the
    target's columns, e.g. :data:`NIST_DEMOGRAPHIC_FEATURES`. Options as in
    :func:`nist_marginal_tvds` (``exclude=("INDP",)`` reproduces v2.3.0's code,
    which also leaves INDP out of the pairs). SDNist reports ``int(score)``.
    """
    tvds = nist_marginal_tvds(target, synthetic, features, **options)
    return 1000.0 * (1.0 - float(np.mean([v for _, v in tvds])))
