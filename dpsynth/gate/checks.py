"""The gate's plan: every expectation and statistic, computed before GE runs.

:func:`prepare` turns the synthetic table, its codes and the DP measurement into a
:class:`Plan`: the record checks (columns, row count, each column's type, domain and
missing values, from :func:`dpsynth.gate.validation.column_domain`) on the decoded table,
and the marginal-accuracy checks (codes re-encode to the table; every measured
marginal of every size k within its threshold, from :mod:`dpsynth.gate.thresholds`)
on a small derived table of statistics. Nothing here imports Great Expectations.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from ..rows.encoding import EncodedTable, encode_column
from ..measurement import Measurement, marginal_key
from ..evaluation.metrics import tvd_vs_counts
from ..schema import Column, Schema
from .validation import column_domain
from .scan import CodeCounts, Scan, frame_chunks, scan_table
from .thresholds import (
    DEFAULT_MIN_FACTOR,
    DEFAULT_SD_FACTOR,
    GateError,
    RowEstimate,
    _overrides,
    _row_band,
    dp_row_estimate,
    marginal_limits,
    predicted_tvds,
)

__all__ = ["Plan", "measured_subsets", "prepare", "prepare_scan", "RECORDS_SUITE", "MARGINALS_SUITE"]

RECORDS_SUITE = "synthetic_records"
MARGINALS_SUITE = "dp_marginal_accuracy"

_CATEGORICAL_TYPES = ["StringDtype", "object"]
_INTEGER_TYPES = [
    "Int8Dtype", "Int16Dtype", "Int32Dtype", "Int64Dtype",
    "UInt8Dtype", "UInt16Dtype", "UInt32Dtype", "UInt64Dtype",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
]
_FLOAT_TYPES = ["float16", "float32", "float64", "Float32Dtype", "Float64Dtype"]
_DATETIME_TYPES = ["datetime64[s]", "datetime64[ms]", "datetime64[us]", "datetime64[ns]"]


@dataclass
class Check:
    """One expectation: its label, suite, GE expectation type and arguments, and what it observed.

    GE evaluates record checks on the table's witness values (:mod:`dpsynth.gate.scan`),
    so its element and unexpected counts are of those few rows: ``counts`` holds the exact
    counts over the whole table, gathered chunk by chunk, shown in their place."""

    name: str
    column: str | None
    suite: str
    expectation: str
    kwargs: dict[str, Any]
    observed: dict[str, Any] = field(default_factory=dict)
    dtype: str | None = None
    counts: dict[str, Any] | None = None  # exact whole-table counts, shown instead of GE's

    @property
    def label(self) -> str:
        """``"column: name"`` for a per-column check, else ``name``."""
        return f"{self.column}: {self.name}" if self.column is not None else self.name


@dataclass
class Plan:
    """Everything the GE run needs: the table's witness values (``table``: a few rows whose
    record checks give the whole table's verdicts), the statistics table and every check;
    ``counts``: the synthetic marginal counts the checks were computed from."""

    schema: Schema
    table: pd.DataFrame
    stats: pd.DataFrame
    checks: list[Check]
    marginal_errors: list[dict[str, Any]]
    thresholds: dict[str, Any]
    statistics: dict[str, Any]
    counts: CodeCounts | None = None


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
    which re-encodes to a neighbouring bin (see :func:`dpsynth.rows.encoding.decode`).
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


def _mismatch_counts(table: pd.DataFrame, codes: EncodedTable) -> np.ndarray | None:
    """Per schema column, the cells whose value does not re-encode to its code (all of a
    column missing or repeated in the table); None when the row counts differ."""
    if len(table) != codes.n:
        return None
    out = np.full(len(codes.schema.columns), float(codes.n))
    for j, col in enumerate(codes.schema.columns):
        if col.name not in table.columns or table.columns.tolist().count(col.name) != 1:
            continue
        if codes.n == 0:
            out[j] = 0.0
            continue
        expected = _roundtrip_codes(col, codes.codes[:, j].astype(np.int64))
        out[j] = float(np.count_nonzero(_reencode(col, table[col.name]) != expected))
    return out


def _record_checks(found: list[str], dtypes: Mapping[str, str], schema: Schema, scanned: Scan) -> list[Check]:
    """Per column: exists, type, in_domain and (when the schema allows no missing) not_null."""
    checks: list[Check] = []
    for col in schema.columns:
        checks.append(Check("exists", col.name, RECORDS_SUITE, "ExpectColumnToExist", {"column": col.name}))
        if found.count(col.name) != 1:  # absent, or a duplicated name: nothing to check per column
            continue
        dom = column_domain(col)
        if dom.values is not None:
            types = _CATEGORICAL_TYPES
            in_domain = ("ExpectColumnValuesToBeInSet", {"column": col.name, "value_set": list(dom.values)})
        elif dom.time:  # timezone-less datetime64 (UTC), inside the bounds
            types = _DATETIME_TYPES
            lo, hi = (datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=b) for b in dom.bounds)
            in_domain = ("ExpectColumnValuesToBeBetween", {"column": col.name, "min_value": lo, "max_value": hi})
        else:
            types = _INTEGER_TYPES if dom.integer else _FLOAT_TYPES + _INTEGER_TYPES
            lo, hi = dom.bounds
            in_domain = ("ExpectColumnValuesToBeBetween", {"column": col.name, "min_value": lo, "max_value": hi})
        checks.append(
            Check(
                "type", col.name, RECORDS_SUITE, "ExpectColumnValuesToBeInTypeList",
                {"column": col.name, "type_list": list(types)}, dtype=dtypes[col.name],
            )
        )
        checks.append(Check("in_domain", col.name, RECORDS_SUITE, in_domain[0], in_domain[1],
                            counts=scanned.column_counts(col.name, "in_domain")))
        if not dom.nullable:
            checks.append(
                Check("not_null", col.name, RECORDS_SUITE, "ExpectColumnValuesToNotBeNull", {"column": col.name},
                      counts=scanned.column_counts(col.name, "not_null"))
            )
    return checks


def _table_checks(
    found: list[str], n: int, names: list[str], expected_rows: int | None, estimate: RowEstimate | None,
    over: Mapping[str, float],
) -> tuple[list[Check], float | None]:
    """Columns in schema order and the row count (exact, or a band around the DP estimate;
    asserted on the statistics table's ``rows`` column, the table being read in chunks)."""
    columns = Check(
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
    lo, hi, tol = _row_band(expected_rows, estimate, over)
    rows = Check(
        "row_count", None, MARGINALS_SUITE, "ExpectColumnValuesToBeBetween",
        {"column": "rows", "min_value": lo, "max_value": hi},
        {"rows": n, "min": lo, "max": hi}, counts={},
    )
    return [columns, rows], tol


@dataclass
class _MarginalResult:
    checks: list[Check] = field(default_factory=list)
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)
    thresholds: dict[str, Any] = field(default_factory=dict)
    by_k: dict[str, dict[str, Any]] = field(default_factory=dict)


def _marginal_checks(
    codes: CodeCounts | EncodedTable, measurement: Measurement, records: float, over: Mapping[str, float]
) -> _MarginalResult:
    """``max_tvd_k<k>`` and ``mean_tvd_k<k>`` for every size k of every measured marginal,
    each marginal against the threshold its own stated noise scale gives (from counts
    gathered chunk by chunk, or from a table in memory, counted here)."""
    codes = CodeCounts.of(codes, measurement)
    out = _MarginalResult()
    keys = list(measurement.marginals)
    if codes.n > 0 and keys:
        tvds = tvd_vs_counts(codes, measurement.marginals, groups=measurement.groups)
    else:  # an empty table matches no distribution
        tvds = {k: 1.0 for k in keys}
    predicted, spread = {}, {}
    if measurement.measured:
        pred, sd = predicted_tvds([nm.counts for nm in measurement.measured], codes.n, records,
                                  [nm.stddev for nm in measurement.measured])
        for i, nm in enumerate(measurement.measured):
            predicted[nm.attrs], spread[nm.attrs] = float(pred[i]), float(sd[i])
    for k in sorted({len(key) for key in keys}):
        group = [key for key in keys if len(key) == k]
        limit, mean_limit = marginal_limits(group, predicted, spread, k, over)
        values = np.array([tvds[key] for key in group], dtype=np.float64)
        ratios = values / np.array([limit[key] for key in group])
        out.thresholds[f"max_tvd_k{k}"] = float(max(limit.values()))
        out.thresholds[f"mean_tvd_k{k}"] = mean_limit
        out.errors += [
            {"marginal": marginal_key(key), "k": k, "tvd": float(tvds[key]), "threshold": float(limit[key]),
             "predicted": float(predicted[key]), "predicted_sd": float(spread[key])}
            for key in group
        ]
        out.columns[f"tvd_k{k}"] = values
        out.columns[f"ratio_k{k}"] = ratios
        out.checks.append(Check(
            f"max_tvd_k{k}", None, MARGINALS_SUITE, "ExpectColumnValuesToBeBetween",
            {"column": f"ratio_k{k}", "min_value": 0.0, "max_value": 1.0},
            {"marginals": len(group), "over_threshold": int(np.count_nonzero(ratios > 1.0)),
             "max_tvd": float(values.max()), "max_ratio": float(ratios.max())},
        ))
        out.checks.append(Check(
            f"mean_tvd_k{k}", None, MARGINALS_SUITE, "ExpectColumnMeanToBeBetween",
            {"column": f"tvd_k{k}", "min_value": 0.0, "max_value": mean_limit},
            {"marginals": len(group), "mean_tvd": float(values.mean()), "threshold": mean_limit},
        ))
        out.by_k[str(k)] = {
            "marginals": len(group), "mean_tvd": float(values.mean()), "max_tvd": float(values.max()),
            "mean_threshold": mean_limit, "mean_predicted": float(np.mean([predicted[key] for key in group])),
        }
    return out


def measured_subsets(schema: Schema, measurement: Measurement | Sequence[tuple[str, ...]]) -> list[tuple[int, ...]]:
    """Sorted column-index subsets of every 1-way marginal and every measured marginal (of a
    measurement, or the column names of its marginals: :func:`dpsynth.measurement.measured_attrs`):
    the counts the gate and the report read from the synthetic codes."""
    names = set(schema.names)
    attrs = getattr(measurement, "marginals", measurement)  # a measurement, or its marginals' names
    keys = [tuple(sorted(schema.index(a) for a in key)) for key in attrs
            if all(isinstance(a, str) and a in names for a in key)]
    return list(dict.fromkeys([(j,) for j in range(len(schema.columns))] + keys))


def prepare(
    synthetic: pd.DataFrame,
    codes: EncodedTable,
    measurement: Measurement,
    expected_rows: int | None,
    thresholds: Mapping[str, float] | None,
) -> Plan:
    """Every check and statistic of the gate on an in-memory table (one chunk of :func:`prepare_scan`)."""
    if not isinstance(synthetic, pd.DataFrame):
        raise GateError(f"synthetic must be a pandas DataFrame, got {type(synthetic).__name__}")
    found = scan_table(frame_chunks(synthetic, codes), codes.schema, measured_subsets(codes.schema, measurement))
    return prepare_scan(found, measurement, expected_rows, thresholds)


def prepare_scan(
    found: Scan,
    measurement: Measurement,
    expected_rows: int | None,
    thresholds: Mapping[str, float] | None,
) -> Plan:
    """Every check and statistic of the gate, from one pass over the synthetic table
    (:func:`dpsynth.gate.scan.scan`); GE only evaluates them."""
    if expected_rows is not None and (isinstance(expected_rows, bool) or int(expected_rows) < 0):
        raise GateError(f"expected_rows must be a whole number >= 0, got {expected_rows!r}")
    over = _overrides(thresholds)
    schema = found.schema
    estimate = dp_row_estimate(measurement)
    checks, tol = _table_checks(found.columns, found.rows, schema.names, expected_rows, estimate, over)
    checks += _record_checks(found.columns, found.dtypes, schema, found)

    mismatch = found.mismatch_share()
    max_share = over.get("max_code_mismatch_share", 0.0)
    checks.append(Check(
        "codes_match_table", None, MARGINALS_SUITE, "ExpectColumnMaxToBeBetween",
        {"column": "code_mismatch", "min_value": 0.0, "max_value": max_share},
        {"columns_mismatched": int(np.count_nonzero(mismatch > 0)),
         "max_mismatch_share": float(mismatch.max()) if mismatch.size else 0.0},
    ))
    counts = found.code_counts()
    records = estimate.value if estimate is not None else float(max(1, counts.n))
    marg = _marginal_checks(counts, measurement, records, over)
    checks += marg.checks
    resolved: dict[str, Any] = {"sd_factor": over.get("sd_factor", DEFAULT_SD_FACTOR),
                                "min_factor": over.get("min_factor", DEFAULT_MIN_FACTOR), **marg.thresholds}
    if tol is not None:
        resolved["row_count_tolerance"] = float(tol)
    resolved["max_code_mismatch_share"] = float(max_share)
    resolved["overridden"] = sorted(over)

    stat_columns = {"rows": np.array([float(found.rows)]), "code_mismatch": mismatch, **marg.columns}
    length = max(len(v) for v in stat_columns.values())
    stats = pd.DataFrame(
        {c: np.concatenate([v, np.full(length - len(v), np.nan)]) for c, v in stat_columns.items()}
    )
    statistics = {
        "rows": found.rows,
        "rows_expected": None if expected_rows is None else int(expected_rows),
        "rows_dp_estimate": None if estimate is None else round(float(estimate.value), 3),
        "rows_dp_estimate_source": None if estimate is None else estimate.source,
        "columns": len(found.columns),
        "marginals": len(measurement.measured),
        "noise_scale_source": "measurement" if measurement.measured else None,
        "marginal_tvd_by_k": marg.by_k,
    }
    return Plan(schema, found.witness_frame(), stats, checks, marg.errors, resolved, statistics, counts)
