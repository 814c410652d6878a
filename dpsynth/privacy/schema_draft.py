"""A schema drafted with differential privacy (``dpsynth schema infer --epsilon``).

Every fact the draft takes from the rows is the output of a DP mechanism, accounted in
zCDP (the methods, their analysis and the references are in docs/schema-draft.md):

* a column's kind (missing, whole number, real number, date, text): a Gaussian
  histogram over those five public cells (one row is in one cell per column);
* identifier-like columns: a noisy count of distinct values against the noisy count
  of rows (left out of the draft when nearly every row differs);
* categories: a stability-based histogram: discrete Gaussian noise on the count of
  every value present, kept only above a threshold set so that a value held by one
  row appears with probability at most its share of ``delta``;
* numeric bounds: a Gaussian histogram over a public 1-2-5 grid from -5e12 to 5e12 (a column
  whose counts cannot support bounds is left out with a note: too few values, too spread);
  cut points: quantiles of a Gaussian histogram on a fine grid inside those bounds;
* dates: the bounds from a histogram of calendar years 1800-2199 (public cells).

The draft is charged to the dataset's registry before any count is made, carries no
``drafted_from_data`` marker, and states its cost in a top-level ``dp_draft`` block.
Noise comes from :mod:`dpsynth.privacy.noise`, generators from :mod:`dpsynth.privacy.rng`;
the caller reads the file (``dpsynth schema infer`` with :func:`dpsynth.rows.encoding.read_table`).
"""

from __future__ import annotations

import hashlib
import math
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import yaml

from ..schema.draft import natural_key
from ..schema.timecols import format_seconds, seconds_of
from .accounting import gaussian_sigma, rho_from_epsilon
from .budget import Charge, check_delta
from .noise import discrete_gaussian
from .registry import charge
from .rng import stage_rng
from .schema_source import draft_charge_name

__all__ = ["DPDraft", "KINDS", "MISSING_TOKENS", "dp_draft_from_table", "numeric_grid",
           "stable_values", "tail_threshold"]

#: Missing-value tokens every DP draft declares for a nullable column (a public list).
MISSING_TOKENS = ("", "NA", "N/A", "NaN", "nan", "null", "NULL", "?", "None")
#: The public cells of the kind histogram ("N": the letter N alone, missing in a numeric or
#: date column (as in the NIST files), a value in a text column).
KINDS = ("missing", "integer", "real", "datetime", "text", "N")
# Shares of a column's rho: kind histogram, distinct count, domain (numeric: bounds and cuts halves).
_SHARE_KIND, _SHARE_DISTINCT = 0.1, 0.05
# After the kinds are known, a text column gets this many times a numeric column's share of
# the rest (its categories need the threshold; a numeric column's grid needs less).
_TEXT_WEIGHT = 3.0
_ID_SHARE = 0.9  # distinct values >= this share of rows: an identifier (left out)
_SURVIVE_Z = 4.0  # a grid cell counts as occupied when its noisy count is above 4 sigma
_FINE_CELLS = 200
# Refusals of bounds (post-processing of counts the draft makes anyway), each wrong with probability
# at most _REFUSE_ALPHA: discrete Gaussian noise (and a sum of independent ones) is sub-Gaussian
# (Canonne, Kamath and Steinke 2020), P[noise >= z sd] <= exp(-z^2/2) (docs/schema-draft.md).
_REFUSE_ALPHA = 1e-7
_REFUSE_Z = math.sqrt(2 * math.log(1 / _REFUSE_ALPHA))  # 5.68
_MAX_CLAMPED = 0.1  # bounds that leave out more than this share of a column's values are refused
_YEARS = np.arange(1800, 2201)


@dataclass(frozen=True)
class DPDraft:
    """A DP schema draft: the schema dict (with its ``dp_draft`` block) and reviewer notes."""

    schema: dict[str, Any]
    notes: dict[str, list[str]] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)

    def to_yaml(self) -> str:
        """The draft as YAML: a header, the ``dp_draft`` block, the columns with comments."""
        d = self.schema["dp_draft"]
        lines = [
            "# Drafted WITH DIFFERENTIAL PRIVACY by `dpsynth schema infer --epsilon`: every category, bound",
            f"# and cut point below is the output of a DP mechanism (epsilon {d['epsilon']:g}, delta {d['delta']:g}),",
            f"# charged to dataset {d['dataset']!r} in its privacy registry. Review it all the same: replace",
            "# what a public code book states better. Edits keep the guarantee; keep the dp_draft block.",
            yaml.safe_dump({"name": self.schema["name"]}, sort_keys=False, allow_unicode=True).rstrip(),
            yaml.safe_dump({"dp_draft": d}, sort_keys=False, allow_unicode=True, width=10**6).rstrip(),
            "columns:",
        ]
        for col in self.schema["columns"]:
            lines += [f"  # {note}" for note in self.notes.get(col["name"], [])]
            flow = yaml.safe_dump(col, default_flow_style=True, sort_keys=False, allow_unicode=True, width=10**6)
            lines.append("  - " + flow.strip())
        lines += [f"  # column {name}: {why}" for name, why in self.left_out.items()]
        return "\n".join(lines) + "\n"


def tail_threshold(sigma: float, delta: float) -> int:
    """Smallest T with P[1 + Z >= T] <= delta for Z discrete Gaussian of scale ``sigma``:
    a value held by one row survives a threshold T with probability at most ``delta``.
    Computed from the exact probabilities (normalised over +-(40 sigma + 10))."""
    if not (sigma > 0 and 0 < delta < 1):
        raise ValueError("tail_threshold needs sigma > 0 and delta in (0, 1)")
    k_max = int(math.ceil(40 * sigma)) + 10
    k = np.arange(-k_max, k_max + 1, dtype=np.float64)
    w = np.exp(-(k * k) / (2 * sigma * sigma))
    tail = np.cumsum(w[::-1])[::-1] / w.sum()  # tail[i] = P[Z >= k[i]]
    first = int(np.argmax(tail <= delta))  # first k with P[Z >= k] <= delta
    return int(k[first]) + 1


def stable_values(values: pd.Series, sigma: float, threshold: int, rng: np.random.Generator) -> dict[str, int]:
    """The stability-based histogram: each distinct value's count plus discrete Gaussian
    noise, kept when the noisy count reaches ``threshold`` (values absent from the rows
    are never candidates). Returns value -> noisy count."""
    counts = values.value_counts(sort=False)
    if counts.empty:
        return {}
    noisy = counts.to_numpy(dtype=np.int64) + discrete_gaussian(sigma, len(counts), rng)
    keep = noisy >= threshold
    return {str(v): int(c) for v, c in zip(counts.index[keep], noisy[keep])}


def numeric_grid() -> np.ndarray:
    """The public grid of the bounds histogram: 0 and +-{1, 2, 5} x 10^k, k = -4..12."""
    pos = np.array([m * 10.0**k for k in range(-4, 13) for m in (1, 2, 5)])
    return np.concatenate([-pos[::-1], [0.0], pos])


def _noisy_hist(cells: np.ndarray, n_cells: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Counts of each cell index (0..n_cells-1) plus discrete Gaussian noise (sensitivity 1)."""
    return np.bincount(cells, minlength=n_cells).astype(np.int64) + discrete_gaussian(sigma, n_cells, rng)


class _Refused(Exception):
    """A column whose bounds the draft's counts cannot support: left out, with the reason."""


@dataclass(frozen=True)
class _Present:
    """A column's noisy count of the values its bounds are drafted from (from the kind
    histogram), and that count's sd."""

    count: float
    sd: float


def _strong(noisy: np.ndarray, sigma: float) -> np.ndarray:
    """Cells whose noisy count clears z sds, z such that a histogram of empty cells has any cell
    this high with probability at most ``_REFUSE_ALPHA`` (a union bound over its cells)."""
    return noisy >= math.sqrt(2 * math.log(len(noisy) / _REFUSE_ALPHA)) * sigma


def _check_some_values(noisy: np.ndarray, sigma: float, present: _Present) -> None:
    """Refuses a column that neither its kind count (``_REFUSE_Z`` sds) nor a :func:`_strong` grid
    cell shows to hold values (an all-empty column, a one-row table: bounds would be noise).
    Either alone would refuse real columns: a small table at a small epsilon (the kind count's
    noise is the larger), or values spread over many grid cells."""
    if present.count < _REFUSE_Z * present.sd and not _strong(noisy, sigma).any():
        raise _Refused(f"too few values to draft bounds privately (a DP count of about {max(present.count, 0):.0f},"
                       f" noise sd {present.sd:.0f}, and no cell of its DP histogram clears the noise): left out. "
                       "Declare public bounds, or drop it from the input")


@dataclass(frozen=True)
class _Budget:
    """One column's noise scales and its share of the threshold delta."""

    kind: float
    distinct: float
    domain: float
    delta: float

    @classmethod
    def after_kinds(cls, sigma_kind: float, rho_rest: float, delta_col: float) -> "_Budget":
        """Noise scales of a column's distinct count and domain queries from its share of the
        rho left after the kind histograms (sensitivity 1 each)."""
        rest = 1 - _SHARE_KIND
        return cls(kind=sigma_kind, distinct=gaussian_sigma(1.0, _SHARE_DISTINCT / rest * rho_rest),
                   domain=gaussian_sigma(1.0, (rest - _SHARE_DISTINCT) / rest * rho_rest), delta=delta_col)


def _classify(arr: pa.ChunkedArray) -> tuple[np.ndarray, pd.Series, np.ndarray, np.ndarray]:
    """Each cell's kind index (into KINDS), its text, number and seconds (NaN where not)."""
    text = pd.Series(pc.cast(arr, pa.string()).to_pylist(), dtype=object)
    stripped = text.fillna("").astype(str).str.strip()
    missing = text.isna() | stripped.isin(MISSING_TOKENS)
    nums = pd.to_numeric(stripped.where(~missing), errors="coerce").to_numpy(dtype=np.float64)
    finite = np.isfinite(nums)
    zeros = stripped.str.match(r"^-?0\d").to_numpy() & ~stripped.str.contains(r"[.eE]").to_numpy()
    number = finite & ~zeros
    if pa.types.is_timestamp(arr.type) or pa.types.is_date(arr.type):
        number = np.zeros(len(text), dtype=bool)
    secs = np.where(number, np.nan, seconds_of(arr, MISSING_TOKENS))
    kind = np.full(len(text), 4, dtype=np.int64)
    kind[~number & np.isfinite(secs)] = 3
    kind[number & (np.floor(nums) != nums)] = 2
    kind[number & (np.floor(nums) == nums)] = 1
    kind[missing.to_numpy()] = 0
    kind[stripped.to_numpy() == "N"] = 5
    return kind, stripped, nums, secs


def _kinds(arr: pa.ChunkedArray, sigma: float, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """The column's noisy kind histogram (over :data:`KINDS`) and the kind it chooses."""
    kind = _classify(arr)[0]
    noisy = _noisy_hist(kind, len(KINDS), sigma, rng)
    integer_n, real_n, date_n, text_n, n_n = (float(v) for v in noisy[1:])
    return noisy, ("numeric", "datetime", "text")[int(np.argmax([integer_n + real_n, date_n, text_n + n_n]))]


def _column(name: str, arr: pa.ChunkedArray, noisy: np.ndarray, chosen: str, b: _Budget, rng: np.random.Generator,
            max_categories: int, bins: int) -> tuple[dict[str, Any] | None, list[str]]:
    """One column's DP draft given its noisy kinds (None: left out, with the reason as the note)."""
    kind, text, nums, secs = _classify(arr)
    integer_n, real_n, date_n, text_n, n_n = (float(v) for v in noisy[1:])
    if chosen == "text":
        kind[kind == 5] = 4  # "N" is a value of a text column
    else:
        kind[kind == 5] = 0  # and a missing mark in a numeric or date column
    n_present = max(integer_n + real_n + date_n + text_n + n_n, 1.0)
    distinct = int(len(pd.unique(text[kind != 0]))) + int(discrete_gaussian(b.distinct, 1, rng)[0])
    integer = chosen == "numeric" and real_n <= max(_SURVIVE_Z * b.kind, 0.01 * n_present)
    some = n_present >= max(20.0, _REFUSE_Z * b.kind * math.sqrt(5))  # five noisy cells: not noise alone
    if (chosen == "text" or integer) and some and distinct >= _ID_SHARE * n_present:
        return None, ["nearly every row holds a different value (by a DP count: an identifier or a row "
                      "number?): left out. Drop it from the input, or declare it with public categories or bounds"]
    col: dict[str, Any] = {"name": name}
    try:
        if chosen == "numeric":
            col.update(_numeric(nums[kind == 1] if integer else nums[(kind == 1) | (kind == 2)], integer, b, rng,
                                max_categories, bins, _Present(integer_n + real_n, b.kind * math.sqrt(2))))
        elif chosen == "datetime":
            col.update(_datetime(secs[kind == 3], b, rng, _Present(date_n, b.kind)))
    except _Refused as exc:
        return None, [str(exc)]
    if chosen == "text":
        values, notes = _categories(text[kind == 4], b, rng, max_categories)
        if not values and text_n + n_n < _REFUSE_Z * b.kind * math.sqrt(2):
            return None, [f"too few values to list categories privately (a DP count of about {max(text_n + n_n, 0):.0f}"
                          f", noise sd {b.kind * math.sqrt(2):.0f}): left out. Declare its public categories, or "
                          "drop it from the input"]
        if not values:
            return None, notes
        col.update({"type": "categorical", "values": values, "other": True, "_notes": notes})
    missing_n = float(noisy[0]) + (n_n if chosen != "text" else 0.0)
    if missing_n > 2 * b.kind * (1.0 if chosen == "text" else math.sqrt(2)):  # a spare code is cheap
        tokens = MISSING_TOKENS + (("N",) if chosen != "text" else ())
        col["missing"] = [t for t in tokens if t not in col.get("values", ())]
    return col, col.pop("_notes", [])


def _categories(text: pd.Series, b: _Budget, rng: np.random.Generator,
                max_categories: int) -> tuple[list[str], list[str]]:
    """Categories by the stability histogram; the top ``max_categories`` in natural order."""
    threshold = tail_threshold(b.domain, b.delta)
    kept = stable_values(text[~text.isin(MISSING_TOKENS)], b.domain, threshold, rng)
    ranked = sorted(kept, key=lambda v: (-kept[v], v))
    listed = sorted(ranked[:max_categories], key=natural_key)
    beyond = sorted(ranked[max_categories:], key=natural_key)
    notes = [f"values whose noisy count reached the DP threshold {threshold}; others fall into 'other'"]
    if beyond:
        notes.append(f"--max-categories {max_categories} folded these {len(beyond)} values into 'other': "
                     + ", ".join(repr(v.replace("\n", " ")) for v in beyond))
    if not listed:
        notes = [f"no value reached the DP threshold {threshold} (rare values, free text or an identifier): "
                 "left out. Drop it from the input, or declare its public categories"]
    return listed, notes


def _occupied(x: np.ndarray, grid: np.ndarray, sigma: float, rng: np.random.Generator,
              present: _Present) -> tuple[int, int, np.ndarray]:
    """DP support on ``grid``: the first and one past the last cell of a noisy histogram whose
    noisy count exceeds 4 sigma, less an outer one apart from the rest that is not
    :func:`_strong`; and the noisy histogram. Refuses (post-processing) a column with too few
    values (:func:`_check_some_values`) or no cell above 4 sigma."""
    cells = np.clip(np.searchsorted(grid, x, side="right") - 1, 0, len(grid) - 2)
    noisy = _noisy_hist(cells, len(grid) - 1, sigma, rng)
    _check_some_values(noisy, sigma, present)
    occupied, strong = np.flatnonzero(noisy > _SURVIVE_Z * sigma), _strong(noisy, sigma)
    if occupied.size == 0:
        raise _Refused(f"the values are too spread for DP bounds at this budget (no cell of its DP histogram "
                       f"clears {_SURVIVE_Z:g} times the noise, sd {sigma:.3g}): left out. Declare public bounds, or "
                       "draft with a larger --epsilon")
    # an outer cell apart from the rest that only the 4 sigma cut lets through is likelier noise
    # (about 3e-5 per empty cell) than a tail: it would stretch the bounds to a far grid edge
    while occupied.size > 1 and not strong[occupied[0]] and occupied[1] - occupied[0] > 1:
        occupied = occupied[1:]
    while occupied.size > 1 and not strong[occupied[-1]] and occupied[-1] - occupied[-2] > 1:
        occupied = occupied[:-1]
    return int(occupied[0]), int(occupied[-1]) + 1, noisy


def _held(inside: np.ndarray, sigma: float, present: _Present, lo: float, hi: float) -> list[str]:
    """Checks drafted bounds ``lo..hi`` against the column's noisy count, from ``inside``, the
    noisy counts of the cells they span (noise ``sigma`` each): refuses bounds that clearly
    hold less than ``1 - _MAX_CLAMPED`` of the values (wrong with probability at most
    ``_REFUSE_ALPHA``); a note when they hold less by about 2 sds only."""
    keep = 1 - _MAX_CLAMPED  # sum(inside) - keep * count has this sd (independent noises)
    sd = math.sqrt(len(inside) * sigma * sigma + (keep * present.sd) ** 2)
    held = float(np.sum(inside))
    share = min(max(held / max(present.count, 1.0), 0.0), 1.0)
    if held + _REFUSE_Z * sd < keep * present.count:
        raise _Refused(f"the values are too spread for DP bounds at this budget: the bounds the DP counts support, "
                       f"{_plain(lo)}..{_plain(hi)}, hold about {share:.0%} of them, so a release would clamp the "
                       "rest: left out. Declare public bounds, or draft with a larger --epsilon")
    if held + 2 * sd < keep * present.count:  # a hint, not a test
        return [f"the DP counts put about {share:.0%} of the values inside the bounds (noisy: the count of values "
                f"has noise of sd {present.sd:.0f}): a release clamps values outside, so widen them if a public "
                "source allows"]
    return []


def _numeric(x: np.ndarray, integer: bool, b: _Budget, rng: np.random.Generator, max_categories: int,
             bins: int, present: _Present) -> dict[str, Any]:
    """Bounds from the 1-2-5 grid, then cut points at the quantiles of a second noisy histogram:
    one cell per whole number when the range is short, else 200 equal cells."""
    sigma = b.domain * math.sqrt(2)  # the domain's rho split in halves: the grid, the second histogram
    grid = numeric_grid()
    if integer:  # whole numbers: no cells between 0 and 1
        grid = grid[(np.abs(grid) >= 1) | (grid == 0)]
    first, last, gridded = _occupied(x, grid, sigma, rng, present)
    lo, hi = float(grid[first]), float(grid[last])
    col: dict[str, Any] = {"type": "numeric"}
    if integer:
        # widened (post-processing) one cell down and two up, so a thin tail under the grid's
        # 4 sigma still gets its own values; a count per whole number then trims the slack
        wlo = lo if lo == 0 else float(grid[max(first - 1, 0)])
        whi = hi if hi == 0 else float(grid[min(last + 2, len(grid) - 1)])
        if whi - wlo <= 2.5 * max_categories:
            return _whole_numbers(x, wlo, whi, sigma, rng, max_categories, bins, present)
    warn = _held(gridded[first:last], sigma, present, lo, hi)
    fine = np.linspace(lo, hi, _FINE_CELLS + 1)
    cells = np.clip(np.searchsorted(fine, np.clip(x, lo, hi), side="right") - 1, 0, _FINE_CELLS - 1)
    noisy = _noisy_hist(cells, _FINE_CELLS, sigma, rng).astype(np.float64)
    col["edges"] = _cut_edges(noisy, fine, sigma, bins, integer)
    if integer:
        col["integer"] = True
    col["_notes"] = ["bounds from a DP histogram on a public 1-2-5 grid; cut points at DP quantiles "
                     f"(a noisy histogram of {_FINE_CELLS} cells inside the bounds)", *warn]
    return col


def _whole_numbers(x: np.ndarray, lo: float, hi: float, sigma: float, rng: np.random.Generator,
                   max_categories: int, bins: int, present: _Present) -> dict[str, Any]:
    """A short range of whole numbers: a noisy count per number trims the bounds to the numbers
    above 3 sigma, unless :func:`_held` finds the trimmed range short (then the range is kept
    and checked in turn); then one bin per number (at most
    ``max_categories``), else quantile cuts from the same counts."""
    cells = np.clip(x, lo, hi - 1).astype(np.int64) - int(lo)
    noisy = _noisy_hist(cells, int(hi - lo), sigma, rng).astype(np.float64)
    occupied = np.flatnonzero(noisy > 3 * sigma)
    warn: list[str] | None = None
    if occupied.size:
        try:
            warn = _held(noisy[occupied[0]: occupied[-1] + 1], sigma, present, lo + occupied[0], lo + occupied[-1])
        except _Refused:
            pass
        if warn == []:  # the trim holds the values: keep it (else the widened range, if it does better)
            noisy = noisy[occupied[0]: occupied[-1] + 1]
            lo, hi = lo + occupied[0], lo + occupied[-1] + 1
    if warn != []:
        warn = _held(noisy, sigma, present, lo, hi - 1)
    if hi - lo <= max_categories:  # the last bin is closed: it ends half-way to the next number
        return {"type": "numeric", "edges": [_plain(v) for v in np.arange(lo, hi)] + [_plain(hi - 0.5)],
                "integer": True, "_notes": ["bounds from DP histograms (a public 1-2-5 grid, then one cell per "
                                            "whole number); one bin per whole number", *warn]}
    edges = _cut_edges(noisy, np.arange(lo, hi + 1, dtype=np.float64), sigma, bins, True)
    return {"type": "numeric", "edges": edges, "integer": True,
            "_notes": ["bounds and cut points (DP quantiles) from DP histograms: a public 1-2-5 grid, then one "
                       "cell per whole number", *warn]}


def _cut_edges(noisy: np.ndarray, fine: np.ndarray, sigma: float, bins: int, integer: bool) -> list[float | int]:
    """Bin edges from a noisy histogram on the cells ``fine`` (post-processing): equal-mass cuts,
    rounded up to a 1-2-5 step (whole numbers for an integer column)."""
    lo, hi = float(fine[0]), float(fine[-1])
    mass = np.where(noisy < 2 * sigma, 0.0, noisy)  # empty cells' noise does not pile up
    cuts = [float(fine[i + 1]) for i in _equal_mass_cells(mass, bins)]
    step = _nice_step((hi - lo) / 100)
    cuts = [math.ceil(c / step - 1e-9) * step for c in cuts]
    if integer:
        cuts = [float(math.ceil(c)) for c in cuts]
    edges = sorted({lo, hi, *[round(c, 12) for c in cuts if lo < c < hi]})
    return [_plain(round(e, 12)) for e in edges]


def _datetime(secs: np.ndarray, b: _Budget, rng: np.random.Generator, present: _Present) -> dict[str, Any]:
    """Bounds to whole calendar years from a DP histogram of the years 1800-2199; one bin per
    year (a span of three years or more), else per month."""
    years = pd.to_datetime(secs, unit="s").year.to_numpy() if secs.size else np.array([], dtype=np.int64)
    grid = np.append(_YEARS, _YEARS[-1] + 1).astype(np.float64)
    first, last, gridded = _occupied(years.astype(np.float64), grid, b.domain, rng, present)
    lo, hi = float(grid[first]), float(grid[last])
    warn = _held(gridded[first:last], b.domain, present, lo, hi)
    step = "year" if hi - lo >= 3 else "month"
    bounds = [format_seconds(pd.Timestamp(year=int(y), month=1, day=1).timestamp()) for y in (lo, hi)]
    return {"type": "datetime", "bounds": bounds, "bins": step, "unit": "second",
            "_notes": [f"bounds to whole years from a DP histogram of calendar years; one bin per {step}", *warn]}


def _equal_mass_cells(mass: np.ndarray, bins: int) -> list[int]:
    """Cells after which to cut so the bins hold about equal mass: a bin closes once it holds
    the remaining mass over the remaining bins, so a value holding much of the mass (an
    atom) takes one bin and the rest is still split evenly."""
    total, cuts, acc = float(mass.sum()), [], 0.0
    for i, m in enumerate(mass[:-1]):
        acc += float(m)
        left = bins - len(cuts)
        if left > 1 and total > 0 and acc >= total / left:
            cuts.append(i)
            total -= acc
            acc = 0.0
    return cuts


def _nice_step(raw: float) -> float:
    """The smallest 1-2-5 step (times a power of ten) at least ``raw``."""
    exp = math.floor(math.log10(raw))
    return next(m * 10.0**exp for m in (1, 2, 5, 10) if m * 10.0**exp >= raw * (1 - 1e-12))


def _plain(x: float) -> float | int:
    x = float(x)  # plain Python numbers for YAML
    return int(x) if x.is_integer() else x


def _plan(epsilon: float, delta: float, n_columns: int) -> tuple[float, float, float]:
    """(rho, threshold delta, conversion delta): half of ``delta`` bounds the chance that a
    threshold lets a rare value through, shared by the columns; the other half converts rho."""
    if isinstance(epsilon, bool) or not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon of a DP schema draft must be a finite number > 0, got {epsilon!r}")
    delta = check_delta(delta, "delta of a DP schema draft")  # the releases' own bound
    rho = rho_from_epsilon(float(epsilon), float(delta) / 2)
    return rho, float(delta) / 2, float(delta) / 2


def dp_draft_from_table(
    table: pa.Table, *, epsilon: float, delta: float, dataset: str, workspace: Path, name: str | None = None,
    max_categories: int = 50, bins: int = 10, seed: bytes | None = None,
) -> DPDraft:
    """Drafts a schema from an Arrow table with DP, charged to ``dataset`` in ``workspace``'s
    registry first (refused past its cap: nothing is counted then). ``seed``: a secret for a
    reproducible draft (None: OS entropy)."""
    for key, value in (("max_categories", max_categories), ("bins", bins)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be a whole number >= 1, got {value!r}")
    if table.num_columns == 0:
        raise ValueError("the input has no columns")
    rho, delta_thr, _ = _plan(epsilon, delta, table.num_columns)
    draft_id = secrets.token_hex(8)
    n_cols = table.num_columns
    sigma_kind = gaussian_sigma(1.0, _SHARE_KIND * rho / n_cols)
    mechanisms = {
        "kinds": "Gaussian histogram of six public kinds per column",
        "identifiers": "Gaussian count of distinct values",
        "categories": "stability-based Gaussian histogram, threshold from delta",
        "numeric": "Gaussian histograms: public 1-2-5 grid (bounds), then one cell per whole number or 200 cells "
                   "inside (trimmed bounds, quantile cut points)",
        "datetime": "Gaussian histogram of calendar years 1800-2199 (bounds)",
        "accounting": "zCDP, converted with Canonne-Kamath-Steinke at delta/2; thresholds take delta/2; "
                      f"after the kinds, a text column gets {_TEXT_WEIGHT:g} shares of the rest, others one",
    }
    block = {"id": draft_id, "dataset": dataset, "epsilon": float(epsilon), "delta": float(delta), "rho": rho,
             "delta_threshold": delta_thr, "mechanisms": mechanisms}
    charge(Path(workspace), dataset, f"schema-draft:{draft_id}", draft_charge_name(draft_id),
           (Charge(stage="schema draft", rho=rho, detail={"columns": n_cols}),), float(delta),
           delta_extra=delta_thr)
    material = _material(table, epsilon, delta, dataset, max_categories, bins)
    rng = stage_rng(seed, material, "dp-draft")
    kinds = [_kinds(table.column(c), sigma_kind, rng) for c in table.column_names]
    # the rest of rho, shared by weights chosen from the kinds (DP outputs): adaptive, with a
    # total fixed in advance (a Renyi filter, docs/schema-draft.md)
    weights = [_TEXT_WEIGHT if chosen == "text" else 1.0 for _, chosen in kinds]
    columns, notes, left_out, sigmas = [], {}, {}, {}
    for col_name, (noisy, chosen), w in zip(table.column_names, kinds, weights):
        b = _Budget.after_kinds(sigma_kind, (1 - _SHARE_KIND) * rho * w / sum(weights), delta_thr / n_cols)
        col, note = _column(col_name, table.column(col_name), noisy, chosen, b, rng, max_categories, bins)
        if col is None:
            left_out[col_name] = note[0]
        else:
            columns.append(col)
            notes[col_name] = [f"{col_name}: {n}" for n in note]
        if chosen == "text":
            sigmas[col_name] = b.domain
    block["sigma_categories"] = sigmas
    schema = {"name": name or dataset, "dp_draft": block, "columns": columns}
    return DPDraft(schema=schema, notes=notes, left_out=left_out)


def _material(table: pa.Table, *settings: Any) -> bytes:
    """What the draft's generator is bound to (DESIGN.md decision 9): the rows' content and
    the settings; private (never written), so a seed reproduces a draft of the same input only."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    h = hashlib.sha256(b"dpsynth/dp-draft/v1\0")
    h.update(sink.getvalue().to_pybytes())
    h.update(repr(settings).encode())
    return h.digest()
