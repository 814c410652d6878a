"""Record validity of a table against its schema: one definition of a column's domain.

:func:`column_domain` says what a valid cell of a column is (the categories plus the
``other`` label, or the numeric or datetime bounds and whether values are whole; missing only
where the schema allows it). The release gate turns it into Great Expectations
expectations (:mod:`dpsynth.gate.checks`); :func:`record_checks` checks it directly
with pandas for ``dpsynth verify``. Results carry counts and column names, never a value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ..schema import Column, Schema
from ..schema.timecols import seconds_of

__all__ = ["ColumnDomain", "column_domain", "record_checks"]


@dataclass(frozen=True, kw_only=True)
class ColumnDomain:
    """Valid cells of one column: ``values`` (categorical) or ``bounds`` (numeric; with
    ``time``, datetime values in seconds since 1970-01-01 UTC)."""

    values: tuple[str, ...] | None = None
    bounds: tuple[float, float] | None = None
    integer: bool = False
    time: bool = False
    nullable: bool = True


def column_domain(col: Column) -> ColumnDomain:
    """The domain a published value of ``col`` must lie in."""
    if col.type == "categorical":
        values = tuple(col.values) + ((col.other_label,) if col.other else ())
        return ColumnDomain(values=values, nullable=col.nullable)
    lo, hi = col.bounds
    return ColumnDomain(bounds=(float(lo), float(hi)), integer=bool(col.integer), time=col.type == "datetime",
                        nullable=col.nullable)


def _check(name: str, success: bool, **stats: Any) -> dict[str, Any]:
    return {"name": name, "success": bool(success), **stats}


def _outside(s: pd.Series, dom: ColumnDomain) -> int:
    """Non-missing cells outside the domain."""
    null = s.isna().to_numpy()
    if dom.values is not None:
        return int((~null & ~s.isin(set(dom.values)).to_numpy()).sum())
    x = _seconds(s) if dom.time else pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    lo, hi = dom.bounds
    out = ~null & ~((x >= lo) & (x <= hi))
    if dom.integer:
        out |= ~null & (np.floor(x) != x)
    return int(out.sum())


def _seconds(s: pd.Series) -> np.ndarray:
    """Seconds of a datetime column's values (NaN for anything that is not a time)."""
    try:
        arr = pa.array(s, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):  # mixed objects: read as text
        arr = pa.array(s.astype(pd.StringDtype()), from_pandas=True)
    return seconds_of(arr)


def record_checks(df: pd.DataFrame, schema: Schema, rows: int | None) -> list[dict[str, Any]]:
    """Columns, row count, each column's domain and missing values, as pass/fail counts."""
    checks = [_check("columns match the schema", list(df.columns) == schema.names)]
    if rows is not None:
        checks.append(_check("row count", len(df) == rows, expected=rows, observed=len(df)))
    else:
        checks.append(_check("row count", len(df) > 0, observed=len(df)))
    for col in schema.columns:
        if col.name not in df.columns:
            continue
        s = df[col.name]
        dom = column_domain(col)
        bad = _outside(s, dom)
        checks.append(_check(f"{col.name}: values inside the schema domain", bad == 0, unexpected=bad))
        if not dom.nullable:
            null = int(s.isna().sum())
            checks.append(_check(f"{col.name}: no missing values", null == 0, unexpected=null))
    return checks
