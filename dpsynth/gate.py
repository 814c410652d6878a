"""The release gate: Great Expectations (1.x) suites on the synthetic table.

A release is published only when :func:`run_gate` says ``success``. The gate looks at
the synthetic table, its codes and the DP measurement, never at raw rows (DESIGN.md,
decision 8). Two suites run on an ephemeral GE context:

``synthetic_records`` (on the decoded synthetic table)
    * ``columns_match_schema``: the schema's columns, in schema order, nothing else;
    * ``row_count``: exactly ``expected_rows`` when the release asked for a number of
      rows, otherwise within a band around the measurement's DP row estimate;
    * per column: ``exists``; ``type`` (categorical: a string dtype; numeric with
      ``integer: true``: an integer dtype, so every value is whole; other numeric: a
      float or integer dtype); ``in_domain`` (categories plus the ``other`` label, or
      the numeric bounds); ``not_null`` for columns whose schema declares no missing
      token (missing values are allowed exactly where ``Column.nullable``).

``dp_marginal_accuracy`` (on a small derived table of statistics)
    * ``codes_match_table``: the table re-encoded with the schema gives back the codes
      the marginals were computed from (catches a decoder that shifts labels);
    * per marginal size k: ``max_tvd_k<k>`` (every k-way marginal's TVD is within its
      threshold) and ``mean_tvd_k<k>`` (the mean TVD over the k-way marginals is within
      its threshold). TVD compares the synthetic codes' marginal with the DP marginal
      of the measurement (negative noisy counts clipped to 0, then normalised), using
      :func:`dpsynth.metrics.tvd_vs_marginals`.

Thresholds: what the noise and the sample size predict
------------------------------------------------------
For a DP marginal with ``d`` cells, noisy counts ``y`` and noise scale ``sigma``, let
``q = clip(y, 0) / sum(clip(y, 0))``, ``n`` the synthetic rows and ``N`` the DP
estimate of the private row count. An honest synthesizer's cell ``i`` deviates from
``q_i`` by two roughly independent, roughly Gaussian errors:

* sampling ``n`` rows: standard deviation ``sqrt(q_i (1 - q_i) / n)``;
* the noise itself: a synthesizer that recovers the true distribution ``p`` instead of
  reproducing ``q`` (for example by fitting several noisy marginals consistently) is
  off by ``|p_i - q_i| ~ sigma / N``.

With ``s_i = sqrt(q_i (1 - q_i) / n + (sigma / N)^2`` and, for a centred Gaussian ``X``
of scale ``s``, ``E|X| = sqrt(2/pi) s`` and ``Var|X| = (1 - 2/pi) s^2``, the TVD
``0.5 sum_i |X_i|`` has the predicted mean and standard deviation::

    E_m  = sum_i s_i / sqrt(2 pi)
    SD_m = 0.5 sqrt(1 - 2/pi) sqrt(sum_i s_i^2 + max_i s_i^2)

(cells treated as independent; the ``max_i s_i^2`` term covers the two-cell case, where
both cells move together and the TVD is one half-normal ``|X_1|``.)

Default thresholds (all overridable per release, see :data:`THRESHOLD_KEYS`):

* per marginal: ``t_m = max(min_factor * E_m, E_m + sd_factor * SD_m)`` with
  ``sd_factor = 6`` and ``min_factor = 2``. In the worst case for the tail, two cells,
  ``t_m = 0.80 s + 6 * 0.52 s = 3.9 s`` for a TVD distributed as ``|N(0, s^2)|``:
  ``P(TVD > t_m) ~ 1e-4``. With more cells the TVD is a sum of many half-normals,
  close to Gaussian, and six standard deviations leave room for model error (a
  synthesizer that neither samples ``q`` exactly nor recovers ``p`` exactly); the floor
  of twice the predicted error keeps large marginals, whose spread is small, from
  failing an honest but imperfect fit. A broken synthesizer (columns shuffled or
  swapped, labels shifted, uniform output) misses the DP marginal by a TVD of order
  0.1-0.5, many times ``E_m`` wherever DP synthesis is meaningful.
* mean over the M marginals of size k:
  ``max(min_factor * mean(E_m), mean(E_m) + sd_factor * sqrt(sum SD_m^2) / M)``: the
  same rule for the mean of M errors (independent marginals assumed for its spread).
  It catches a systematic excess too small to push any single marginal over.
* ``max_tvd_k<k>`` given: every k-way marginal's threshold is that number instead.

Measured with the baseline (one release per seed, every 1-way marginal): the largest
TVD / t_m was 0.71 on the demo table at epsilon 1 (200 releases, 2,000 marginals),
0.19 at epsilon 0.1, 0.80 at epsilon 10, 0.76 with 200 synthetic rows, and 0.70 on
NIST national2019 at epsilon 1 (40 releases, 960 marginals); the mean TVD reached at
most 0.66 of its threshold. Swapping two demo columns gives TVD ~0.2 against
thresholds ~0.04-0.05.

Noise scale ``sigma`` of a marginal: the ``stddev`` its :class:`~dpsynth.measurement.NoisyMarginal`
states (the measurement contract; a method that states 0 gets the sampling term only).

Row count: with ``expected_rows`` the count must be exact. Otherwise the DP estimate
``N`` is the measurement's :meth:`~dpsynth.measurement.Measurement.estimated_records` (the
measured record count, else the inverse-variance mean of the 1-way marginals' totals); the
band is ``N (1 +/- row_count_tolerance)`` with the default tolerance
``max(0.01, 5 * max_m sqrt(d_m) sigma_m / N)``: a method may size its output from any
single noisy total, whose standard deviation is ``sqrt(d_m) sigma_m``.

What the summary never holds
----------------------------
GE lists "unexpected values" of failing expectations. A buggy synthesizer could copy a
raw value into the synthetic table, and such a list would then publish it. Every GE
run here asks for ``SUMMARY`` results with ``partial_unexpected_count = 0``, and the
summary keeps only whitelisted counts and fractions. :func:`write_data_docs` rewrites
the stored validation results to the same whitelist before GE renders them, and
strips every reference to a remote script, stylesheet or image from the rendered pages.
"""

from __future__ import annotations

import math
import re
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.parse import unquote, urlparse

import numpy as np
import pandas as pd
import pyarrow as pa

from .encoding import EncodedTable, encode_column
from .measurement import Measurement, marginal_key
from .metrics import tvd_vs_marginals
from .schema import Column, Schema

__all__ = [
    "THRESHOLD_KEYS",
    "DEFAULT_SD_FACTOR",
    "DEFAULT_MIN_FACTOR",
    "GateError",
    "run_gate",
    "write_data_docs",
    "predicted_tvd",
    "predicted_tvd_sd",
    "dp_row_estimate",
]

#: Standard deviations of the predicted TVD a marginal may exceed its predicted mean by.
DEFAULT_SD_FACTOR = 6.0
#: Every threshold is at least this multiple of the predicted mean TVD.
DEFAULT_MIN_FACTOR = 2.0
#: Floor of the relative row-count tolerance when no row count was requested.
MIN_ROW_TOLERANCE = 0.01
#: Standard deviations of the noisiest single total allowed in the row-count band.
ROW_TOLERANCE_SDS = 5.0
#: Smallest per-marginal threshold (keeps ratios finite for a point-mass marginal).
_MIN_THRESHOLD = 1e-9

#: Keys accepted in ``thresholds`` (``<k>`` is a marginal size: 1, 2, 3...).
THRESHOLD_KEYS = (
    "max_tvd_k<k>",
    "mean_tvd_k<k>",
    "row_count_tolerance",
    "sd_factor",
    "min_factor",
    "max_code_mismatch_share",
)
_TVD_KEY = re.compile(r"^(max|mean)_tvd_k([1-9][0-9]*)$")
_SCALAR_KEYS = ("row_count_tolerance", "sd_factor", "min_factor", "max_code_mismatch_share")

RECORDS_SUITE = "synthetic_records"
MARGINALS_SUITE = "dp_marginal_accuracy"

# SUMMARY gives counts; a partial_unexpected_count of 0 keeps GE from listing values.
_RESULT_FORMAT: dict[str, Any] = {"result_format": "SUMMARY", "partial_unexpected_count": 0}
# Integer counts GE reports that carry no value of the table.
_GE_COUNTS = ("element_count", "unexpected_count", "missing_count")
_GE_PERCENTS = {"unexpected_percent": "unexpected_fraction", "missing_percent": "missing_fraction"}
_WITHHELD = "details withheld: GE error messages may quote table values"

_CATEGORICAL_TYPES = ["StringDtype", "object"]
_INTEGER_TYPES = [
    "Int8Dtype", "Int16Dtype", "Int32Dtype", "Int64Dtype",
    "UInt8Dtype", "UInt16Dtype", "UInt32Dtype", "UInt64Dtype",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
]
_FLOAT_TYPES = ["float16", "float32", "float64", "Float32Dtype", "Float64Dtype"]


class GateError(ValueError):
    """A public problem with the gate's inputs (bad thresholds, a folder in the way)."""


# --- public helpers: noise scales, row estimate, predicted TVD -----------------------


def _positive_number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        return None
    v = float(x)
    return v if math.isfinite(v) and v >= 0 else None


def _sigmas(m: Measurement) -> tuple[dict[tuple[str, ...], float], str]:
    """Noise scale of every measured marginal, as the measurement states it."""
    return {nm.attrs: nm.stddev for nm in m.measured}, "measurement"


@dataclass(frozen=True)
class RowEstimate:
    """DP estimate of the private table's row count, from the measurement alone."""

    value: float
    #: Standard deviation of the noisiest single total a method could size its output from.
    noisiest_total_sd: float
    source: str


def dp_row_estimate(m: Measurement) -> RowEstimate | None:
    """The measurement's own estimate of the row count (None if it has no marginal or count)."""
    one_way = [nm for nm in m.measured if len(nm.attrs) == 1] or list(m.measured)
    noisiest = max((math.sqrt(nm.counts.size) * nm.stddev for nm in one_way), default=0.0)
    if m.records is not None:
        return RowEstimate(m.records.value, noisiest, "measured record count")
    value = m.estimated_records()
    if value is None:
        return None
    return RowEstimate(float(value), noisiest, "inverse-variance mean of 1-way totals")


def _target(noisy: np.ndarray) -> np.ndarray:
    """The DP marginal as a distribution: NaN and negatives to 0, normalised (uniform if empty)."""
    q = np.clip(np.nan_to_num(np.asarray(noisy, dtype=np.float64).ravel(), nan=0.0, posinf=0.0, neginf=0.0), 0.0, None)
    total = q.sum()
    return q / total if total > 0 else np.full(q.size, 1.0 / max(1, q.size))


def _cell_scales(noisy: np.ndarray, rows: int, records: float, sigma: float) -> np.ndarray:
    q = _target(noisy)
    n = max(1, int(rows))
    big_n = max(1.0, float(records))
    return np.sqrt(q * (1.0 - q) / n + (float(sigma) / big_n) ** 2)


def predicted_tvd(noisy: np.ndarray, rows: int, records: float, sigma: float) -> float:
    """Expected TVD between an honest ``rows``-row synthetic marginal and this DP marginal.

    ``E_m = sum_i s_i / sqrt(2 pi)`` with ``s_i = sqrt(q_i (1 - q_i) / rows +
    (sigma / records)^2)``; see the module docstring.
    """
    return float(_cell_scales(noisy, rows, records, sigma).sum() / math.sqrt(2.0 * math.pi))


def predicted_tvd_sd(noisy: np.ndarray, rows: int, records: float, sigma: float) -> float:
    """Its standard deviation: ``0.5 sqrt(1 - 2/pi) sqrt(sum_i s_i^2 + max_i s_i^2)``."""
    s = _cell_scales(noisy, rows, records, sigma)
    if s.size == 0:
        return 0.0
    return float(0.5 * math.sqrt(1.0 - 2.0 / math.pi) * math.sqrt(float(np.sum(s**2) + np.max(s) ** 2)))


# --- the plan: everything computed before GE runs ----------------------------------


@dataclass
class _Check:
    name: str
    column: str | None
    suite: str
    expectation: str
    kwargs: dict[str, Any]
    observed: dict[str, Any] = field(default_factory=dict)
    dtype: str | None = None

    @property
    def label(self) -> str:
        return f"{self.column}: {self.name}" if self.column is not None else self.name


@dataclass
class _Plan:
    schema: Schema
    table: pd.DataFrame
    stats: pd.DataFrame
    checks: list[_Check]
    marginal_errors: list[dict[str, Any]]
    thresholds: dict[str, Any]
    statistics: dict[str, Any]


def _overrides(thresholds: Mapping[str, float] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in (thresholds or {}).items():
        if not isinstance(key, str) or not (key in _SCALAR_KEYS or _TVD_KEY.match(key)):
            raise GateError(f"unknown threshold {key!r}; known: {', '.join(THRESHOLD_KEYS)}")
        v = _positive_number(value)
        if v is None:
            raise GateError(f"threshold {key!r} must be a finite number >= 0, got {value!r}")
        if key == "max_code_mismatch_share" and v > 1:
            raise GateError("threshold 'max_code_mismatch_share' is a share: at most 1")
        out[key] = v
    return out


def _for_ge(df: pd.DataFrame) -> pd.DataFrame:
    """The table as GE sees it: text column names; every string dtype as ``string``.

    pandas 3's default ``str`` dtype (NaN as missing) is a string type GE's type
    check does not recognise; it is cast to ``string`` (pd.NA as missing), losslessly.
    """
    out = df.copy(deep=False)
    out.columns = [str(c) for c in df.columns]
    for i, dtype in enumerate(out.dtypes):  # by position: names may repeat
        if isinstance(dtype, pd.StringDtype) and dtype != pd.StringDtype():
            out.isetitem(i, out.iloc[:, i].astype(pd.StringDtype()))
    return out


def _roundtrip_codes(col: Column, codes: np.ndarray) -> np.ndarray:
    """Codes that re-encoding the decoded values gives back (identity but for one case).

    An integer bin holding no integer decodes to the nearest integer inside the bounds,
    which re-encodes to a neighbouring bin (see :func:`dpsynth.encoding.decode`).
    """
    if col.type != "numeric" or not col.integer:
        return codes
    e = np.asarray(col.edges, dtype=np.float64)
    lo, hi = e[:-1], e[1:]
    last = np.arange(lo.size) == lo.size - 1
    empty = np.flatnonzero(np.where(last, np.floor(hi), np.ceil(hi) - 1.0) < np.ceil(lo))
    if empty.size == 0:
        return codes
    near = np.clip(np.rint((lo[empty] + hi[empty]) / 2.0), np.ceil(e[0]), np.floor(e[-1]))
    lut = np.arange(col.cardinality, dtype=np.int64)
    lut[empty] = encode_column(col, pa.array(near))
    return lut[codes]


def _reencode(col: Column, series: pd.Series) -> np.ndarray:
    try:
        arr = pa.array(series, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        arr = pa.array(series.astype(pd.StringDtype()), from_pandas=True)
    return np.asarray(encode_column(col, arr), dtype=np.int64)


def _code_mismatch(table: pd.DataFrame, codes: EncodedTable) -> np.ndarray:
    """Per schema column, the share of cells whose value does not re-encode to its code."""
    out = np.ones(len(codes.schema.columns), dtype=np.float64)
    if len(table) != codes.n:
        return out
    if codes.n == 0:
        return np.zeros_like(out)
    for j, col in enumerate(codes.schema.columns):
        if col.name not in table.columns or table.columns.tolist().count(col.name) != 1:
            continue
        expected = _roundtrip_codes(col, codes.codes[:, j].astype(np.int64))
        out[j] = float(np.mean(_reencode(col, table[col.name]) != expected))
    return out


def _row_band(
    expected_rows: int | None, estimate: RowEstimate | None, over: Mapping[str, float]
) -> tuple[int, int | None, float | None]:
    """(min, max, relative tolerance) of the synthetic row count; max None: unbounded."""
    if expected_rows is not None:
        return int(expected_rows), int(expected_rows), 0.0
    if estimate is None:
        return 1, None, None
    if "row_count_tolerance" in over:
        tol = over["row_count_tolerance"]
    else:
        tol = max(MIN_ROW_TOLERANCE, ROW_TOLERANCE_SDS * estimate.noisiest_total_sd / estimate.value)
    lo = max(1, math.floor(estimate.value * (1.0 - tol)))
    hi = max(lo, math.ceil(estimate.value * (1.0 + tol)))
    return lo, hi, tol


def _record_checks(table: pd.DataFrame, schema: Schema) -> list[_Check]:
    checks: list[_Check] = []
    for col in schema.columns:
        checks.append(_Check("exists", col.name, RECORDS_SUITE, "ExpectColumnToExist", {"column": col.name}))
        if col.name not in table.columns:
            continue
        series = table[col.name]
        if isinstance(series, pd.DataFrame):  # a duplicated column name: nothing to check per column
            continue
        if col.type == "categorical":
            types = _CATEGORICAL_TYPES
            domain = list(col.values) + ([col.other_label] if col.other else [])
            in_domain = ("ExpectColumnValuesToBeInSet", {"column": col.name, "value_set": domain})
        else:
            types = _INTEGER_TYPES if col.integer else _FLOAT_TYPES + _INTEGER_TYPES
            lo, hi = col.bounds
            in_domain = (
                "ExpectColumnValuesToBeBetween",
                {"column": col.name, "min_value": float(lo), "max_value": float(hi)},
            )
        checks.append(
            _Check(
                "type", col.name, RECORDS_SUITE, "ExpectColumnValuesToBeInTypeList",
                {"column": col.name, "type_list": list(types)}, dtype=str(series.dtype),
            )
        )
        checks.append(_Check("in_domain", col.name, RECORDS_SUITE, in_domain[0], in_domain[1]))
        if not col.nullable:
            checks.append(
                _Check("not_null", col.name, RECORDS_SUITE, "ExpectColumnValuesToNotBeNull", {"column": col.name})
            )
    return checks


def _prepare(
    synthetic: pd.DataFrame,
    codes: EncodedTable,
    measurement: Measurement,
    expected_rows: int | None,
    thresholds: Mapping[str, float] | None,
) -> _Plan:
    if not isinstance(synthetic, pd.DataFrame):
        raise GateError(f"synthetic must be a pandas DataFrame, got {type(synthetic).__name__}")
    if expected_rows is not None and (isinstance(expected_rows, bool) or int(expected_rows) < 0):
        raise GateError(f"expected_rows must be a whole number >= 0, got {expected_rows!r}")
    over = _overrides(thresholds)
    schema = codes.schema
    table = _for_ge(synthetic)
    n_rows = len(table)
    sd_factor = over.get("sd_factor", DEFAULT_SD_FACTOR)
    min_factor = over.get("min_factor", DEFAULT_MIN_FACTOR)
    estimate = dp_row_estimate(measurement)
    sigmas, sigma_source = _sigmas(measurement)

    # --- records -------------------------------------------------------------------
    found = list(table.columns)
    names = schema.names
    checks = [
        _Check(
            "columns_match_schema", None, RECORDS_SUITE, "ExpectTableColumnsToMatchOrderedList",
            {"column_list": names},
            {
                "columns": len(found),
                "expected": len(names),
                "missing": sum(1 for c in names if c not in found),
                "extra": sum(1 for c in found if c not in names),
                "out_of_place": sum(
                    1 for i, c in enumerate(names) if c in found and (i >= len(found) or found[i] != c)
                ),
            },
        )
    ]
    lo, hi, tol = _row_band(expected_rows, estimate, over)
    checks.append(
        _Check(
            "row_count", None, RECORDS_SUITE, "ExpectTableRowCountToBeBetween",
            {"min_value": lo, "max_value": hi},
            {"rows": n_rows, "min": lo, "max": hi},
        )
    )
    checks += _record_checks(table, schema)

    # --- marginal accuracy ---------------------------------------------------------
    mismatch = _code_mismatch(table, codes)
    max_share = over.get("max_code_mismatch_share", 0.0)
    stat_columns: dict[str, np.ndarray] = {"code_mismatch": mismatch}
    checks.append(
        _Check(
            "codes_match_table", None, MARGINALS_SUITE, "ExpectColumnMaxToBeBetween",
            {"column": "code_mismatch", "min_value": 0.0, "max_value": max_share},
            {
                "columns_mismatched": int(np.count_nonzero(mismatch > 0)),
                "max_mismatch_share": float(mismatch.max()) if mismatch.size else 0.0,
            },
        )
    )
    keys = list(measurement.marginals)
    if codes.n > 0 and keys:
        tvds = tvd_vs_marginals(codes, measurement.marginals)
    else:  # an empty table matches no distribution
        tvds = {k: 1.0 for k in keys}
    records = estimate.value if estimate is not None else float(max(1, codes.n))
    predicted = {
        k: predicted_tvd(measurement.marginals[k], codes.n, records, sigmas[k]) for k in keys
    }
    spread = {
        k: predicted_tvd_sd(measurement.marginals[k], codes.n, records, sigmas[k]) for k in keys
    }
    resolved: dict[str, Any] = {"sd_factor": sd_factor, "min_factor": min_factor}
    marginal_errors: list[dict[str, Any]] = []
    by_k: dict[str, dict[str, Any]] = {}
    for k in sorted({len(key) for key in keys}):
        group = [key for key in keys if len(key) == k]
        fixed = over.get(f"max_tvd_k{k}")
        limit = {
            key: max(
                _MIN_THRESHOLD,
                fixed
                if fixed is not None
                else max(min_factor * predicted[key], predicted[key] + sd_factor * spread[key]),
            )
            for key in group
        }
        values = np.array([tvds[key] for key in group], dtype=np.float64)
        ratios = values / np.array([limit[key] for key in group])
        mean_pred = float(np.mean([predicted[key] for key in group]))
        mean_sd = math.sqrt(sum(spread[key] ** 2 for key in group)) / len(group)
        mean_limit = over.get(f"mean_tvd_k{k}", max(min_factor * mean_pred, mean_pred + sd_factor * mean_sd))
        resolved[f"max_tvd_k{k}"] = float(max(limit.values()))
        resolved[f"mean_tvd_k{k}"] = float(mean_limit)
        for key in group:
            marginal_errors.append(
                {
                    "marginal": marginal_key(key),
                    "k": k,
                    "tvd": float(tvds[key]),
                    "threshold": float(limit[key]),
                    "predicted": float(predicted[key]),
                    "predicted_sd": float(spread[key]),
                }
            )
        stat_columns[f"tvd_k{k}"] = values
        stat_columns[f"ratio_k{k}"] = ratios
        over_count = int(np.count_nonzero(ratios > 1.0))
        checks.append(
            _Check(
                f"max_tvd_k{k}", None, MARGINALS_SUITE, "ExpectColumnValuesToBeBetween",
                {"column": f"ratio_k{k}", "min_value": 0.0, "max_value": 1.0},
                {
                    "marginals": len(group),
                    "over_threshold": over_count,
                    "max_tvd": float(values.max()),
                    "max_ratio": float(ratios.max()),
                },
            )
        )
        checks.append(
            _Check(
                f"mean_tvd_k{k}", None, MARGINALS_SUITE, "ExpectColumnMeanToBeBetween",
                {"column": f"tvd_k{k}", "min_value": 0.0, "max_value": float(mean_limit)},
                {"marginals": len(group), "mean_tvd": float(values.mean()), "threshold": float(mean_limit)},
            )
        )
        by_k[str(k)] = {
            "marginals": len(group),
            "mean_tvd": float(values.mean()),
            "max_tvd": float(values.max()),
            "mean_threshold": float(mean_limit),
            "mean_predicted": mean_pred,
        }
    if tol is not None:
        resolved["row_count_tolerance"] = float(tol)
    resolved["max_code_mismatch_share"] = float(max_share)
    resolved["overridden"] = sorted(over)

    length = max(len(v) for v in stat_columns.values())
    stats = pd.DataFrame(
        {c: np.concatenate([v, np.full(length - len(v), np.nan)]) for c, v in stat_columns.items()}
    )
    statistics = {
        "rows": n_rows,
        "rows_expected": None if expected_rows is None else int(expected_rows),
        "rows_dp_estimate": None if estimate is None else round(float(estimate.value), 3),
        "rows_dp_estimate_source": None if estimate is None else estimate.source,
        "columns": len(found),
        "marginals": len(keys),
        "noise_scale_source": sigma_source if keys else None,
        "marginal_tvd_by_k": by_k,
    }
    return _Plan(schema, table, stats, checks, marginal_errors, resolved, statistics)


# --- running GE ----------------------------------------------------------------------


def _context(root: Path | None = None):
    """An ephemeral GE context (or a file context under ``root``), progress bars off."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    if root is None:
        context = gx.get_context(mode="ephemeral")
    else:
        context = gx.get_context(mode="file", project_root_dir=str(root))
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return context


def _run_suites(context, plan: _Plan) -> dict[int, Any]:
    """Runs both suites; returns each check's GE result by its index in ``plan.checks``."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    source = context.data_sources.add_pandas("dpsynth")
    results: dict[int, Any] = {}
    for suite_name, frame in ((RECORDS_SUITE, plan.table), (MARGINALS_SUITE, plan.stats)):
        members = [i for i, c in enumerate(plan.checks) if c.suite == suite_name]
        if not members:
            continue
        batch = source.add_dataframe_asset(suite_name).add_batch_definition_whole_dataframe("whole_table")
        # All expectations go in before the suite joins the context: adding them one by
        # one to a stored suite re-serialises it each time (quadratic in the count).
        expectations = [
            getattr(gxe, plan.checks[i].expectation)(
                **plan.checks[i].kwargs, meta={"dpsynth_check": plan.checks[i].label, "index": i}
            )
            for i in members
        ]
        suite = context.suites.add(gx.ExpectationSuite(name=suite_name, expectations=expectations))
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=suite_name, data=batch, suite=suite)
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = definition.run(batch_parameters={"dataframe": frame}, result_format=dict(_RESULT_FORMAT))
        for r in run.results:
            results[int(r.expectation_config.meta["index"])] = r
    return results


def _ge_counts(result: Mapping[str, Any] | None) -> dict[str, Any]:
    """Whitelisted counts and fractions of one GE result (never a value of the table)."""
    out: dict[str, Any] = {}
    result = result or {}
    for k in _GE_COUNTS:
        v = result.get(k)
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            out[k] = int(v)
    for k, name in _GE_PERCENTS.items():
        v = _positive_number(result.get(k))
        if v is not None:
            out[name] = v / 100.0
    return out


def _raised(r: Any) -> bool:
    info = getattr(r, "exception_info", None) or {}
    if isinstance(info, Mapping) and "raised_exception" in info:
        return bool(info.get("raised_exception"))
    # several expectations may report one exception_info per metric
    return any(isinstance(v, Mapping) and v.get("raised_exception") for v in (info.values() if isinstance(info, Mapping) else []))


def _json_number(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _summarise(plan: _Plan, results: Mapping[int, Any]) -> dict[str, Any]:
    entries = []
    for i, check in enumerate(plan.checks):
        r = results.get(i)
        entry: dict[str, Any] = {"name": check.name}
        if check.column is not None:
            entry["column"] = check.column
        entry["expectation"] = re.sub(r"(?<!^)(?=[A-Z])", "_", check.expectation).lower()
        observed = {k: _json_number(v) for k, v in check.observed.items()}
        if r is None:
            success = False
            observed["error"] = True
        else:
            success = bool(r.success)
            observed.update(_ge_counts(r.result))
            if _raised(r):
                success = False
                observed["error"] = True
        entry["success"] = success
        entry["observed"] = observed
        if check.dtype is not None:
            entry["dtype"] = check.dtype
        entries.append(entry)
    failed = [plan.checks[i].label for i, e in enumerate(entries) if not e["success"]]
    statistics = {
        "evaluated": len(entries),
        "successful": len(entries) - len(failed),
        "failed": len(failed),
        "success_percent": round(100.0 * (len(entries) - len(failed)) / max(1, len(entries)), 2),
        **plan.statistics,
    }
    return {
        "success": not failed,
        "failed": failed,
        "statistics": statistics,
        "expectations": entries,
        "marginal_errors": [{k: _json_number(v) for k, v in e.items()} for e in plan.marginal_errors],
        "thresholds": dict(plan.thresholds),
    }


def run_gate(
    synthetic: pd.DataFrame,
    codes: EncodedTable,
    measurement: Measurement,
    expected_rows: int | None,
    thresholds: Mapping[str, float] | None = None,
    *,
    docs: str | Path | None = None,
) -> dict[str, Any]:
    """Validates a synthetic table against its schema and its DP measurement with GE.

    With ``docs`` (a folder that must be absent or empty), the same run is also
    rendered as Data Docs there, only when the gate passes (see :func:`write_data_docs`).

    ``synthetic``: the decoded synthetic table (what is published); ``codes``: its
    integer codes (their schema is the release's schema); ``expected_rows``: the row
    count the release asked for, or None to accept a band around the DP estimate;
    ``thresholds``: overrides (see :data:`THRESHOLD_KEYS` and the module docstring).

    Returns a JSON-serialisable summary: ``success``, ``failed`` (labels of the failed
    expectations, ``"column: name"`` or ``name``), ``statistics``, ``expectations``
    (``name``, ``column`` when per column, ``expectation`` (GE type), ``success``,
    ``observed``: counts and fractions only), ``marginal_errors`` (``marginal``
    ``"a|b"``, ``k``, ``tvd``, ``threshold``, ``predicted``) and the resolved
    ``thresholds``. Deterministic: no time stamps or run ids.
    """
    plan = _prepare(synthetic, codes, measurement, expected_rows, thresholds)
    if docs is None:
        return _summarise(plan, _run_suites(_context(), plan))
    folder = _empty_folder(docs)
    with tempfile.TemporaryDirectory(prefix="dpsynth-gx-") as tmp:
        context = _context(Path(tmp))
        summary = _summarise(plan, _run_suites(context, plan))
        if summary["success"]:
            _render_docs(context, plan, folder)
    return summary


# --- Data Docs ---------------------------------------------------------------------


def _sanitise_result(result: Any, column_names: Sequence[str]) -> None:
    """Rewrites one stored suite result in place to counts, fractions and schema names."""
    allowed = set(column_names)
    for r in result.results:
        raw = dict(r.result or {})
        clean: dict[str, Any] = {}
        for k in (*_GE_COUNTS, *_GE_PERCENTS, "unexpected_percent_total", "unexpected_percent_nonmissing"):
            v = raw.get(k)
            if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
                clean[k] = v
        obs = raw.get("observed_value")
        if isinstance(obs, (int, float, np.integer, np.floating)) and not isinstance(obs, bool):
            clean["observed_value"] = obs
        elif isinstance(obs, str) and re.fullmatch(r"[A-Za-z0-9_\[\]]{1,40}", obs):
            clean["observed_value"] = obs  # a dtype name from the type check
        elif isinstance(obs, (list, tuple)):
            clean["observed_value"] = [c if c in allowed else "(a column not in the schema)" for c in obs]
        if "element_count" in clean or "unexpected_count" in clean:
            clean["partial_unexpected_list"] = []
        r.result = clean
        if _raised(r):
            r.exception_info = {
                "raised_exception": True,
                "exception_message": _WITHHELD,
                "exception_traceback": _WITHHELD,
            }


_REMOTE_TAGS = (
    re.compile(r"<script\b[^>]*\bsrc\s*=\s*['\"]?(?:https?:)?//[^>]*>\s*</script\s*>", re.I),
    re.compile(r"<link\b[^>]*\bhref\s*=\s*['\"]?(?:https?:)?//[^>]*>", re.I),
    re.compile(r"<img\b[^>]*\bsrc\s*=\s*['\"]?(?:https?:)?//[^>]*>", re.I),
)
_REMOTE_CSS = re.compile(r"@import\s+url\(\s*['\"]?(?:https?:)?//[^)]*\)\s*;?|url\(\s*['\"]?(?:https?:)?//[^)]*\)", re.I)


# Stand-ins for the remote Bootstrap and Font Awesome the pages are written for: the
# status icons become text marks, tables get rules. Appended to each page's <head>.
_OFFLINE_STYLE = """<style>
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: .5em 0 1em; }
th, td { border-bottom: 1px solid #ddd; padding: .25em .6em; text-align: left; vertical-align: top; }
i.fas { font-style: normal; font-weight: bold; }
.fa-check-circle::before { content: "\\2714"; color: #1a7f37; }
.fa-times::before { content: "\\2718"; color: #c62828; }
.fa-question-circle::before { content: "?"; }
.text-danger { color: #c62828; }
.text-success { color: #1a7f37; }
</style>
"""


def _strip_remote(folder: Path) -> None:
    """Removes every remote script, stylesheet, image and CSS url from the copied site."""
    for path in folder.rglob("*"):
        suffix = path.suffix.lower()
        if suffix not in (".html", ".htm", ".css"):
            continue
        text = path.read_text(encoding="utf-8")
        if suffix != ".css":
            for pattern in _REMOTE_TAGS:
                text = pattern.sub("", text)
            text = re.sub(r"</head\s*>", lambda m: _OFFLINE_STYLE + m.group(0), text, count=1, flags=re.I)
        path.write_text(_REMOTE_CSS.sub("none", text), encoding="utf-8")


def write_data_docs(
    synthetic: pd.DataFrame,
    codes: EncodedTable,
    measurement: Measurement,
    expected_rows: int | None,
    thresholds: Mapping[str, float] | None,
    folder: str | Path,
) -> Path:
    """Renders GE Data Docs of the gate into ``folder``; returns its ``index.html``.

    The suites run on a file-backed GE context in a temporary directory; the stored
    validation results are rewritten to counts and fractions (see
    :func:`_sanitise_result`) before GE renders them, only the rendered site is
    copied, and remote scripts, stylesheets and images are stripped so the pages open
    offline and fetch nothing. ``folder`` must not exist or be empty.
    """
    folder = _empty_folder(folder)
    plan = _prepare(synthetic, codes, measurement, expected_rows, thresholds)
    with tempfile.TemporaryDirectory(prefix="dpsynth-gx-") as tmp:
        context = _context(Path(tmp))
        _run_suites(context, plan)
        return _render_docs(context, plan, folder)


def _empty_folder(folder: str | Path) -> Path:
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise GateError(f"data docs folder {folder} exists and is not empty")
    return folder


def _render_docs(context, plan: _Plan, folder: Path) -> Path:
    """Sanitises the stored results of a file context, renders its site into ``folder``."""
    store = context.validation_results_store
    for key in store.list_keys():
        stored = store.get(key)
        _sanitise_result(stored, plan.schema.names)
        store.set(key, stored)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        context.build_data_docs()
    urls = [u.get("site_url") for u in context.get_docs_sites_urls() if u.get("site_url")]
    if not urls:
        raise GateError("GE built no Data Docs site")
    site = Path(unquote(urlparse(urls[0]).path)).parent
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(site, folder, dirs_exist_ok=True)
    _strip_remote(folder)
    index = folder / "index.html"
    _add_offline_index(index)
    return index


def _add_offline_index(index: Path) -> None:
    """Lists the site's pages at the top of the index.

    GE fills the index's tables with a remote JavaScript library, which is stripped:
    without this list the index would show no links offline.
    """
    import html

    root = index.parent
    items = []
    for kind, pattern in (("validation result", "validations/**/*.html"), ("expectation suite", "expectations/*.html")):
        for page in sorted(root.glob(pattern)):
            rel = page.relative_to(root).as_posix()
            suite = page.relative_to(root).parts[1]
            suite = suite[:-5] if suite.endswith(".html") else suite
            items.append(
                f'<li><a href="{html.escape(rel, quote=True)}">{html.escape(suite)}</a>: {kind}</li>'
            )
    block = (
        '<nav style="margin:1em 1.5em"><h2>Pages</h2><ul>' + "".join(items) + "</ul></nav>\n"
    )
    text = index.read_text(encoding="utf-8")
    text = re.sub(r"<body[^>]*>", lambda m: m.group(0) + "\n" + block, text, count=1, flags=re.I)
    index.write_text(text, encoding="utf-8")
